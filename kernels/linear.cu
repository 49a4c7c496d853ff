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
    await_inputs();
    linear_any<8>(w, x, x_stride, y, y_stride, n, row0, nrows);
}

// Tile of one token (decode).
extern "C" __global__ void linear_f32_t1(Mat w, const float* __restrict__ x, int x_stride, float* __restrict__ y,
                                         int y_stride, int n, int row0, int nrows) {
    await_inputs();
    linear_any<1>(w, x, x_stride, y, y_stride, n, row0, nrows);
}

// Grouped, tile of 8 tokens.
extern "C" __global__ void linear_grouped(Mat w, const float* __restrict__ x, int x_stride, int x_group,
                                          float* __restrict__ y, int y_stride, int n, int nrows) {
    await_inputs();
    const int z = blockIdx.z;
    linear_any<8>(w, x + (size_t)z * x_group, x_stride, y + (size_t)z * nrows, y_stride, n, z * nrows, nrows);
}

// Grouped, tile of one token (decode).
extern "C" __global__ void linear_grouped_t1(Mat w, const float* __restrict__ x, int x_stride, int x_group,
                                             float* __restrict__ y, int y_stride, int n, int nrows) {
    await_inputs();
    const int z = blockIdx.z;
    linear_any<1>(w, x + (size_t)z * x_group, x_stride, y + (size_t)z * nrows, y_stride, n, z * nrows, nrows);
}

// Decode (one token): the activation row staged whole, each warp NR rows at
// once (warp_dot_rows; the same sums as above). The grid is at most what
// the SMs hold at once: block b stages the row once, and its warp w takes
// the row groups b * warps + w, then that plus the grid's warps, and so on
// (the first group's chunks load while the row is staged). grid (blocks, 1,
// groups), block 128, dynamic smem the staged row (stage_row). Group z:
// rows row0 + z*nrows .., input x + z*x_group, outputs y + z*nrows.
// A pair of matrices of one format, width and `scaled` (two products of
// one input, such as W1 and W3) in one launch: rows j < na are rows of w
// written to y, the others rows j - na of w2 written to y2 (no groups).
template <int FMT, int NR>
__device__ __forceinline__ void linear_rows_fmt(const Mat& w, const Mat& w2, int na, const float* x, float* y,
                                                float* y2, int row0, int nrows, double* xs) {
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int stride = gridDim.x * warps * NR;
    int j0 = (blockIdx.x * warps + (threadIdx.x >> 5)) * NR;
    const bool scaled = w.scaled != 0;
    RowRef rows[NR];
    uint4 buf[NR][RING(NR)];
    auto refs = [&](int j0) {
        #pragma unroll
        for (int r = 0; r < NR; r++) {
            const int j = min(j0 + r, nrows - 1);
            rows[r] = j < na ? row_ref<FMT>(w, row0 + j) : row_ref<FMT>(w2, j - na);
        }
    };
    if (j0 < nrows) {
        refs(j0);
        first_chunks<FMT, NR>(rows, w.cols, buf);
    }
    await_inputs();  // the weights' first chunks load while the kernel before finishes
    stage_row<Fmt<FMT>::E>(x, w.cols, scaled ? pow2d(Code<FMT>::P - 127) : 1.0, xs);
    __syncthreads();
    for (bool first = true; j0 < nrows; j0 += stride, first = false) {
        if (!first) {
            refs(j0);
            first_chunks<FMT, NR>(rows, w.cols, buf);
        }
        double acc[NR];
        if (scaled) warp_dot_rows<FMT, NR, true>(rows, w.cols, xs, buf, acc);
        else warp_dot_rows<FMT, NR, false>(rows, w.cols, xs, buf, acc);
        if (lane == 0) {
            #pragma unroll
            for (int r = 0; r < NR; r++) {
                const int j = j0 + r;
                if (j < nrows) *(j < na ? y + j : y2 + (j - na)) = (float)acc[r];
            }
        }
    }
}

template <int NR>
__device__ __forceinline__ void linear_rows(const Mat& w, const Mat& w2, int na, const float* x, int x_group, float* y,
                                            float* y2, int row0, int nrows) {
    const int z = blockIdx.z;
    x += (size_t)z * x_group;
    y += (size_t)z * nrows;
    row0 += z * nrows;
    switch (w.fmt) {
        case FMT_BF16: linear_rows_fmt<FMT_BF16, NR>(w, w2, na, x, y, y2, row0, nrows, xs_dyn); break;
        case FMT_FP8: linear_rows_fmt<FMT_FP8, NR>(w, w2, na, x, y, y2, row0, nrows, xs_dyn); break;
        case FMT_FP4: linear_rows_fmt<FMT_FP4, NR>(w, w2, na, x, y, y2, row0, nrows, xs_dyn); break;
        default: linear_rows_fmt<FMT_F32, NR>(w, w2, na, x, y, y2, row0, nrows, xs_dyn); break;
    }
}

extern "C" __global__ void linear_t1_r1(Mat w, Mat w2, int na, const float* __restrict__ x, int x_group,
                                        float* __restrict__ y, float* __restrict__ y2, int row0, int nrows) {
    linear_rows<1>(w, w2, na, x, x_group, y, y2, row0, nrows);
}

extern "C" __global__ void linear_t1_r2(Mat w, Mat w2, int na, const float* __restrict__ x, int x_group,
                                        float* __restrict__ y, float* __restrict__ y2, int row0, int nrows) {
    linear_rows<2>(w, w2, na, x, x_group, y, y2, row0, nrows);
}

extern "C" __global__ void linear_t1_r4(Mat w, Mat w2, int na, const float* __restrict__ x, int x_group,
                                        float* __restrict__ y, float* __restrict__ y2, int row0, int nrows) {
    linear_rows<4>(w, w2, na, x, x_group, y, y2, row0, nrows);
}
