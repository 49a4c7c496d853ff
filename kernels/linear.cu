// linear.cu — y[t, j] = sum_k x[t, k] * W[row0 + j, k]   (CPU twin: cpu/ops/linear.rs)
//
// Every output is reduced in one order, whatever kernel forms it and
// however many tokens its launch holds (common.cuh: 16-byte chunks, lane l
// of 32 taking chunks l, l + 32, ..., a partial per chunk, the lanes' sums
// by a fixed butterfly), accumulating in f64 (the CPU twin's precision), so
// results do not depend on the batch. Four families of kernels form it:
// - the prefill tiles `linear_f32` / `linear_grouped` (8 rows x 8 tokens a
//   block, linear_tile_pairs below);
// - the prefill and chunk groups `linear_groups` (a group of tokens staged
//   whole, linear_group below);
// - the decode rows `linear_t1_r{1,2,4}_{f32,bf16,fp8,fp4}` (one token, its
//   row staged whole, each warp 1, 2 or 4 rows; a kernel per format);
// - `linear_f32_t1` / `linear_grouped_t1`, one warp a row and a tile of
//   one token, for a decode row too wide to stage whole.
//
// The grouped kernels add grid z = group: group z applies rows
// z*nrows .. z*nrows+nrows-1 of W to the inputs at x + z*x_group and writes
// y + z*nrows (the grouped low-rank output projection `wo_a` in one
// launch); each output's sum is the one above.

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

// Prefill and chunks: a block of 8 warps takes 8 rows and 8 tokens. Warp w
// takes rows 2 * (w & 3) and 2 * (w & 3) + 1 of the block's and tokens
// 4 * (w >> 2) .. + 3, so that each staged activation a lane reads serves
// two rows, each weight it decodes four tokens, and each activation the
// block converts to f64 eight rows. The block walks
// the columns in windows of 32 chunks (one a lane, as warp_dot_rows'
// lanes take them), staging the window's activations as f64 (times 2^(P -
// 127) for scaled codes; chunk c of token t at t * TILE_TOKEN(E) + c * (E +
// 2), the decode kernels' layout) while the next window's chunks and
// activations load (the activations by cp.async into an f32 staging area
// after the f64 window).
// Each output is the sum warp_dot_rows forms: per chunk a partial from
// zero in column order, taken into the lane's sum as the decode kernels
// take it, the lanes' sums by the butterfly; bits do not depend on n.
// grid (ceil(nrows / TILE_ROWS), ceil(n / TILE_TOKENS)), block 256, dynamic
// smem TILE_SMEM(E) doubles (gpu/products.rs `tile_smem`).
#define TILE_ROWS 8
#define TILE_TOKENS 8
#define TILE_TOKEN(E) (32 * ((E) + 2))
// The f64 window, then the f32 staging area (in doubles).
#define TILE_SMEM(E) (TILE_TOKENS * TILE_TOKEN(E) + TILE_TOKENS * 32 * (E) / 2)
// Values of a chunk a lane decodes at once (all of a BF16 or F32 chunk).
#define TILE_SLICE(E) ((E) < 8 ? (E) : 8)

