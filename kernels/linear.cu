// linear.cu — y[t, j] = sum_k x[t, k] * W[row0 + j, k]   (CPU twin: cpu/ops/linear.rs)
//
// One warp per output row and a tile of up to 8 tokens: the warp decodes
// each 8-wide weight chunk once and applies it to every token of the tile,
// accumulating in f64 (the CPU twin's precision). Each output is reduced in
// the order of warp_dot_row (lane chunks in order, then a fixed butterfly)
// whatever the tile holds, so results do not depend on the batch.
//
// grid (ceil(nrows / 4), ceil(n / 8)), block 128.
#define LIN_TILE 8

extern "C" __global__ void linear_f32(Mat w, const float* __restrict__ x, int x_stride, float* __restrict__ y,
                                      int y_stride, int n, int row0, int nrows) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j = blockIdx.x * 4 + warp;
    if (j >= nrows) return;
    const int r = row0 + j;
    const int t0 = blockIdx.y * LIN_TILE;
    const int nt = min(LIN_TILE, n - t0);
    double acc[LIN_TILE];
    #pragma unroll
    for (int t = 0; t < LIN_TILE; t++) acc[t] = 0.0;
    float wv[8];
    for (int k = lane * 8; k < w.cols; k += 256) {
        load8(w, r, k, wv);
        #pragma unroll
        for (int t = 0; t < LIN_TILE; t++) {
            if (t < nt) {
                const float* xr = x + (size_t)(t0 + t) * x_stride + k;
                const float4 a = *(const float4*)xr;
                const float4 b = *(const float4*)(xr + 4);
                double s = acc[t];
                s = fma((double)wv[0], (double)a.x, s); s = fma((double)wv[1], (double)a.y, s);
                s = fma((double)wv[2], (double)a.z, s); s = fma((double)wv[3], (double)a.w, s);
                s = fma((double)wv[4], (double)b.x, s); s = fma((double)wv[5], (double)b.y, s);
                s = fma((double)wv[6], (double)b.z, s); s = fma((double)wv[7], (double)b.w, s);
                acc[t] = s;
            }
        }
    }
    #pragma unroll
    for (int t = 0; t < LIN_TILE; t++) {
        double v = acc[t];
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && t < nt) y[(size_t)(t0 + t) * y_stride + j] = (float)v;
    }
}
