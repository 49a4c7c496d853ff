// indexer.cu — the lightning indexer of CSA layers   (CPU twin: cpu/ops/indexer.rs)
//
// indexer_scores: for query t (position p = t0 + t), every visible key
//   s < (p+1)/ratio scores sum_h relu(q[t,h] . k_s) / sqrt(di) * (w[t,h] / sqrt(heads)),
//   in f64, heads in order; grid (n), block 256; scores[t * max_entries + s].
// indexer_topk: the topk best visible entries, ascending indices, ties to
//   the lower index; -1 pads. The k-th largest score is found by a bitwise
//   search on order-preserving 64-bit keys. grid (n), block 256.

#define IDX_KM 4  // key values per lane: index_head_dim <= 32 * IDX_KM (checked by the host)

// grid (n, ceil(max visible / 32)), block 256 (8 warps, 4 entries each),
// dynamic smem heads*di floats (the query) + heads floats (scaled weights).
extern "C" __global__ void indexer_scores(const float* __restrict__ q, const float* __restrict__ w,
                                          const float* __restrict__ keys, int heads, int di, int ratio, int t0,
                                          int max_entries, float heads_sqrt, double* __restrict__ scores) {
    extern __shared__ float qs[];
    const int t = blockIdx.x;
    const int p = t0 + t;
    const int visible = (p + 1) / ratio;
    const int s0 = blockIdx.y * 32;
    if (s0 >= visible) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const double sm = 1.0 / sqrt((double)di);
    for (int i = threadIdx.x; i < heads * di; i += blockDim.x) qs[i] = q[(size_t)t * heads * di + i];
    float* ws = qs + heads * di;
    for (int h = threadIdx.x; h < heads; h += blockDim.x) ws[h] = __fdiv_rn(w[(size_t)t * heads + h], heads_sqrt);
    __syncthreads();
    const float* qt = qs;
    for (int s = s0 + warp; s < min(s0 + 32, visible); s += 8) {
        const float* k = keys + (size_t)s * di;
        // the key in registers, lane-strided (lane l holds elements l, l + 32, ...)
        double kd[IDX_KM];
        #pragma unroll
        for (int m = 0; m < IDX_KM; m++) kd[m] = lane + 32 * m < di ? (double)k[lane + 32 * m] : 0.0;
        double total = 0.0;
        // eight heads' dots at a time (independent chains and butterflies),
        // each a lane-strided f64 sum and the fixed butterfly; the total adds
        // them in head order
        for (int h0 = 0; h0 < heads; h0 += 8) {
            double dot[8];
            #pragma unroll
            for (int u = 0; u < 8; u++) {
                const float* qh = qt + (size_t)min(h0 + u, heads - 1) * di;
                double acc = 0.0;
                #pragma unroll
                for (int m = 0; m < IDX_KM; m++)
                    if (lane + 32 * m < di) acc = fma((double)qh[lane + 32 * m], kd[m], acc);
                dot[u] = acc;
            }
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                #pragma unroll
                for (int u = 0; u < 8; u++) dot[u] += __shfl_xor_sync(0xffffffffu, dot[u], o);
            }
            #pragma unroll
            for (int u = 0; u < 8; u++) {
                const int h = h0 + u;
                if (h < heads) total += fmax(dot[u], 0.0) * sm * (double)ws[h];
            }
        }
        if (lane == 0) scores[(size_t)t * max_entries + s] = total;
    }
}

__device__ __forceinline__ u64 order_key(double f) {
    const u64 b = (u64)__double_as_longlong(f);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

extern "C" __global__ void indexer_topk(const double* __restrict__ scores, int ratio, int t0, int max_entries,
                                        int topk, int* __restrict__ sel) {
    __shared__ double red[32];
    const int t = blockIdx.x;
    const int p = t0 + t;
    const int visible = (p + 1) / ratio;
    const double* sc = scores + (size_t)t * max_entries;
    int* out = sel + (size_t)t * topk;
    if (visible <= topk) {
        for (int j = threadIdx.x; j < topk; j += blockDim.x) out[j] = j < visible ? j : -1;
        return;
    }
    // largest threshold T with count(key >= T) >= topk
    u64 T = 0;
    for (int bit = 63; bit >= 0; bit--) {
        const u64 cand = T | (1ull << bit);
        double c = 0.0;
        for (int s = threadIdx.x; s < visible; s += blockDim.x) c += order_key(sc[s]) >= cand ? 1.0 : 0.0;
        c = block_sum(c, red);
        if (c >= (double)topk) T = cand;
    }
    // entries above T, then ties at T by ascending index, up to topk; in index order
    double gt = 0.0;
    for (int s = threadIdx.x; s < visible; s += blockDim.x) gt += order_key(sc[s]) > T ? 1.0 : 0.0;
    int ties_left = topk - (int)block_sum(gt, red);
    if (threadIdx.x == 0) {
        int o = 0;
        for (int s = 0; s < visible && o < topk; s++) {
            const u64 k = order_key(sc[s]);
            if (k > T) out[o++] = s;
            else if (k == T && ties_left > 0) { out[o++] = s; ties_left--; }
        }
    }
}
