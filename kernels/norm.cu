// norm.cu — RMSNorm of rows: x * rsqrt(mean(x^2) + eps) [* w]   (CPU twin: cpu/ops/norm.rs)
// In f64, one rounding per output, as the CPU twin. grid (rows), block 256.
// In place allowed (x == y). Rows of a multiple of 4 values (16-byte
// aligned) are read as float4, up to eight per thread in flight; each
// thread's sum of squares runs over its vectors in order, then block_sum.
// One output: x * r, times the weight g where there is one.
__device__ __forceinline__ float norm_one(float x, double r, float g, const float* w) {
    const double v = (double)x * r;
    return (float)(w ? v * (double)g : v);
}

// One row (all threads of the block).
__device__ __forceinline__ void rms_norm_row(const float* xr, float* yr, const float* __restrict__ w, int width,
                                             float eps, double* red) {
    const bool vec = (width & 3) == 0 && (((size_t)xr) & 15) == 0 && (((size_t)yr) & 15) == 0 &&
                     (((size_t)w) & 15) == 0;
    double ss = 0.0;
    if (vec) {
        const float4* x4 = (const float4*)xr;
        const int n4 = width >> 2;
        for (int base = threadIdx.x; base < n4; base += 8 * blockDim.x) {
            float4 v[8];
            load_vec8(x4, n4, base, v);
            #pragma unroll
            for (int u = 0; u < 8; u++) {
                if (base + u * blockDim.x < n4) {
                    ss = fma((double)v[u].x, (double)v[u].x, ss);
                    ss = fma((double)v[u].y, (double)v[u].y, ss);
                    ss = fma((double)v[u].z, (double)v[u].z, ss);
                    ss = fma((double)v[u].w, (double)v[u].w, ss);
                }
            }
        }
    } else {
        for (int i = threadIdx.x; i < width; i += blockDim.x) ss = fma((double)xr[i], (double)xr[i], ss);
    }
    ss = block_sum(ss, red);
    const double r = 1.0 / sqrt(ss / (double)width + (double)eps);
    if (vec) {
        const float4* x4 = (const float4*)xr;
        const float4* w4 = (const float4*)w;
        float4* y4 = (float4*)yr;
        const int n4 = width >> 2;
        for (int base = threadIdx.x; base < n4; base += 4 * blockDim.x) {
            float4 v[4], g[4];
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = base + u * blockDim.x;
                if (i < n4) {
                    v[u] = x4[i];
                    g[u] = w ? w4[i] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
                }
            }
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = base + u * blockDim.x;
                if (i < n4) y4[i] = make_float4(norm_one(v[u].x, r, g[u].x, w), norm_one(v[u].y, r, g[u].y, w),
                                                norm_one(v[u].z, r, g[u].z, w), norm_one(v[u].w, r, g[u].w, w));
            }
        }
        return;
    }
    for (int i = threadIdx.x; i < width; i += blockDim.x) yr[i] = norm_one(xr[i], r, w ? w[i] : 1.0f, w);
}

extern "C" __global__ void rms_norm_f32(const float* x, float* y, const float* __restrict__ w, int width, float eps) {
    await_inputs();
    __shared__ double red[32];
    rms_norm_row(x + (size_t)blockIdx.x * width, y + (size_t)blockIdx.x * width, w, width, eps, red);
}

// rms_norm_f32 then rope_rows (forward) on each row in one launch, the same
// operations in the same order: rows of n tokens x heads, token t at
// position pos0 + t. In place. grid (n * heads), block 256.
extern "C" __global__ void rms_norm_rope(float* x, const float* __restrict__ w, int width, float eps, int heads,
                                         const float* __restrict__ inv_freq, int npairs, int pos0) {
    await_inputs();
    __shared__ double red[32];
    float* xr = x + (size_t)blockIdx.x * width;
    rms_norm_row(xr, xr, w, width, eps, red);
    __syncthreads();  // the normalized row, written by every thread, read back below
    rope_row(xr + (width - 2 * npairs), (float)(pos0 + (int)blockIdx.x / heads), inv_freq, npairs, false);
}