// The tile's sums: warp w of the block sums its two weight rows `rows`
// (`active`: the warp has rows; a row past the matrix repeats its last
// and is not stored) against tokens 4 * (w >> 2) .. + 3 of the block's
// nt <= 8, whose activations start at xrow(t); acc[r][t] is every lane's
// (zero for tokens past nt). Every thread of the block calls it with the
// same nt and xrow (it syncs). The windows are copied 4 values at a time
// (E, and so every window, is a multiple of 4), by one 16-byte copy where
// the address allows.
template <int FMT, bool SCALED, class XRow>
__device__ __forceinline__ void tile_dots(const RowRef (&rows)[2], bool active, int cols, int nt, XRow xrow,
                                          double* xs, double (&acc)[2][4]) {
    const int E = Fmt<FMT>::E, SL = TILE_SLICE(E);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int tw = 4 * (warp >> 2);  // the warp's first token of the block's
    const int nch = cols / E;
    const double xscale = SCALED ? pow2d(Code<FMT>::P - 127) : 1.0;
    #pragma unroll
    for (int r = 0; r < 2; r++)
        #pragma unroll
        for (int t = 0; t < 4; t++) acc[r][t] = 0.0;
    // the window at chunk `base`: its f32 activations copied into `stage`
    // asynchronously, then (all copies landed, every warp past the last
    // window) converted into xs
    float* stage = (float*)(xs + TILE_TOKENS * TILE_TOKEN(E));
    auto fetch = [&](int base) {
        const int k0 = base * E, len = min(32 * E, cols - k0);
        for (int i = 4 * threadIdx.x; i < TILE_TOKENS * 32 * E; i += 4 * blockDim.x) {
            const int t = i / (32 * E), e = i % (32 * E);
            if (t < nt && e < len) {
                const float* src = xrow(t) + k0 + e;
                if (e + 4 <= len && (((size_t)src) & 15) == 0) copy_async16(stage + i, src);
                else
                    for (int u = 0; u < 4 && e + u < len; u++) copy_async4(stage + i + u, src + u);
            }
        }
        copy_async_commit();
    };
    auto convert = [&]() {
        copy_async_wait_all();
        __syncthreads();
        for (int i = 4 * threadIdx.x; i < TILE_TOKENS * 32 * E; i += 4 * blockDim.x) {
            const int t = i / (32 * E), e = i % (32 * E);
            const float4 v = *(const float4*)(stage + i);
            double2* d = (double2*)(xs + t * TILE_TOKEN(E) + (e / E) * (E + 2) + e % E);
            d[0] = make_double2((double)v.x * xscale, (double)v.y * xscale);
            d[1] = make_double2((double)v.z * xscale, (double)v.w * xscale);
        }
        __syncthreads();
    };
    fetch(0);
    uint4 cur[2], next[2];
    #pragma unroll
    for (int r = 0; r < 2; r++) cur[r] = active && lane < nch ? rows[r].chunks[lane] : make_uint4(0, 0, 0, 0);
    convert();
    for (int base = 0; base < nch; base += 32) {
        const int ci = base + lane;
        const bool more = base + 32 < nch;
        #pragma unroll
        for (int r = 0; r < 2; r++)
            next[r] = active && ci + 32 < nch ? rows[r].chunks[ci + 32] : make_uint4(0, 0, 0, 0);
        if (more) fetch(base + 32);  // the next window's activations land while this one is summed
        if (active && ci < nch) {
            double f[2];
            float sc[2];
            double p[2][4];
            #pragma unroll
            for (int r = 0; r < 2; r++) {
                if (SCALED) f[r] = chunk_factor<FMT>(rows[r], ci);
                else sc[r] = row_scale<FMT>(rows[r], ci);
                #pragma unroll
                for (int t = 0; t < 4; t++) p[r][t] = 0.0;
            }
            #pragma unroll
            for (int s0 = 0; s0 < E; s0 += SL) {
                double wv[2][SL];
                #pragma unroll
                for (int r = 0; r < 2; r++)
                    #pragma unroll
                    for (int k = 0; k < SL; k++)
                        wv[r][k] = SCALED ? code_value<FMT>(cur[r], s0 + k) : (double)dequant_value<FMT>(cur[r], s0 + k, sc[r]);
                #pragma unroll
                for (int t = 0; t < 4; t++) {
                    if (tw + t < nt) {
                        const double2* xr = (const double2*)(xs + (tw + t) * TILE_TOKEN(E) + lane * (E + 2) + s0);
                        #pragma unroll
                        for (int k = 0; k < SL; k += 2) {
                            const double2 xv = xr[k >> 1];
                            #pragma unroll
                            for (int r = 0; r < 2; r++) {
                                p[r][t] = fma(wv[r][k], xv.x, p[r][t]);
                                p[r][t] = fma(wv[r][k + 1], xv.y, p[r][t]);
                            }
                        }
                    }
                }
            }
            #pragma unroll
            for (int r = 0; r < 2; r++)
                #pragma unroll
                for (int t = 0; t < 4; t++) acc[r][t] = SCALED ? fma(p[r][t], f[r], acc[r][t]) : acc[r][t] + p[r][t];
        }
        #pragma unroll
        for (int r = 0; r < 2; r++) cur[r] = next[r];
        if (more) convert();
    }
    #pragma unroll
    for (int r = 0; r < 2; r++)
        #pragma unroll
        for (int t = 0; t < 4; t++) acc[r][t] = warp_sum(acc[r][t]);
}

