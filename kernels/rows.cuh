// rows.cuh — the weight-row dot products of the products and the experts
// (linear.cu, moe.cu): the staged activation rows, the registers' and shared
// memory's weight rings, and the warp's dots in the chunk order that
// common.cuh fixes for every kernel. Compiled right after common.cuh in the
// one NVRTC translation unit (gpu/nvrtc.rs `SOURCES`).

// Shared floats block_dot_rows needs for NT tokens.
#define DOT_SMEM(E, NT) ((NT) * 32 * ((E) + 1))

// Dot products of row r (warp-owned; `active` false for warps past the
// last row, which still help stage) with NT token vectors x + t*x_stride,
// nt of them real, on dequantized weights. xs: shared, DOT_SMEM(E, NT)
// floats: the block walks the columns in windows of 32 chunks, staging each
// window's activations (one padding word per chunk, so that lanes read
// without bank conflicts). Every lane of an active warp gets each full sum.
template <int FMT, int NT>
__device__ __forceinline__ void block_dot_rows(const Mat& m, int r, bool active, const float* x, int x_stride, int nt,
                                               double* acc, float* xs) {
    const int E = Fmt<FMT>::E;
    const int lane = threadIdx.x & 31;
    const int nch = m.cols / E;
    const uint4* rc = (const uint4*)m.data + (size_t)r * nch;
    const int row_words = 32 * (E + 1);
    #pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0;
    float w[E];
    uint4 cur = make_uint4(0, 0, 0, 0);
    if (active && lane < nch) cur = rc[lane];
    for (int base = 0; base < nch; base += 32) {
        const int ci = base + lane;
        uint4 next = make_uint4(0, 0, 0, 0);
        if (active && ci + 32 < nch) next = rc[ci + 32];
        __syncthreads();
        const int k0 = base * E, len = min(32 * E, m.cols - k0);
        for (int i = threadIdx.x; i < NT * 32 * E; i += blockDim.x) {
            const int t = i / (32 * E), e = i % (32 * E);
            if (t < nt && e < len) xs[t * row_words + e + e / E] = x[(size_t)t * x_stride + k0 + e];
        }
        __syncthreads();
        if (active && ci < nch) {
            decode_chunk<FMT>(m, r, ci, cur, w);
            #pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < nt) {
                    const float* xr = xs + t * row_words + lane * (E + 1);
                    double p = 0.0;
                    #pragma unroll
                    for (int j = 0; j < E; j++) p = fma((double)w[j], (double)xr[j], p);
                    acc[t] += p;
                }
            }
        }
        cur = next;
    }
    #pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = warp_sum(acc[t]);
}

// One token against many rows (decode). The token's whole row is staged in
// shared memory once per block, as f64 (scaled by 2^(P - 127) for
// scaled-code products), chunk ci at ci * (E + 2) (two padding values keep
// each lane's 16-byte reads apart in the banks), and each warp takes ND
// rows at once: lane l walks chunks l, l + 32, ... of every row together,
// reading each activation once for all of them. Each row's sum is
// block_dot_rows' (same chunk order, partials and butterfly), so the bits
// do not depend on the kernel; what changes is the work per weight and the
// bytes in flight (each lane keeps RING(ND) chunks of every row loading in
// registers, or, in the one-token products, SMEM_RING_STAGES(ND) in shared
// memory).

// Stage x[0..cols) * xscale as f64 for chunks of E values, cols / E chunks
// of E + 2 doubles (gpu/products.rs `row_smem` sizes it; all threads; the
// caller syncs). Each thread issues its loads eight 16-byte vectors at a
// time before it stores any, so a block waits for about one memory latency,
// not one per element.
template <int E>
__device__ __forceinline__ void stage_row(const float* x, int cols, double xscale, double* xs) {
    if ((cols & 3) != 0 || (((size_t)x) & 15) != 0) {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) xs[(i / E) * (E + 2) + i % E] = (double)x[i] * xscale;
        return;
    }
    const float4* x4 = (const float4*)x;
    const int n4 = cols >> 2;
    for (int base = threadIdx.x; base < n4; base += 8 * blockDim.x) {
        float4 v[8];
        load_vec8(x4, n4, base, v);
        #pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = base + u * blockDim.x;
            if (i < n4) {
                const int k = 4 * i;  // E is a multiple of 4: one chunk
                double2* d = (double2*)(xs + (k / E) * (E + 2) + k % E);
                d[0] = make_double2((double)v[u].x * xscale, (double)v[u].y * xscale);
                d[1] = make_double2((double)v[u].z * xscale, (double)v[u].w * xscale);
            }
        }
    }
}

// Chunks each lane keeps in flight per row when a warp takes ND rows: a
// warp with one row (the short matrices, whose grids leave SMs idle) reads
// 8 chunks (128 bytes) a lane ahead, so that a row of up to 256 chunks is
// read in one memory latency; warps with several rows read 2 ahead (more
// would cost registers and blocks an SM).
#define RING(ND) ((ND) == 1 ? 8 : 2)

// A weight chunk for a warp's sums over NT tokens: for one token (a decode
// step, which reads each weight once) under the evict-first policy
// (common.cuh stream_policy); a prefill's groups, whose blocks read the
// same rows for other tokens, load it plainly.
template <int NT>
__device__ __forceinline__ uint4 weight_chunk(const uint4* p, unsigned long long policy) {
    return NT == 1 ? load_stream16(p, policy) : *p;
}

// The first RING(ND) - 1 chunks of each of ND rows for this lane (issued
// before the activations are staged, so that both latencies overlap), for
// sums over NT tokens.
template <int FMT, int ND, int NT>
__device__ __forceinline__ void first_chunks(const RowRef* rows, int cols, uint4 (*buf)[RING(ND)]) {
    const int lane = threadIdx.x & 31;
    const int nch = cols / Fmt<FMT>::E;
    const unsigned long long policy = stream_policy();
    #pragma unroll
    for (int q = 0; q < ND; q++) {
        #pragma unroll
        for (int d = 0; d + 1 < RING(ND); d++) {
            const int ci = lane + 32 * d;
            buf[q][d] = ci < nch ? weight_chunk<NT>(rows[q].chunks + ci, policy) : make_uint4(0, 0, 0, 0);
        }
    }
}

// Tokens the prefill's group kernels stage whole at once (linear.cu
// linear_groups, moe.cu expert_*_groups; gpu/products.rs `GROUP_TOKENS`).
#define GROUP_TOKENS 4
// Weight rows a warp of the group kernels takes at once: each 16-byte shared
// load of two staged values feeds GROUP_ROWS x 2 multiply-adds per token
// (with 2 rows the shared loads bound the expert groups); block 256 (8
// warps), for the registers of 4 rows x 4 tokens.
#define GROUP_ROWS 4

// A group's NT rows of `cols` staged for scaled-code or dequantized
// products (token t's row at row(t), the last again past nt; stage_row's
// layout, token t at xs_dyn + t * (cols / E * (E + 2))), every thread of
// the block, then the barrier.
template <int FMT, bool SCALED, int NT, class Row>
__device__ __forceinline__ void stage_group(Row row, int cols, int nt) {
    const int E = Fmt<FMT>::E;
    #pragma unroll
    for (int t = 0; t < NT; t++)
        stage_row<E>(row(min(t, nt - 1)), cols, SCALED ? pow2d(Code<FMT>::P - 127) : 1.0,
                     xs_dyn + t * (cols / E * (E + 2)));
    __syncthreads();
}

