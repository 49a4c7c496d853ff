// norm.cu — RMSNorm of rows: x * rsqrt(mean(x^2) + eps) [* w]   (CPU twin: cpu/ops/norm.rs)
// grid (rows), block 256. In place allowed (x == y).
extern "C" __global__ void rms_norm_f32(const float* x, float* y, const float* __restrict__ w, int width, float eps) {
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * width;
    float* yr = y + (size_t)blockIdx.x * width;
    float ss = 0.f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, red);
    const float r = rsqrtf(ss / (float)width + eps);
    __syncthreads();
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const float v = xr[i] * r;
        yr[i] = w ? v * w[i] : v;
    }
}
