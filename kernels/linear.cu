// linear.cu — y[t, j] = sum_k x[t, k] * W[row0 + j, k]   (CPU twin: cpu/ops/linear.rs)
//
// One warp per output row and a tile of tokens: the warp reads each 16-byte
// weight chunk once and applies it to every token of the tile (activations
// staged in shared memory), accumulating in f64 (the CPU twin's precision).
// Each output is reduced in the order of block_dot_rows whatever the tile
// holds, so results do not depend on the batch; decode (n = 1) uses a tile
// of one.
//
// grid (ceil(nrows / 4), ceil(n / tile)), block 128. The grouped kernels add
// grid z = group: group z applies rows z*nrows .. z*nrows+nrows-1 of W to the
// inputs at x + z*x_group and writes y + z*nrows (the grouped low-rank output
// projection `wo_a` in one launch); each output's sum is the one above.

template <int FMT, int NT>
__device__ __forceinline__ void linear_tile(const Mat& w, const float* x, int x_stride, float* y, int y_stride, int n,
                                            int row0, int nrows, float* xs) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j = blockIdx.x * 4 + warp;
    const bool active = j < nrows;
    const int t0 = blockIdx.y * NT;
    const int nt = min(NT, n - t0);
    double acc[NT];
    block_dot_rows<FMT, NT>(w, row0 + (active ? j : 0), active, x + (size_t)t0 * x_stride, x_stride, nt, acc, xs);
    if (active && lane == 0) {
        #pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < nt) y[(size_t)(t0 + t) * y_stride + j] = (float)acc[t];
    }
}

// One shared buffer, sized for the widest chunk (FP4), serves every format.
template <int NT>
__device__ __forceinline__ void linear_any(const Mat& w, const float* x, int x_stride, float* y, int y_stride, int n,
                                           int row0, int nrows) {
    __shared__ float xs[DOT_SMEM(32, NT)];
    switch (w.fmt) {
        case FMT_BF16: linear_tile<FMT_BF16, NT>(w, x, x_stride, y, y_stride, n, row0, nrows, xs); break;
        case FMT_FP8: linear_tile<FMT_FP8, NT>(w, x, x_stride, y, y_stride, n, row0, nrows, xs); break;
        case FMT_FP4: linear_tile<FMT_FP4, NT>(w, x, x_stride, y, y_stride, n, row0, nrows, xs); break;
        default: linear_tile<FMT_F32, NT>(w, x, x_stride, y, y_stride, n, row0, nrows, xs); break;
    }
}

// Tile of 8 tokens (prefill and chunks).
extern "C" __global__ void linear_f32(Mat w, const float* __restrict__ x, int x_stride, float* __restrict__ y,
                                      int y_stride, int n, int row0, int nrows) {
    linear_any<8>(w, x, x_stride, y, y_stride, n, row0, nrows);
}

// Tile of one token (decode).
extern "C" __global__ void linear_f32_t1(Mat w, const float* __restrict__ x, int x_stride, float* __restrict__ y,
                                         int y_stride, int n, int row0, int nrows) {
    linear_any<1>(w, x, x_stride, y, y_stride, n, row0, nrows);
}

// Grouped, tile of 8 tokens.
extern "C" __global__ void linear_grouped(Mat w, const float* __restrict__ x, int x_stride, int x_group,
                                          float* __restrict__ y, int y_stride, int n, int nrows) {
    const int z = blockIdx.z;
    linear_any<8>(w, x + (size_t)z * x_group, x_stride, y + (size_t)z * nrows, y_stride, n, z * nrows, nrows);
}

// Grouped, tile of one token (decode).
extern "C" __global__ void linear_grouped_t1(Mat w, const float* __restrict__ x, int x_stride, int x_group,
                                             float* __restrict__ y, int y_stride, int n, int nrows) {
    const int z = blockIdx.z;
    linear_any<1>(w, x + (size_t)z * x_group, x_stride, y + (size_t)z * nrows, y_stride, n, z * nrows, nrows);
}

// Decode (one token) with the whole activation row staged once per block:
// the same per-lane chunk order, f64 fma order and butterfly as
// block_dot_rows, so the same bits, without a barrier per 32 chunks and with
// four chunks in flight per lane; each warp takes RPW consecutive rows. x is
// staged in windows of 32 chunks laid out as block_dot_rows lays one out.
// grid (ceil(nrows / (4 * RPW)), 1, groups), block 128, dynamic smem
// ceil(nch / 32) * 32 * (E + 1) floats. Group z: rows row0 + z*nrows ..,
// inputs x + z*x_group, outputs y + z*nrows (as linear_grouped).
#define RPW 4

template <int FMT>
__device__ __forceinline__ double warp_row_dot_staged(const Mat& m, int r, const float* xs) {
    const int E = Fmt<FMT>::E;
    const int lane = threadIdx.x & 31;
    const int nch = m.cols / E;
    const uint4* rc = (const uint4*)m.data + (size_t)r * nch;
    const int row_words = 32 * (E + 1);
    double a = 0.0;
    float w[E];
    for (int base = 0; base < nch; base += 4 * 32) {
        uint4 c[4];
        #pragma unroll
        for (int u = 0; u < 4; u++) {
            const int ci = base + u * 32 + lane;
            c[u] = ci < nch ? rc[ci] : make_uint4(0, 0, 0, 0);
        }
        #pragma unroll
        for (int u = 0; u < 4; u++) {
            const int ci = base + u * 32 + lane;
            if (ci < nch) {
                decode_chunk<FMT>(m, r, ci, c[u], w);
                const float* xr = xs + ((base >> 5) + u) * row_words + lane * (E + 1);
                #pragma unroll
                for (int j = 0; j < E; j++) a = fma((double)w[j], (double)xr[j], a);
            }
        }
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    return a;
}

template <int FMT>
__device__ __forceinline__ void linear_t1_staged_fmt(const Mat& w, const float* x, float* y, int row0, int nrows,
                                                     float* xs) {
    const int E = Fmt<FMT>::E;
    const int nch = w.cols / E, row_words = 32 * (E + 1), nwin = (nch + 31) / 32;
    for (int i = threadIdx.x; i < nwin * 32 * E; i += blockDim.x) {
        const int wd = i / (32 * E), e = i % (32 * E), k = wd * 32 * E + e;
        if (k < w.cols) xs[wd * row_words + e + e / E] = x[k];
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int k = 0; k < RPW; k++) {
        const int j = (blockIdx.x * (blockDim.x >> 5) + warp) * RPW + k;
        if (j >= nrows) break;
        const double a = warp_row_dot_staged<FMT>(w, row0 + j, xs);
        if (lane == 0) y[j] = (float)a;
    }
}

extern "C" __global__ void linear_t1_staged(Mat w, const float* __restrict__ x, int x_group, float* __restrict__ y,
                                            int row0, int nrows) {
    extern __shared__ float xs_dyn[];
    const int z = blockIdx.z;
    x += (size_t)z * x_group;
    y += (size_t)z * nrows;
    row0 += z * nrows;
    switch (w.fmt) {
        case FMT_BF16: linear_t1_staged_fmt<FMT_BF16>(w, x, y, row0, nrows, xs_dyn); break;
        case FMT_FP8: linear_t1_staged_fmt<FMT_FP8>(w, x, y, row0, nrows, xs_dyn); break;
        case FMT_FP4: linear_t1_staged_fmt<FMT_FP4>(w, x, y, row0, nrows, xs_dyn); break;
        default: linear_t1_staged_fmt<FMT_F32>(w, x, y, row0, nrows, xs_dyn); break;
    }
}