// One chunk's terms for ND rows and NT staged tokens: the chunk ci of each
// row (its 16 bytes in w[q]) against the tokens' staged values, a partial
// from zero in column order taken into acc[q][t] (times the chunk's factor
// for scaled codes).
template <int FMT, int ND, int NT, bool SCALED>
__device__ __forceinline__ void add_chunk(const RowRef* rows, int ci, const uint4 (&w)[ND], const double* xs,
                                          int stride, double (&acc)[ND][NT]) {
    const int E = Fmt<FMT>::E;
    float s[ND];
    double f[ND], p[ND][NT];
    #pragma unroll
    for (int q = 0; q < ND; q++) {
        if (SCALED) f[q] = chunk_factor<FMT>(rows[q], ci);
        else s[q] = row_scale<FMT>(rows[q], ci);
        #pragma unroll
        for (int t = 0; t < NT; t++) p[q][t] = 0.0;
    }
    #pragma unroll
    for (int j = 0; j < E; j += 2) {
        double w0[ND], w1[ND];
        #pragma unroll
        for (int q = 0; q < ND; q++) {
            w0[q] = SCALED ? code_value<FMT>(w[q], j) : (double)dequant_value<FMT>(w[q], j, s[q]);
            w1[q] = SCALED ? code_value<FMT>(w[q], j + 1) : (double)dequant_value<FMT>(w[q], j + 1, s[q]);
        }
        #pragma unroll
        for (int t = 0; t < NT; t++) {
            const double2 xv = *(const double2*)(xs + t * stride + ci * (E + 2) + j);
            #pragma unroll
            for (int q = 0; q < ND; q++) {
                p[q][t] = fma(w0[q], xv.x, p[q][t]);
                p[q][t] = fma(w1[q], xv.y, p[q][t]);
            }
        }
    }
    #pragma unroll
    for (int q = 0; q < ND; q++)
        #pragma unroll
        for (int t = 0; t < NT; t++) acc[q][t] = SCALED ? fma(p[q][t], f[q], acc[q][t]) : acc[q][t] + p[q][t];
}

// Dots of NT staged tokens (token t's row at xs + t * stride, stage_row's
// layout) with ND rows (any mix of matrices of one format and width
// `cols`), by one warp, from the chunks first_chunks loaded: each step
// loads the chunk RING(ND) - 1 strides ahead into the last slot, sums the
// first (each weight decoded once for the NT tokens), and shifts the slots
// down; every lane gets every sum acc[q][t]. SCALED: scaled-code products
// (the rows staged with xscale pow2d(P - 127)); otherwise dequantized
// weights (xscale 1).
template <int FMT, int ND, int NT, bool SCALED>
__device__ __forceinline__ void warp_dot_rows_tokens(const RowRef* rows, int cols, const double* xs, int stride,
                                                     uint4 (*buf)[RING(ND)], double (&acc)[ND][NT]) {
    const int E = Fmt<FMT>::E, D = RING(ND);
    const int lane = threadIdx.x & 31;
    const int nch = cols / E;
    const unsigned long long policy = stream_policy();
    #pragma unroll
    for (int q = 0; q < ND; q++)
        #pragma unroll
        for (int t = 0; t < NT; t++) acc[q][t] = 0.0;
    for (int ci = lane; ci < nch; ci += 32) {
        const int ahead = ci + 32 * (D - 1);
        #pragma unroll
        for (int q = 0; q < ND; q++)
            buf[q][D - 1] = ahead < nch ? weight_chunk<NT>(rows[q].chunks + ahead, policy) : make_uint4(0, 0, 0, 0);
        uint4 w[ND];
        #pragma unroll
        for (int q = 0; q < ND; q++) w[q] = buf[q][0];
        add_chunk<FMT, ND, NT, SCALED>(rows, ci, w, xs, stride, acc);
        #pragma unroll
        for (int q = 0; q < ND; q++)
            #pragma unroll
            for (int d = 0; d + 1 < D; d++) buf[q][d] = buf[q][d + 1];
    }
    #pragma unroll
    for (int q = 0; q < ND; q++)
        #pragma unroll
        for (int t = 0; t < NT; t++) acc[q][t] = warp_sum(acc[q][t]);
}

// The weight ring in shared memory (the one-token products, linear.cu
// linear_rows_fmt): each warp of ND rows keeps SMEM_RING_STAGES(ND) stages
// of its rows' chunks, stage k holding chunk lane + 32 k of every row for
// lane `lane` (ND x 32 16-byte slots), copied by cp.async (under the
// evict-first policy, as weight_chunk) so that the chunks in flight take
// no registers: 3 stages ahead of the sums for warps of 2 or 4 rows (the
// register ring holds 1), 7 for one row (as RING(1)).
// Each lane reads back only the slots it copied (its own cp.async groups),
// so no barrier is needed. The expert kernels keep the register ring: the
// smem ring halves the blocks an SM holds of them, and they were slower so
// (perf.md, twenty-second session).
#define SMEM_RING_STAGES(ND) ((ND) == 1 ? 8 : 4)
// The ring's bytes a warp (gpu/products.rs `ring_smem`).
#define SMEM_RING_WARP_BYTES(ND) (SMEM_RING_STAGES(ND) * (ND) * 32 * 16)

// Copy stage k of the rows into its slot (an empty group past the row's end).
template <int ND>
__device__ __forceinline__ void ring_copy_stage(const RowRef* rows, int nch, uint4* ring, int k,
                                                unsigned long long policy) {
    const int lane = threadIdx.x & 31;
    const int ci = lane + 32 * k;
    uint4* slot = ring + (k % SMEM_RING_STAGES(ND)) * ND * 32 + lane;
    if (ci < nch) {
        #pragma unroll
        for (int q = 0; q < ND; q++) copy_async16_stream(slot + q * 32, rows[q].chunks + ci, policy);
    }
    copy_async_commit();
}

// The first SMEM_RING_STAGES(ND) - 1 stages of the rows (issued before the
// wait for constant weights, as first_chunks).
template <int ND>
__device__ __forceinline__ void ring_first_stages(const RowRef* rows, int nch, uint4* ring) {
    const unsigned long long policy = stream_policy();
    #pragma unroll
    for (int k = 0; k + 1 < SMEM_RING_STAGES(ND); k++) ring_copy_stage<ND>(rows, nch, ring, k, policy);
}