// A tile of a matrix: the block's rows j0 .. j0 + 7 of nrows (from row0 of
// w), its tokens tb .. tb + 7 of n; warp w takes rows j0 + 2 * (w & 3) and
// the next.
template <int FMT, bool SCALED>
__device__ __forceinline__ void linear_tile_pairs(const Mat& w, const float* x, int x_stride, float* y, int y_stride,
                                                  int n, int row0, int nrows, double* xs) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j0 = blockIdx.x * TILE_ROWS + 2 * (warp & 3);  // the warp's rows j0, j0 + 1 (of nrows)
    const int tb = blockIdx.y * TILE_TOKENS;                 // the block's first token
    const int tw = 4 * (warp >> 2);                          // the warp's first token of the block's
    const int nt = min(TILE_TOKENS, n - tb);
    RowRef rows[2];
    #pragma unroll
    for (int r = 0; r < 2; r++) rows[r] = row_ref<FMT>(w, row0 + min(j0 + r, nrows - 1));
    double acc[2][4];
    tile_dots<FMT, SCALED>(rows, j0 < nrows, w.cols, nt, [&](int t) { return x + (size_t)(tb + t) * x_stride; }, xs,
                           acc);
    if (lane == 0) {
        #pragma unroll
        for (int r = 0; r < 2; r++)
            #pragma unroll
            for (int t = 0; t < 4; t++)
                if (j0 + r < nrows && tw + t < nt) y[(size_t)(tb + tw + t) * y_stride + j0 + r] = (float)acc[r][t];
    }
}

template <int FMT>
__device__ __forceinline__ void linear_tile_fmt(const Mat& w, const float* x, int x_stride, float* y, int y_stride,
                                                int n, int row0, int nrows) {
    if (w.scaled) linear_tile_pairs<FMT, true>(w, x, x_stride, y, y_stride, n, row0, nrows, xs_dyn);
    else linear_tile_pairs<FMT, false>(w, x, x_stride, y, y_stride, n, row0, nrows, xs_dyn);
}

__device__ __forceinline__ void linear_tiles(const Mat& w, const float* x, int x_stride, float* y, int y_stride, int n,
                                             int row0, int nrows) {
    switch (w.fmt) {
        case FMT_BF16: linear_tile_fmt<FMT_BF16>(w, x, x_stride, y, y_stride, n, row0, nrows); break;
        case FMT_FP8: linear_tile_fmt<FMT_FP8>(w, x, x_stride, y, y_stride, n, row0, nrows); break;
        case FMT_FP4: linear_tile_fmt<FMT_FP4>(w, x, x_stride, y, y_stride, n, row0, nrows); break;
        default: linear_tile_fmt<FMT_F32>(w, x, x_stride, y, y_stride, n, row0, nrows); break;
    }
}

// Prefill and chunks (tiles of 8 rows x 8 tokens).
extern "C" __global__ void linear_f32(Mat w, const float* __restrict__ x, int x_stride, float* __restrict__ y,
                                      int y_stride, int n, int row0, int nrows) {
    await_inputs();
    linear_tiles(w, x, x_stride, y, y_stride, n, row0, nrows);
}

