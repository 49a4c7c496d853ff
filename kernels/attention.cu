// attention.cu — sparse attention with a sink over one shared K=V head
// (CPU twin: cpu/ops/attention.rs, key gathering in cpu/forward.rs).
//
// Query t (position p = t0 + t), head h attends to the window rows at
// positions max(0, p-window+1) ..= p — from the ring (positions < t0, slot
// pos % ring_rows) or from this chunk's rows `local` — then to compressed
// entries: mode 1 (HCA) every entry s < (p+1)/ratio, mode 2 (CSA) the
// indexer's list sel[t, 0..topk) (-1 = none). Mode 3 is a drafter's block
// (DSpark, CPU twin in crates/dspark/src/model.rs): every query sees the
// ring's rows at positions max(0, t0-window) .. t0-1 and then all `topk`
// rows of this chunk, whatever its own position. Logits q.k * scale join a
// per-head sink logit; out = sum p_j k_j / denominator. All in f64 (the
// order of each sum below; the CPU twin's differs only in f64 rounding).
// The output's last 2 npairs dims are then rotated back (rope.cu's inverse
// at position rope_pos0 + t).

__device__ __forceinline__ const float* key_row(int j, int nwin, int first, int t0, const float* ring, int ring_rows,
                                                const float* local, const float* entries, const int* sel, int t,
                                                int topk, int mode, int hd) {
    if (j < nwin) {
        const int pos = first + j;
        return pos < t0 ? ring + (size_t)(pos % ring_rows) * hd : local + (size_t)(pos - t0) * hd;
    }
    if (mode == 3) return local + (size_t)(j - nwin) * hd;
    const int s = mode == 1 ? j - nwin : sel[(size_t)t * topk + (j - nwin)];
    return s >= 0 ? entries + (size_t)s * hd : 0;
}

// The keys query t (position p = t0 + t) sees, in key_row's order: nwin
// window rows from position first, then the entries; returns their count.
__device__ __forceinline__ int att_keys(int t, int t0, int window, int mode, int ratio, int topk, int& first,
                                        int& nwin) {
    const int p = t0 + t;
    first = mode == 3 ? max(0, t0 - window) : max(0, p - window + 1);
    nwin = mode == 3 ? t0 - first : p - first + 1;
    int nent = 0;
    if (mode == 1) nent = (p + 1) / ratio;
    else if (mode == 2) nent = min(topk, (p + 1) / ratio);  // the indexer pads with -1 past the visible entries
    else if (mode == 3) nent = topk;
    return nwin + nent;
}

#define ATT_Q4 4       // float4s of the query per lane: head_dim <= 128 * ATT_Q4 (checked by the host)
#define ATT_GROUPS 16  // key groups: warp g takes keys g, g + 16, ... (block 512)
#define ATT_KEYS 4     // keys a warp has loading at once

