// compressor.cu — pooled entries of the CSA/HCA compressors and the CSA
// indexer   (CPU twin: cpu/ops/compressor.rs and CpuOracle::compress).
//
// Raw rows hold [kv | gate] of width 2*W (W = c*hd, c = 2 for the
// overlapping CSA series, 1 for HCA). For each window that closes in this
// chunk (positions t0..t0+n), entry w pools per channel with a softmax of
// gate + ape[slot]: HCA over the window's ratio rows; CSA over the previous
// window's first-half rows and this window's second-half rows. A raw row at
// position q comes from this chunk (kv_local/gate_local) when q >= t0, else
// from the pending ring. Then RMSNorm with weight, RoPE at w*ratio, and the
// variant's finish (post: 0 none, 1 FP8 on the non-rope dims (1x64),
// 2 Hadamard + FP4 (1x32)).
// grid (number of closing windows), block max(32, hd) rounded up to 32 (hd <= 1024),
// dynamic smem hd floats.

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
    extern __shared__ float e[];
    __shared__ float red[32];
    const int W = (overlap ? 2 : 1) * hd;
    // the b-th window closing in [t0, t0+n)
    const int w = t0 / ratio + blockIdx.x;  // windows closed before t0: t0 / ratio
    const int i = threadIdx.x;
    const bool on = i < hd;
    // pool channel i
    float mx = -INFINITY;
    for (int pass = 0; pass < 2 && on; pass++) {
        float num = 0.f, den = 0.f;
        for (int half = 0; half < (overlap ? 2 : 1); half++) {
            const int ws = overlap ? w - 1 + half : w;
            if (ws < 0) continue;
            for (int j = 0; j < ratio; j++) {
                const float *kv, *g;
                raw_at(ws * ratio + j, t0, kv_local, gate_local, ring, ring_rows, W, &kv, &g);
                const int c = (overlap && half == 1) ? hd + i : i;
                const float gv = g[c] + ape[(size_t)j * W + c];
                if (pass == 0) {
                    mx = fmaxf(mx, gv);
                } else {
                    const float ex = expf(gv - mx);
                    den += ex;
                    num = fmaf(ex, kv[c], num);
                }
            }
        }
        if (pass == 1) e[i] = num / den;
    }
    __syncthreads();
    // RMSNorm with weight
    const float ev = on ? e[i] : 0.f;
    const float ss = block_sum(ev * ev, red);
    const float r = rsqrtf(ss / (float)hd + eps);
    const float v = on ? ev * r * norm_w[i] : 0.f;
    __syncthreads();
    if (on) e[i] = v;
    __syncthreads();
    // RoPE at w * ratio on the last 2*npairs dims
    const int off = hd - 2 * npairs;
    if (on && i >= off && ((i - off) & 1) == 0) {
        const int pi = (i - off) >> 1;
        const float ang = (float)(w * ratio) * inv_freq[pi];
        const float c = (float)cos((double)ang), s = (float)sin((double)ang);
        const float a = e[i], b = e[i + 1];
        e[i] = a * c - b * s;
        e[i + 1] = b * c + a * s;
    }
    __syncthreads();
    float* dst = entries + (size_t)w * hd;
    if (on) dst[i] = e[i];
    __syncthreads();
    if (post == 1) {
        // FP8 on the non-rope dims, blocks of 64 (hd - 2*npairs is a multiple of 64)
        const int nope = hd - 2 * npairs;
        float amax = 0.f;
        if (i < nope) amax = fabsf(e[i]);
        // per-64 block max via two warps' shuffles: lanes of warps 2b, 2b+1
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        red[i >> 5] = amax;
        __syncthreads();
        if (i < nope) {
            const int b = i >> 6, nw = blockDim.x >> 5;
            const float hi = 2 * b + 1 < nw ? red[2 * b + 1] : 0.f;
            const float am = fmaxf(fmaxf(red[2 * b], hi), 1e-4f);
            const float s = pow2_scale(am, 448.f);
            dst[i] = e4m3_round(fminf(fmaxf(e[i] / s, -448.f), 448.f)) * s;
        }
    } else if (post == 2) {
        // Hadamard over hd (a power of two), then FP4 in blocks of 32
        for (int len = 1; len < hd; len <<= 1) {
            float nv = 0.f;
            if (on) {
                const int j = i ^ len;
                nv = (i & len) ? e[j] - e[i] : e[i] + e[j];
            }
            __syncthreads();
            if (on) e[i] = nv;
            __syncthreads();
        }
        const float hv = on ? e[i] * rsqrtf((float)hd) : 0.f;
        float a = fabsf(hv);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        const float s = pow2_scale(fmaxf(a, 6.f * __uint_as_float(1u << 23)), 6.f);
        if (on) dst[i] = e2m1_round(fminf(fmaxf(hv / s, -6.f), 6.f)) * s;
    }
    (void)n;
}

// Pack this chunk's raw rows [kv | gate] into the pending ring (last rows only).
// grid (min(n, ring_rows)), block 256.
extern "C" __global__ void compress_ring_append(float* __restrict__ ring, int ring_rows,
                                                const float* __restrict__ kv_local,
                                                const float* __restrict__ gate_local, int W, int n, int t0) {
    const int skip = n > ring_rows ? n - ring_rows : 0;
    const int t = skip + blockIdx.x;
    float* dst = ring + (size_t)((t0 + t) % ring_rows) * 2 * W;
    for (int i = threadIdx.x; i < W; i += blockDim.x) {
        dst[i] = kv_local[(size_t)t * W + i];
        dst[W + i] = gate_local[(size_t)t * W + i];
    }
}