// Tile of one token (decode).
extern "C" __global__ void linear_f32_t1(Mat w, const float* __restrict__ x, int x_stride, float* __restrict__ y,
                                         int y_stride, int n, int row0, int nrows) {
    await_inputs();
    linear_any<1>(w, x, x_stride, y, y_stride, n, row0, nrows);
}

// Grouped, tiles of 8 rows x 8 tokens.
extern "C" __global__ void linear_grouped(Mat w, const float* __restrict__ x, int x_stride, int x_group,
                                          float* __restrict__ y, int y_stride, int n, int nrows) {
    await_inputs();
    const int z = blockIdx.z;
    linear_tiles(w, x + (size_t)z * x_group, x_stride, y + (size_t)z * nrows, y_stride, n, z * nrows, nrows);
}

// Grouped, tile of one token (decode).
extern "C" __global__ void linear_grouped_t1(Mat w, const float* __restrict__ x, int x_stride, int x_group,
                                             float* __restrict__ y, int y_stride, int n, int nrows) {
    await_inputs();
    const int z = blockIdx.z;
    linear_any<1>(w, x + (size_t)z * x_group, x_stride, y + (size_t)z * nrows, y_stride, n, z * nrows, nrows);
}

// Prefill and chunks (but scaled FP8 and FP4 rows, which take linear_mma
// below), where NT staged rows of the matrix's width fit
// (gpu/products.rs `group_smem`; NT is GROUP_TOKENS, or half of it for rows
// too wide for that many): block (x, y, z) stages tokens y * NT .. + NT - 1
// whole (stage_row's layout; a last group of fewer tokens stages its last
// again), then its warps walk the rows GROUP_ROWS at a time - warp w rows
// GROUP_ROWS * (x * warps + w) and the next GROUP_ROWS - 1, then those plus
// GROUP_ROWS times the grid's warps, ... - each weight decoded once for
// the group's tokens
// (warp_dot_rows_tokens: the decode kernels' sums). Unlike the 8x8 tiles,
// the tokens' activations are read once a block, not once for every 8
// rows. Group z applies rows row0 + z * nrows .. to the inputs at
// x + z * x_group and writes y + z * nrows (one group: a plain product of
// rows row0 .. row0 + nrows - 1). grid (blocks, ceil(n / NT), groups),
// block 256, dynamic smem NT staged rows of w.cols.
template <int FMT, bool SCALED, int NT>
__device__ __forceinline__ void linear_group(const Mat& w, const float* x, int x_stride, float* y, int y_stride,
                                             int n, int row0, int nrows) {
    const int E = Fmt<FMT>::E, stride = w.cols / E * (E + 2);
    const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
    const int t0 = blockIdx.y * NT, nt = min(NT, n - t0);
    stage_group<FMT, SCALED, NT>([&](int t) { return x + (size_t)(t0 + t) * x_stride; }, w.cols, nt);
    for (int j0 = GROUP_ROWS * (blockIdx.x * warps + (threadIdx.x >> 5)); j0 < nrows;
         j0 += GROUP_ROWS * gridDim.x * warps) {
        RowRef rows[GROUP_ROWS];
        #pragma unroll
        for (int r = 0; r < GROUP_ROWS; r++) rows[r] = row_ref<FMT>(w, row0 + min(j0 + r, nrows - 1));
        uint4 buf[GROUP_ROWS][RING(GROUP_ROWS)];
        first_chunks<FMT, GROUP_ROWS, NT>(rows, w.cols, buf);
        double acc[GROUP_ROWS][NT];
        warp_dot_rows_tokens<FMT, GROUP_ROWS, NT, SCALED>(rows, w.cols, xs_dyn, stride, buf, acc);
        #pragma unroll
        for (int t = 0; t < NT; t++) {
            if (lane == t && t < nt) {
                #pragma unroll
                for (int r = 0; r < GROUP_ROWS; r++)
                    if (j0 + r < nrows) y[(size_t)(t0 + t) * y_stride + j0 + r] = (float)acc[r][t];
            }
        }
    }
}

