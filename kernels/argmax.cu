// argmax.cu — index of the largest logit per row, ties to the lower index
// (CPU twin: generate.rs argmax). grid (rows), block 256.
extern "C" __global__ void argmax_rows(const float* __restrict__ x, int width, int* __restrict__ out) {
    __shared__ float bv[256];
    __shared__ int bi[256];
    const float* r = x + (size_t)blockIdx.x * width;
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const float f = r[i];
        if (f > v || (f == v && i < idx)) { v = f; idx = i; }
    }
    bv[threadIdx.x] = v;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float ov = bv[threadIdx.x + s];
            const int oi = bi[threadIdx.x + s];
            if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])) {
                bv[threadIdx.x] = ov;
                bi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = bi[0];
}
