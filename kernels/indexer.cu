// indexer.cu — the lightning indexer of CSA layers   (CPU twin: cpu/ops/indexer.rs)
//
// indexer_scores: for query t (position p = t0 + t), every visible key
//   s < (p+1)/ratio scores sum_h w[t,h] * relu(q[t,h] . k_s) / sqrt(di);
//   heads in order (w scaled by wscale); grid (n), block 256; scores[t * max_entries + s].
// indexer_topk: the topk best visible entries, ascending indices, ties to
//   the lower index; -1 pads. The k-th largest key is found by a bitwise
//   search on order-preserving integer keys. grid (n), block 256.

extern "C" __global__ void indexer_scores(const float* __restrict__ q, const float* __restrict__ w,
                                          const float* __restrict__ keys, int heads, int di, int ratio, int t0,
                                          int max_entries, float wscale, float* __restrict__ scores) {
    const int t = blockIdx.x;
    const int p = t0 + t;
    const int visible = (p + 1) / ratio;
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, lane = threadIdx.x & 31;
    const float sm = rsqrtf((float)di);
    const float* qt = q + (size_t)t * heads * di;
    for (int s = warp; s < visible; s += nwarps) {
        const float* k = keys + (size_t)s * di;
        float total = 0.f;
        for (int h = 0; h < heads; h++) {
            float acc = 0.f;
            for (int i = lane; i < di; i += 32) acc = fmaf(qt[(size_t)h * di + i], k[i], acc);
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            total = fmaf(fmaxf(acc, 0.f) * sm, w[(size_t)t * heads + h] * wscale, total);
        }
        if (lane == 0) scores[(size_t)t * max_entries + s] = total;
    }
}

__device__ __forceinline__ u32 order_key(float f) {
    const u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

extern "C" __global__ void indexer_topk(const float* __restrict__ scores, int ratio, int t0, int max_entries,
                                        int topk, int* __restrict__ sel) {
    __shared__ float red[32];
    const int t = blockIdx.x;
    const int p = t0 + t;
    const int visible = (p + 1) / ratio;
    const float* sc = scores + (size_t)t * max_entries;
    int* out = sel + (size_t)t * topk;
    if (visible <= topk) {
        for (int j = threadIdx.x; j < topk; j += blockDim.x) out[j] = j < visible ? j : -1;
        return;
    }
    // largest threshold T with count(key >= T) >= topk
    u32 T = 0;
    for (int bit = 31; bit >= 0; bit--) {
        const u32 cand = T | (1u << bit);
        float c = 0.f;
        for (int s = threadIdx.x; s < visible; s += blockDim.x) c += order_key(sc[s]) >= cand ? 1.f : 0.f;
        c = block_sum(c, red);
        if (c >= (float)topk) T = cand;
        __syncthreads();
    }
    // entries above T, then ties at T by ascending index, up to topk; emitted in index order
    float gt = 0.f;
    for (int s = threadIdx.x; s < visible; s += blockDim.x) gt += order_key(sc[s]) > T ? 1.f : 0.f;
    const int n_gt = (int)block_sum(gt, red);
    int ties_left = topk - n_gt;
    if (threadIdx.x == 0) {
        int o = 0;
        for (int s = 0; s < visible && o < topk; s++) {
            const u32 k = order_key(sc[s]);
            if (k > T) out[o++] = s;
            else if (k == T && ties_left > 0) { out[o++] = s; ties_left--; }
        }
    }
}