template <int FMT, int NT>
__device__ __forceinline__ void linear_group_fmt(const Mat& w, const float* x, int x_stride, float* y, int y_stride,
                                                 int n, int row0, int nrows) {
    if (w.scaled) linear_group<FMT, true, NT>(w, x, x_stride, y, y_stride, n, row0, nrows);
    else linear_group<FMT, false, NT>(w, x, x_stride, y, y_stride, n, row0, nrows);
}

template <int NT>
__device__ __forceinline__ void linear_group_any(const Mat& w, const float* x, int x_stride, float* y, int y_stride,
                                                 int n, int row0, int nrows) {
    switch (w.fmt) {
        case FMT_BF16: linear_group_fmt<FMT_BF16, NT>(w, x, x_stride, y, y_stride, n, row0, nrows); break;
        case FMT_FP8: linear_group_fmt<FMT_FP8, NT>(w, x, x_stride, y, y_stride, n, row0, nrows); break;
        case FMT_FP4: linear_group_fmt<FMT_FP4, NT>(w, x, x_stride, y, y_stride, n, row0, nrows); break;
        default: linear_group_fmt<FMT_F32, NT>(w, x, x_stride, y, y_stride, n, row0, nrows); break;
    }
}

// tokens: the group's NT, GROUP_TOKENS or GROUP_TOKENS / 2
extern "C" __global__ void __launch_bounds__(256) linear_groups(Mat w, const float* __restrict__ x, int x_stride,
                                                                int x_group, float* __restrict__ y, int y_stride,
                                                                int n, int row0, int nrows, int tokens) {
    await_inputs();
    const int z = blockIdx.z;
    const float* xz = x + (size_t)z * x_group;
    float* yz = y + (size_t)z * nrows;
    const int r0 = row0 + z * nrows;
    if (tokens == GROUP_TOKENS) linear_group_any<GROUP_TOKENS>(w, xz, x_stride, yz, y_stride, n, r0, nrows);
    else linear_group_any<GROUP_TOKENS / 2>(w, xz, x_stride, yz, y_stride, n, r0, nrows);
}

// Decode (one token): the activation row staged whole, each warp NR rows at
// once (warp_dot_rows_ring; the same sums as above). The grid is at most
// what the SMs hold at once: block b stages the row once, and its warp w
// takes the row groups b * warps + w, then that plus the grid's warps, and
// so on (the first group's first stages load while the row is staged).
// grid (blocks, 1, groups), block 128, 256 or 512 (gpu/products.rs
// `decode_block`), dynamic smem the staged row (stage_row), then each warp's
// weight ring (SMEM_RING_WARP_BYTES(NR) a warp). Group z:
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
    // this warp's weight ring, after the staged row of nch chunks (gpu/products.rs `decode_block` sizes both)
    const int E = Fmt<FMT>::E, nch = w.cols / E;
    uint4* ring = (uint4*)(xs + (size_t)nch * (E + 2)) + (threadIdx.x >> 5) * (SMEM_RING_WARP_BYTES(NR) / 16);
    auto refs = [&](int j0) {
        #pragma unroll
        for (int r = 0; r < NR; r++) {
            const int j = min(j0 + r, nrows - 1);
            rows[r] = j < na ? row_ref<FMT>(w, row0 + j) : row_ref<FMT>(w2, j - na);
        }
    };
    if (j0 < nrows) {
        refs(j0);
        ring_first_stages<NR>(rows, nch, ring);
    }
    await_inputs();  // the weights' first stages load while the kernel before finishes
    stage_row<E>(x, w.cols, scaled ? pow2d(Code<FMT>::P - 127) : 1.0, xs);
    __syncthreads();
    for (bool first = true; j0 < nrows; j0 += stride, first = false) {
        if (!first) {
            refs(j0);
            ring_first_stages<NR>(rows, nch, ring);
        }
        double acc[NR];
        if (scaled) warp_dot_rows_ring<FMT, NR, true>(rows, w.cols, xs, ring, acc);
        else warp_dot_rows_ring<FMT, NR, false>(rows, w.cols, xs, ring, acc);
        if (lane == 0) {
            #pragma unroll
            for (int r = 0; r < NR; r++) {
                const int j = j0 + r;
                if (j < nrows) *(j < na ? y + j : y2 + (j - na)) = (float)acc[r];
            }
        }
    }
}

