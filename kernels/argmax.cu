// argmax.cu — index of the largest logit per row, ties to the lower index,
// NaN never chosen (CPU twin: generate.rs argmax). Two launches: slices of
// each row reduce to (value, index) partials, then one block per row
// reduces its partials. The comparison orders (value, index) pairs totally
// (NaN values never replace a pair), so the answer does not depend on how
// the row is split. The slice count is the launch's (grid y of the first,
// block of the second; gpu/state.rs ARGMAX_SLICES).

__device__ __forceinline__ void argmax_take(float f, int i, float& v, int& idx) {
    if (f > v || (f == v && i < idx)) {
        v = f;
        idx = i;
    }
}

// Block-wide (blockDim.x a power of two, at most 256); thread 0 gets it.
__device__ __forceinline__ void argmax_block(float& v, int& idx) {
    __shared__ float bv[256];
    __shared__ int bi[256];
    bv[threadIdx.x] = v;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) argmax_take(bv[threadIdx.x + s], bi[threadIdx.x + s], bv[threadIdx.x], bi[threadIdx.x]);
        __syncthreads();
    }
    v = bv[0];
    idx = bi[0];
}

// grid (rows, slices), block 256: the best (value, index) of each slice of
// each row into pv/pi[row * slices + slice].
extern "C" __global__ void argmax_slices(const float* __restrict__ x, int width, float* __restrict__ pv,
                                         int* __restrict__ pi) {
    await_inputs();
    const float* r = x + (size_t)blockIdx.x * width;
    const int slices = gridDim.y;
    const int len = (width + slices - 1) / slices;
    const int lo = blockIdx.y * len, hi = min(width, lo + len);
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) argmax_take(r[i], i, v, idx);
    argmax_block(v, idx);
    if (threadIdx.x == 0) {
        pv[(size_t)blockIdx.x * slices + blockIdx.y] = v;
        pi[(size_t)blockIdx.x * slices + blockIdx.y] = idx;
    }
}

// grid (rows), block = slices (a power of two, at most 256): each row's
// partials into out[row].
extern "C" __global__ void argmax_rows(const float* __restrict__ pv, const int* __restrict__ pi, int* __restrict__ out) {
    await_inputs();
    float v = pv[(size_t)blockIdx.x * blockDim.x + threadIdx.x];
    int idx = pi[(size_t)blockIdx.x * blockDim.x + threadIdx.x];
    argmax_block(v, idx);
    if (threadIdx.x == 0) out[blockIdx.x] = idx;
}
