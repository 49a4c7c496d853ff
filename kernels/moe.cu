// moe.cu — routing and clamped SwiGLU experts   (CPU twin: cpu/ops/moe.rs)
//
// moe_route: per token, scores = sqrt(softplus(logit)) (func 0), sigmoid (1)
//   or softmax (2); the top-k of score + bias (ties to the lower expert) or
//   tid2eid[token]; weights = chosen scores / (sum + 1e-20) * scaling.
//   grid (n), block 256.
// expert_gate_up: for pair (token, slot) and row i of the expert:
//   h = silu(min(x.W1_i, lim)) * clamp(x.W3_i, -lim, lim) * weight.
//   `pairs` lists the pair ids a launch covers (all of them for the fused
//   arm, one expert's for the per-expert arm): both compute every element
//   with the same instructions.
// expert_down: out[pair, j] = W2_j . h[pair].
// The combination y[t] = sum_slot out[t*k + slot] + shared[t] (f64) is
// done where it is read, in hc.cu's hc_post.
// Routing weights are kept in f64 as the CPU twin keeps them.

__device__ __forceinline__ double score_of(double l, int func, double mx, double z) {
    if (func == 0) return sqrt(l > 20.0 ? l : log1p(exp(l)));
    if (func == 1) return 1.0 / (1.0 + exp(-l));
    return exp(l - mx) / z;
}

// Whether expert i of score v comes before expert bi of score b in the
// routing order: value down, then expert up (one total order).
__device__ __forceinline__ bool route_before(double v, int i, double b, int bi) {
    return v > b || (v == b && i < bi);
}

// The first of (v, i) over the warp in the routing order (every lane gets
// it).
__device__ __forceinline__ void route_warp_max(double& v, int& i) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const double ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (route_before(ov, oi, v, i)) { v = ov; i = oi; }
    }
}