// One kernel per (rows a warp, format): each holds one format's path alone
// (both arms, scaled codes and dequantized), so that the code a warp runs
// is compact (gpu/products.rs `decode_rows` picks the name).
template <int FMT, int NR>
__device__ __forceinline__ void linear_rows(const Mat& w, const Mat& w2, int na, const float* x, int x_group, float* y,
                                            float* y2, int row0, int nrows) {
    const int z = blockIdx.z;
    x += (size_t)z * x_group;
    y += (size_t)z * nrows;
    row0 += z * nrows;
    linear_rows_fmt<FMT, NR>(w, w2, na, x, y, y2, row0, nrows, xs_dyn);
}

#define LINEAR_T1(NAME, FMT, NR)                                                                                  \
    extern "C" __global__ void NAME(Mat w, Mat w2, int na, const float* __restrict__ x, int x_group,              \
                                    float* __restrict__ y, float* __restrict__ y2, int row0, int nrows) {        \
        linear_rows<FMT, NR>(w, w2, na, x, x_group, y, y2, row0, nrows);                                          \
    }
LINEAR_T1(linear_t1_r1_f32, FMT_F32, 1)
LINEAR_T1(linear_t1_r2_f32, FMT_F32, 2)
LINEAR_T1(linear_t1_r4_f32, FMT_F32, 4)
LINEAR_T1(linear_t1_r1_bf16, FMT_BF16, 1)
LINEAR_T1(linear_t1_r2_bf16, FMT_BF16, 2)
LINEAR_T1(linear_t1_r4_bf16, FMT_BF16, 4)
LINEAR_T1(linear_t1_r1_fp8, FMT_FP8, 1)
LINEAR_T1(linear_t1_r2_fp8, FMT_FP8, 2)
LINEAR_T1(linear_t1_r4_fp8, FMT_FP8, 4)
LINEAR_T1(linear_t1_r1_fp4, FMT_FP4, 1)
LINEAR_T1(linear_t1_r2_fp4, FMT_FP4, 2)
LINEAR_T1(linear_t1_r4_fp4, FMT_FP4, 4)

// Prefill and chunks through scaled FP8, FP4 (linear_mma) or BF16 rows
// (linear_mma_bf16) on the FP64 tensor cores (rows.cuh `mma_round`;
// gpu/products.rs `mma_smem` says which products): block (x, y, z) takes
// tokens y * MMA_TOKENS .. + 15 (the last again past n), and in each round warp w takes a tile of MMA_ROWS rows,
// from tile x * warps + w on, the grid's warps apart. Group z as in
// linear_groups. Every sum has warp_dot_rows_tokens' bits. grid (blocks,
// ceil(n / MMA_TOKENS), groups), block MMA_BLOCK (12 warps: the most its
// registers let an SM hold), dynamic smem gpu/products.rs `mma_tile_smem`.
template <int FMT, int CHUNKS>
__device__ __forceinline__ void linear_mma_fmt(const Mat& w, const float* x, int x_stride, float* y, int y_stride,
                                               int n, int row0, int nrows) {
    const int warps = MMA_BLOCK >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int t0 = blockIdx.y * MMA_TOKENS, nt = min(MMA_TOKENS, n - t0);
    const int tiles = (nrows + MMA_ROWS - 1) / MMA_ROWS, stride = gridDim.x * warps;
    const int rounds = mma_rounds(tiles, blockIdx.x * warps, stride);
    const float* const* rows = mma_token_rows([&](int t) { return x + (size_t)(t0 + t) * x_stride; }, nt);
    for (int r = 0; r < rounds; r++) {
        const int j0 = MMA_ROWS * (blockIdx.x * warps + (threadIdx.x >> 5) + r * stride);
        const RowRef lo = row_ref<FMT>(w, row0 + min(j0 + g, nrows - 1));
        const RowRef hi = row_ref<FMT>(w, row0 + min(j0 + g + 8, nrows - 1));
        double out[8];
        mma_round<FMT, CHUNKS>(j0 < nrows, lo, hi, rows, w.cols, r > 0, r + 1 < rounds, out);
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            const int t = 8 * (i >> 2) + 2 * q + (i & 1), rr = j0 + g + 8 * ((i >> 1) & 1);
            if (t < nt && rr < nrows) y[(size_t)(t0 + t) * y_stride + rr] = (float)out[i];
        }
    }
}

