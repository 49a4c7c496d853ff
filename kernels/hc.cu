// hc.cu — manifold-constrained hyper-connections   (CPU twin: cpu/ops/hc.rs)
//
// hc_mix_rows + hc_pre: per token, mixes m = fn . (x / rms(x)) over the hc*d streams,
// pre = sigmoid(m*s0 + b) + eps, post = 2 sigmoid(m*s1 + b),
// comb = Sinkhorn(softmax_row(m*s2 + b) + eps), and the collapsed input
// sum_j pre_j x_j. Writes mix[t] = [pre(hc) | post(hc) | comb(hc*hc)] in f64.
// hc_post: x'_k = post_k * out + sum_j comb[j][k] x_j (in place).
// hc_head: the selected rows' mixes by hc_mix_rows, then pre only (no
// Sinkhorn) and the collapse.
// All in f64 in the CPU twin's order; one rounding per output.

#define HC_MAX 8

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// Mixes m[t, j] = fn_j . x_r / rms(x_r), r = rows[t] (t where rows is
// null), one block per (token, mix row): grid (n, nm), block 256. Writes f64.
extern "C" __global__ void hc_mix_rows(const float* __restrict__ x, const int* __restrict__ rows,
                                       const float* __restrict__ fn, int width, float norm_eps,
                                       double* __restrict__ mixes) {
    __shared__ double red[32];
    const int t = blockIdx.x, j = blockIdx.y, nm = gridDim.y;
    const float* xt = x + (size_t)(rows ? rows[t] : t) * width;
    const float* f = fn + (size_t)j * width;
    double ss = 0.0, dot = 0.0;
    // eight strides' loads issued before their sums (the same per-thread order)
    for (int i0 = threadIdx.x; i0 < width; i0 += 8 * blockDim.x) {
        float xv[8], fv[8];
        #pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u * blockDim.x;
            xv[u] = i < width ? xt[i] : 0.0f;
            fv[u] = i < width ? f[i] : 0.0f;
        }
        #pragma unroll
        for (int u = 0; u < 8; u++) {
            if (i0 + u * blockDim.x < width) {
                ss = fma((double)xv[u], (double)xv[u], ss);
                dot = fma((double)fv[u], (double)xv[u], dot);
            }
        }
    }
    ss = block_sum(ss, red);
    dot = block_sum(dot, red);
    if (threadIdx.x == 0) mixes[(size_t)t * nm + j] = dot * (1.0 / sqrt(ss / (double)width + (double)norm_eps));
}

// From the mixes: pre, post and the Sinkhorn comb (one thread per comb
// element, each sum in the CPU twin's order), then the collapsed input.
// The first two warps run the Sinkhorn iterations (barrier 1, 64 threads)
// while the others collapse the streams, which needs only `pre`.
// grid (n), block 256 (any multiple of 32 above HC_SINKHORN_THREADS).
#define HC_SINKHORN_THREADS 64

__device__ __forceinline__ void sinkhorn_sync() { asm volatile("bar.sync 1, 64;" ::: "memory"); }

