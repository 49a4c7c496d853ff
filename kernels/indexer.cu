// indexer.cu — the lightning indexer of CSA layers   (CPU twin: cpu/ops/indexer.rs)
//
// indexer_scores: for query t (position p = t0 + t), every visible key
//   s < (p+1)/ratio scores sum_h relu(q[t,h] . k_s) / sqrt(di) * (w[t,h] / sqrt(heads)),
//   in f64, heads in order; scores[t * max_entries + s].
// indexer_topk: the topk best visible entries, ascending indices, ties to
//   the lower index; -1 pads. The topk-th largest score is found by a radix
//   select on order-preserving 64-bit keys (up to eight passes of one byte
//   each, counting into a shared histogram; it stops early once every key
//   left in the chosen byte's bin is selected, and the keys are then compared
//   on the bytes found), then each thread writes its share at offsets from
//   block prefix sums. grid (n), block 1024.

#define IDX_KM 4    // key values per lane: index_head_dim <= 32 * IDX_KM (checked by the host)
#define IDX_KB 8    // keys per block
#define IDX_HEADS 64  // heads at most: 8 warps of 8 (checked by the host)

// grid (n, key groups), block 256: warp w takes heads 8w .. 8w+7 (their
// query values in registers as f64, loaded once) and block y the groups of
// IDX_KB keys y, y + gridDim.y, ...; the block stages each group's keys in
// shared memory as f64, converted once there (one float4 a thread, the next
// group's loading while this one is scored; a warp converting each value
// it reads would convert each one 8 times, at a quarter of the FMA rate).
// Each dot is a lane-strided f64 sum and the fixed butterfly (here as a
// reduce-scatter: the same pairs in the same order, leaving head
// 4 b4 + 2 b3 + b2 of the lane's bits on the lane); the total adds the
// heads' terms in head order. di % 4 == 0 (checked by the host).
extern "C" __global__ void __launch_bounds__(256, 2) indexer_scores(const float* __restrict__ q, const float* __restrict__ w,
                                          const float* __restrict__ keys, int heads, int di, int ratio, int t0,
                                          int max_entries, float heads_sqrt, double* __restrict__ scores) {
    await_inputs();
    __shared__ double terms[IDX_KB][IDX_HEADS];
    __shared__ __align__(16) double ks[IDX_KB * IDX_KM * 32];  // IDX_KB keys of up to 32 * IDX_KM values (double2 stores)
    const int t = blockIdx.x;
    const int p = t0 + t;
    const int visible = (p + 1) / ratio;
    if (blockIdx.y * IDX_KB >= visible) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h0 = warp * 8;
    const bool on = h0 < heads;
    const double sm = 1.0 / sqrt((double)di);
    // this thread's float4 of the group of keys from s0 (rows s0 .. s0 + IDX_KB - 1, contiguous)
    auto fetch = [&](int s0) {
        const int e = 4 * threadIdx.x;
        return s0 < visible && e < min(IDX_KB, visible - s0) * di ? *(const float4*)(keys + (size_t)s0 * di + e)
                                                                   : make_float4(0.f, 0.f, 0.f, 0.f);
    };
    const int step = gridDim.y * IDX_KB;
    float4 next = fetch(blockIdx.y * IDX_KB);
    double qd[8][IDX_KM];
    #pragma unroll
    for (int u = 0; u < 8; u++) {
        const float* qh = q + ((size_t)t * heads + min(h0 + u, heads - 1)) * di;
        #pragma unroll
        for (int m = 0; m < IDX_KM; m++) qd[u][m] = on && lane + 32 * m < di ? (double)qh[lane + 32 * m] : 0.0;
    }
    // the lane's head after the reduce-scatter, and its weight
    const int hl = h0 + ((lane & 16) ? 4 : 0) + ((lane & 8) ? 2 : 0) + ((lane & 4) ? 1 : 0);
    const double wl = on && hl < heads ? (double)__fdiv_rn(w[(size_t)t * heads + hl], heads_sqrt) : 0.0;
    for (int s0 = blockIdx.y * IDX_KB; s0 < visible; s0 += step) {
        const int nk = min(IDX_KB, visible - s0);
        __syncthreads();  // the last group's keys and terms are read
        if (threadIdx.x < IDX_KB * IDX_KM * 8) {
            double2* at = (double2*)(ks + 4 * threadIdx.x);
            at[0] = make_double2((double)next.x, (double)next.y);
            at[1] = make_double2((double)next.z, (double)next.w);
        }
        __syncthreads();
        next = fetch(s0 + step);
        if (on) {
            for (int k = 0; k < nk; k++) {
                double kv[IDX_KM];
                #pragma unroll
                for (int m = 0; m < IDX_KM; m++) kv[m] = lane + 32 * m < di ? ks[k * di + lane + 32 * m] : 0.0;
                double d[8];
                #pragma unroll
                for (int u = 0; u < 8; u++) {
                    double acc = 0.0;
                    #pragma unroll
                    for (int m = 0; m < IDX_KM; m++)
                        if (lane + 32 * m < di) acc = fma(qd[u][m], kv[m], acc);
                    d[u] = acc;
                }
                // butterfly pairs (l, l ^ o), o = 16, 8, 4, then 2, 1 on the one left
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    const bool hi = lane & 16;
                    const double keep = hi ? d[i + 4] : d[i], send = hi ? d[i] : d[i + 4];
                    d[i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
                }
                #pragma unroll
                for (int i = 0; i < 2; i++) {
                    const bool hi = lane & 8;
                    const double keep = hi ? d[i + 2] : d[i], send = hi ? d[i] : d[i + 2];
                    d[i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
                }
                {
                    const bool hi = lane & 4;
                    const double keep = hi ? d[1] : d[0], send = hi ? d[0] : d[1];
                    d[0] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
                }
                d[0] += __shfl_xor_sync(0xffffffffu, d[0], 2);
                d[0] += __shfl_xor_sync(0xffffffffu, d[0], 1);
                if ((lane & 3) == 0 && hl < heads) terms[k][hl] = fmax(d[0], 0.0) * sm * wl;
            }
        }
        __syncthreads();
        if (threadIdx.x < nk) {
            double total = 0.0;
            for (int h = 0; h < heads; h++) total += terms[threadIdx.x][h];
            scores[(size_t)t * max_entries + s0 + threadIdx.x] = total;
        }
    }
}

// ---- The prefill's scores on the FP64 tensor cores ----
// indexer_scores' bits, 16 heads of one token a warp (the heads share the
// keys, so they are the instruction's m). A dot's lane partial is the chain
// of fmas over the lane's values l + 32 m, m = 0 .. 3 in order, from zero:
// one m16n8k4 f64 instruction gives it for 16 heads and 8 keys (rows.cuh:
// the instruction's outputs are that chain, bit for bit). The 32 lanes'
// partials ("leaves") are added in warp_sum's tree (the reduce-scatter
// above adds the same pairs), walked in bit-reversed order onto a stack of
// subtrees in registers (mma_leaf_push_regs). The terms and each key's
// total over the heads in order are indexer_scores'. For di == 128 (every
// lane's 4 values present) and heads a multiple of 16, at most IDX_HEADS
// (checked by the host: gpu/layer_ops.rs `indexer_mma`).
// grid (n), block 32 IDXM_WARPS: warp w takes head tile w % 4 (16 heads)
// and key tile w / 4 (8 keys) of each stage of IDXM_KEYS keys. Dynamic
// smem (gpu/layer_ops.rs `INDEXER_MMA_SMEM`): the queries as f64 in the A
// fragments' order (idxm_q_at: 64 KiB and 512 bytes), a stage's keys as f64 (IDXM_KEYS rows of
// IDXM_ROW), the stage's terms (IDXM_KEYS x IDX_HEADS).
#define IDXM_WARPS 8
#define IDXM_KEYS 16
// Doubles of a staged key row (idxm_at's 156 and 8 of padding), so that a
// warp's B reads (8 keys' 4 values of a leaf) take two wavefronts.
#define IDXM_ROW 164

// Where value l + 32 m of a staged key row lies: leaf l's 4 values side
// by side (thread (g, q) reads value m = q of its key's leaf), and 4
// doubles of padding every 4 leaves, so that each of the staging's stores
// (lane j of a warp: leaf 4 (j % 8) + i of value m = j / 8) takes two
// wavefronts, as the reads do.
__device__ __forceinline__ int idxm_at(int l, int m) { return 4 * l + 4 * (l >> 2) + m; }

// Where the pair of heads 16 tile + g and + 8 of value l + 32 m of the
// queries lies (double2s): leaf l's A fragments (tile, m = q, g) side by
// side, a double2 of padding a leaf, so that the staging's stores (a warp:
// leaves 0 .. 31 of one pair and value) take four wavefronts, as the
// reads (a warp: one leaf and tile) do.
__device__ __forceinline__ int idxm_q_at(int l, int tile, int m, int g) { return (l * 4 + tile) * 32 + m * 8 + g + l; }
// double2s of the queries (idxm_q_at's, IDX_HEADS heads)
#define IDXM_Q2 (32 * (IDX_HEADS / 16) * 32 + 32)

extern "C" __global__ void __launch_bounds__(32 * IDXM_WARPS, 2) indexer_scores_mma(const float* __restrict__ q,
                                          const float* __restrict__ w, const float* __restrict__ keys, int heads,
                                          int ratio, int t0, int max_entries, float heads_sqrt,
                                          double* __restrict__ scores) {
    await_inputs();
    const int di = 32 * IDX_KM;
    double2* qs = (double2*)xs_dyn;  // idxm_q_at
    double* ks = xs_dyn + 2 * IDXM_Q2;
    double* terms = ks + IDXM_KEYS * IDXM_ROW;  // [key][head]
    // the last tokens, which see the most keys, first: the launch's tail holds the shortest blocks
    const int t = gridDim.x - 1 - blockIdx.x, p = t0 + t, visible = (p + 1) / ratio;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qq = lane & 3;
    const int tile = warp & 3, n0 = 8 * (warp >> 2), h0 = 16 * tile;
    const bool on = h0 < heads;
    const double sm = 1.0 / sqrt((double)di);
    // the queries' pairs of heads (16 tile + g, + 8), a double2 an item
    for (int i = tid; i < heads / 2 * di; i += blockDim.x) {
        const int pr = i / di, e = i % di, tile = pr >> 3, g = pr & 7, h = 16 * tile + g;
        const float* qh = q + ((size_t)t * heads + h) * di + e;
        qs[idxm_q_at(e & 31, tile, e >> 5, g)] = make_double2((double)qh[0], (double)qh[8 * di]);
    }
    // this thread's heads' weights (rows g and g + 8 of its tile)
    double wl[2];
    #pragma unroll
    for (int u = 0; u < 2; u++) wl[u] = on ? (double)__fdiv_rn(w[(size_t)t * heads + h0 + g + 8 * u], heads_sqrt) : 0.0;
    // this thread's float4s of the stage from key s0 (IDXM_KEYS rows of di, contiguous): items tid, tid + blockDim.x
    const int items = IDXM_KEYS * di / 4;
    auto fetch = [&](int s0, float4 (&v)[2]) {
        #pragma unroll
        for (int z = 0; z < 2; z++) {
            const int i = tid + z * 32 * IDXM_WARPS;
            v[z] = i < items && s0 + i / (di / 4) < visible ? *(const float4*)(keys + (size_t)s0 * di + 4 * i)
                                                          : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    float4 next[2];
    fetch(0, next);
    for (int s0 = 0; s0 < visible; s0 += IDXM_KEYS) {
        #pragma unroll
        for (int z = 0; z < 2; z++) {
            const int i = tid + z * 32 * IDXM_WARPS;
            if (i < items) {
                const int k = i / (di / 4), e = 4 * (i % (di / 4)), l = e & 31, m = e >> 5;
                double* d = ks + k * IDXM_ROW + idxm_at(l, m);
                d[0] = (double)next[z].x;
                d[4] = (double)next[z].y;
                d[8] = (double)next[z].z;
                d[12] = (double)next[z].w;
            }
        }
        __syncthreads();  // the stage's keys are staged (and, the first time, the queries)
        fetch(s0 + IDXM_KEYS, next);
        if (on && s0 + n0 < visible) {
            const double* kb = ks + (n0 + g) * IDXM_ROW + qq;
            const double2* qa = qs + idxm_q_at(0, tile, qq, g);
            double st[5][4], x[4];
            #pragma unroll
            for (int mi = 0; mi < 32; mi++) {
                const int l = leaf_brev5(mi);
                const double2 av = qa[idxm_q_at(l, 0, 0, 0)];
                const double a[2] = {av.x, av.y};
                #pragma unroll
                for (int i = 0; i < 4; i++) x[i] = 0.0;
                mma_k4(x, a, kb[idxm_at(l, 0)]);
                mma_leaf_push_regs(st, x, mi);
            }
            // x[i]: head h0 + g + 8 (i / 2), key n0 + 2 qq + i % 2 of the stage
            #pragma unroll
            for (int i = 0; i < 4; i++)
                terms[(n0 + 2 * qq + (i & 1)) * IDX_HEADS + h0 + g + 8 * (i >> 1)] = fmax(x[i], 0.0) * sm * wl[i >> 1];
        }
        __syncthreads();
        if (tid < IDXM_KEYS && s0 + tid < visible) {
            double total = 0.0;
            for (int h = 0; h < heads; h++) total += terms[tid * IDX_HEADS + h];
            scores[(size_t)t * max_entries + s0 + tid] = total;
        }
        __syncthreads();  // the terms are read and the keys summed: the next stage may overwrite both
    }
}

__device__ __forceinline__ u64 order_key(double f) {
    const u64 b = (u64)__double_as_longlong(f);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

// Sum of one int per thread (blockDim.x a multiple of 32); all threads get it.
__device__ __forceinline__ int block_sum_int(int v, int* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = __reduce_add_sync(0xffffffffu, v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    int s = 0;
    for (int i = 0; i < nw; i++) s += red[i];
    return s;
}

// Inclusive prefix sum of one int per lane over the warp, in lane order.
__device__ __forceinline__ int warp_scan_int(int v) {
    const int lane = threadIdx.x & 31;
    #pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
    }
    return v;
}

// Exclusive prefix sum of one int per thread over the block, in thread order.
__device__ __forceinline__ int block_scan_int(int v, int* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int inc = warp_scan_int(v);
    __syncthreads();
    if (lane == 31) red[warp] = inc;
    __syncthreads();
    int before = 0;
    for (int i = 0; i < warp; i++) before += red[i];
    return before + inc - v;
}

// Keys each thread of indexer_topk keeps in registers: entries
// u * blockDim.x + thread for u < TOPK_CACHED (8192 entries with 1024
// threads: a 32k context at ratio 4); later entries are read each pass.
#define TOPK_CACHED 8

// Among the keys of sc[0 .. visible) (the first TOPK_CACHED * blockDim.x
// of them in `cached`, this thread's) whose bits under `mask` equal
// `prefix`, the byte at `shift` of the need-th largest: returns it and sets
// *need to that key's rank among the keys that share the byte (all
// threads; hist holds 256 ints of shared memory, pick three: the byte, the
// rank, and whether that rank is the bin's whole count, so that every key
// sharing the bytes found so far is selected). Counts are integers, so the
// histogram's atomic order does not matter; a warp whose candidates all
// share one byte adds once, others add a candidate at a time.
__device__ __forceinline__ int select_byte(const double* __restrict__ sc, const u64* cached, int visible, u64 mask,
                                           u64 prefix, int shift, int* need, bool* whole, int* hist, int* pick) {
    const int lane = threadIdx.x & 31;
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    auto count = [&](int s, u64 k) {  // every lane of the warp, for entry s (key k where s < visible)
        const bool cand = s < visible && (k & mask) == prefix;
        const int bin = (int)((k >> shift) & 255);
        const unsigned lanes = __ballot_sync(0xffffffffu, cand);
        if (lanes == 0) return;
        const int first = __ffs(lanes) - 1;
        const int b0 = __shfl_sync(0xffffffffu, bin, first);
        if (__all_sync(0xffffffffu, !cand || bin == b0)) {
            if (lane == first) atomicAdd(&hist[b0], __popc(lanes));
        } else if (cand) {
            atomicAdd(&hist[bin], 1);
        }
    };
    #pragma unroll
    for (int u = 0; u < TOPK_CACHED; u++) count(u * blockDim.x + threadIdx.x, cached[u]);
    for (int s0 = TOPK_CACHED * blockDim.x; s0 < visible; s0 += blockDim.x) {
        const int s = s0 + threadIdx.x;
        count(s, s < visible ? order_key(sc[s]) : 0);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        // lane l: bins 255 - 8l down to 248 - 8l; `above` counts the higher bins
        int c[8], sum = 0;
        #pragma unroll
        for (int u = 0; u < 8; u++) {
            c[u] = hist[255 - 8 * lane - u];
            sum += c[u];
        }
        const int inc = warp_scan_int(sum);
        int above = inc - sum;
        const int want = *need;
        if (above < want && want <= inc) {
            #pragma unroll
            for (int u = 0; u < 8; u++) {
                if (above < want && want <= above + c[u]) {
                    pick[0] = 255 - 8 * lane - u;
                    pick[1] = want - above;
                    pick[2] = want - above == c[u];
                }
                above += c[u];
            }
        }
    }
    __syncthreads();
    *need = pick[1];
    *whole = pick[2];
    return pick[0];
}

// grid (n), block 1024. Thread i owns the entries [i * per, (i + 1) * per).
extern "C" __global__ void __launch_bounds__(1024) indexer_topk(const double* __restrict__ scores, int ratio, int t0, int max_entries,
                                        int topk, int* __restrict__ sel) {
    await_inputs();
    __shared__ int red[32];
    __shared__ int hist[256];
    __shared__ int pick[3];
    const int t = blockIdx.x;
    const int p = t0 + t;
    const int visible = (p + 1) / ratio;
    const double* sc = scores + (size_t)t * max_entries;
    int* out = sel + (size_t)t * topk;
    if (visible <= topk) {
        for (int j = threadIdx.x; j < topk; j += blockDim.x) out[j] = j < visible ? j : -1;
        return;
    }
    // T: the topk-th largest key (the largest T with count(key >= T) >= topk), a byte at a time, or its
    // bytes under `mask` once every key that shares them is selected (then keys compare under `mask`)
    u64 cached[TOPK_CACHED];
    #pragma unroll
    for (int u = 0; u < TOPK_CACHED; u++) {
        const int s = u * blockDim.x + threadIdx.x;
        cached[u] = s < visible ? order_key(sc[s]) : 0;
    }
    u64 T = 0, mask = 0;
    int need = topk;
    for (int shift = 56; shift >= 0; shift -= 8) {
        bool whole;
        T |= (u64)select_byte(sc, cached, visible, mask, T, shift, &need, &whole, hist, pick) << shift;
        mask |= 255ull << shift;
        if (whole) break;
    }
    // entries above T, then ties at T by ascending index, up to topk; in index order
    const int per = (visible + blockDim.x - 1) / blockDim.x;
    const int lo = min(visible, (int)threadIdx.x * per), hi = min(visible, lo + per);
    int gt = 0, eq = 0;
    for (int s = lo; s < hi; s++) {
        const u64 k = order_key(sc[s]) & mask;
        gt += k > T;
        eq += k == T;
    }
    const int ties_left = topk - block_sum_int(gt, red);
    const int ties = max(0, min(eq, ties_left - block_scan_int(eq, red)));
    int o = block_scan_int(gt + ties, red);
    int taken = 0;
    for (int s = lo; s < hi; s++) {
        const u64 k = order_key(sc[s]) & mask;
        if (k > T) out[o++] = s;
        else if (k == T && taken < ties) {
            out[o++] = s;
            taken++;
        }
    }
}