// Block (x, y, z)'s group z: its inputs x_group floats on, its rows and
// outputs z * nrows on.
template <int FMT, int CHUNKS>
__device__ __forceinline__ void linear_mma_group(const Mat& w, const float* x, int x_stride, int x_group, float* y,
                                                 int y_stride, int n, int row0, int nrows) {
    const int z = blockIdx.z;
    linear_mma_fmt<FMT, CHUNKS>(w, x + (size_t)z * x_group, x_stride, y + (size_t)z * nrows, y_stride, n,
                                row0 + z * nrows, nrows);
}

// Rows of 4 or more chunks a lane; rows of 1 or 2 (wq_b's, the indexer's
// queries') take linear_mma_short, a kernel of its own (rows.cuh
// MMA_CHUNKS_ALL, MMA_CHUNKS_FEW).
extern "C" __global__ void __launch_bounds__(384) linear_mma(Mat w, const float* __restrict__ x, int x_stride,
                                                             int x_group, float* __restrict__ y, int y_stride, int n,
                                                             int row0, int nrows) {
    await_inputs();
    if (w.fmt == FMT_FP4) linear_mma_group<FMT_FP4, MMA_CHUNKS_ALL>(w, x, x_stride, x_group, y, y_stride, n, row0,
                                                                     nrows);
    else linear_mma_group<FMT_FP8, MMA_CHUNKS_ALL>(w, x, x_stride, x_group, y, y_stride, n, row0, nrows);
}

extern "C" __global__ void __launch_bounds__(384) linear_mma_short(Mat w, const float* __restrict__ x, int x_stride,
                                                                   int x_group, float* __restrict__ y, int y_stride,
                                                                   int n, int row0, int nrows) {
    await_inputs();
    if (w.fmt == FMT_FP4) linear_mma_group<FMT_FP4, MMA_CHUNKS_FEW>(w, x, x_stride, x_group, y, y_stride, n, row0,
                                                                    nrows);
    else linear_mma_group<FMT_FP8, MMA_CHUNKS_FEW>(w, x, x_stride, x_group, y, y_stride, n, row0, nrows);
}

// The same for BF16 rows (the compressors' and the indexer's products and
// the router's gate: no scales, one m16n8k8 step a chunk of 8 values), a
// kernel of its own so that the FP8 and FP4 paths keep their registers.
extern "C" __global__ void __launch_bounds__(384) linear_mma_bf16(Mat w, const float* __restrict__ x, int x_stride,
                                                                  int x_group, float* __restrict__ y, int y_stride,
                                                                  int n, int row0, int nrows) {
    await_inputs();
    linear_mma_group<FMT_BF16, MMA_CHUNKS_ALL>(w, x, x_stride, x_group, y, y_stride, n, row0, nrows);
}