extern "C" __global__ void hc_pre(const float* __restrict__ x, const double* __restrict__ mixes,
                                  const float* __restrict__ base, const float* __restrict__ scale, int hc, int d,
                                  int iters, float hc_eps, double* __restrict__ mix, float* __restrict__ collapsed) {
    __shared__ double a[HC_MAX * HC_MAX];
    __shared__ double b[HC_MAX * HC_MAX];
    __shared__ double pre_s[HC_MAX];
    const int t = blockIdx.x, tid = threadIdx.x;
    const int nmix = (2 + hc) * hc;
    const double* m = mixes + (size_t)t * nmix;
    double* out = mix + (size_t)t * nmix;
    const double eps = hc_eps;
    const bool cell = tid < hc * hc;
    const int j = tid / hc, k = tid % hc;
    if (tid < hc) {
        pre_s[tid] = sigmoid_d(m[tid] * (double)scale[0] + (double)base[tid]) + eps;
        out[tid] = pre_s[tid];
        out[hc + tid] = 2.0 * sigmoid_d(m[hc + tid] * (double)scale[1] + (double)base[hc + tid]);
    }
    if (cell) a[tid] = m[2 * hc + tid] * (double)scale[2] + (double)base[2 * hc + tid];
    __syncthreads();
    if (tid >= HC_SINKHORN_THREADS) {
        // the collapsed input, four elements' loads in flight per thread
        const float* xt = x + (size_t)t * hc * d;
        const int step = blockDim.x - HC_SINKHORN_THREADS;
        for (int i0 = tid - HC_SINKHORN_THREADS; i0 < d; i0 += 4 * step) {
            float xv[4][HC_MAX];
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = i0 + u * step;
                #pragma unroll
                for (int q = 0; q < HC_MAX; q++) xv[u][q] = q < hc && i < d ? xt[(size_t)q * d + i] : 0.0f;
            }
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = i0 + u * step;
                if (i < d) {
                    double acc = 0.0;
                    #pragma unroll
                    for (int q = 0; q < HC_MAX; q++)
                        if (q < hc) acc += pre_s[q] * (double)xv[u][q];
                    collapsed[(size_t)t * d + i] = (float)acc;
                }
            }
        }
        return;
    }
    // row softmax + eps
    if (cell) {
        double mx = -1e300;
        for (int q = 0; q < hc; q++) mx = fmax(mx, a[j * hc + q]);
        b[tid] = exp(a[tid] - mx);
    }
    sinkhorn_sync();
    if (cell) {
        double s = 0.0;
        for (int q = 0; q < hc; q++) s += b[j * hc + q];
        a[tid] = b[tid] / s + eps;
    }
    sinkhorn_sync();
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            double v = 0.0;
            if (cell) {
                double s = 0.0;
                for (int q = 0; q < hc; q++) s += a[j * hc + q];
                s += eps;
                v = a[tid] / s;
            }
            sinkhorn_sync();
            if (cell) a[tid] = v;
            sinkhorn_sync();
        }
        double v = 0.0;
        if (cell) {
            double s = 0.0;
            for (int q = 0; q < hc; q++) s += a[q * hc + k];
            s += eps;
            v = a[tid] / s;
        }
        sinkhorn_sync();
        if (cell) a[tid] = v;
        sinkhorn_sync();
    }
    if (cell) out[2 * hc + tid] = a[tid];
}

// grid (n, ceil(d/256)), block 256. x updated in place.
extern "C" __global__ void hc_post(float* __restrict__ x, const float* __restrict__ out, const double* __restrict__ mix,
                                   int hc, int d) {
    const int t = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= d) return;
    const int nmix = (2 + hc) * hc;
    const double* m = mix + (size_t)t * nmix;
    float* xt = x + (size_t)t * hc * d;
    float old[HC_MAX];
    for (int j = 0; j < hc; j++) old[j] = xt[(size_t)j * d + i];
    const double o = out[(size_t)t * d + i];
    for (int k = 0; k < hc; k++) {
        double acc = m[hc + k] * o;
        for (int j = 0; j < hc; j++) acc += m[2 * hc + j * hc + k] * (double)old[j];
        xt[(size_t)k * d + i] = (float)acc;
    }
}

// Final collapse of selected tokens `rows[r]` into y[r, :], from their
// mixes (hc_mix_rows over hc_head's fn, hc per row): pre only (no
// Sinkhorn). grid (nrows, ceil(d/256)), block 256.
extern "C" __global__ void hc_head(const float* __restrict__ x, const int* __restrict__ rows,
                                   const double* __restrict__ mixes, const float* __restrict__ base,
                                   const float* __restrict__ scale, int hc, int d, float hc_eps,
                                   float* __restrict__ y) {
    __shared__ double pre_s[HC_MAX];
    const float* xt = x + (size_t)rows[blockIdx.x] * hc * d;
    if (threadIdx.x < hc) {
        const int j = threadIdx.x;
        pre_s[j] = sigmoid_d(mixes[(size_t)blockIdx.x * hc + j] * (double)scale[0] + (double)base[j]) + (double)hc_eps;
    }
    __syncthreads();
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= d) return;
    float xv[HC_MAX];
    #pragma unroll
    for (int j = 0; j < HC_MAX; j++) xv[j] = j < hc ? xt[(size_t)j * d + i] : 0.0f;
    double acc = 0.0;
    #pragma unroll
    for (int j = 0; j < HC_MAX; j++)
        if (j < hc) acc += pre_s[j] * (double)xv[j];
    y[(size_t)blockIdx.x * d + i] = (float)acc;
}
