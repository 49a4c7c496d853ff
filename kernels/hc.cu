// hc.cu — manifold-constrained hyper-connections   (CPU twin: cpu/ops/hc.rs)
//
// hc_mix_rows: per token, the mixes m = fn . (x / rms(x)) over the hc*d
// streams (as per-slice partials). hc_pre: pre = sigmoid(m*s0 + b) + eps and
// the collapsed input sum_j pre_j x_j, then the block's RMS norm of it.
// hc_sinkhorn: post = 2 sigmoid(m*s1 + b),
// comb = Sinkhorn(softmax_row(m*s2 + b) + eps); writes mix[t] =
// [pre(hc) | post(hc) | comb(hc*hc)] in f64.
// hc_post: x'_k = post_k * out + sum_j comb[j][k] x_j (in place), out the
// block's output (for the MoE, its slots and shared expert combined here).
// hc_head: the selected rows' mixes by hc_mix_rows, then pre only (no
// Sinkhorn) and the collapse (and the final norm where asked).
// All in f64 with one rounding per output. The mixes' dot products are
// summed per slice of HC_SLICE elements, then over the slices (the CPU
// twin's f64 order differs from it only in rounding); the rest follows the
// CPU twin's order.

#define HC_MAX 8
#define HC_MIX_MAX ((2 + HC_MAX) * HC_MAX)
// Elements of the flat streams per hc_mix_rows block (its block size).
#define HC_SLICE 256

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// pre_j = sigmoid(m_j * s0 + b_j) + eps, from the mix m_j (times 1/rms).
__device__ __forceinline__ double pre_weight(double mj, float s0, float bj, float hc_eps) {
    return sigmoid_d(mj * (double)s0 + (double)bj) + (double)hc_eps;
}

// Per-slice partials of the mixes: block (t, s) takes the flat elements
// s * HC_SLICE + tid of row r = rows[t] (t where rows is null) and writes
// partials[t, s] = [sum x^2 | fn_0 . x | ... | fn_{nm-1} . x] over its
// slice (nm + 1 values; each a warp butterfly, then the warps in order).
// The mixes are these summed over the slices (slice_sums), times 1/rms.
// grid (n, ceil(width / HC_SLICE)), block HC_SLICE.
// The first HC_MIX_EARLY rows of fn (all of them for hc <= 4) are read
// before the kernel waits for its inputs.
#define HC_MIX_EARLY 24
extern "C" __global__ void hc_mix_rows(const float* __restrict__ x, const int* __restrict__ rows,
                                       const float* __restrict__ fn, int width, int nm,
                                       double* __restrict__ partials) {
    __shared__ double red[HC_SLICE / 32][HC_MIX_MAX + 1];
    const int t = blockIdx.x, s = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i = s * HC_SLICE + threadIdx.x;
    const bool in = i < width;
    float early[HC_MIX_EARLY];
    #pragma unroll
    for (int u = 0; u < HC_MIX_EARLY; u++) early[u] = in && u < nm ? fn[(size_t)u * width + i] : 0.0f;
    await_inputs();
    const double xv = in ? (double)x[(size_t)(rows ? rows[t] : t) * width + i] : 0.0;
    // the warp's sum of slot k: x^2 (k = 0) or row k - 1 of fn times x
    auto warp_part = [&](int k, double prod) {
        const double v = warp_sum(prod);
        if (lane == 0) red[warp][k] = v;
    };
    warp_part(0, xv * xv);
    #pragma unroll
    for (int u = 0; u < HC_MIX_EARLY; u++)
        if (u < nm) warp_part(1 + u, (double)early[u] * xv);
    // the rest: sixteen rows' loads in flight before their sums
    for (int j0 = HC_MIX_EARLY; j0 < nm; j0 += 16) {
        float fv[16];
        #pragma unroll
        for (int u = 0; u < 16; u++) fv[u] = in && j0 + u < nm ? fn[(size_t)(j0 + u) * width + i] : 0.0f;
        #pragma unroll
        for (int u = 0; u < 16; u++)
            if (j0 + u < nm) warp_part(1 + j0 + u, (double)fv[u] * xv);
    }
    __syncthreads();
    double* out = partials + ((size_t)t * gridDim.y + s) * (nm + 1);
    for (int k = threadIdx.x; k <= nm; k += blockDim.x) {
        double acc = 0.0;
        for (int w = 0; w < HC_SLICE / 32; w++) acc += red[w][k];
        out[k] = acc;
    }
}