// warp_dot_rows_tokens for one token with the chunks from the ring
// (ring_first_stages issued): the same terms in the same order, so the same bits.
template <int FMT, int ND, bool SCALED>
__device__ __forceinline__ void warp_dot_rows_ring(const RowRef* rows, int cols, const double* xs, uint4* ring,
                                                   double* out) {
    const int E = Fmt<FMT>::E, S = SMEM_RING_STAGES(ND);
    const int lane = threadIdx.x & 31;
    const int nch = cols / E;
    const unsigned long long policy = stream_policy();
    double acc[ND][1];
    #pragma unroll
    for (int q = 0; q < ND; q++) acc[q][0] = 0.0;
    int k = 0;
    for (int ci = lane; ci < nch; ci += 32, k++) {
        ring_copy_stage<ND>(rows, nch, ring, k + S - 1, policy);
        asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
        const uint4* slot = ring + (k % S) * ND * 32 + lane;
        uint4 w[ND];
        #pragma unroll
        for (int q = 0; q < ND; q++) w[q] = slot[q * 32];
        add_chunk<FMT, ND, 1, SCALED>(rows, ci, w, xs, 0, acc);
    }
    copy_async_wait_all();  // the empty groups past the end: the ring is free for the next rows
    #pragma unroll
    for (int q = 0; q < ND; q++) out[q] = warp_sum(acc[q][0]);
}

// The staged token's dots (warp_dot_rows_tokens for one token).
template <int FMT, int ND, bool SCALED>
__device__ __forceinline__ void warp_dot_rows(const RowRef* rows, int cols, const double* xs, uint4 (*buf)[RING(ND)],
                                              double* acc) {
    double a[ND][1];
    warp_dot_rows_tokens<FMT, ND, 1, SCALED>(rows, cols, xs, 0, buf, a);
    #pragma unroll
    for (int q = 0; q < ND; q++) acc[q] = a[q][0];
}

// The whole-row sequence every decode kernel runs: the rows' first chunks,
// the token staged, the barrier, the dots. Every thread of the block calls
// it with the same `scaled` (every row's Mat.scaled); a warp with no rows
// (`active` false) gets false and no sums.
template <int FMT, int ND>
__device__ __forceinline__ bool staged_row_dots(const RowRef* rows, bool active, bool scaled, const float* x,
                                                int cols, double* xs, double* acc) {
    uint4 buf[ND][RING(ND)];
    if (active) first_chunks<FMT, ND, 1>(rows, cols, buf);
    stage_row<Fmt<FMT>::E>(x, cols, scaled ? pow2d(Code<FMT>::P - 127) : 1.0, xs);
    __syncthreads();
    if (!active) return false;
    if (scaled) warp_dot_rows<FMT, ND, true>(rows, cols, xs, buf, acc);
    else warp_dot_rows<FMT, ND, false>(rows, cols, xs, buf, acc);
    return true;
}

// ---- The prefill's scaled-code products on the FP64 tensor cores ----
// One `mma.sync.aligned.m16n8k16.row.col.f64` computes each of its 16 x 8
// outputs d[m][n] as fma(a[m][15], b[15][n], ... fma(a[m][0], b[0][n],
// c[m][n])): the chain of f64 fmas over k in order from c, bit for bit
// (measured on the H200 over more than 10^6 outputs of each of the m8n8k4,
// m16n8k4, m16n8k8 and m16n8k16 shapes, 53-bit, f32, cancelling and
// subnormal operands included; docs/results/prepared_session25, perf.md
// "The gap", item 6), at twice the FP64 pipes' multiply-adds a second.
// add_chunk's partial of a chunk is that chain from zero over the chunk's
// values in column order, so one instruction (two for FP4's 32 values)
// gives 16 rows' partials of a chunk for 8 tokens with add_chunk's bits.
// The rest of warp_dot_rows_tokens' order stays: lane l's sum is the chain
// of fma(partial, factor, sum) over chunks l, l + 32, ... (a "leaf" here,
// its chunks walked in order), and the 32 leaves are added in warp_sum's
// tree. The block walks the leaves in bit-reversed order (0, 16, 8, 24, 4,
// ...), so that each of the tree's additions has both operands when its
// second leaf completes: a stack of subtrees (mma_leaf_push).
//
// A block's warps take one tile of MMA_ROWS rows each (a "round") for the
// block's MMA_TOKENS tokens, two instructions a chunk step sharing the
// rows' decoded codes (tokens 0-7 and 8-15), and walk the leaves together:
// the tokens' values of the next few leaves' chunks (a "stage": MmaStage)
// are staged as scaled f64 in shared memory while this stage's are read,
// one block barrier a stage.

// Tokens of a block and rows of a tile (gpu/products.rs `MMA_TOKENS`, `MMA_ROWS`), the block's threads
// (`MMA_BLOCK`) and the levels of a thread's stack of subtrees (mma_leaf_push).
#define MMA_TOKENS 16
#define MMA_ROWS 16
#define MMA_BLOCK 384
#define MMA_LEVELS 5
// Chunk steps (one chunk of the thread's two rows) each thread keeps loading ahead of the sums.
#define MMA_AHEAD 2

// Slabs of 16 values (of each token) a stage holds: 32 multiply-add
// instructions a warp between two barriers, whatever the rows' width.
#define MMA_STAGE_SLABS 16

// d = a . b + d for one 16 x 8 x 16 tile (PTX fragments: thread (g, q) =
// (lane / 4, lane % 4) holds a[i] = A[g + 8 (i % 2)][q + 4 (i / 2)],
// b[i] = B[q + 4 i][g] and d[i] = D[g + 8 (i / 2)][2 q + i % 2]).
__device__ __forceinline__ void mma_k16(double (&d)[4], const double (&a)[8], const double (&b)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, "
        "{%12,%13,%14,%15}, {%0,%1,%2,%3};"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]),
          "d"(b[1]), "d"(b[2]), "d"(b[3]));
}

// The same for a 16 x 8 x 8 tile (a[i], i < 4, and b[i], i < 2, as above):
// BF16 rows, whose 16-byte chunks hold 8 values.
__device__ __forceinline__ void mma_k8(double (&d)[4], const double (&a)[4], const double (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}

// The same for a 16 x 8 x 4 tile (a[i], i < 2, and b[0] as above): the
// indexer's dots, whose lanes hold 4 values each.
__device__ __forceinline__ void mma_k4(double (&d)[4], const double (&a)[2], double b) {
    asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(b));
}

// mi's 5 bits reversed (the leaf a warp's mi-th instruction takes), and
// its trailing 1 bits, in forms the compiler folds where mi is a constant
// (an unrolled loop's index), so that a stack of subtrees stays in
// registers (mma_leaf_push_regs).
__device__ __forceinline__ int leaf_brev5(int mi) {
    return ((mi & 1) << 4) | ((mi & 2) << 2) | (mi & 4) | ((mi & 8) >> 2) | ((mi & 16) >> 4);
}
// the same for 16 leaves (4 bits)
__device__ __forceinline__ int leaf_brev4(int mi) {
    return ((mi & 1) << 3) | ((mi & 2) << 1) | ((mi & 4) >> 1) | ((mi & 8) >> 3);
}
__device__ __forceinline__ int leaf_trailing_ones(int mi) {
    return !(mi & 1) ? 0 : !(mi & 2) ? 1 : !(mi & 4) ? 2 : !(mi & 8) ? 3 : !(mi & 16) ? 4 : 5;
}

