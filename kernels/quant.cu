// quant.cu — activation quantization of the `fp8` variant   (CPU twin: cpu/ops/quant.rs)
//
// act_fp8_rows: each row through FP8 E4M3 in 1x128 blocks (power-of-two
//   scale from the block amax, floored at 1e-4); grid (rows, ceil(width/128)), block 128.
// kv_fp8_rows: the first width-rope dims of each row in 1x64 blocks;
//   grid (rows, ceil(nope/64)), block 64.
// indexer_rows: orthonormal Walsh-Hadamard of each row (power-of-two width
//   <= 1024), then FP4 E2M1 in 1x32 blocks; grid (rows), block max(32, width),
//   dynamic smem width doubles.

__device__ __forceinline__ void fp8_block(float* v, int len, float* red) {
    const int i = threadIdx.x;
    const float a = i < len ? fabsf(v[i]) : 0.f;
    const float amax = fmaxf(block_max(a, red), 1e-4f);
    const float s = pow2_scale(amax, 448.f);
    if (i < len) v[i] = e4m3_round(fminf(fmaxf(v[i] / s, -448.f), 448.f)) * s;
}

extern "C" __global__ void act_fp8_rows(float* __restrict__ x, int width) {
    await_inputs();
    __shared__ float red[32];
    const int b0 = blockIdx.y * 128;
    fp8_block(x + (size_t)blockIdx.x * width + b0, min(128, width - b0), red);
}

extern "C" __global__ void kv_fp8_rows(float* __restrict__ x, int width, int nope) {
    await_inputs();
    __shared__ float red[32];
    const int b0 = blockIdx.y * 64;
    fp8_block(x + (size_t)blockIdx.x * width + b0, min(64, nope - b0), red);
}

// Orthonormal Walsh-Hadamard of `width` values held in shared `h` (f64, as
// the CPU twin), by threads 0..width. Returns this thread's rotated value.
__device__ __forceinline__ float hadamard_shared(double* h, int width) {
    const int i = threadIdx.x;
    const bool on = i < width;
    for (int len = 1; len < width; len <<= 1) {
        double v = 0.0;
        if (on) {
            const int j = i ^ len;
            v = (i & len) ? h[j] - h[i] : h[i] + h[j];
        }
        __syncthreads();
        if (on) h[i] = v;
        __syncthreads();
    }
    return on ? (float)(h[i] * (1.0 / sqrt((double)width))) : 0.f;
}

// FP4 E2M1 in blocks of 32 = one warp each (lanes past `on` hold 0).
__device__ __forceinline__ float fp4_block(float hv) {
    float a = fabsf(hv);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    const float s = pow2_scale(fmaxf(a, 6.f * __uint_as_float(1u << 23)), 6.f);
    return e2m1_round(fminf(fmaxf(hv / s, -6.f), 6.f)) * s;
}

extern "C" __global__ void indexer_rows(float* __restrict__ x, int width) {
    await_inputs();
    extern __shared__ double h[];
    float* row = x + (size_t)blockIdx.x * width;
    const int i = threadIdx.x;
    const bool on = i < width;
    if (on) h[i] = row[i];
    __syncthreads();
    const float hv = hadamard_shared(h, width);
    const float q = fp4_block(hv);
    if (on) row[i] = q;
}