// Values 0 .. nv-1 of one token's slice partials (stride nm + 1), summed
// over the slices: lane l takes slices l, l + 32, ... in order, then the
// butterfly; warp w of the block sums values w, w + nwarps, ... Writes the
// mixes (times 1/rms of the width values) to m[0 .. nv-2]. Every block that
// calls it gets the same bits. Ends with a barrier.
__device__ __forceinline__ void slice_sums(const double* __restrict__ p, int slices, int nm, int nv, int width,
                                           float norm_eps, double* m, double* ss) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int v = warp; v < nv; v += nwarps) {
        double acc = 0.0;
        for (int s = lane; s < slices; s += 32) acc += p[(size_t)s * (nm + 1) + v];
        acc = warp_sum(acc);
        if (lane == 0) {
            if (v == 0) *ss = acc;
            else m[v - 1] = acc;
        }
    }
    __syncthreads();
    const double r = 1.0 / sqrt(*ss / (double)width + (double)norm_eps);
    for (int v = threadIdx.x; v + 1 < nv; v += blockDim.x) m[v] *= r;
    __syncthreads();
}

// pre_j for j < hc into pre_s (shared), from one token's slice partials p
// (nm mixes a slice): slice_sums, then thread j's pre_weight with b_j and
// s0 as the caller read them before its wait. Every thread; ends with a
// barrier.
__device__ __forceinline__ void pre_weights(const double* __restrict__ p, int slices, int nm, int hc, int width,
                                            float norm_eps, float s0, float bj, float hc_eps, double* pre_s) {
    __shared__ double m[HC_MAX];
    __shared__ double ss;
    slice_sums(p, slices, nm, hc + 1, width, norm_eps, m, &ss);
    if ((int)threadIdx.x < hc) pre_s[threadIdx.x] = pre_weight(m[threadIdx.x], s0, bj, hc_eps);
    __syncthreads();
}

// sum_j pre_j x_j for element i of token row xt (hc streams of d).
__device__ __forceinline__ float collapse_one(const float* __restrict__ xt, const double* pre, int hc, int d, int i) {
    float xv[HC_MAX];
    #pragma unroll
    for (int q = 0; q < HC_MAX; q++) xv[q] = q < hc ? xt[(size_t)q * d + i] : 0.0f;
    double acc = 0.0;
    #pragma unroll
    for (int q = 0; q < HC_MAX; q++)
        if (q < hc) acc += pre[q] * (double)xv[q];
    return (float)acc;
}

// The whole collapsed row of token row xt into c (shared memory, d
// floats): collapse_one's sums, each thread's float4s of every stream
// loading at once. All threads; the caller syncs.
__device__ __forceinline__ void collapse_row(const float* __restrict__ xt, const double* pre, int hc, int d, float* c) {
    if ((d & 3) != 0 || (((size_t)xt) & 15) != 0) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) c[i] = collapse_one(xt, pre, hc, d, i);
        return;
    }
    const int n4 = d >> 2;
    for (int base = threadIdx.x; base < n4; base += 2 * blockDim.x) {
        float4 v[2][HC_MAX];
        #pragma unroll
        for (int u = 0; u < 2; u++) {
            const int i = base + u * blockDim.x;
            #pragma unroll
            for (int q = 0; q < HC_MAX; q++)
                if (q < hc && i < n4) v[u][q] = ((const float4*)(xt + (size_t)q * d))[i];
        }
        #pragma unroll
        for (int u = 0; u < 2; u++) {
            const int i = base + u * blockDim.x;
            if (i >= n4) continue;
            double a[4] = {0.0, 0.0, 0.0, 0.0};
            #pragma unroll
            for (int q = 0; q < HC_MAX; q++) {
                if (q < hc) {
                    a[0] += pre[q] * (double)v[u][q].x;
                    a[1] += pre[q] * (double)v[u][q].y;
                    a[2] += pre[q] * (double)v[u][q].z;
                    a[3] += pre[q] * (double)v[u][q].w;
                }
            }
            *(float4*)(c + 4 * i) = make_float4((float)a[0], (float)a[1], (float)a[2], (float)a[3]);
        }
    }
}

