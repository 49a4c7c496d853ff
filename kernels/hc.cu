// hc.cu — manifold-constrained hyper-connections   (CPU twin: cpu/ops/hc.rs)
//
// hc_pre: per token, mixes m = fn . (x / rms(x)) over the hc*d streams,
// pre = sigmoid(m*s0 + b) + eps, post = 2 sigmoid(m*s1 + b),
// comb = Sinkhorn(softmax_row(m*s2 + b) + eps), and the collapsed input
// sum_j pre_j x_j. Writes mix[t] = [pre(hc) | post(hc) | comb(hc*hc)].
// hc_post: x'_k = post_k * out + sum_j comb[j][k] x_j (in place).
// hc_head: pre only (no Sinkhorn), collapse.
// The small hc x hc math runs in double in one thread.

#define HC_MAX 8

// grid (n), block 256, dynamic smem: nmix floats.
extern "C" __global__ void hc_pre(const float* __restrict__ x, const float* __restrict__ fn,
                                  const float* __restrict__ base, const float* __restrict__ scale, int hc, int d,
                                  int iters, float hc_eps, float norm_eps, float* __restrict__ mix,
                                  float* __restrict__ collapsed) {
    extern __shared__ float mixes[];
    __shared__ float red[32];
    __shared__ float pre_s[HC_MAX];
    const int t = blockIdx.x;
    const int width = hc * d;
    const float* xt = x + (size_t)t * width;
    float ss = 0.f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) ss = fmaf(xt[i], xt[i], ss);
    ss = block_sum(ss, red);
    const float rinv = rsqrtf(ss / (float)width + norm_eps);
    const int nmix = (2 + hc) * hc;
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (int j = warp; j < nmix; j += nwarps) {
        const float* f = fn + (size_t)j * width;
        float acc = 0.f;
        for (int i = lane; i < width; i += 32) acc = fmaf(f[i], xt[i], acc);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) mixes[j] = acc * rinv;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double c[HC_MAX * HC_MAX];
        float* out = mix + (size_t)t * nmix;
        const double eps = hc_eps;
        for (int j = 0; j < hc; j++) {
            const double p = 1.0 / (1.0 + exp(-((double)mixes[j] * scale[0] + base[j]))) + eps;
            out[j] = (float)p;
            pre_s[j] = (float)p;
            out[hc + j] = (float)(2.0 / (1.0 + exp(-((double)mixes[hc + j] * scale[1] + base[hc + j]))));
        }
        for (int j = 0; j < hc; j++) {
            double mx = -1e300;
            for (int k = 0; k < hc; k++) {
                c[j * hc + k] = (double)mixes[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
                mx = fmax(mx, c[j * hc + k]);
            }
            double s = 0.0;
            for (int k = 0; k < hc; k++) { c[j * hc + k] = exp(c[j * hc + k] - mx); s += c[j * hc + k]; }
            for (int k = 0; k < hc; k++) c[j * hc + k] = c[j * hc + k] / s + eps;
        }
        for (int it = 0; it < iters; it++) {
            if (it > 0) {
                for (int j = 0; j < hc; j++) {
                    double s = eps;
                    for (int k = 0; k < hc; k++) s += c[j * hc + k];
                    for (int k = 0; k < hc; k++) c[j * hc + k] /= s;
                }
            }
            for (int k = 0; k < hc; k++) {
                double s = eps;
                for (int j = 0; j < hc; j++) s += c[j * hc + k];
                for (int j = 0; j < hc; j++) c[j * hc + k] /= s;
            }
        }
        for (int i = 0; i < hc * hc; i++) out[2 * hc + i] = (float)c[i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < hc; j++) acc = fmaf(pre_s[j], xt[(size_t)j * d + i], acc);
        collapsed[(size_t)t * d + i] = acc;
    }
}

// grid (n, ceil(d/256)), block 256. x updated in place.
extern "C" __global__ void hc_post(float* __restrict__ x, const float* __restrict__ out, const float* __restrict__ mix,
                                   int hc, int d) {
    const int t = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= d) return;
    const int nmix = (2 + hc) * hc;
    const float* m = mix + (size_t)t * nmix;
    float* xt = x + (size_t)t * hc * d;
    float old[HC_MAX];
    for (int j = 0; j < hc; j++) old[j] = xt[(size_t)j * d + i];
    const float o = out[(size_t)t * d + i];
    for (int k = 0; k < hc; k++) {
        float acc = m[hc + k] * o;
        for (int j = 0; j < hc; j++) acc = fmaf(m[2 * hc + j * hc + k], old[j], acc);
        xt[(size_t)k * d + i] = acc;
    }
}

// Final collapse of selected tokens `rows[r]` into y[r, :]. grid (nrows), block 256.
extern "C" __global__ void hc_head(const float* __restrict__ x, const int* __restrict__ rows,
                                   const float* __restrict__ fn, const float* __restrict__ base,
                                   const float* __restrict__ scale, int hc, int d, float hc_eps, float norm_eps,
                                   float* __restrict__ y) {
    __shared__ float red[32];
    __shared__ float mixes[HC_MAX];
    __shared__ float pre_s[HC_MAX];
    const int t = rows[blockIdx.x];
    const int width = hc * d;
    const float* xt = x + (size_t)t * width;
    float ss = 0.f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) ss = fmaf(xt[i], xt[i], ss);
    ss = block_sum(ss, red);
    const float rinv = rsqrtf(ss / (float)width + norm_eps);
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (int j = warp; j < hc; j += nwarps) {
        float acc = 0.f;
        for (int i = lane; i < width; i += 32) acc = fmaf(fn[(size_t)j * width + i], xt[i], acc);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) mixes[j] = acc * rinv;
    }
    __syncthreads();
    if (threadIdx.x < hc) {
        const int j = threadIdx.x;
        pre_s[j] = (float)(1.0 / (1.0 + exp(-((double)mixes[j] * scale[0] + base[j]))) + (double)hc_eps);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < hc; j++) acc = fmaf(pre_s[j], xt[(size_t)j * d + i], acc);
        y[(size_t)blockIdx.x * d + i] = acc;
    }
}