// grid (n), block 256; dynamic smem n_experts doubles (the scores) and
// n_experts floats (the bias, read before the kernel waits for its inputs).
extern "C" __global__ void moe_route(const float* __restrict__ logits, int n_experts, int k,
                                     const float* __restrict__ bias, const int* __restrict__ tid2eid,
                                     const int* __restrict__ tokens, int func, int norm, float scaling,
                                     int* __restrict__ idx, double* __restrict__ wts) {
    extern __shared__ double sc[];
    float* bs = (float*)(sc + n_experts);
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) bs[e] = bias ? bias[e] : 0.0f;
    await_inputs();
    __shared__ double red[32];
    __shared__ double cv[32 * 16];  // each warp's top k (k <= 16)
    __shared__ int ci[32 * 16];
    __shared__ int chosen[16];
    const int t = blockIdx.x, tid = threadIdx.x;
    const float* l = logits + (size_t)t * n_experts;
    double mx = -1e300, z = 0.0;
    if (func == 2) {
        double m = -1e300;
        for (int e = tid; e < n_experts; e += blockDim.x) m = fmax(m, (double)l[e]);
        mx = block_max(m, red);
        if (tid == 0) {
            for (int e = 0; e < n_experts; e++) z += exp((double)l[e] - mx);
            red[0] = z;
        }
        __syncthreads();
        z = red[0];
        __syncthreads();
    }
    for (int e = tid; e < n_experts; e += blockDim.x) sc[e] = score_of((double)l[e], func, mx, z);
    __syncthreads();
    if (tid2eid) {
        if (tid < k) chosen[tid] = tid2eid[(size_t)tokens[t] * k + tid];
    } else {
        // the top k of score + bias in order (ties to the lower expert): each
        // warp its own k best by shuffles, then warp 0 the k best of those
        // (every expert of the block's top k is among its warp's top k, and
        // the order, value down then expert up, is one total order, so
        // these are the k passes of a block argmax, with one barrier)
        const int lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
        // bit j: this thread's j-th expert (e = tid + j blockDim) is in its warp's list; j < 32 holds while
        // the scores fit the 48 KiB of shared memory this launch may take (gpu/forward.rs MAX_ROUTED_EXPERTS)
        unsigned taken = 0;
        for (int s = 0; s < k; s++) {
            double best = -1e300;
            int besti = 0x7fffffff, bestj = -1;
            for (int e = tid, j = 0; e < n_experts; e += blockDim.x, j++) {
                if (taken >> j & 1) continue;
                const double v = sc[e] + (double)bs[e];
                if (route_before(v, e, best, besti)) { best = v; besti = e; bestj = j; }
            }
            route_warp_max(best, besti);
            if (bestj >= 0 && besti == tid + bestj * (int)blockDim.x) taken |= 1u << bestj;
            if (lane == 0) { cv[warp * k + s] = best; ci[warp * k + s] = besti; }
        }
        __syncthreads();
        if (warp == 0) {
            const int nc = nwarps * k;  // at most 32 warps x 16: the lane's candidates c = lane + 32 m
            unsigned gone = 0;
            for (int s = 0; s < k; s++) {
                double best = -1e300;
                int besti = 0x7fffffff;
                for (int c = lane, m = 0; c < nc; c += 32, m++) {
                    if (gone >> m & 1) continue;
                    if (route_before(cv[c], ci[c], best, besti)) { best = cv[c]; besti = ci[c]; }
                }
                route_warp_max(best, besti);
                for (int c = lane, m = 0; c < nc; c += 32, m++)
                    if (!(gone >> m & 1) && ci[c] == besti) gone |= 1u << m;
                if (lane == 0) chosen[s] = besti;
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
        double w[16];
        double sum = 0.0;
        for (int s = 0; s < k; s++) { w[s] = sc[chosen[s]]; sum += w[s]; }
        for (int s = 0; s < k; s++) {
            const double v = norm ? w[s] / (sum + 1e-20) : w[s];
            idx[(size_t)t * k + s] = chosen[s];
            wts[(size_t)t * k + s] = v * (double)scaling;
        }
    }
}

// As the CPU twin: clamps in f32, the rest in f64, one rounding.
__device__ __forceinline__ float swiglu(float g, float u, float lim, double w) {
    const double gv = (double)fminf(g, lim);
    const double uv = (double)fminf(fmaxf(u, -lim), lim);
    return (float)(gv / (1.0 + exp(-gv)) * uv * w);
}

// One block per (pair, group of 4 * ER rows): the pair's token staged once,
// each warp ER rows of W1 and the same rows of W3 together (warp_dot_rows).
#define ER_GATE_UP 2
#define ER_DOWN 4

template <int FMT>
__device__ __forceinline__ void gate_up_fmt(const Mat& w1, const Mat& w3, const float* x, int d, double wt, float lim,
                                            int inter, float* h, double* xs) {
    const int i0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * ER_GATE_UP;
    const bool active = i0 < inter;
    RowRef rows[2 * ER_GATE_UP];
    if (active) {
        #pragma unroll
        for (int r = 0; r < ER_GATE_UP; r++) {
            const int i = min(i0 + r, inter - 1);
            rows[r] = row_ref<FMT>(w1, i);
            rows[ER_GATE_UP + r] = row_ref<FMT>(w3, i);
        }
    }
    double acc[2 * ER_GATE_UP];
    if (!staged_row_dots<FMT, 2 * ER_GATE_UP>(rows, active, w1.scaled && w3.scaled, x, d, xs, acc)) return;
    if ((threadIdx.x & 31) == 0) {
        #pragma unroll
        for (int r = 0; r < ER_GATE_UP; r++)
            if (i0 + r < inter) h[i0 + r] = swiglu((float)acc[r], (float)acc[ER_GATE_UP + r], lim, wt);
    }
}

// grid (ceil(inter / (4 * ER_GATE_UP)), npairs), block 128, dynamic smem
// the staged row of d (stage_row) for the experts' format.
extern "C" __global__ void expert_gate_up(const Mat* __restrict__ w1s, const Mat* __restrict__ w3s,
                                          const float* __restrict__ x, int d, const int* __restrict__ idx,
                                          const double* __restrict__ wts, int k, const int* __restrict__ pairs,
                                          float lim, int inter, float* __restrict__ h) {
    await_inputs();
    const int pair = pairs[blockIdx.y];
    const int e = idx[pair];
    const Mat w1 = w1s[e], w3 = w3s[e];
    const float* xt = x + (size_t)(pair / k) * d;
    float* hp = h + (size_t)pair * inter;
    const double wt = wts[pair];
    switch (w1.fmt) {
        case FMT_BF16: gate_up_fmt<FMT_BF16>(w1, w3, xt, d, wt, lim, inter, hp, xs_dyn); break;
        case FMT_FP8: gate_up_fmt<FMT_FP8>(w1, w3, xt, d, wt, lim, inter, hp, xs_dyn); break;
        case FMT_FP4: gate_up_fmt<FMT_FP4>(w1, w3, xt, d, wt, lim, inter, hp, xs_dyn); break;
        default: gate_up_fmt<FMT_F32>(w1, w3, xt, d, wt, lim, inter, hp, xs_dyn); break;
    }
}

template <int FMT>
__device__ __forceinline__ void down_fmt(const Mat& w2, const float* h, int inter, int d, float* out, double* xs) {
    const int j0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * ER_DOWN;
    const bool active = j0 < d;
    RowRef rows[ER_DOWN];
    if (active) {
        #pragma unroll
        for (int r = 0; r < ER_DOWN; r++) rows[r] = row_ref<FMT>(w2, min(j0 + r, d - 1));
    }
    double acc[ER_DOWN];
    if (!staged_row_dots<FMT, ER_DOWN>(rows, active, w2.scaled != 0, h, inter, xs, acc)) return;
    if ((threadIdx.x & 31) == 0) {
        #pragma unroll
        for (int r = 0; r < ER_DOWN; r++)
            if (j0 + r < d) out[j0 + r] = (float)acc[r];
    }
}

// grid (ceil(d / (4 * ER_DOWN)), npairs), block 128, dynamic smem
// the staged row of inter (stage_row) for the experts' format.
extern "C" __global__ void expert_down(const Mat* __restrict__ w2s, const float* __restrict__ h, int inter,
                                       const int* __restrict__ idx, const int* __restrict__ pairs, int d,
                                       float* __restrict__ out) {
    await_inputs();
    const int pair = pairs[blockIdx.y];
    const Mat w2 = w2s[idx[pair]];
    const float* hp = h + (size_t)pair * inter;
    float* op = out + (size_t)pair * d;
    switch (w2.fmt) {
        case FMT_BF16: down_fmt<FMT_BF16>(w2, hp, inter, d, op, xs_dyn); break;
        case FMT_FP8: down_fmt<FMT_FP8>(w2, hp, inter, d, op, xs_dyn); break;
        case FMT_FP4: down_fmt<FMT_FP4>(w2, hp, inter, d, op, xs_dyn); break;
        default: down_fmt<FMT_F32>(w2, hp, inter, d, op, xs_dyn); break;
    }
}

// Several tokens: the (token, slot) pairs listed by expert (a counting
// sort of idx), so that the expert kernels' blocks that run together read
// one expert's weights, from L2 after the first, rather than a different
// expert's from memory for nearly every pair. Within an expert the order
// is whatever the atomics give; no value depends on it (each pair's sums
// and outputs are its own). Expert ids outside 0 .. n_experts - 1 (none
// come from moe_route) are listed with the last expert. With `groups` (not
// null), also the groups of the expert group kernels below: group y takes
// pairs[groups[2y] ..][0 .. groups[2y + 1]), up to `per_group` pairs of one
// expert, each expert's pairs in groups one after another; groups past
// the last have 0 pairs (ngroups >= npairs / per_group + n_experts holds
// them all). grid 1, block 1024, dynamic smem 2 * n_experts ints.
extern "C" __global__ void moe_group_pairs(const int* __restrict__ idx, int npairs, int n_experts,
                                           int* __restrict__ pairs, int* __restrict__ groups, int ngroups,
                                           int per_group) {
    await_inputs();
    extern __shared__ int group_smem[];
    int* expert_next = group_smem;               // an expert's count, then its first slot, then its next
    int* first_group = group_smem + n_experts;   // an expert's first group
    __shared__ int group_count;
    const int tid = threadIdx.x;
    for (int e = tid; e < n_experts; e += blockDim.x) expert_next[e] = 0;
    __syncthreads();
    for (int p = tid; p < npairs; p += blockDim.x) atomicAdd(&expert_next[min(max(idx[p], 0), n_experts - 1)], 1);
    __syncthreads();
    if (tid == 0) {
        int start = 0, group = 0;
        for (int e = 0; e < n_experts; e++) {
            const int c = expert_next[e];
            expert_next[e] = start;
            first_group[e] = group;
            start += c;
            group += (c + per_group - 1) / per_group;
        }
        group_count = group;
    }
    __syncthreads();
    if (groups != nullptr) {
        for (int e = tid; e < n_experts; e += blockDim.x) {
            const int first = expert_next[e], c = (e + 1 < n_experts ? expert_next[e + 1] : npairs) - first;
            for (int q = 0; q < c; q += per_group) {
                const int y = first_group[e] + q / per_group;
                if (y < ngroups) {
                    groups[2 * y] = first + q;
                    groups[2 * y + 1] = min(per_group, c - q);
                }
            }
        }
        for (int y = group_count + tid; y < ngroups; y += blockDim.x) {
            groups[2 * y] = 0;
            groups[2 * y + 1] = 0;
        }
    }
    __syncthreads();
    for (int p = tid; p < npairs; p += blockDim.x)
        pairs[atomicAdd(&expert_next[min(max(idx[p], 0), n_experts - 1)], 1)] = p;
}

// Prefill experts in groups of GROUP_TOKENS pairs of one expert (a group
// of moe_group_pairs' list a block, or y, y + gridDim.y, ...): the group's
// tokens staged whole as the per-pair kernels stage one (stage_row; a
// group of fewer pairs stages its last again), then each warp takes
// GROUP_ROWS weight rows at a time against all of them
// (warp_dot_rows_tokens), each weight decoded once for the group and each
// 16-byte shared load of two staged values feeding GROUP_ROWS x 2
// multiply-adds (with 2 rows the shared loads bound the kernels). Every
// pair's sums are the per-pair kernels', so the outputs do not depend on
// the kernel. Block 256 (8 warps, registers for 4 rows x 4 tokens).
// One warp's dots of GROUP_ROWS weight rows with the staged group.
template <int FMT, bool SCALED>
__device__ __forceinline__ void group_dots(const RowRef (&rows)[GROUP_ROWS], int cols,
                                           double (&acc)[GROUP_ROWS][GROUP_TOKENS]) {
    const int E = Fmt<FMT>::E;
    uint4 buf[GROUP_ROWS][RING(GROUP_ROWS)];
    first_chunks<FMT, GROUP_ROWS, GROUP_TOKENS>(rows, cols, buf);
    warp_dot_rows_tokens<FMT, GROUP_ROWS, GROUP_TOKENS, SCALED>(rows, cols, xs_dyn, cols / E * (E + 2), buf, acc);
}

// expert_gate_up_groups: warp w takes rows i0 = 2 * (x * warps + w) and
// i0 + 1 of W1 and of W3, then i0 plus twice the grid's warps, ..., and
// writes each pair's swiglu. grid (blocks, min(ngroups, 65535)), block
// 256, dynamic smem GROUP_TOKENS staged rows of d (gpu/products.rs
// `group_smem`).
template <int FMT, bool SCALED>
__device__ __forceinline__ void gate_up_group(const Mat& w1, const Mat& w3, const float* x, int d, const double* wts,
                                              int k, const int* tp, int nt, float lim, int inter, float* h) {
    const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
    stage_group<FMT, SCALED, GROUP_TOKENS>([&](int t) { return x + (size_t)(tp[t] / k) * d; }, d, nt);
    for (int i0 = 2 * (blockIdx.x * warps + (threadIdx.x >> 5)); i0 < inter; i0 += 2 * gridDim.x * warps) {
        const int i1 = min(i0 + 1, inter - 1);
        const RowRef rows[GROUP_ROWS] = {row_ref<FMT>(w1, i0), row_ref<FMT>(w3, i0), row_ref<FMT>(w1, i1),
                                         row_ref<FMT>(w3, i1)};
        double acc[GROUP_ROWS][GROUP_TOKENS];
        group_dots<FMT, SCALED>(rows, d, acc);
        #pragma unroll
        for (int t = 0; t < GROUP_TOKENS; t++) {
            if (lane == t && t < nt) {
                const int pair = tp[t];
                h[(size_t)pair * inter + i0] = swiglu((float)acc[0][t], (float)acc[1][t], lim, wts[pair]);
                if (i0 + 1 < inter)
                    h[(size_t)pair * inter + i0 + 1] = swiglu((float)acc[2][t], (float)acc[3][t], lim, wts[pair]);
            }
        }
    }
}

// The block's groups of one expert's pairs (moe_group_pairs): f(e, tp, nt)
// for groups blockIdx.y, blockIdx.y + gridDim.y, ... (expert e, its nt
// pairs listed at tp) until the first empty one (the groups past the last:
// the same for the whole block), each followed by a barrier (every warp
// past the group's staged rows before the next group's).
template <class F>
__device__ __forceinline__ void for_expert_groups(const int* idx, const int* pairs, const int* groups, int ngroups,
                                                  F f) {
    for (int y = blockIdx.y; y < ngroups; y += gridDim.y) {
        const int nt = groups[2 * y + 1];
        if (nt == 0) return;
        const int* tp = pairs + groups[2 * y];
        f(idx[tp[0]], tp, nt);
        __syncthreads();
    }
}

template <int FMT>
__device__ __forceinline__ void gate_up_group_fmt(const Mat& w1, const Mat& w3, const float* x, int d,
                                                  const double* wts, int k, const int* tp, int nt, float lim,
                                                  int inter, float* h) {
    if (w1.scaled && w3.scaled) gate_up_group<FMT, true>(w1, w3, x, d, wts, k, tp, nt, lim, inter, h);
    else gate_up_group<FMT, false>(w1, w3, x, d, wts, k, tp, nt, lim, inter, h);
}

extern "C" __global__ void __launch_bounds__(256) expert_gate_up_groups(
    const Mat* __restrict__ w1s, const Mat* __restrict__ w3s, const float* __restrict__ x, int d,
    const int* __restrict__ idx, const double* __restrict__ wts, int k, const int* __restrict__ pairs,
    const int* __restrict__ groups, int ngroups, float lim, int inter, float* __restrict__ h) {
    await_inputs();
    for_expert_groups(idx, pairs, groups, ngroups, [&](int e, const int* tp, int nt) {
        const Mat w1 = w1s[e], w3 = w3s[e];
        switch (w1.fmt) {
            case FMT_BF16: gate_up_group_fmt<FMT_BF16>(w1, w3, x, d, wts, k, tp, nt, lim, inter, h); break;
            case FMT_FP8: gate_up_group_fmt<FMT_FP8>(w1, w3, x, d, wts, k, tp, nt, lim, inter, h); break;
            case FMT_FP4: gate_up_group_fmt<FMT_FP4>(w1, w3, x, d, wts, k, tp, nt, lim, inter, h); break;
            default: gate_up_group_fmt<FMT_F32>(w1, w3, x, d, wts, k, tp, nt, lim, inter, h); break;
        }
    });
}

// expert_down_groups: warp w takes rows j0 = GROUP_ROWS * (x * warps + w)
// .. j0 + GROUP_ROWS - 1 of W2, then j0 plus GROUP_ROWS times the grid's
// warps, ... grid (blocks, min(ngroups, 65535)), block 256, dynamic smem
// GROUP_TOKENS staged rows of inter.
template <int FMT, bool SCALED>
__device__ __forceinline__ void down_group(const Mat& w2, const float* h, int inter, const int* tp, int nt, int d,
                                           float* out) {
    const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
    stage_group<FMT, SCALED, GROUP_TOKENS>([&](int t) { return h + (size_t)tp[t] * inter; }, inter, nt);
    for (int j0 = GROUP_ROWS * (blockIdx.x * warps + (threadIdx.x >> 5)); j0 < d;
         j0 += GROUP_ROWS * gridDim.x * warps) {
        RowRef rows[GROUP_ROWS];
        #pragma unroll
        for (int r = 0; r < GROUP_ROWS; r++) rows[r] = row_ref<FMT>(w2, min(j0 + r, d - 1));
        double acc[GROUP_ROWS][GROUP_TOKENS];
        group_dots<FMT, SCALED>(rows, inter, acc);
        #pragma unroll
        for (int t = 0; t < GROUP_TOKENS; t++) {
            if (lane == t && t < nt) {
                #pragma unroll
                for (int r = 0; r < GROUP_ROWS; r++)
                    if (j0 + r < d) out[(size_t)tp[t] * d + j0 + r] = (float)acc[r][t];
            }
        }
    }
}

template <int FMT>
__device__ __forceinline__ void down_group_fmt(const Mat& w2, const float* h, int inter, const int* tp, int nt, int d,
                                               float* out) {
    if (w2.scaled) down_group<FMT, true>(w2, h, inter, tp, nt, d, out);
    else down_group<FMT, false>(w2, h, inter, tp, nt, d, out);
}

extern "C" __global__ void __launch_bounds__(256) expert_down_groups(
    const Mat* __restrict__ w2s, const float* __restrict__ h, int inter, const int* __restrict__ idx,
    const int* __restrict__ pairs, const int* __restrict__ groups, int ngroups, int d, float* __restrict__ out) {
    await_inputs();
    for_expert_groups(idx, pairs, groups, ngroups, [&](int e, const int* tp, int nt) {
        const Mat w2 = w2s[e];
        switch (w2.fmt) {
            case FMT_BF16: down_group_fmt<FMT_BF16>(w2, h, inter, tp, nt, d, out); break;
            case FMT_FP8: down_group_fmt<FMT_FP8>(w2, h, inter, tp, nt, d, out); break;
            case FMT_FP4: down_group_fmt<FMT_FP4>(w2, h, inter, tp, nt, d, out); break;
            default: down_group_fmt<FMT_F32>(w2, h, inter, tp, nt, d, out); break;
        }
    });
}

// Prefill experts on the FP64 tensor cores (rows.cuh `mma_tile_dots`), for
// layers whose routed experts are all scaled-code FP8 or FP4 (gpu/weights.rs
// `experts_scaled`): groups of up to MMA_PAIRS pairs of one expert
// (moe_group_pairs with per_group MMA_PAIRS), the group's rows staged as
// stage_mma_pairs stages them (a group of fewer pairs stages its last
// again), then each warp takes tiles of rows. Every sum is the group
// kernels' and the per-pair kernels', so the outputs do not depend on the
// kernel. grid (blocks, min(ngroups, 65535)), block 384 (linear_mma's),
// dynamic smem MMA_PAIRS * mma_stride(cols, wide) values (f64 for W2's
// pairs where mma_wide(cols), else f32), then each thread's stack (16
// doubles, mma_pair_push).
//
// expert_gate_up_mma: warp w takes intermediate rows i0 = 8 (x * warps + w)
// .. i0 + 7, then i0 plus 8 times the grid's warps, ...: a tile's rows g and
// g + 8 are W1's and W3's row i0 + g, so that each thread holds both halves
// of its pairs' swiglu (out[u] and out[2 + u] for token 2 q + u).
template <int FMT>
__device__ __forceinline__ void gate_up_mma(const Mat& w1, const Mat& w3, const float* x, int d, const double* wts,
                                            int k, const int* tp, int nt, float lim, int inter, float* h) {
    double* st = mma_pairs_stack(d, false);
    const int warps = blockDim.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    stage_mma_pairs<FMT>([&](int t) { return x + (size_t)(tp[t] / k) * d; }, d, nt, false);
    for (int i0 = 8 * (blockIdx.x * warps + (threadIdx.x >> 5)); i0 < inter; i0 += 8 * gridDim.x * warps) {
        const int i = min(i0 + g, inter - 1);
        double out[4];
        mma_tile_dots<FMT, false>(row_ref<FMT>(w1, i), row_ref<FMT>(w3, i), d, MmaPairsF32<FMT>::at(d), st, out);
        #pragma unroll
        for (int u = 0; u < 2; u++) {
            const int t = 2 * q + u;
            if (t < nt && i0 + g < inter) {
                const int pair = tp[t];
                h[(size_t)pair * inter + i0 + g] = swiglu((float)out[u], (float)out[2 + u], lim, wts[pair]);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(384) expert_gate_up_mma(
    const Mat* __restrict__ w1s, const Mat* __restrict__ w3s, const float* __restrict__ x, int d,
    const int* __restrict__ idx, const double* __restrict__ wts, int k, const int* __restrict__ pairs,
    const int* __restrict__ groups, int ngroups, float lim, int inter, float* __restrict__ h) {
    await_inputs();
    for_expert_groups(idx, pairs, groups, ngroups, [&](int e, const int* tp, int nt) {
        const Mat w1 = w1s[e], w3 = w3s[e];
        if (w1.fmt == FMT_FP4) gate_up_mma<FMT_FP4>(w1, w3, x, d, wts, k, tp, nt, lim, inter, h);
        else gate_up_mma<FMT_FP8>(w1, w3, x, d, wts, k, tp, nt, lim, inter, h);
    });
}

// expert_down_mma: warp w takes W2's rows j0 = MMA_ROWS * (x * warps + w)
// .. j0 + MMA_ROWS - 1, then j0 plus MMA_ROWS times the grid's warps, ...
template <int FMT>
__device__ __forceinline__ void down_mma(const Mat& w2, const float* h, int inter, const int* tp, int nt, int d,
                                         float* out) {
    double* st = mma_pairs_stack(inter, mma_wide(inter));
    const int warps = blockDim.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    stage_mma_pairs<FMT>([&](int t) { return h + (size_t)tp[t] * inter; }, inter, nt, mma_wide(inter));
    for (int j0 = MMA_ROWS * (blockIdx.x * warps + (threadIdx.x >> 5)); j0 < d; j0 += MMA_ROWS * gridDim.x * warps) {
        double sums[4];
        mma_tile_dots_down<FMT>(row_ref<FMT>(w2, min(j0 + g, d - 1)), row_ref<FMT>(w2, min(j0 + g + 8, d - 1)), inter,
                                st, sums);
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int t = 2 * q + (i & 1), r = j0 + g + 8 * (i >> 1);
            if (t < nt && r < d) out[(size_t)tp[t] * d + r] = (float)sums[i];
        }
    }
}

extern "C" __global__ void __launch_bounds__(384) expert_down_mma(
    const Mat* __restrict__ w2s, const float* __restrict__ h, int inter, const int* __restrict__ idx,
    const int* __restrict__ pairs, const int* __restrict__ groups, int ngroups, int d, float* __restrict__ out) {
    await_inputs();
    for_expert_groups(idx, pairs, groups, ngroups, [&](int e, const int* tp, int nt) {
        const Mat w2 = w2s[e];
        if (w2.fmt == FMT_FP4) down_mma<FMT_FP4>(w2, h, inter, tp, nt, d, out);
        else down_mma<FMT_FP8>(w2, h, inter, tp, nt, d, out);
    });
}

// Shared expert middle: h = swiglu(g, u) with weight 1, elementwise over n*inter.
extern "C" __global__ void swiglu_rows(const float* __restrict__ g, const float* __restrict__ u, float lim, int len,
                                       float* __restrict__ h) {
    await_inputs();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) h[i] = swiglu(g[i], u[i], lim, 1.0);
}
