// hc.cu — manifold-constrained hyper-connections   (CPU twin: cpu/ops/hc.rs)
//
// hc_pre: per token, mixes m = fn . (x / rms(x)) over the hc*d streams,
// pre = sigmoid(m*s0 + b) + eps, post = 2 sigmoid(m*s1 + b),
// comb = Sinkhorn(softmax_row(m*s2 + b) + eps), and the collapsed input
// sum_j pre_j x_j. Writes mix[t] = [pre(hc) | post(hc) | comb(hc*hc)] in f64.
// hc_post: x'_k = post_k * out + sum_j comb[j][k] x_j (in place).
// hc_head: pre only (no Sinkhorn), collapse.
// All in f64 in the CPU twin's order; one rounding per output.

#define HC_MAX 8

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// Mixes of token row xt (width = hc*d) into mixes[0..nm). Block-wide.
__device__ __forceinline__ void hc_mixes(const float* xt, int width, const float* fn, int nm, float norm_eps,
                                         double* mixes, double* red) {
    double ss = 0.0;
    for (int i = threadIdx.x; i < width; i += blockDim.x) ss = fma((double)xt[i], (double)xt[i], ss);
    ss = block_sum(ss, red);
    const double rinv = 1.0 / sqrt(ss / (double)width + (double)norm_eps);
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (int j = warp; j < nm; j += nwarps) {
        const double acc = warp_dot(fn + (size_t)j * width, xt, width);
        if (lane == 0) mixes[j] = acc * rinv;
    }
    __syncthreads();
}

// grid (n), block 256.
extern "C" __global__ void hc_pre(const float* __restrict__ x, const float* __restrict__ fn,
                                  const float* __restrict__ base, const float* __restrict__ scale, int hc, int d,
                                  int iters, float hc_eps, float norm_eps, double* __restrict__ mix,
                                  float* __restrict__ collapsed) {
    __shared__ double mixes[(2 + HC_MAX) * HC_MAX];
    __shared__ double red[32];
    __shared__ double pre_s[HC_MAX];
    const int t = blockIdx.x;
    const int width = hc * d;
    const float* xt = x + (size_t)t * width;
    const int nmix = (2 + hc) * hc;
    hc_mixes(xt, width, fn, nmix, norm_eps, mixes, red);
    if (threadIdx.x == 0) {
        double c[HC_MAX * HC_MAX];
        double* out = mix + (size_t)t * nmix;
        const double eps = hc_eps;
        const double s0 = scale[0], s1 = scale[1], s2 = scale[2];
        for (int j = 0; j < hc; j++) {
            pre_s[j] = sigmoid_d(mixes[j] * s0 + (double)base[j]) + eps;
            out[j] = pre_s[j];
            out[hc + j] = 2.0 * sigmoid_d(mixes[hc + j] * s1 + (double)base[hc + j]);
        }
        for (int j = 0; j < hc; j++) {
            double mx = -1e300;
            for (int k = 0; k < hc; k++) {
                c[j * hc + k] = mixes[2 * hc + j * hc + k] * s2 + (double)base[2 * hc + j * hc + k];
                mx = fmax(mx, c[j * hc + k]);
            }
            double s = 0.0;
            for (int k = 0; k < hc; k++) { c[j * hc + k] = exp(c[j * hc + k] - mx); s += c[j * hc + k]; }
            for (int k = 0; k < hc; k++) c[j * hc + k] = c[j * hc + k] / s + eps;
        }
        for (int it = 0; it < iters; it++) {
            if (it > 0) {
                for (int j = 0; j < hc; j++) {
                    double s = 0.0;
                    for (int k = 0; k < hc; k++) s += c[j * hc + k];
                    s += eps;
                    for (int k = 0; k < hc; k++) c[j * hc + k] /= s;
                }
            }
            for (int k = 0; k < hc; k++) {
                double s = 0.0;
                for (int j = 0; j < hc; j++) s += c[j * hc + k];
                s += eps;
                for (int j = 0; j < hc; j++) c[j * hc + k] /= s;
            }
        }
        for (int i = 0; i < hc * hc; i++) out[2 * hc + i] = c[i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        double acc = 0.0;
        for (int j = 0; j < hc; j++) acc += pre_s[j] * (double)xt[(size_t)j * d + i];
        collapsed[(size_t)t * d + i] = (float)acc;
    }
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

// Final collapse of selected tokens `rows[r]` into y[r, :]. grid (nrows), block 256.
extern "C" __global__ void hc_head(const float* __restrict__ x, const int* __restrict__ rows,
                                   const float* __restrict__ fn, const float* __restrict__ base,
                                   const float* __restrict__ scale, int hc, int d, float hc_eps, float norm_eps,
                                   float* __restrict__ y) {
    __shared__ double red[32];
    __shared__ double mixes[HC_MAX];
    __shared__ double pre_s[HC_MAX];
    const int t = rows[blockIdx.x];
    const int width = hc * d;
    const float* xt = x + (size_t)t * width;
    hc_mixes(xt, width, fn, hc, norm_eps, mixes, red);
    if (threadIdx.x < hc) {
        const int j = threadIdx.x;
        pre_s[j] = sigmoid_d(mixes[j] * (double)scale[0] + (double)base[j]) + (double)hc_eps;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        double acc = 0.0;
        for (int j = 0; j < hc; j++) acc += pre_s[j] * (double)xt[(size_t)j * d + i];
        y[(size_t)blockIdx.x * d + i] = (float)acc;
    }
}