// Leaf mi's sums x (the mi-th in bit-reversed order, leaf_brev5, or
// leaf_brev4 for L = 4 levels) onto a stack of complete subtrees in
// registers (mma_leaf_push's additions: each 1 bit of mi from the lowest
// adds that level's subtree, the first 0 bit stores x there). After leaf
// 2^L - 1, x is the whole tree (L = 5: warp_sum's).
template <int L>
__device__ __forceinline__ void mma_leaf_push_regs(double (&st)[L][4], double (&x)[4], int mi) {
    const int ones = leaf_trailing_ones(mi);
    #pragma unroll
    for (int lvl = 0; lvl < ones; lvl++)
        #pragma unroll
        for (int i = 0; i < 4; i++) x[i] = st[lvl][i] + x[i];
    if (ones < L)
        #pragma unroll
        for (int i = 0; i < 4; i++) st[ones][i] = x[i];
}

// A tensor-core step's values of a chunk (the instruction's k: 16, or a
// BF16 chunk's 8) and the steps a chunk takes (S: 2 for FP4's 32 values).
template <int FMT>
struct MmaK {
    static const int V = Fmt<FMT>::E < 16 ? Fmt<FMT>::E : 16, S = Fmt<FMT>::E / V;
};

// The A fragment of a BF16 chunk of this thread's rows g and g + 8 (words
// wl and wh; thread (g, q)): a[0], a[1] value q and a[2], a[3] value q + 4
// of the two rows as value * 2^-P (code_value's: the half at the top of
// its word, then S.E8.M7 to bits 31, 27..13).
__device__ __forceinline__ void mma_a_fragment_bf16(const u32 (&wl)[4], const u32 (&wh)[4], int q, double (&a)[4]) {
    const bool second = (q & 2) != 0;  // values q, q + 4 in words q / 2 and 2 + q / 2
    const int up = (q & 1) ? 0 : 16;   // the high half for odd values
    const u32 w[4] = {second ? wl[1] : wl[0], second ? wh[1] : wh[0], second ? wl[3] : wl[2], second ? wh[3] : wh[2]};
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        const int t = (int)(w[i] << up);
        a[i] = __hiloint2double((int)((u32)(t >> 3) & 0x8FFFE000u), 0);
    }
}

// The A fragment of half h of a chunk of this thread's rows g and g + 8
// (the chunk's words wl and wh; thread (g, q)): a[2 i] and a[2 i + 1] are
// value 16 h + q + 4 i of the two rows as value * 2^-P. KEEP_LOW: the
// fragment's low words are zero already (a value's f64 has a zero low
// word) and only the high words are written (mma_round_k's kept zeros).
template <int FMT, bool KEEP_LOW = false>
__device__ __forceinline__ void mma_a_fragment(const u32 (&wl)[4], const u32 (&wh)[4], int h, int q, double (&a)[8]) {
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        const u32 l = FMT == FMT_FP8 ? wl[i] : wl[2 * h + (i >> 1)], u = FMT == FMT_FP8 ? wh[i] : wh[2 * h + (i >> 1)];
        const int pos = FMT == FMT_FP8 ? q : q + 4 * (i & 1);
        a[2 * i] = __hiloint2double(word_code_hi<FMT>(l, pos), KEEP_LOW ? __double2loint(a[2 * i]) : 0);
        a[2 * i + 1] = __hiloint2double(word_code_hi<FMT>(u, pos), KEEP_LOW ? __double2loint(a[2 * i + 1]) : 0);
    }
}

// Leaf m's sums x (the m-th in bit-reversed order) onto the stack of
// complete subtrees, in shared memory (this thread's level l value i at
// st[(8 l + i) * MMA_BLOCK]): level l holds the sum of 2^l leaves; each 1
// bit of m from the lowest up adds the level's subtree and x (warp_sum's
// pair: the lanes differ in bit 4 - l), the first 0 bit stores x there
// (`ones`: m's trailing 1 bits). After leaf 31, x is the whole tree.
// `first`: the levels below it were added already (mma_round_k's leaf
// pairs).
__device__ __forceinline__ void mma_leaf_push(double* st, double (&x)[8], int ones, int first = 0) {
    for (int lvl = first; lvl < ones; lvl++) {
        #pragma unroll
        for (int i = 0; i < 8; i++) x[i] = st[(8 * lvl + i) * MMA_BLOCK] + x[i];
    }
    if (ones < MMA_LEVELS) {
        #pragma unroll
        for (int i = 0; i < 8; i++) st[(8 * ones + i) * MMA_BLOCK] = x[i];
    }
}

// A stage: L = MMA_STAGE_SLABS / (K S) leaves (K chunks a leaf, S slabs
// of V values a chunk: MmaK), leaves L G .. L G + L - 1 in bit-reversed
// order, of the block's MMA_TOKENS tokens: token t's row at rows[t], as
// f64 scaled by xscale (exact: a power of two). Leaf l's token t is the
// row of TS doubles at b + (16 l + t) TS (K S slabs and 2 of padding, so
// that a warp's reads of its B fragments take the fewest wavefronts);
// value c of slab j at V j + (c % 4) * Q + c / 4 (Q = V / 4), so that a
// thread's B fragment (values q, q + 4, ... of a slab) is 8 Q contiguous
// bytes. Item i is quarter i % Q of token (i / Q) % 16's slab i / (16 Q)
// of the stage (a float4 each); fetch copies this thread's items' f32
// values to raw (16 bytes an item, cp.async: no registers held while the
// stage before is summed), store waits for them and writes their f64s.
template <int FMT, int K>
struct MmaStage {
    static const int E = Fmt<FMT>::E, V = MmaK<FMT>::V, S = MmaK<FMT>::S, Q = V / 4, LOG2Q = Q == 4 ? 2 : 1;
    static const int KS = K * S, L = MMA_STAGE_SLABS / KS, TS = V * KS + 2;
    static const int LOG2L = L >= 16 ? 4 : L >= 8 ? 3 : L >= 4 ? 2 : L >= 2 ? 1 : 0;
    static const int DOUBLES = 16 * L * TS, N = 16 * Q * MMA_STAGE_SLABS, ITEMS = (N + MMA_BLOCK - 1) / MMA_BLOCK;
    static __device__ __forceinline__ void fetch(const float* const* rows, int stage, float* raw) {
        #pragma unroll
        for (int s = 0; s < ITEMS; s++) {
            const int i = threadIdx.x + s * MMA_BLOCK, r = i & (Q - 1), t = (i >> LOG2Q) & 15;
            const int l = (i >> (LOG2Q + 4)) / KS, j = (i >> (LOG2Q + 4)) % KS;
            const int v = __brev(stage * L + l) >> 27;
            if (i < N) copy_async16(raw + 4 * i, rows[t] + (v + 32 * (j / S)) * E + V * (j % S) + 4 * r);
        }
        copy_async_commit();
    }
    static __device__ __forceinline__ void store(double* b, double xscale, const float* raw) {
        copy_async_wait_all();
        #pragma unroll
        for (int s = 0; s < ITEMS; s++) {
            const int i = threadIdx.x + s * MMA_BLOCK, r = i & (Q - 1), t = (i >> LOG2Q) & 15;
            const int l = (i >> (LOG2Q + 4)) / KS, j = (i >> (LOG2Q + 4)) % KS;
            if (i < N) {
                const float4 v = *(const float4*)(raw + 4 * i);
                double* d = b + (16 * l + t) * TS + V * j + r;
                d[0] = (double)v.x * xscale;
                d[Q] = (double)v.y * xscale;
                d[2 * Q] = (double)v.z * xscale;
                d[3 * Q] = (double)v.w * xscale;
            }
        }
    }
};