// The collapse and the RMS norm after it (as a collapse then rms_norm_f32
// over the collapsed row, the same bits): one block a token collapses its
// whole row into shared memory (d floats of the dynamic shared memory),
// then normalizes it into `out`. All threads (256, rms_norm_f32's block).
__device__ __forceinline__ void collapse_norm(const float* __restrict__ xt, const double* pre, int hc, int d,
                                              const float* __restrict__ norm_w, float eps, const NormWeight& nw,
                                              float* out) {
    __shared__ double red[32];
    float* c = (float*)xs_dyn;
    collapse_row(xt, pre, hc, d, c);
    __syncthreads();
    rms_norm_row(c, out, norm_w, d, eps, red, nw);
}

// From the slice partials: pre and the collapsed input, normalized by the
// block's RMS norm (collapse_norm; weight norm_w, none where null).
// grid (n), block 256, dynamic smem d floats.
extern "C" __global__ void hc_pre(const float* __restrict__ x, const double* __restrict__ partials, int slices,
                                  int width, float norm_eps, const float* __restrict__ base,
                                  const float* __restrict__ scale, int hc, int d, float hc_eps,
                                  const float* __restrict__ norm_w, float* __restrict__ collapsed) {
    const int t = blockIdx.x, tid = threadIdx.x;
    float b_early = 0.0f, s_early = 0.0f;
    if (tid < hc) b_early = base[tid], s_early = scale[0];
    NormWeight nw;
    norm_weight_early(norm_w, d, nw);
    await_inputs();
    __shared__ double pre_s[HC_MAX];
    const int nmix = (2 + hc) * hc;
    pre_weights(partials + (size_t)t * slices * (nmix + 1), slices, nmix, hc, width, norm_eps, s_early, b_early, hc_eps,
                pre_s);
    collapse_norm(x + (size_t)t * hc * d, pre_s, hc, d, norm_w, norm_eps, nw, collapsed + (size_t)t * d);
}

// One Sinkhorn half-step on the hc x hc matrix a by warp 0 (lane l holds
// cells l and l + 32): each cell divided by its row's (rows) or column's
// sum plus eps, the sum in index order as the CPU twin's.
__device__ __forceinline__ void sinkhorn_normalize(double* a, int hc, double eps, bool rows) {
    const int lane = threadIdx.x & 31, cells = hc * hc;
    double v[2];
    for (int r = 0; r < 2; r++) {
        const int c = lane + 32 * r;
        if (c < cells) {
            const int first = rows ? c / hc * hc : c % hc, step = rows ? 1 : hc;
            double s = 0.0;
            for (int q = 0; q < hc; q++) s += a[first + q * step];
            v[r] = a[c] / (s + eps);
        }
    }
    __syncwarp();
    for (int r = 0; r < 2; r++)
        if (lane + 32 * r < cells) a[lane + 32 * r] = v[r];
    __syncwarp();
}

// From the slice partials: pre, post and the Sinkhorn comb, written to
// mix[t] (the Sinkhorn by warp 0; each sum in the CPU twin's order). Only
// hc_post reads them, so the engine runs this beside the block on a second
// stream. grid (n), block 256.
extern "C" __global__ void hc_sinkhorn(const double* __restrict__ partials, int slices, int width, float norm_eps,
                                       const float* __restrict__ base, const float* __restrict__ scale, int hc,
                                       int iters, float hc_eps, double* __restrict__ mix) {
    await_inputs();
    __shared__ double m[HC_MIX_MAX];
    __shared__ double a[HC_MAX * HC_MAX];
    __shared__ double b[HC_MAX * HC_MAX];
    __shared__ double ss;
    const int t = blockIdx.x, tid = threadIdx.x;
    const int nmix = (2 + hc) * hc;
    slice_sums(partials + (size_t)t * slices * (nmix + 1), slices, nmix, nmix + 1, width, norm_eps, m, &ss);
    if (tid >= 32) return;
    const double eps = hc_eps;
    // Sinkhorn in warp 0: lane l holds cells l and l + 32
    const int lane = tid;
    double* out = mix + (size_t)t * nmix;
    if (lane < hc) {
        out[lane] = pre_weight(m[lane], scale[0], base[lane], hc_eps);
        out[hc + lane] = 2.0 * sigmoid_d(m[hc + lane] * (double)scale[1] + (double)base[hc + lane]);
    }
    const int cells = hc * hc;
    for (int c = lane; c < cells; c += 32) a[c] = m[2 * hc + c] * (double)scale[2] + (double)base[2 * hc + c];
    __syncwarp();
    // row softmax + eps
    for (int c = lane; c < cells; c += 32) {
        const int j = c / hc;
        double mx = -1e300;
        for (int q = 0; q < hc; q++) mx = fmax(mx, a[j * hc + q]);
        b[c] = exp(a[c] - mx);
    }
    __syncwarp();
    for (int c = lane; c < cells; c += 32) {
        const int j = c / hc;
        double s = 0.0;
        for (int q = 0; q < hc; q++) s += b[j * hc + q];
        a[c] = b[c] / s + eps;
    }
    __syncwarp();
    for (int it = 0; it < iters; it++) {
        if (it > 0) sinkhorn_normalize(a, hc, eps, true);
        sinkhorn_normalize(a, hc, eps, false);
    }
    for (int c = lane; c < cells; c += 32) out[2 * hc + c] = a[c];
}

