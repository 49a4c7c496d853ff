// compressor.cu — pooled entries of the CSA/HCA compressors and the CSA
// indexer   (CPU twin: cpu/ops/compressor.rs and CpuOracle::compress).
//
// Raw rows hold [kv | gate] of width 2*W (W = c*hd, c = 2 for the
// overlapping CSA series, 1 for HCA). For each window that closes in this
// chunk (positions t0..t0+n), entry w pools per channel with a softmax of
// gate + ape[slot] (f64): HCA over the window's ratio rows; CSA over the
// previous window's first-half rows and this window's second-half rows. A
// raw row at position q comes from this chunk (kv_local/gate_local) when
// q >= t0, else from the pending ring. Then RMSNorm with weight (f64), RoPE
// at w*ratio (f32 as the CPU), and the variant's finish (post: 0 none,
// 1 FP8 on the non-rope dims in 1x64 blocks, 2 Hadamard + FP4 in 1x32).
// grid (number of closing windows), block max(32, hd) rounded up to 32
// (hd <= 1024), dynamic smem hd doubles.

__device__ __forceinline__ void raw_at(int q, int t0, const float* kv_local, const float* gate_local,
                                       const float* ring, int ring_rows, int W, const float** kv,
                                       const float** gate) {
    if (q >= t0) {
        *kv = kv_local + (size_t)(q - t0) * W;
        *gate = gate_local + (size_t)(q - t0) * W;
    } else {
        const float* r = ring + (size_t)(q % ring_rows) * 2 * W;
        *kv = r;
        *gate = r + W;
    }
}

extern "C" __global__ void compress_pool(const float* __restrict__ kv_local, const float* __restrict__ gate_local,
                                         const float* __restrict__ ring, int ring_rows, int t0, int n, int ratio,
                                         int overlap, int hd, const float* __restrict__ ape,
                                         const float* __restrict__ norm_w, float eps,
                                         const float* __restrict__ inv_freq, int npairs, int post,
                                         float* __restrict__ entries) {
    await_inputs();
    extern __shared__ double e[];
    __shared__ double red[32];
    __shared__ float redf[32];
    __shared__ float ef[1024];
    const int W = (overlap ? 2 : 1) * hd;
    const int w = t0 / ratio + blockIdx.x;  // windows closed before t0: t0 / ratio
    const int i = threadIdx.x;
    const bool on = i < hd;
    // pool channel i over the slots, in slot order
    if (on) {
        double mx = -INFINITY, num = 0.0, den = 0.0;
        for (int pass = 0; pass < 2; pass++) {
            for (int half = 0; half < (overlap ? 2 : 1); half++) {
                const int ws = overlap ? w - 1 + half : w;
                if (ws < 0) continue;
                for (int j = 0; j < ratio; j++) {
                    const float *kv, *g;
                    raw_at(ws * ratio + j, t0, kv_local, gate_local, ring, ring_rows, W, &kv, &g);
                    const int c = (overlap && half == 1) ? hd + i : i;
                    const double gv = (double)g[c] + (double)ape[(size_t)j * W + c];
                    if (pass == 0) {
                        mx = fmax(mx, gv);
                    } else {
                        const double ex = exp(gv - mx);
                        den += ex;
                        num += ex * (double)kv[c];
                    }
                }
            }
        }
        e[i] = (double)(float)(num / den);
    }
    __syncthreads();
    // RMSNorm with weight, in f64
    const double ev = on ? e[i] : 0.0;
    const double ss = block_sum(ev * ev, red);
    const double r = 1.0 / sqrt(ss / (double)hd + (double)eps);
    if (on) ef[i] = (float)(ev * r * (double)norm_w[i]);
    __syncthreads();
    // RoPE at w * ratio on the last 2*npairs dims (f32, as the CPU)
    const int off = hd - 2 * npairs;
    if (on && i >= off && ((i - off) & 1) == 0) {
        const int pi = (i - off) >> 1;
        const float ang = __fmul_rn((float)(w * ratio), inv_freq[pi]);
        rotate_pair(&ef[i], &ef[i + 1], (float)cos((double)ang), (float)sin((double)ang));
    }
    __syncthreads();
    float* dst = entries + (size_t)w * hd;
    float out = on ? ef[i] : 0.f;
    if (post == 1) {
        // FP8 on the non-rope dims, blocks of 64
        const int nope = hd - 2 * npairs;
        float amax = (on && i < nope) ? fabsf(out) : 0.f;
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        if ((i & 31) == 0) redf[i >> 5] = amax;
        __syncthreads();
        if (on && i < nope) {
            const int b = i >> 6, nw = blockDim.x >> 5;
            const float hi = 2 * b + 1 < nw ? redf[2 * b + 1] : 0.f;
            const float am = fmaxf(fmaxf(redf[2 * b], hi), 1e-4f);
            const float s = pow2_scale(am, 448.f);
            out = e4m3_round(fminf(fmaxf(out / s, -448.f), 448.f)) * s;
        }
    } else if (post == 2) {
        // Hadamard over hd (a power of two), then FP4 in blocks of 32
        if (on) e[i] = (double)out;
        __syncthreads();
        const float hv = hadamard_shared(e, hd);
        out = fp4_block(hv);
    }
    if (on) dst[i] = out;
    (void)n;
}

// Pack this chunk's raw rows [kv | gate] into the pending ring (last rows only).
// grid (min(n, ring_rows)), block 256.
extern "C" __global__ void compress_ring_append(float* __restrict__ ring, int ring_rows,
                                                const float* __restrict__ kv_local,
                                                const float* __restrict__ gate_local, int W, int n, int t0) {
    await_inputs();
    const int skip = n > ring_rows ? n - ring_rows : 0;
    const int t = skip + blockIdx.x;
    float* dst = ring + (size_t)((t0 + t) % ring_rows) * 2 * W;
    for (int i = threadIdx.x; i < W; i += blockDim.x) {
        dst[i] = kv_local[(size_t)t * W + i];
        dst[W + i] = gate_local[(size_t)t * W + i];
    }
}