// One round of the block (K chunks a leaf: cols / E / 32, a power of two
// with K S <= MMA_STAGE_SLABS): this warp's tile, if active, is 16
// scaled-code rows (FP8, FP4 or BF16; this thread's rows lo and hi are g and
// g + 8 of it) and the block's tokens (token t's f32 row at rows[t],
// mma_token_rows): out[4 u + i] is row g + 8 (i / 2)'s sum with token
// 8 u + 2 q + i % 2, with warp_dot_rows_tokens' bits. Every thread of the
// block calls it, active or not (the stages' barriers). `staged`: the
// round before staged this round's first stage (the same tokens' values);
// `more`: a round follows, whose first stage this one stages during its
// last (a stage's count a round, 32 / L, is even, so that first stage goes
// to the buffer it always takes). Dynamic smem: two
// stages, the threads' stacks (MMA_LEVELS * 8 doubles a thread, MMA_BLOCK
// apart), then the fetched values (MmaStage::N float4s). PAIRS: where
// K <= 2, leaf pairs (the stack's level 0 in registers, below).
template <int FMT, int K, bool PAIRS>
__device__ __forceinline__ void mma_round_k(bool active, const RowRef& lo, const RowRef& hi,
                                            const float* const* rows, bool staged, bool more, double (&out)[8]) {
    using Stage = MmaStage<FMT, K>;
    const int S = Stage::S, V = Stage::V, L = Stage::L, TS = Stage::TS, lane = threadIdx.x & 31, g = lane >> 2,
              q = lane & 3;
    double* bufs = xs_dyn;
    double* st = xs_dyn + 2 * Stage::DOUBLES + threadIdx.x;
    float* raw = (float*)(xs_dyn + 2 * Stage::DOUBLES + 8 * MMA_LEVELS * MMA_BLOCK);
    const double xscale = pow2d(Code<FMT>::P - 127);
    if (!staged) {
        Stage::fetch(rows, 0, raw);
        Stage::store(bufs, xscale, raw);
        __syncthreads();
    }
    uint4 ring[MMA_AHEAD][2];
    u32 sc[MMA_AHEAD][2];
    // Where K >= 4 the FP8 and FP4 A fragments keep their low words, zero
    // from here on (an empty asm hides the zeros), and each chunk writes
    // only the high words (mma_a_fragment's KEEP_LOW): else ptxas, at its
    // register cap, zeroes the low words and moves the high words into
    // place before every instruction. wo_a and wo_b ran faster this way,
    // wq_b (K = 2) and the experts' tile slower (perf.md, thirty-fourth and
    // thirty-fifth sessions).
    double kept[8];
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        kept[i] = 0.0;
        if (K >= 4) asm volatile("" : "+d"(kept[i]));
    }
    // the rows' addresses held in registers where K <= 2: an empty asm
    // hides where they come from, so that ptxas, at its register cap, does
    // not rebuild them from the kernel's parameters at every load (an
    // LDC.64 and four address instructions a load). Not for more chunks a
    // lane: there ptxas then issues each load just before its sums instead
    // of a step ahead, and wo_a and wo_b (8 and 16) were slower so
    // (perf.md, thirtieth session).
    const uint4 *clo = lo.chunks, *chi = hi.chunks;
    const u8* slo = lo.scales;
    if (K <= 2) asm volatile("" : "+l"(clo), "+l"(chi), "+l"(slo));
    int lm = 0, lk = 0;  // the next step to load: leaf lm's lk-th chunk
    auto load = [&](uint4 (&c)[2], u32 (&s)[2]) {
        const int ci = (__brev(lm) >> 27) + 32 * lk;
        const bool in = lm < 32;
        c[0] = in ? (K <= 2 ? load_global16(clo + ci) : lo.chunks[ci]) : make_uint4(0, 0, 0, 0);
        c[1] = in ? (K <= 2 ? load_global16(chi + ci) : hi.chunks[ci]) : make_uint4(0, 0, 0, 0);
        // chunk_scale's: FP8's of the tile's one 128-row block (its 16 rows start at a multiple of 16:
        // gpu/products.rs `mma_smem`), FP4's of each row
        if (FMT == FMT_FP8) {
            s[0] = in ? (K <= 2 ? load_global32((const u32*)slo + (ci >> 3)) : chunk_scale<FMT>(lo, ci)) : 0u;
        } else if (FMT == FMT_FP4) {
            s[0] = in ? chunk_scale<FMT>(lo, ci) : 0u;
            s[1] = in ? chunk_scale<FMT>(hi, ci) : 0u;
        }
        if (++lk == K) lk = 0, lm++;
    };
    if (active) {
        #pragma unroll
        for (int d = 0; d + 1 < MMA_AHEAD; d++) load(ring[d], sc[d]);
    }
    for (int G = 0; G < 32 / L; G++) {
        const bool fetch = G + 1 < 32 / L || more;  // stage (G + 1) % (32 / L), into buffer (G + 1) % 2
        if (fetch) Stage::fetch(rows, (G + 1) % (32 / L), raw);
        if (active) {
            double even[8];
            #pragma unroll
            for (int l = 0; l < L; l++) {
                const int m = G * L + l;
                const double* b = bufs + (G & 1) * Stage::DOUBLES + 16 * l * TS + Stage::Q * q;
                double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
                #pragma unroll
                for (int k = 0; k < K; k++) {
                    const int slot = (l * K + k) % MMA_AHEAD;  // L K is a multiple of MMA_AHEAD
                    load(ring[(slot + MMA_AHEAD - 1) % MMA_AHEAD], sc[(slot + MMA_AHEAD - 1) % MMA_AHEAD]);
                    const u32 wl[4] = {ring[slot][0].x, ring[slot][0].y, ring[slot][0].z, ring[slot][0].w};
                    const u32 wh[4] = {ring[slot][1].x, ring[slot][1].y, ring[slot][1].z, ring[slot][1].w};
                    double p0[4] = {0.0, 0.0, 0.0, 0.0}, p1[4] = {0.0, 0.0, 0.0, 0.0};
                    if constexpr (V == 8) {  // BF16: one k8 step a chunk
                        double a[4];
                        mma_a_fragment_bf16(wl, wh, q, a);
                        const double* bj = b + V * k;
                        const double2 x0 = *(const double2*)(bj + g * TS), y0 = *(const double2*)(bj + (8 + g) * TS);
                        const double b0[2] = {x0.x, x0.y}, b1[2] = {y0.x, y0.y};
                        mma_k8(p0, a, b0);
                        mma_k8(p1, a, b1);
                    } else {
                        #pragma unroll
                        for (int h = 0; h < S; h++) {
                            double fresh[8];
                            double(&a)[8] = K >= 4 ? kept : fresh;
                            mma_a_fragment<FMT, K >= 4>(wl, wh, h, q, a);
                            const double* bj = b + V * (k * S + h);
                            const double2 x0 = *(const double2*)(bj + g * TS), x1 = *(const double2*)(bj + g * TS + 2);
                            const double2 y0 = *(const double2*)(bj + (8 + g) * TS);
                            const double2 y1 = *(const double2*)(bj + (8 + g) * TS + 2);
                            const double b0[4] = {x0.x, x0.y, x1.x, x1.y}, b1[4] = {y0.x, y0.y, y1.x, y1.y};
                            mma_k16(p0, a, b0);
                            mma_k16(p1, a, b1);
                        }
                    }
                    // chunk_factor's, of the scales loaded with the chunks (BF16's: 2^127)
                    const double fl = FMT == FMT_BF16 ? pow2d(127) : scale_factor<FMT>(sc[slot][0]);
                    const double fh = FMT != FMT_FP4 ? fl : scale_factor<FMT>(sc[slot][1]);
                    #pragma unroll
                    for (int i = 0; i < 4; i++) {
                        acc[i] = fma(p0[i], i < 2 ? fl : fh, acc[i]);
                        acc[4 + i] = fma(p1[i], i < 2 ? fl : fh, acc[4 + i]);
                    }
                }
                // m's trailing 1 bits: l's, known here, but for the stage's last leaf
                const int ones = l + 1 < L ? __ffs(~l) - 1 : Stage::LOG2L + __ffs(~G) - 1;
                // Leaf pairs (PAIRS, where K <= 2: a stage's L >= 4 leaves): the
                // stack's level 0 in registers, an even leaf kept in `even` and
                // the next leaf (odd, in the same stage) adding it as
                // mma_leaf_push would (level 0's sum, then the levels above):
                // the same tree. wq_b's loop (K = 2) takes 58.3 instructions a
                // DMMA this way, 61.6 with its leaves through shared memory
                // (ptxas 13.0), yet its launches took longer (perf.md,
                // thirty-fifth session), so linear_mma_short goes without.
                if (PAIRS && K <= 2 && (l & 1) == 0) {
                    #pragma unroll
                    for (int i = 0; i < 8; i++) even[i] = acc[i];
                } else if (PAIRS && K <= 2) {
                    #pragma unroll
                    for (int i = 0; i < 8; i++) acc[i] = even[i] + acc[i];
                    mma_leaf_push(st, acc, ones, 1);
                } else {
                    mma_leaf_push(st, acc, ones);
                }
                if (m == 31) {
                    #pragma unroll
                    for (int i = 0; i < 8; i++) out[i] = acc[i];
                }
            }
        }
        if (fetch) Stage::store(bufs + ((G + 1) & 1) * Stage::DOUBLES, xscale, raw);
        __syncthreads();
    }
}

