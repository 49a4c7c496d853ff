// norm.cu — RMSNorm of rows: x * rsqrt(mean(x^2) + eps) [* w]   (CPU twin: cpu/ops/norm.rs)
// In f64, one rounding per output, as the CPU twin. grid (rows), block 256.
// In place allowed (x == y).
extern "C" __global__ void rms_norm_f32(const float* x, float* y, const float* __restrict__ w, int width, float eps) {
    __shared__ double red[32];
    const float* xr = x + (size_t)blockIdx.x * width;
    float* yr = y + (size_t)blockIdx.x * width;
    double ss = 0.0;
    for (int i = threadIdx.x; i < width; i += blockDim.x) ss = fma((double)xr[i], (double)xr[i], ss);
    ss = block_sum(ss, red);
    const double r = 1.0 / sqrt(ss / (double)width + (double)eps);
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const double v = (double)xr[i] * r;
        yr[i] = (float)(w ? v * (double)w[i] : v);
    }
}