// Lane l holds elements 128 m + 4 l .. 128 m + 4 l + 3 of a row (m < ATT_Q4).
__device__ __forceinline__ void load_row4(const float* row, int hd, int lane, float4* v) {
    #pragma unroll
    for (int m = 0; m < ATT_Q4; m++) {
        const int e = 128 * m + 4 * lane;
        v[m] = row && e < hd ? *(const float4*)(row + e) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// Block 512 (ATT_GROUPS warps). Every sum has one fixed order: a logit is
// each lane's products in element order, then the butterfly; the
// denominator's terms thread-strided, then block_sum; an output element is
// each key group's terms in key order, then group g + 8 added to group g,
// then groups 0..7 in order.
// The body of attention_rows: HPB heads of one token a block (blockIdx.y *
// HPB ..), sharing each key row's loads, KEYS keys a warp loading at once;
// each head's sums in the order above, so the outputs do not depend on HPB.
// With CL = 2 the two blocks blockIdx.z = 0, 1 are one cluster sharing the
// heads: block z computes rounds z, z + 2, ... of KEYS * ATT_GROUPS logits
// and stores each into both blocks' shared memory, then the weighted sums
// of its half of the output's elements (lane l's float4s m = OQ z .. OQ z
// + OQ - 1, OQ = ATT_Q4 / CL): each logit and each element the same sum
// whichever block forms it, so the outputs do not depend on CL either.
// Dynamic smem max(max_keys * (8 * HPB + 8), ATT_GROUPS / 2 * hd * 8)
// bytes: the heads' logits (then weights) and the key row addresses,
// reused for one head's partial outputs at a time; red: 32 shared doubles
// (the kernel's one static array, whatever instantiations it calls).
// NORM: the queries are read as wq_b wrote them, and each warp normalizes
// (no weight, `eps`) and rotates its copy of the row in registers with
// rms_norm_rope_warps' sums and roundings (norm_rope_lane: a lane holds the
// same float4s there and here), so the logits see the bits that kernel
// would have written (hd / 4 - npairs / 2 a whole number of float4s). The
// rotations come from `rot` (the token's npairs (cos, sin) as rope_angle
// takes them, written by rms_norm_f32_key_rope for the key at the same
// position), the output's inverse ones too (the same cos, the sine negated).
template <int HPB, int KEYS, int CL, bool NORM = false>
__device__ __forceinline__ void attention_heads(const float* __restrict__ q, const float* __restrict__ ring,
                                                int ring_rows, const float* __restrict__ local,
                                                const float* __restrict__ entries, const int* __restrict__ sel,
                                                int topk, int mode, int ratio, int t0, int window,
                                                const float* __restrict__ sinks, int hd, double scale,
                                                const float* __restrict__ inv_freq, int npairs, int rope_pos0,
                                                float eps, const float* __restrict__ rot, float* __restrict__ out,
                                                double* red) {
    extern __shared__ double logits[];  // HPB x nk logits, then nk key row addresses
    const int t = blockIdx.x, h0 = blockIdx.y * HPB, heads = gridDim.y * HPB;
    int first, nwin;
    const int nk = att_keys(t, t0, window, mode, ratio, topk, first, nwin);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float** keys = (const float**)(logits + HPB * nk);
    for (int j = threadIdx.x; j < nk; j += blockDim.x)
        keys[j] = key_row(j, nwin, first, t0, ring, ring_rows, local, entries, sel, t, topk, mode, hd);
    const int r0 = hd - 2 * npairs;
    // NORM: the token's (cos, sin) pairs (rot is null otherwise: no offset from it)
    const float* trot = NORM ? rot + (size_t)t * 2 * npairs : nullptr;
    NormRopeLane qe;  // NORM: this lane's rotations (no weight)
    if (NORM) {
        const float4* rt = (const float4*)trot;
        #pragma unroll
        for (int m = 0; m < ATT_Q4; m++) {
            const int e = 128 * m + 4 * lane;
            const float4 cs = e >= r0 && e < hd ? rt[(e - r0) >> 2] : make_float4(1.0f, 0.0f, 1.0f, 0.0f);
            qe.c[m][0] = cs.x;
            qe.s[m][0] = cs.y;
            qe.c[m][1] = cs.z;
            qe.s[m][1] = cs.w;
        }
    }
    double qd[HPB][4 * ATT_Q4];
    #pragma unroll
    for (int hh = 0; hh < HPB; hh++) {
        float4 qv[ATT_Q4];
        load_row4(q + ((size_t)t * heads + h0 + hh) * hd, hd, lane, qv);
        if (NORM) norm_rope_lane(qv, nullptr, hd >> 2, r0 >> 2, hd, eps, qe);
        #pragma unroll
        for (int m = 0; m < ATT_Q4; m++) {
            qd[hh][4 * m] = qv[m].x;
            qd[hh][4 * m + 1] = qv[m].y;
            qd[hh][4 * m + 2] = qv[m].z;
            qd[hh][4 * m + 3] = qv[m].w;
        }
    }
    // logits: each warp KEYS keys at a time, all their loads issued first
    // (in a cluster: this block's rounds, after every block has started, so
    // that the others' shared memory can take them)
    const int round = KEYS * ATT_GROUPS, rank = CL > 1 ? (int)blockIdx.z : 0;
    if (CL > 1) {
        cluster_arrive();
        cluster_wait();
    } else {
        __syncthreads();
    }
    for (int j0 = warp + rank * round; j0 < nk; j0 += CL * round) {
        float4 kv[KEYS][ATT_Q4];
        #pragma unroll
        for (int u = 0; u < KEYS; u++) {
            const int j = j0 + u * ATT_GROUPS;
            load_row4(j < nk ? keys[j] : 0, hd, lane, kv[u]);
        }
        double s[KEYS][HPB];
        #pragma unroll
        for (int u = 0; u < KEYS; u++) {
            #pragma unroll
            for (int hh = 0; hh < HPB; hh++) {
                s[u][hh] = 0.0;
                #pragma unroll
                for (int m = 0; m < ATT_Q4; m++) {
                    if (128 * m + 4 * lane < hd) {
                        s[u][hh] = fma(qd[hh][4 * m], (double)kv[u][m].x, s[u][hh]);
                        s[u][hh] = fma(qd[hh][4 * m + 1], (double)kv[u][m].y, s[u][hh]);
                        s[u][hh] = fma(qd[hh][4 * m + 2], (double)kv[u][m].z, s[u][hh]);
                        s[u][hh] = fma(qd[hh][4 * m + 3], (double)kv[u][m].w, s[u][hh]);
                    }
                }
            }
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            #pragma unroll
            for (int u = 0; u < KEYS; u++)
                #pragma unroll
                for (int hh = 0; hh < HPB; hh++) s[u][hh] += __shfl_xor_sync(0xffffffffu, s[u][hh], o);
        }
        if (lane == 0) {
            #pragma unroll
            for (int u = 0; u < KEYS; u++) {
                const int j = j0 + u * ATT_GROUPS;
                #pragma unroll
                for (int hh = 0; hh < HPB; hh++) {
                    if (j < nk) {
                        const double v = keys[j] ? s[u][hh] * scale : -INFINITY;
                        logits[hh * nk + j] = v;
                        #pragma unroll
                        for (int r = 1; r < CL; r++) store_peer(logits + hh * nk + j, rank ^ r, v);
                    }
                }
            }
        }
    }
    if (CL > 1) {  // every block's logits stored in all (the barrier orders the others' stores)
        cluster_arrive();
        cluster_wait();
    } else {
        __syncthreads();
    }
    double denom[HPB];
    #pragma unroll
    for (int hh = 0; hh < HPB; hh++) {
        double* lg = logits + hh * nk;
        double mx = (double)sinks[h0 + hh];
        for (int j = threadIdx.x; j < nk; j += blockDim.x) mx = fmax(mx, lg[j]);
        mx = block_max(mx, red);
        double part = 0.0;
        for (int j = threadIdx.x; j < nk; j += blockDim.x) {
            const double e = lg[j] == -INFINITY ? 0.0 : exp(lg[j] - mx);
            lg[j] = e;
            part += e;
        }
        denom[hh] = exp((double)sinks[h0 + hh] - mx) + block_sum(part, red);
    }
    // out = sum_j p_j k_j: warp g takes keys g, g + 16, ... in order (zero
    // weights skipped), KEYS rows loading at once; this block's elements
    // (float4s m0 .. m0 + OQ - 1 of each lane)
    const int OQ = ATT_Q4 / CL, m0 = OQ * rank;
    double acc[HPB][4 * OQ];
    #pragma unroll
    for (int hh = 0; hh < HPB; hh++)
        #pragma unroll
        for (int e = 0; e < 4 * OQ; e++) acc[hh][e] = 0.0;
    for (int j0 = warp; j0 < nk; j0 += KEYS * ATT_GROUPS) {
        float4 kv[KEYS][OQ];
        double pj[KEYS][HPB];
        #pragma unroll
        for (int u = 0; u < KEYS; u++) {
            const int j = j0 + u * ATT_GROUPS;
            bool any = false;
            #pragma unroll
            for (int hh = 0; hh < HPB; hh++) {
                pj[u][hh] = j < nk ? logits[hh * nk + j] : 0.0;
                any = any || pj[u][hh] != 0.0;
            }
            const float* row = any ? keys[j] : 0;
            #pragma unroll
            for (int m = 0; m < OQ; m++) {
                const int e = 128 * (m0 + m) + 4 * lane;
                kv[u][m] = row && e < hd ? *(const float4*)(row + e) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
        #pragma unroll
        for (int u = 0; u < KEYS; u++) {
            #pragma unroll
            for (int hh = 0; hh < HPB; hh++) {
                if (pj[u][hh] != 0.0) {
                    #pragma unroll
                    for (int m = 0; m < OQ; m++) {
                        acc[hh][4 * m] += pj[u][hh] * (double)kv[u][m].x;
                        acc[hh][4 * m + 1] += pj[u][hh] * (double)kv[u][m].y;
                        acc[hh][4 * m + 2] += pj[u][hh] * (double)kv[u][m].z;
                        acc[hh][4 * m + 3] += pj[u][hh] * (double)kv[u][m].w;
                    }
                }
            }
        }
    }
    // each head in turn: the groups' partials, g + 8 into g, then 0..7 in
    // order (the key weights and addresses are no longer needed: their
    // memory holds them)
    double* part_out = logits;  // [ATT_GROUPS / 2][hd]
    const int half = ATT_GROUPS / 2;
    #pragma unroll
    for (int hh = 0; hh < HPB; hh++) {
        __syncthreads();
        if (warp >= half) {
            #pragma unroll
            for (int m = 0; m < OQ; m++) {
                const int e = 128 * (m0 + m) + 4 * lane;
                if (e < hd) {
                    #pragma unroll
                    for (int c = 0; c < 4; c++) part_out[(size_t)(warp - half) * hd + e + c] = acc[hh][4 * m + c];
                }
            }
        }
        __syncthreads();
        if (warp < half) {
            #pragma unroll
            for (int m = 0; m < OQ; m++) {
                const int e = 128 * (m0 + m) + 4 * lane;
                if (e < hd) {
                    #pragma unroll
                    for (int c = 0; c < 4; c++) {
                        double* r = part_out + (size_t)warp * hd + e + c;
                        *r = acc[hh][4 * m + c] + *r;
                    }
                }
            }
        }
        __syncthreads();
        float* orow = out + ((size_t)t * heads + h0 + hh) * hd;
        const int e0 = 128 * m0, e1 = min(hd, 128 * (m0 + OQ));
        for (int e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
            double s = 0.0;
            for (int g = 0; g < half; g++) s += part_out[(size_t)g * hd + e];
            orow[e] = (float)(s / denom[hh]);
        }
        __syncthreads();  // the row written above, rotated back (rope_rows inverse) in place
        // the pairs among this block's elements (a pair never straddles two blocks: e0, e1 even)
        const int i0 = max(0, (e0 - r0) / 2), i1 = min(npairs, (e1 - r0) / 2);
        if (NORM) {
            for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
                const float2 cs = ((const float2*)trot)[i];
                rotate_pair(&orow[r0 + 2 * i], &orow[r0 + 2 * i + 1], cs.x, -cs.y);
            }
        } else {
            rope_pairs(orow + r0, (float)(rope_pos0 + t), inv_freq, i0, i1, true);
        }
    }
}

// One head of one token a block: grid (n, heads), block 512 (ATT_GROUPS
// warps). Chunks too short to fill the SMs with attention_rows_h2.
extern "C" __global__ void __launch_bounds__(512) attention_rows(const float* __restrict__ q, const float* __restrict__ ring, int ring_rows,
                                          const float* __restrict__ local, const float* __restrict__ entries,
                                          const int* __restrict__ sel, int topk, int mode, int ratio, int t0,
                                          int window, const float* __restrict__ sinks, int hd, double scale,
                                          const float* __restrict__ inv_freq, int npairs, int rope_pos0,
                                          float* __restrict__ out) {
    await_inputs();
    __shared__ double red[32];
    attention_heads<1, ATT_KEYS, 1>(q, ring, ring_rows, local, entries, sel, topk, mode, ratio, t0, window, sinks,
                                    hd, scale, inv_freq, npairs, rope_pos0, 0.0f, nullptr, out, red);
}

// One head of one token a cluster of two blocks (decode, where one head a
// block would leave half the SMs idle): each block computes half of the
// logits (stored in both) and the weighted sums of half of the output's
// elements (attention_heads' CL = 2). grid (n, heads, 2), block 512.
extern "C" __global__ void __cluster_dims__(1, 1, 2) __launch_bounds__(512)
    attention_rows_pair(const float* __restrict__ q, const float* __restrict__ ring, int ring_rows,
                        const float* __restrict__ local, const float* __restrict__ entries,
                        const int* __restrict__ sel, int topk, int mode, int ratio, int t0, int window,
                        const float* __restrict__ sinks, int hd, double scale, const float* __restrict__ inv_freq,
                        int npairs, int rope_pos0, float* __restrict__ out) {
    await_inputs();
    __shared__ double red[32];
    attention_heads<1, ATT_KEYS, 2>(q, ring, ring_rows, local, entries, sel, topk, mode, ratio, t0, window, sinks,
                                    hd, scale, inv_freq, npairs, rope_pos0, 0.0f, nullptr, out, red);
}

// attention_rows_pair on the heads' rows as wq_b wrote them: each warp
// normalizes (eps, no weight) and rotates its head's query itself
// (attention_heads' NORM, the rotations from `rot`), in place of
// rms_norm_rope_warps' launch before it (the key's row and `rot` come from
// rms_norm_f32_key_rope, before wq_b).
extern "C" __global__ void __cluster_dims__(1, 1, 2) __launch_bounds__(512)
    attention_rows_pair_normed(const float* __restrict__ q, const float* __restrict__ ring, int ring_rows,
                               const float* __restrict__ local, const float* __restrict__ entries,
                               const int* __restrict__ sel, int topk, int mode, int ratio, int t0, int window,
                               const float* __restrict__ sinks, int hd, double scale, int npairs, float eps,
                               const float* __restrict__ rot, float* __restrict__ out) {
    await_inputs();
    __shared__ double red[32];
    attention_heads<1, ATT_KEYS, 2, true>(q, ring, ring_rows, local, entries, sel, topk, mode, ratio, t0, window,
                                          sinks, hd, scale, nullptr, npairs, 0, eps, rot, out, red);
}

// Two heads of one token a block, each key row loaded once for both (the 64
// heads of DeepSeek-V4 share one key row set, so a prefill reads each
// token's keys heads / 2 times instead of heads): grid (n, heads / 2),
// block 512; 2 keys a warp loading at once, for the registers.
extern "C" __global__ void __launch_bounds__(512) attention_rows_h2(const float* __restrict__ q, const float* __restrict__ ring, int ring_rows,
                                          const float* __restrict__ local, const float* __restrict__ entries,
                                          const int* __restrict__ sel, int topk, int mode, int ratio, int t0,
                                          int window, const float* __restrict__ sinks, int hd, double scale,
                                          const float* __restrict__ inv_freq, int npairs, int rope_pos0,
                                          float* __restrict__ out) {
    await_inputs();
    __shared__ double red[32];
    attention_heads<2, 2, 1>(q, ring, ring_rows, local, entries, sel, topk, mode, ratio, t0, window, sinks, hd, scale,
                             inv_freq, npairs, rope_pos0, 0.0f, nullptr, out, red);
}

// ---- The prefill's attention on the FP64 tensor cores ----
// attention_heads' sums with its bits, 16 heads of one token a block (the
// heads share one key row set, so they are the instruction's m; each key
// element converted once for 16 heads, not 2). A logit's lane partial is
// the chain of fmas over the lane's 16 elements (128 m + 4 l + c, m then
// c) from zero: one m16n8k16 f64 instruction gives it for 16 heads and 8
// keys (rows.cuh: the instruction's outputs are that chain, bit for bit);
// the 32 lanes' partials ("leaves") are added in warp_sum's tree, walked in
// bit-reversed order onto a stack of subtrees (mma_leaf_push's additions,
// in registers: mma_leaf_push_regs). The softmax is attention_heads' (the same thread-strided
// partials, butterflies and sums over the warps in order), for the 16
// heads at once. An output element of key group G (keys G, G + 16, ...) is
// the chain of fmas over the group's keys in order from zero, 16 keys an
// instruction (a zero weight adds nothing: attention_heads skips it), and
// the groups are added as attention_heads adds them: G + 8 into G, then 0
// .. 7 in order from zero.
#define ATT_MMA_HEADS 16
// Doubles of one row of the weights' layout (att_w): 16 heads and 4 of padding, so that a
// quarter warp's eight 16-byte reads (2 head pairs of 4 rows) fall in distinct banks.
#define ATT_MMA_ROW 20

// Index of key j's weight (its logit, then exp) for head h: key j = G + 16
// r (G = j % 16, its output group) at row G R + r, heads h and h + 8 of a
// pair side by side (a thread's A fragment of the output: 16 bytes).
__device__ __forceinline__ int att_w(int R, int j, int h) {
    return ((j & 15) * R + (j >> 4)) * ATT_MMA_ROW + 2 * (h & 7) + (h >> 3);
}

// Leaves of key values a warp of attention_mma's logits has in flight
// (cp.async), and the floats of one key in a leaf's slot: its 4 segments of
// 4 values and 4 of padding (a thread's B reads fall in distinct banks).
#define ATT_MMA_AHEAD 4
#define ATT_MMA_KEY 20
// Steps of key values a warp of attention_mma's outputs has in flight (a
// slot: 16 keys x 16 values).
#define ATT_MMA_OUT_AHEAD 4

// Key n0 + g's row of the logits' tile at n0 (attention_mma), or none
// past the last key.
__device__ __forceinline__ const float* att_tile_key(const float* const* keys, int nk, int n0, int g) {
    return n0 + g < nk ? keys[n0 + g] : 0;
}

// This lane's copy of leaf mi of a logits' tile: its key kp's (this lane's
// key of the tile, att_tile_key) values 128 qq + 4 l .. + 3 (l = mi's leaf)
// to the key's segment qq in the leaf's slot; zeros for no key or a key
// without a row.
__device__ __forceinline__ void att_leaf_copy(float* lring, const float* kp, int mi, int g, int qq) {
    float* dst = lring + (mi % ATT_MMA_AHEAD) * (8 * ATT_MMA_KEY) + g * ATT_MMA_KEY + 4 * qq;
    if (kp) copy_async16(dst, kp + 128 * qq + 4 * leaf_brev5(mi));
    else *(float4*)dst = make_float4(0.f, 0.f, 0.f, 0.f);
}

// Where value e (0 .. 15: tiles E0 and E0 + 1 of a pass) of key k (0 ..
// 15) of an output step lies in its slot: segment e / 4 of the key's row
// of 16, swizzled by bit 1 of k so that a thread's B reads (keys qq + 4 m,
// values 8 T + g) fall in distinct banks.
__device__ __forceinline__ int att_out_at(int k, int e) {
    return 16 * k + 4 * ((e >> 2) ^ (k & 2)) + (e & 3);
}

// The next output step of a warp's stream (attention_mma): pass pp, chain
// c (group c / 2 + 8 (c % 2)), instruction ks.
struct AttOutCursor {
    int pp, c, ks;
};

// This lane's two copies of the step at `next` (if any) into slot `slot`
// of the warp's ring: keys G + 16 (16 ks + k), k = 0 .. 15, values 8 E0 ..
// 8 E0 + 15 (E0 = 4 warp + 2 pp), 16 bytes a copy; zeros past the keys or
// for a key without a row. Then advances `next`.
__device__ __forceinline__ void att_out_copy(float* oring, int slot, const float* const* keys, int nk, int KS,
                                             AttOutCursor& next, int warp, int lane) {
    if (next.pp < 2) {
        const int G = next.c / 2 + 8 * (next.c & 1), E0 = 4 * warp + 2 * next.pp;
        #pragma unroll
        for (int z = 0; z < 2; z++) {
            const int ci = lane + 32 * z, k = ci >> 2, sg = ci & 3, j = G + 16 * (16 * next.ks + k);
            float* dst = oring + slot * (16 * 16) + att_out_at(k, 4 * sg);
            const float* kp = j < nk ? keys[j] : 0;
            if (kp) copy_async16(dst, kp + 8 * E0 + 4 * sg);
            else *(float4*)dst = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        if (++next.ks == KS) {
            next.ks = 0;
            if (++next.c == ATT_GROUPS) {
                next.c = 0;
                next.pp++;
            }
        }
    }
}

// grid (n, heads / 16), block 512 (16 warps: attention_heads' softmax
// order). Head width 512 (a lane's 16 elements: one instruction's k).
// Dynamic smem (gpu/layer_ops.rs `attention_mma_smem`): the weights
// (ATT_GROUPS R rows of ATT_MMA_ROW doubles, R = ceil(nk / 16)), the 16 heads' queries as
// f64 in the A fragments' order (64 KiB; the outputs' rings of key values
// after the logits), the key row addresses (an even count), the logits'
// rings of key values.
extern "C" __global__ void __launch_bounds__(512) attention_mma(const float* __restrict__ q, const float* __restrict__ ring, int ring_rows,
                                          const float* __restrict__ local, const float* __restrict__ entries,
                                          const int* __restrict__ sel, int topk, int mode, int ratio, int t0,
                                          int window, const float* __restrict__ sinks, int hd, double scale,
                                          const float* __restrict__ inv_freq, int npairs, int rope_pos0,
                                          float* __restrict__ out) {
    await_inputs();
    __shared__ double red[ATT_MMA_HEADS * ATT_GROUPS];  // the heads' warp maxima, then warp sums
    __shared__ double hmax[ATT_MMA_HEADS], den[ATT_MMA_HEADS];
    const int t = blockIdx.x, h0 = blockIdx.y * ATT_MMA_HEADS, heads = gridDim.y * ATT_MMA_HEADS;
    int first, nwin;
    const int nk = att_keys(t, t0, window, mode, ratio, topk, first, nwin), R = (nk + 15) >> 4;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qq = lane & 3;
    double* w = xs_dyn;
    double2* qs = (double2*)(w + ATT_GROUPS * R * ATT_MMA_ROW);
    const float** keys = (const float**)(qs + 32 * 4 * 32);
    for (int j = tid; j < nk; j += blockDim.x)
        keys[j] = key_row(j, nwin, first, t0, ring, ring_rows, local, entries, sel, t, topk, mode, hd);
    // the rows' tail past the last key: zero weights
    for (int i = tid; i < ATT_MMA_HEADS * (16 * R - nk); i += blockDim.x)
        w[att_w(R, nk + i / ATT_MMA_HEADS, i % ATT_MMA_HEADS)] = 0.0;
    // queries: element 128 m + 4 l + c of head h at pair ((4 l + m) 8 + h % 8) 4 + c, half h / 8
    for (int i = tid; i < ATT_MMA_HEADS * 128; i += blockDim.x) {
        const int h = i >> 7, e = 4 * (i & 127), l = (e & 127) >> 2, m = e >> 7;
        const float4 v = *(const float4*)(q + ((size_t)t * heads + h0 + h) * hd + e);
        double* d = (double*)(qs + ((4 * l + m) * 8 + (h & 7)) * 4) + (h >> 3);
        d[0] = v.x;
        d[2] = v.y;
        d[4] = v.z;
        d[6] = v.w;
    }
    __syncthreads();
    // logits: warp tiles of 8 keys; leaf l's instruction takes A[h][4 m + c]
    // = q[h][128 m + 4 l + c], B[4 m + c][n] = key n's same element. The
    // warp's tiles and their leaves are one stream whose key values are
    // copied ATT_MMA_AHEAD leaves ahead into the warp's ring (att_leaf_copy),
    // one cp.async group a leaf.
    float* lring = (float*)(keys + ((nk + 1) & ~1)) + warp * (ATT_MMA_AHEAD * 8 * ATT_MMA_KEY);
    const float* kp = att_tile_key(keys, nk, 8 * warp, g);  // this lane's key of the warp's tile
    if (8 * warp < nk) {
        #pragma unroll
        for (int mi = 0; mi < ATT_MMA_AHEAD; mi++) {
            att_leaf_copy(lring, kp, mi, g, qq);
            copy_async_commit();
        }
    }
    for (int n0 = 8 * warp; n0 < nk; n0 += 8 * ATT_GROUPS) {
        const float* kn = att_tile_key(keys, nk, n0 + 8 * ATT_GROUPS, g);  // and of its next tile
        double st[5][4], x[4];
        #pragma unroll
        for (int mi = 0; mi < 32; mi++) {
            const int l = leaf_brev5(mi);
            asm volatile("cp.async.wait_group %0;" ::"n"(ATT_MMA_AHEAD - 1) : "memory");
            __syncwarp();
            const float* slot = lring + (mi % ATT_MMA_AHEAD) * (8 * ATT_MMA_KEY) + g * ATT_MMA_KEY + qq;
            double a[8], b[4];
            #pragma unroll
            for (int m = 0; m < 4; m++) {
                const double2 v = qs[(4 * l + m) * 32 + lane];
                a[2 * m] = v.x;
                a[2 * m + 1] = v.y;
                b[m] = (double)slot[4 * m];
            }
            #pragma unroll
            for (int i = 0; i < 4; i++) x[i] = 0.0;
            mma_k16(x, a, b);
            __syncwarp();  // every lane has read the slot: the leaf ATT_MMA_AHEAD on takes it
            if (mi + ATT_MMA_AHEAD < 32) att_leaf_copy(lring, kp, mi + ATT_MMA_AHEAD, g, qq);
            else if (n0 + 8 * ATT_GROUPS < nk) att_leaf_copy(lring, kn, mi + ATT_MMA_AHEAD - 32, g, qq);
            copy_async_commit();
            mma_leaf_push_regs(st, x, mi);
        }
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int j = n0 + 2 * qq + (i & 1);
            if (j < nk) w[att_w(R, j, g + 8 * (i >> 1))] = keys[j] ? x[i] * scale : -INFINITY;
        }
        kp = kn;
    }
    copy_async_wait_all();  // the empty groups past the stream's end
    __syncthreads();
    // softmax of the 16 heads at once, each head's sums in attention_heads' order
    {
        double v[ATT_MMA_HEADS];
        #pragma unroll
        for (int h = 0; h < ATT_MMA_HEADS; h++) v[h] = (double)sinks[h0 + h];
        for (int j = tid; j < nk; j += blockDim.x)
            #pragma unroll
            for (int h = 0; h < ATT_MMA_HEADS; h++) v[h] = fmax(v[h], w[att_w(R, j, h)]);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            #pragma unroll
            for (int h = 0; h < ATT_MMA_HEADS; h++) v[h] = fmax(v[h], __shfl_xor_sync(0xffffffffu, v[h], o));
        if (lane == 0)
            #pragma unroll
            for (int h = 0; h < ATT_MMA_HEADS; h++) red[h * ATT_GROUPS + warp] = v[h];
        __syncthreads();
        if (tid < ATT_MMA_HEADS) {
            double m = red[tid * ATT_GROUPS];
            for (int i = 1; i < ATT_GROUPS; i++) m = fmax(m, red[tid * ATT_GROUPS + i]);
            hmax[tid] = m;
        }
        __syncthreads();
        #pragma unroll
        for (int h = 0; h < ATT_MMA_HEADS; h++) v[h] = 0.0;
        for (int j = tid; j < nk; j += blockDim.x) {
            #pragma unroll
            for (int h = 0; h < ATT_MMA_HEADS; h++) {
                double* lg = w + att_w(R, j, h);
                const double e = *lg == -INFINITY ? 0.0 : exp(*lg - hmax[h]);
                *lg = e;
                v[h] += e;
            }
        }
        #pragma unroll
        for (int h = 0; h < ATT_MMA_HEADS; h++) v[h] = warp_sum(v[h]);
        if (lane == 0)
            #pragma unroll
            for (int h = 0; h < ATT_MMA_HEADS; h++) red[h * ATT_GROUPS + warp] = v[h];
        __syncthreads();
        if (tid < ATT_MMA_HEADS) {
            double s = 0.0;
            for (int i = 0; i < ATT_GROUPS; i++) s += red[tid * ATT_GROUPS + i];
            den[tid] = exp((double)sinks[h0 + tid] - hmax[tid]) + s;
        }
        __syncthreads();
    }
    // outputs: warp w takes elements 32 w .. 32 w + 31, two tiles of 8 at a
    // time; A[h][k] = the weight of key G + 16 (16 ks + k), B[k][n] = that
    // key's element 8 E + n. A pass's steps: group G = gg + 8 u's ks-th
    // instruction, for gg, then u, then ks; the warp's two passes and their
    // steps are one stream whose key values are copied ATT_MMA_OUT_AHEAD
    // steps ahead into the warp's ring in the queries' memory (no longer
    // read), one cp.async group a step (att_out_copy).
    const double2* w2 = (const double2*)w;
    const int KS = (R + 15) >> 4;
    float* oring = (float*)qs + warp * (ATT_MMA_OUT_AHEAD * 16 * 16);
    AttOutCursor next = {0, 0, 0};  // the next step to copy
    #pragma unroll
    for (int d = 0; d < ATT_MMA_OUT_AHEAD; d++) {
        att_out_copy(oring, d, keys, nk, KS, next, warp, lane);
        copy_async_commit();
    }
    int sx = 0;  // the stream's step: its ring slot sx % ATT_MMA_OUT_AHEAD
    #pragma unroll 1
    for (int pp = 0; pp < 2; pp++) {
        const int E0 = 4 * warp + 2 * pp;
        double s[2][4];
        #pragma unroll
        for (int T = 0; T < 2; T++)
            #pragma unroll
            for (int i = 0; i < 4; i++) s[T][i] = 0.0;
        #pragma unroll 1
        for (int gg = 0; gg < ATT_GROUPS / 2; gg++) {
            double acc[2][2][4];
            #pragma unroll
            for (int u = 0; u < 2; u++) {
                const int G = gg + 8 * u;
                #pragma unroll
                for (int T = 0; T < 2; T++)
                    #pragma unroll
                    for (int i = 0; i < 4; i++) acc[u][T][i] = 0.0;
                for (int rb = 0; rb < R; rb += 16, sx++) {
                    asm volatile("cp.async.wait_group %0;" ::"n"(ATT_MMA_OUT_AHEAD - 1) : "memory");
                    __syncwarp();
                    const float* slot = oring + (sx % ATT_MMA_OUT_AHEAD) * (16 * 16);
                    double a[8];
                    #pragma unroll
                    for (int m = 0; m < 4; m++) {
                        const int r = rb + qq + 4 * m;
                        const double2 v = r < R ? w2[(G * R + r) * (ATT_MMA_ROW / 2) + g] : make_double2(0.0, 0.0);
                        a[2 * m] = v.x;
                        a[2 * m + 1] = v.y;
                    }
                    #pragma unroll
                    for (int T = 0; T < 2; T++) {
                        double b[4];
                        #pragma unroll
                        for (int m = 0; m < 4; m++) b[m] = (double)slot[att_out_at(qq + 4 * m, 8 * T + g)];
                        mma_k16(acc[u][T], a, b);
                    }
                    __syncwarp();  // every lane has read the slot: the step ATT_MMA_OUT_AHEAD on takes it
                    att_out_copy(oring, (sx + ATT_MMA_OUT_AHEAD) % ATT_MMA_OUT_AHEAD, keys, nk, KS, next, warp, lane);
                    copy_async_commit();
                }
            }
            #pragma unroll
            for (int T = 0; T < 2; T++)
                #pragma unroll
                for (int i = 0; i < 4; i++) s[T][i] += acc[0][T][i] + acc[1][T][i];
        }
        #pragma unroll
        for (int T = 0; T < 2; T++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                const int h = g + 8 * (i >> 1), e = 8 * (E0 + T) + 2 * qq + (i & 1);
                out[((size_t)t * heads + h0 + h) * hd + e] = (float)(s[T][i] / den[h]);
            }
    }
    copy_async_wait_all();  // the empty groups past the stream's end
    __syncthreads();  // the rows written above, rotated back (rope_pairs' inverse) in place
    const int r0 = hd - 2 * npairs;
    for (int i = tid; i < ATT_MMA_HEADS * npairs; i += blockDim.x) {
        float* orow = out + ((size_t)t * heads + h0 + i / npairs) * hd + r0;
        const int pi = i % npairs;
        float c, sn;
        rope_angle((float)(rope_pos0 + t), inv_freq[pi], true, c, sn);
        rotate_pair(&orow[2 * pi], &orow[2 * pi + 1], c, sn);
    }
}

// Append the last rows of a chunk to a ring: rows t with t >= n - ring_rows
// go to slot (t0 + t) % ring_rows. grid (min(n, ring_rows)), block 256.
extern "C" __global__ void ring_append(float* __restrict__ ring, int ring_rows, const float* __restrict__ rows,
                                       int width, int n, int t0) {
    await_inputs();
    const int skip = n > ring_rows ? n - ring_rows : 0;
    const int t = skip + blockIdx.x;
    const float* src = rows + (size_t)t * width;
    float* dst = ring + (size_t)((t0 + t) % ring_rows) * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}