// Which rows a tensor-core kernel's rounds take, by chunks a lane: every
// count, 1 and 2 with leaf pairs (MMA_CHUNKS_ALL: linear_mma,
// linear_mma_bf16), or only 1 and 2, without (MMA_CHUNKS_FEW:
// linear_mma_short). The host launches linear_mma for rows of 4 or more
// chunks a lane only, yet it keeps the short rows' rounds: as one kernel
// of every count it ran its long rows 1.2% faster than a kernel of the
// long rows alone, whose SASS ptxas laid out otherwise (Nsight Compute,
// perf.md, thirty-sixth session); and wq_b's rounds ran 9% faster in a
// kernel of their own without the leaf pairs.
#define MMA_CHUNKS_ALL 0
#define MMA_CHUNKS_FEW 1

// A round (mma_round_k) for rows of `cols`: cols / E / 32 chunks a lane,
// 1, 2, 4, 8 or 16, and at most 8 for FP4 (gpu/products.rs `mma_tile_smem`),
// of the counts CHUNKS names (the kernel is never launched for others).
template <int FMT, int CHUNKS>
__device__ __forceinline__ void mma_round(bool active, const RowRef& lo, const RowRef& hi, const float* const* rows,
                                          int cols, bool staged, bool more, double (&out)[8]) {
    const int k = cols / Fmt<FMT>::E / 32;
    if constexpr (CHUNKS == MMA_CHUNKS_FEW) {
        if (k == 1) mma_round_k<FMT, 1, false>(active, lo, hi, rows, staged, more, out);
        else mma_round_k<FMT, 2, false>(active, lo, hi, rows, staged, more, out);
    } else {
        switch (k) {
            case 1: mma_round_k<FMT, 1, true>(active, lo, hi, rows, staged, more, out); break;
            case 2: mma_round_k<FMT, 2, true>(active, lo, hi, rows, staged, more, out); break;
            case 4: mma_round_k<FMT, 4, true>(active, lo, hi, rows, staged, more, out); break;
            case 8: mma_round_k<FMT, 8, true>(active, lo, hi, rows, staged, more, out); break;
            default:
                mma_round_k<FMT, MMA_STAGE_SLABS / MmaK<FMT>::S, true>(active, lo, hi, rows, staged, more, out);
                break;
        }
    }
}

// Rounds a block takes over `tiles` tiles, its warps' tiles warps apart from
// tile first of the block, stride tiles a round for the grid.
__device__ __forceinline__ int mma_rounds(int tiles, int first, int stride) {
    return first < tiles ? (tiles - first + stride - 1) / stride : 0;
}

// ---- The experts' tile: groups of MMA_PAIRS pairs of one expert ----
// The prefill's routed experts take their own tile (moe.cu
// `expert_gate_up_mma`, `expert_down_mma`): a group's 8 pairs staged whole
// as f32 (their rows fit: at most 4096 values), no barrier between the
// warps' tiles, leaves in pairs (v, v + 16) side by side. An expert has few
// pairs (96 on average at 4096 tokens of DeepSeek-V4-Flash), which fill
// groups of 8 better than 16, and its FP4 rows amortize a chunk's loads
// over two instructions (measured against mma_round's 16 tokens: the
// twenty-sixth session, perf.md "Steps so far").

// Pairs of a group (the mma's n; gpu/products.rs `MMA_PAIRS`).
#define MMA_PAIRS 8

// W2's pairs (expert_down_mma), where their rows have at most
// MMA_WIDE_COLS values, are staged as f64, already scaled (gpu/products.rs
// `MMA_WIDE_COLS`): their 8 rows and the threads' stacks fit the shared
// memory the kernels opt in to, and the tile reads its B fragments as they
// go into the instruction. Other pairs are staged as f32, each value
// converted and scaled where the tile reads it: W1's and W3's (the hidden
// size: 4096 at DeepSeek-V4-Flash's widths, more than fits as f64; with
// the f64 path beside it, ptxas gave expert_gate_up_mma's f32 path other
// registers, and constant stack offsets made it slower: perf.md, twenty-ninth
// session), and longer rows of W2.
#define MMA_WIDE_COLS 2048

__device__ __forceinline__ bool mma_wide(int cols) { return cols <= MMA_WIDE_COLS; }

// Values between two staged tokens: the row and its padding (2 doubles, or
// 16 floats), so that a tile's 8 tokens' 16-byte reads of one slab take the
// fewest wavefronts.
__device__ __forceinline__ int mma_stride(int cols, bool wide) { return wide ? cols + 2 : cols + 16; }