// The block's output `out`, or (where `slots` is not null) the MoE's: its
// k slot outputs and the shared expert's summed in f64 (the shared one
// left out where skip_shared), rounded once. grid (n, ceil(d/256)), block
// 256. x updated in place.
extern "C" __global__ void hc_post(float* __restrict__ x, const float* __restrict__ out,
                                   const float* __restrict__ slots, int k, int skip_shared,
                                   const double* __restrict__ mix, int hc, int d) {
    await_inputs();
    const int t = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= d) return;
    const int nmix = (2 + hc) * hc;
    const double* m = mix + (size_t)t * nmix;
    float* xt = x + (size_t)t * hc * d;
    float old[HC_MAX];
    for (int j = 0; j < hc; j++) old[j] = xt[(size_t)j * d + i];
    float of;
    if (slots) {
        double acc = 0.0;
        for (int s = 0; s < k; s++) acc += (double)slots[((size_t)t * k + s) * d + i];
        if (!skip_shared) acc += (double)out[(size_t)t * d + i];
        of = (float)acc;
    } else {
        of = out[(size_t)t * d + i];
    }
    const double o = of;
    for (int k = 0; k < hc; k++) {
        double acc = m[hc + k] * o;
        for (int j = 0; j < hc; j++) acc += m[2 * hc + j * hc + k] * (double)old[j];
        xt[(size_t)k * d + i] = (float)acc;
    }
}

// Final collapse of selected tokens `rows[r]` into y[r, :], from their
// slice partials (hc_mix_rows over hc_head's fn, nm = hc): pre only (no
// Sinkhorn); with norm_w, normalized as hc_pre does. grid (nrows,
// ceil(d/256)), or (nrows) with norm_w and dynamic smem d floats; block 256.
extern "C" __global__ void hc_head(const float* __restrict__ x, const int* __restrict__ rows,
                                   const double* __restrict__ partials, int slices, int width, float norm_eps,
                                   const float* __restrict__ base, const float* __restrict__ scale, int hc, int d,
                                   float hc_eps, const float* __restrict__ norm_w, float* __restrict__ y) {
    const int tid = threadIdx.x;
    float b_early = 0.0f, s_early = 0.0f;
    if (tid < hc) b_early = base[tid], s_early = scale[0];
    NormWeight nw;
    norm_weight_early(norm_w, d, nw);
    await_inputs();
    __shared__ double pre_s[HC_MAX];
    pre_weights(partials + (size_t)blockIdx.x * slices * (hc + 1), slices, hc, hc, width, norm_eps, s_early, b_early,
                hc_eps, pre_s);
    if (norm_w) {
        collapse_norm(x + (size_t)rows[blockIdx.x] * hc * d, pre_s, hc, d, norm_w, norm_eps, nw,
                      y + (size_t)blockIdx.x * d);
        return;
    }
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i < d) y[(size_t)blockIdx.x * d + i] = collapse_one(x + (size_t)rows[blockIdx.x] * hc * d, pre_s, hc, d, i);
}