// This thread's stack of subtrees (mma_pair_push), after the staged pairs.
__device__ __forceinline__ double* mma_pairs_stack(int cols, bool wide) {
    return (double*)((char*)xs_dyn + MMA_PAIRS * mma_stride(cols, wide) * (wide ? 8 : 4)) + threadIdx.x;
}

// Stage MMA_PAIRS rows of `cols` values (cols a multiple of 16, rows
// 16-byte aligned; token t's row at row(t), the last again past nt) in the
// dynamic shared memory for mma_tile_dots: token t at t * mma_stride(cols),
// value j of each 16 at position (j % 4) * 4 + j / 4 of its 16, so that a
// thread's B fragment (values q, q + 4, q + 8, q + 12 of a slab) is
// contiguous; as f64 times 2^(P - 127) (stage_row's scale) if `wide`,
// else as f32. Every thread of the block, then the barrier.
template <int FMT, class Row>
__device__ __forceinline__ void stage_mma_pairs(Row row, int cols, int nt, bool wide) {
    const int slabs = cols >> 4, stride = mma_stride(cols, wide);
    const double xscale = pow2d(Code<FMT>::P - 127);
    for (int i = threadIdx.x; i < MMA_PAIRS * slabs; i += blockDim.x) {
        const int t = i / slabs, s = i - t * slabs;
        const float4* src = (const float4*)(row(min(t, nt - 1)) + 16 * s);
        const float4 v0 = src[0], v1 = src[1], v2 = src[2], v3 = src[3];
        if (wide) {
            double2* dst = (double2*)(xs_dyn + (size_t)t * stride + 16 * s);
            const float v[4][4] = {{v0.x, v1.x, v2.x, v3.x}, {v0.y, v1.y, v2.y, v3.y},
                                   {v0.z, v1.z, v2.z, v3.z}, {v0.w, v1.w, v2.w, v3.w}};
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                dst[2 * r] = make_double2((double)v[r][0] * xscale, (double)v[r][1] * xscale);
                dst[2 * r + 1] = make_double2((double)v[r][2] * xscale, (double)v[r][3] * xscale);
            }
        } else {
            float4* dst = (float4*)((float*)xs_dyn + (size_t)t * stride + 16 * s);
            dst[0] = make_float4(v0.x, v1.x, v2.x, v3.x);
            dst[1] = make_float4(v0.y, v1.y, v2.y, v3.y);
            dst[2] = make_float4(v0.z, v1.z, v2.z, v3.z);
            dst[3] = make_float4(v0.w, v1.w, v2.w, v3.w);
        }
    }
    __syncthreads();
}

// A thread's B fragment of slab s (values q, q + 4, q + 8, q + 12 of its
// token g, scaled): from pairs staged as f64 (x: the token's row plus 4 q) ...
struct MmaPairsWide {
    const double* x;
    static __device__ __forceinline__ MmaPairsWide at(int cols) {
        const int lane = threadIdx.x & 31;
        return {xs_dyn + (lane >> 2) * mma_stride(cols, true) + 4 * (lane & 3)};
    }
    __device__ __forceinline__ void fragment(int s, double (&b)[4]) const {
        const double2 u = *(const double2*)(x + 16 * s), v = *(const double2*)(x + 16 * s + 2);
        b[0] = u.x;
        b[1] = u.y;
        b[2] = v.x;
        b[3] = v.y;
    }
};
// ... or as f32, converted and scaled here: v * 2^(P - 127) as the f64 of v
// with P - 127 added to its exponent field (an integer add, off the FP64
// pipes the instructions take). Exact for every finite nonzero v (as an f64
// it is normal, its exponent at most 1023 + 128, and P - 127 <= 895). A zero
// v becomes +-2^(P - 127 - 1023) instead of +-0: its product with any code
// (less than 2^(16 - 1023) as value * 2^-P) is below 2^-1076 and rounds to
// zero in the instruction's fma, which leaves a nonzero chain as it was and
// a zero one zero (of either sign: the partials then go into fma(p, f, acc)
// from acc = +0, where a zero's sign cannot show). An infinite or NaN v
// becomes a finite value, so such a token's sums come out finite and wrong
// where the DMUL kept them infinite or NaN.
template <int FMT>
struct MmaPairsF32 {
    const float* x;
    static __device__ __forceinline__ MmaPairsF32 at(int cols) {
        const int lane = threadIdx.x & 31;
        return {(const float*)xs_dyn + (size_t)(lane >> 2) * mma_stride(cols, false) + 4 * (lane & 3)};
    }
    static __device__ __forceinline__ double scaled(float v) {
        // BF16's codes come near 2^-768 as value * 2^-P, where a zero's product would not round away
        static_assert(FMT == FMT_FP8 || FMT == FMT_FP4, "scaled codes of FP8 or FP4 only");
        const double d = (double)v;
        return __hiloint2double(__double2hiint(d) + ((Code<FMT>::P - 127) << 20), __double2loint(d));
    }
    __device__ __forceinline__ void fragment(int s, double (&b)[4]) const {
        const float4 v = *(const float4*)(x + 16 * s);
        b[0] = scaled(v.x);
        b[1] = scaled(v.y);
        b[2] = scaled(v.z);
        b[3] = scaled(v.w);
    }
};

// Leaf pair m's sums x (leaves 2 m and 2 m + 1 already added: warp_sum's
// first pair, lanes v and v + 16) onto the stack of complete subtrees, in
// shared memory (this thread's level l value i at st[(4 l + i) * stride]):
// level l holds the sum of 2^l pairs; each 1 bit of m from the lowest up
// adds the level's subtree and x (warp_sum's pair: the lanes differ in bit
// 3 - l), the first 0 bit stores x there. After pair 15, x is the whole
// tree.
__device__ __forceinline__ void mma_pair_push(double* st, int stride, double (&x)[4], int m) {
    bool stored = false;
    #pragma unroll
    for (int lvl = 0; lvl < 4; lvl++) {
        const bool add = !stored && ((m >> lvl) & 1) != 0;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            if (add) x[i] = st[(4 * lvl + i) * stride] + x[i];
            else if (!stored) st[(4 * lvl + i) * stride] = x[i];
        }
        stored = stored || !add;
    }
}

// One chunk's partials for the tile's two rows of this thread (chunks cl
// and ch, chunk index ci; xb the staged pairs, MmaPairsWide or MmaPairsF32):
// p = the 16 rows' chains over the chunk's values from zero, for the 8
// tokens.
template <int FMT, class X>
__device__ __forceinline__ void mma_chunk(const uint4& cl, const uint4& ch, int ci, const X& xb, double (&p)[4]) {
    const int S = Fmt<FMT>::E / 16, q = threadIdx.x & 3;
    const u32 wl[4] = {cl.x, cl.y, cl.z, cl.w}, wh[4] = {ch.x, ch.y, ch.z, ch.w};
    #pragma unroll
    for (int i = 0; i < 4; i++) p[i] = 0.0;
    #pragma unroll
    for (int h = 0; h < S; h++) {
        double b[4];
        xb.fragment(ci * S + h, b);
        double a[8];
        mma_a_fragment<FMT>(wl, wh, h, q, a);
        mma_k16(p, a, b);
    }
}

// The tile's sums with K chunks a leaf (mma_tile_dots). Leaves go in
// pairs (2 m, 2 m + 1: lanes v and v + 16), their chunks side by side, so
// that each step has two independent instructions; the ring holds
// MMA_AHEAD steps of the pair's four chunks (rows lo and hi of each leaf),
// each loaded MMA_AHEAD - 1 steps before its sums. The k loop is unrolled
// whole, and the pairs' loop U times, so that every slot is known at
// compile time.
template <int FMT, int K, bool FIXED, class X>
__device__ __forceinline__ void mma_tile_dots_k(const RowRef& lo, const RowRef& hi, const X& xb, double* st,
                                                double (&out)[4]) {
    const int U = K >= MMA_AHEAD ? 1 : MMA_AHEAD / K;  // pairs an unrolled round
    uint4 ring[MMA_AHEAD][4];
    int lm = 0, lk = 0;  // the next step to load: pair lm's lk-th chunks
    auto load = [&](uint4 (&c)[4]) {
        const int ci = (__brev(2 * lm) >> 27) + 32 * lk;
        const bool in = lm < 16;
        c[0] = in ? lo.chunks[ci] : make_uint4(0, 0, 0, 0);
        c[1] = in ? hi.chunks[ci] : make_uint4(0, 0, 0, 0);
        c[2] = in ? lo.chunks[ci + 16] : make_uint4(0, 0, 0, 0);
        c[3] = in ? hi.chunks[ci + 16] : make_uint4(0, 0, 0, 0);
        if (++lk == K) lk = 0, lm++;
    };
    #pragma unroll
    for (int d = 0; d + 1 < MMA_AHEAD; d++) load(ring[d]);
    for (int m0 = 0; m0 < 16; m0 += U) {
        #pragma unroll
        for (int u = 0; u < U; u++) {
            const int m = m0 + u, v = __brev(2 * m) >> 27;
            double a0[4] = {0.0, 0.0, 0.0, 0.0}, a1[4] = {0.0, 0.0, 0.0, 0.0};
            #pragma unroll
            for (int k = 0; k < K; k++) {
                const int slot = (u * K + k) % MMA_AHEAD;
                load(ring[(slot + MMA_AHEAD - 1) % MMA_AHEAD]);
                const int ci = v + 32 * k;
                double p0[4], p1[4];
                mma_chunk<FMT>(ring[slot][0], ring[slot][1], ci, xb, p0);
                mma_chunk<FMT>(ring[slot][2], ring[slot][3], ci + 16, xb, p1);
                const double f0l = chunk_factor<FMT>(lo, ci), f0h = chunk_factor<FMT>(hi, ci);
                const double f1l = chunk_factor<FMT>(lo, ci + 16), f1h = chunk_factor<FMT>(hi, ci + 16);
                a0[0] = fma(p0[0], f0l, a0[0]);
                a0[1] = fma(p0[1], f0l, a0[1]);
                a0[2] = fma(p0[2], f0h, a0[2]);
                a0[3] = fma(p0[3], f0h, a0[3]);
                a1[0] = fma(p1[0], f1l, a1[0]);
                a1[1] = fma(p1[1], f1l, a1[1]);
                a1[2] = fma(p1[2], f1h, a1[2]);
                a1[3] = fma(p1[3], f1h, a1[3]);
            }
            #pragma unroll
            for (int i = 0; i < 4; i++) a0[i] = a0[i] + a1[i];
            mma_pair_push(st, FIXED ? MMA_BLOCK : blockDim.x, a0, m);
            if (m == 15) {
                #pragma unroll
                for (int i = 0; i < 4; i++) out[i] = a0[i];
            }
        }
    }
}

// One warp's tile of 16 scaled-code rows (FP8 or FP4; cols / E 32 times
// 1, 2, 4, 8 or 16: the chunks a lane, gpu/products.rs `expert_mma_smem`) and the
// 8 staged tokens (stage_mma_pairs; xb: MmaPairsWide or MmaPairsF32 at
// them): this thread's rows lo and hi are g and g + 8 of the tile, st its
// stack (mma_pair_push; blockDim.x doubles apart, or if FIXED, MMA_BLOCK:
// offsets known at compile time), and out[i] is row g + 8 (i / 2)'s sum
// with token 2 q + i % 2, with warp_dot_rows_tokens' bits.
template <int FMT, bool FIXED, class X>
__device__ __forceinline__ void mma_tile_dots(const RowRef& lo, const RowRef& hi, int cols, const X& xb, double* st,
                                              double (&out)[4]) {
    switch (cols / Fmt<FMT>::E / 32) {
        case 1: mma_tile_dots_k<FMT, 1, FIXED>(lo, hi, xb, st, out); break;
        case 2: mma_tile_dots_k<FMT, 2, FIXED>(lo, hi, xb, st, out); break;
        case 4: mma_tile_dots_k<FMT, 4, FIXED>(lo, hi, xb, st, out); break;
        case 8: mma_tile_dots_k<FMT, 8, FIXED>(lo, hi, xb, st, out); break;
        default: mma_tile_dots_k<FMT, 16, FIXED>(lo, hi, xb, st, out); break;
    }
}

// The tile on W2's pairs (expert_down_mma): staged as f64 where
// mma_wide(cols) (stage_mma_pairs with wide = mma_wide(cols)), and the
// stack's offsets known at compile time (MMA_BLOCK), which the f64 path
// needs to keep its registers (blockDim.x: 168 registers and 116/1348 bytes
// of spills under ptxas 13.0; MMA_BLOCK: 158 and none).
template <int FMT>
__device__ __forceinline__ void mma_tile_dots_down(const RowRef& lo, const RowRef& hi, int cols, double* st,
                                                   double (&out)[4]) {
    if (mma_wide(cols)) {  // at most MMA_WIDE_COLS: 4 chunks a lane for FP8, 2 for FP4
        const MmaPairsWide xb = MmaPairsWide::at(cols);
        switch (cols / Fmt<FMT>::E / 32) {
            case 1: mma_tile_dots_k<FMT, 1, true>(lo, hi, xb, st, out); break;
            case 2: mma_tile_dots_k<FMT, 2, true>(lo, hi, xb, st, out); break;
            default: mma_tile_dots_k<FMT, 4, true>(lo, hi, xb, st, out); break;
        }
        return;
    }
    mma_tile_dots<FMT, true>(lo, hi, cols, MmaPairsF32<FMT>::at(cols), st, out);
}

// The block's token rows for mma_round, in shared memory: rows[t] =
// row(t), the last again past nt. Every thread of the block calls it (a
// barrier), after the rounds of the rows before.
template <class Row>
__device__ __forceinline__ const float* const* mma_token_rows(Row row, int nt) {
    __shared__ const float* rows[MMA_TOKENS];
    if (threadIdx.x < MMA_TOKENS) rows[threadIdx.x] = row(min((int)threadIdx.x, nt - 1));
    __syncthreads();
    return rows;
}
