// moe_tensor.cu — the routed experts' products on the BF16 tensor cores
//   (the `tensor` expert sums, gpu/forward.rs `ProductSums::Tensor`; CPU twin:
//   cpu/ops/moe.rs, whose exact sums these approximate inside the band,
//   gates/src/band.rs `Realization::GpuTensorExperts`)
//
// For layers whose routed experts are all FP4 with rows a multiple of
// LIMB_K long. Every other product of the engine keeps the f64 sums.
//
// Arithmetic (the same for every token count, so chunked prefill and decode
// give the same bits):
// - An activation x (f32) is three BF16 limbs, hi = rn(x), mid = rn(x - hi),
//   lo = rn(x - hi - mid) (`split4`): their sum is x for every finite x
//   whose limbs stay normal.
// - A weight is its E2M1 value times its chunk's E8M0 scale, a BF16 exactly
//   (two significant bits; `limb_tables` and `fp4_bf16x8`).
// - A row's dot with one limb is a chain of `mma.m16n8k16` BF16 products
//   accumulated in f32, from zero, one K step of 16 after another in the
//   order `limb_pos` fixes (thread q of a tile's rows holds the block's
//   chunk q of 32 columns; step s takes its columns 4s .. 4s + 3).
// - K is cut into 4, 2 or 1 parts (`limb_parts`), each part's chains from
//   zero; a part's value is rn_f32((f64(d_hi) + f64(d_mid)) + f64(d_lo))
//   (`limb_sum`), and the output is -0 + v_0 + v_1 + ... in f32.
// One token (decode, `expert_gate_up_bf16`, `expert_down_bf16`) puts its
// three limbs on the instruction's columns 0, 1, 2; groups of up to
// LIMB_TOKENS pairs of one expert (prefill, the `_groups` kernels) put the
// tokens on the columns, one instruction a limb. Each output element of the
// instruction depends only on its row of A, its column of B and its
// accumulator, so both give the same bits.

#define LIMB_K 128       // a K block: 4 chunks of 32 FP4 values a row, one a thread
#define LIMB_PAD 16      // bf16 after each staged limb row: rows 32 bytes apart mod 128
#define LIMB_TOKENS 16   // pairs of a prefill group: two of the instruction's n
#define LIMB_STAGES 3    // the prefill kernels' staged K blocks
#define LIMB_WARPS 4     // warps of a block, a tile (decode) or two (prefill) each

extern __shared__ __align__(16) uint4 limb_smem[];

// Logical column k = LIMB_K b + 32 q + 4 s + i (q, i < 4, s < 8) of a row
// of limbs is stored at LIMB_K b + 16 s + 4 q + i, so that a thread's four
// columns of a step are one 8-byte word.
__device__ __forceinline__ int limb_pos(int k) {
    const int b = k & ~(LIMB_K - 1), r = k & (LIMB_K - 1);
    return b + ((r >> 2) & 7) * 16 + (r >> 5) * 4 + (r & 3);
}

__device__ __forceinline__ u32 bf16x2_rn(float lo_half, float hi_half) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi_half), "f"(lo_half));
    return r;
}

// Four f32 values to their three limbs, each an 8-byte word of four bf16.
__device__ __forceinline__ void split4(float4 v, uint2 (&l)[3]) {
    float a[4] = {v.x, v.y, v.z, v.w};
    #pragma unroll
    for (int L = 0; L < 3; L++) {
        const u32 p0 = bf16x2_rn(a[0], a[1]), p1 = bf16x2_rn(a[2], a[3]);
        l[L] = make_uint2(p0, p1);
        a[0] = __fsub_rn(a[0], __uint_as_float(p0 << 16));
        a[1] = __fsub_rn(a[1], __uint_as_float(p0 & 0xffff0000u));
        a[2] = __fsub_rn(a[2], __uint_as_float(p1 << 16));
        a[3] = __fsub_rn(a[3], __uint_as_float(p1 & 0xffff0000u));
    }
}

// A row of K f32 values as limb rows at dst, dst + stride, dst + 2 stride
// (bf16 elements), each in limb_pos order; `threads` threads from `tid`,
// each with STAGE_LOADS of its float4s in flight at once.
#define STAGE_LOADS 4
__device__ __forceinline__ void stage_limb_row(const float* x, int K, u16* dst, int stride, int tid, int threads) {
    for (int k0 = 4 * tid; k0 < K; k0 += 4 * STAGE_LOADS * threads) {
        float4 v[STAGE_LOADS];
        #pragma unroll
        for (int u = 0; u < STAGE_LOADS; u++) {
            const int k = k0 + 4 * u * threads;
            if (k < K) v[u] = *(const float4*)(x + k);
        }
        #pragma unroll
        for (int u = 0; u < STAGE_LOADS; u++) {
            const int k = k0 + 4 * u * threads;
            if (k < K) {
                uint2 l[3];
                split4(v[u], l);
                const int p = limb_pos(k);
                #pragma unroll
                for (int L = 0; L < 3; L++) *(uint2*)(dst + (size_t)L * stride + p) = l[L];
            }
        }
    }
}

__device__ __forceinline__ float limb_sum(float hi, float mid, float lo) {
    return (float)(((double)hi + (double)mid) + (double)lo);
}

// Per E8M0 scale byte e: the low and the high bytes of the BF16 of each
// E2M1 magnitude (index 0 .. 7: 0, 0.5, 1, 1.5, 2, 3, 4, 6) times 2^(e-127),
// as e8m0_decode gives it (subnormal at e = 0, NaN at 255): x, y the low
// bytes of magnitudes 0-3 and 4-7, z, w the high bytes. Every such product
// has at most two significant bits, so the f32's top half is its BF16.
__device__ __forceinline__ void limb_tables(uint4* t) {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int e = threadIdx.x; e < 256; e += blockDim.x) {
        const float s = e8m0_decode((u32)e);
        u32 lo[2] = {0, 0}, hi[2] = {0, 0};
        #pragma unroll
        for (int m = 0; m < 8; m++) {
            const u32 b = __float_as_uint(__fmul_rn(mag[m], s)) >> 16;
            lo[m >> 2] |= (b & 0xff) << (8 * (m & 3));
            hi[m >> 2] |= (b >> 8) << (8 * (m & 3));
        }
        t[e] = make_uint4(lo[0], lo[1], hi[0], hi[1]);
    }
}

// The tables of every scale, built once a device (`limb_tables_fill`, one
// block of 256 threads, launched when the kernels load: gpu/device.rs
// `Gpu::open`). The expert kernels copy them into shared memory
// (`limb_tables_copy`, by cp.async, committed as one group) instead of
// building them in every block.
__device__ uint4 limb_tables_built[256];
extern "C" __global__ void limb_tables_fill() {
    await_inputs();
    limb_tables(limb_tables_built);
}
__device__ __forceinline__ void limb_tables_copy(uint4* t) {
    for (int e = threadIdx.x; e < 256; e += blockDim.x)
        copy_async16((float*)(t + e), (const float*)(limb_tables_built + e));
    copy_async_commit();
}

// Eight E2M1 codes (a word, the lowest nibble first) with their chunk's
// table to four words of two BF16 each (codes 0-1, 2-3, 4-5, 6-7, the lower
// code in the low half): the magnitudes' bytes by byte permutes, the signs
// (each nibble's bit 3) moved to the high bytes' top bits.
__device__ __forceinline__ void fp4_bf16x8(u32 c, const uint4& t, u32 (&p)[4]) {
    const u32 m = c & 0x77777777u, m2 = m >> 16, v = c << 4;
    const u32 lo03 = __byte_perm(t.x, t.y, m), lo47 = __byte_perm(t.x, t.y, m2);
    const u32 hi03 = __byte_perm(t.z, t.w, m) | (__byte_perm(v, c, 0x5140) & 0x80808080u);
    const u32 hi47 = __byte_perm(t.z, t.w, m2) | (__byte_perm(v, c, 0x7362) & 0x80808080u);
    p[0] = __byte_perm(lo03, hi03, 0x5140);
    p[1] = __byte_perm(lo03, hi03, 0x7362);
    p[2] = __byte_perm(lo47, hi47, 0x5140);
    p[3] = __byte_perm(lo47, hi47, 0x7362);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The weight rows of a tile, as its threads read them: thread q of a row
// takes, of each K block, the row's columns 32 q .. 32 q + 31 (chunk q of
// the block in limb_pos order), and gives them as BF16 pairs eight columns
// (two K steps) at a time: p[0], p[1] step 2 w's columns 4 s .. 4 s + 1 and
// 4 s + 2 .. 4 s + 3 (s = 2 w), p[2], p[3] step 2 w + 1's. A source holds
// what it needs beside the rows (`Fp4Limbs`: the tables), its Row type a
// thread's pointers into one row, Block<R> a thread's raw words of a K block
// for R rows (`load<STREAM>`: STREAM for a decode tile's, `limb_chunk`),
// Ready<R> what a block's conversion needs once.
__device__ __forceinline__ u32 word_of(const uint4& c, int w) {
    return w == 0 ? c.x : w == 1 ? c.y : w == 2 ? c.z : c.w;
}

// A source's 16 bytes of weight codes: for a decode tile (one token, each
// weight read once a step) under the evict-first policy (common.cuh
// stream_policy), for a prefill group (whose blocks read the same rows for
// other pairs or tokens) plainly, as rows.cuh weight_chunk. The scales
// load plainly in both, as the f64 sums' do.
template <bool STREAM>
__device__ __forceinline__ uint4 limb_chunk(const uint4* p) {
    return STREAM ? load_stream16(p, stream_policy()) : __ldg(p);
}

// FP4 rows (the routed experts): codes and E8M0 scale bytes, one scale a
// thread's chunk; BF16 by the per-scale tables (`limb_tables`). The matrices
// lie in row tiles (gpu/weights.rs `MatLayout::RowTiles`): rows 16 t ..
// 16 t + 15's K block b is 1 KiB of codes, row after row, then block b + 1's,
// and the scale bytes likewise (64 a tile's K block), so that a tile's load
// of 8 rows is 512 contiguous bytes, not 8 runs of 64.
struct Fp4Limbs {
    static constexpr int AHEAD = 4;  // K blocks a decode tile loads ahead
    static constexpr int TILE_STEP = 16 * (LIMB_K / 32);  // uint4s (and scale bytes) from a tile's K block to the next
    const uint4* tables;
    struct Row {
        const uint4* codes;
        const u8* scales;
    };
    template <int R>
    struct Block {
        uint4 c[R];
        u32 e[R];
    };
    template <int R>
    struct Ready {
        uint4 t[R];
    };
    __device__ __forceinline__ static Row row(const Mat& m, int r, int q) {
        const size_t at = (size_t)(r >> 4) * 16 * (m.cols >> 5) + (r & 15) * (LIMB_K / 32) + q;
        Row lr;
        lr.codes = (const uint4*)m.data + at;
        lr.scales = (const u8*)m.scales + at;
        return lr;
    }
    template <bool STREAM, int R>
    __device__ __forceinline__ void load(const Row (&rows)[R], int b, Block<R>& blk) const {
        #pragma unroll
        for (int r = 0; r < R; r++) {
            blk.c[r] = limb_chunk<STREAM>(rows[r].codes + TILE_STEP * b);
            blk.e[r] = __ldg(rows[r].scales + TILE_STEP * b);
        }
    }
    template <int R>
    __device__ __forceinline__ void ready(const Block<R>& blk, Ready<R>& rd) const {
        #pragma unroll
        for (int r = 0; r < R; r++) rd.t[r] = tables[blk.e[r]];
    }
    template <int R>
    __device__ __forceinline__ void bf16x8(const Block<R>& blk, const Ready<R>& rd, int r, int w, u32 (&p)[4]) const {
        fp4_bf16x8(word_of(blk.c[r], w), rd.t[r], p);
    }
};

// Four E4M3 codes (a word, the lowest byte first) times a power-of-two
// scale s as two words of two BF16 (codes 0-1, 2-3): each code to f16 and
// f32 exactly, times s exactly (gpu/weights.rs `codes_bf16_exactly`: the
// product stays a normal f32 of at most four significant bits), then BF16
// exactly.
__device__ __forceinline__ float f16_bits_f32(u32 h) {
    float f;
    asm("{ .reg .b16 t; cvt.u16.u32 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "r"(h));
    return f;
}
__device__ __forceinline__ void fp8_bf16x4(u32 c, float s, u32& p0, u32& p1) {
    u32 h01, h23;
    asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %2; cvt.rn.f16x2.e4m3x2 %0, lo; cvt.rn.f16x2.e4m3x2 %1, hi; }"
        : "=r"(h01), "=r"(h23)
        : "r"(c));
    p0 = bf16x2_rn(__fmul_rn(f16_bits_f32(h01 & 0xffff), s), __fmul_rn(f16_bits_f32(h01 >> 16), s));
    p1 = bf16x2_rn(__fmul_rn(f16_bits_f32(h23 & 0xffff), s), __fmul_rn(f16_bits_f32(h23 >> 16), s));
}

// FP8 rows (the attention's projections): E4M3 codes and one f32 scale a
// block of 128 rows and 128 columns, a power of two.
struct Fp8Limbs {
    static constexpr int AHEAD = 4;  // twice Fp4Limbs' bytes ahead (linear_bf16_one: 4 blocks an SM, 124 registers)
    struct Row {
        const uint4* codes;   // the row's chunk 2 q
        const float* scales;  // its 128-row block's scales
    };
    template <int R>
    struct Block {
        uint4 c[R][2];
        float s[R];
    };
    template <int R>
    struct Ready {};
    __device__ __forceinline__ static Row row(const Mat& m, int r, int q) {
        Row lr;
        lr.codes = (const uint4*)m.data + (size_t)r * (m.cols >> 4) + 2 * q;
        lr.scales = (const float*)m.scales + (size_t)(r >> 7) * ((m.cols + 127) >> 7);
        return lr;
    }
    template <bool STREAM, int R>
    __device__ __forceinline__ void load(const Row (&rows)[R], int b, Block<R>& blk) const {
        #pragma unroll
        for (int r = 0; r < R; r++) {
            blk.c[r][0] = limb_chunk<STREAM>(rows[r].codes + 8 * b);
            blk.c[r][1] = limb_chunk<STREAM>(rows[r].codes + 8 * b + 1);
            blk.s[r] = __ldg(rows[r].scales + b);
        }
    }
    template <int R>
    __device__ __forceinline__ void ready(const Block<R>&, Ready<R>&) const {}
    template <int R>
    __device__ __forceinline__ void bf16x8(const Block<R>& blk, const Ready<R>&, int r, int w, u32 (&p)[4]) const {
        const uint4& c = blk.c[r][w >> 1];
        fp8_bf16x4((w & 1) ? c.z : c.x, blk.s[r], p[0], p[1]);
        fp8_bf16x4((w & 1) ? c.w : c.y, blk.s[r], p[2], p[3]);
    }
};

// Decode: a warp's tile of 16 rows (rows[0] its row g, rows[1] row g + 8)
// against one token's limbs staged at xs (rows of K + LIMB_PAD bf16, limb L
// on column L), K blocks b_first .. b_first + nb - 1, accumulated into d
// (d[0], d[1]: row g's hi and mid on the lanes with q = 0, lo on q = 1's
// d[0]; d[2], d[3] row g + 8's). The ring's first W::AHEAD blocks are
// loaded before (`ring_first`), so that they come while the token is staged.
#define LIMB_DECODE_BLOCKS 5  // decode blocks an SM: at most 102 registers
template <class W>
using TileRing = typename W::template Block<2>[W::AHEAD];

template <class W>
__device__ __forceinline__ void ring_first(const W& src, const typename W::Row (&rows)[2], int b_first, int nb,
                                           TileRing<W>& ring) {
    #pragma unroll
    for (int j = 0; j < W::AHEAD; j++)
        if (j < nb) src.template load<true>(rows, b_first + j, ring[j]);
}

template <class W>
__device__ __forceinline__ void tile_one_token(const W& src, const typename W::Row (&rows)[2], int K, int b_first,
                                               int nb, const u16* xs, TileRing<W>& ring, float (&d)[4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const bool col = g < 3;
    const u16* xr = xs + (size_t)(col ? g : 0) * (K + LIMB_PAD) + 4 * q + LIMB_K * b_first;
    for (int b0 = 0; b0 < nb; b0 += W::AHEAD) {
        #pragma unroll
        for (int j = 0; j < W::AHEAD; j++) {
            const int b = b0 + j;
            if (b < nb) {
                const typename W::template Block<2> blk = ring[j];
                if (b + W::AHEAD < nb) src.template load<true>(rows, b_first + b + W::AHEAD, ring[j]);
                typename W::template Ready<2> rd;
                src.ready(blk, rd);
                #pragma unroll
                for (int w = 0; w < 4; w++) {
                    u32 p0[4], p1[4];
                    src.bf16x8(blk, rd, 0, w, p0);
                    src.bf16x8(blk, rd, 1, w, p1);
                    #pragma unroll
                    for (int h = 0; h < 2; h++) {
                        uint2 x = make_uint2(0, 0);
                        if (col) x = *(const uint2*)(xr + LIMB_K * b + 16 * (2 * w + h));
                        mma_bf16(d, p0[2 * h], p1[2 * h], p0[2 * h + 1], p1[2 * h + 1], x.x, x.y);
                    }
                }
            }
        }
    }
}

// The K parts of a row of K values (gpu/products.rs `limb_parts`): 4, 2 or
// 1, whichever first divides its K blocks. Each part's chains start from
// zero; a row's output is -0 + v_0 + v_1 + ... in f32, in part order, v_p
// the part's limb_sum. Decode gives each part a warp (more warps for one
// token's few tiles), prefill runs them one after another.
__device__ __forceinline__ int limb_parts(int K) {
    const int nb = K / LIMB_K;
    return nb % 4 == 0 ? 4 : nb % 2 == 0 ? 2 : 1;
}

// Decode: the warp's part of its tile (warp w of the block: tile w / parts,
// part w % parts): K blocks part nb .. part nb + nb - 1.
__device__ __forceinline__ int tile_part_blocks(int K, int& first) {
    const int parts = limb_parts(K), nb = K / LIMB_K / parts;
    first = ((threadIdx.x >> 5) % parts) * nb;
    return nb;
}

// Decode: the first loads of the warp's part (before the token is staged).
template <class W>
__device__ __forceinline__ void tile_parts_first(const W& src, const typename W::Row (&rows)[2], bool active, int K,
                                                 TileRing<W>& ring) {
    int first;
    const int nb = tile_part_blocks(K, first);
    if (active) ring_first(src, rows, first, nb, ring);
}

// Decode: the warp's part of its tile (its ring's first blocks loaded,
// `tile_parts_first`; the token staged at xs and the block synchronized)
// into rows v[0] (row g) and v[1] (row g + 8) of the block's part sums
// (`limb_part_sums`), on the lanes with q = 0, then the tile's sums over
// the parts in order, on the lanes with q = 0 of its first part's warp
// (returns whether this lane holds them).
template <class W>
__device__ __forceinline__ bool tile_parts(const W& src, const typename W::Row (&rows)[2], bool active, int K,
                                           const u16* xs, TileRing<W>& ring, float* part_sums, float (&v)[2]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int parts = limb_parts(K);
    int first;
    const int nb = tile_part_blocks(K, first);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (active) tile_one_token(src, rows, K, first, nb, xs, ring, acc);
    const float lo_a = __shfl_down_sync(0xffffffffu, acc[0], 1), lo_b = __shfl_down_sync(0xffffffffu, acc[2], 1);
    if (q == 0) {
        part_sums[warp * 16 + g] = limb_sum(acc[0], acc[1], lo_a);
        part_sums[warp * 16 + g + 8] = limb_sum(acc[2], acc[3], lo_b);
    }
    __syncthreads();
    if (first != 0 || q != 0 || !active) return false;
    v[0] = -0.0f;
    v[1] = -0.0f;
    for (int p = 0; p < parts; p++) {
        v[0] = __fadd_rn(v[0], part_sums[(warp + p) * 16 + g]);
        v[1] = __fadd_rn(v[1], part_sums[(warp + p) * 16 + g + 8]);
    }
    return true;
}

// The decode kernels' shared memory: the tables, then the token's limb
// rows, then the warps' part sums (16 floats a warp).
__device__ __forceinline__ u16* limb_rows_smem() { return (u16*)(limb_smem + 256); }
__device__ __forceinline__ float* limb_part_sums(int K) { return (float*)(limb_rows_smem() + 3 * (K + LIMB_PAD)); }

// grid (ceil(inter / (8 LIMB_WARPS / parts)), npairs), block 32 LIMB_WARPS,
// dynamic smem 4096 + 3 (d + LIMB_PAD) 2 + 64 LIMB_WARPS bytes
// (gpu/products.rs `limb_smem_one`). Block x's tile t takes intermediate
// rows i0 = 8 (x LIMB_WARPS / parts + t) .. i0 + 7: its rows g and g + 8
// are W1's and W3's row i0 + g.
extern "C" __global__ void __launch_bounds__(32 * LIMB_WARPS, LIMB_DECODE_BLOCKS) expert_gate_up_bf16(
    const Mat* __restrict__ w1s, const Mat* __restrict__ w3s, const float* __restrict__ x, int d,
    const int* __restrict__ idx, const double* __restrict__ wts, int k, const int* __restrict__ pairs, float lim,
    int inter, float* __restrict__ h) {
    limb_tables_copy(limb_smem);
    await_inputs();
    const int pair = pairs[blockIdx.y];
    const int e = idx[pair];
    const int g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3, parts = limb_parts(d);
    const int i0 = 8 * (blockIdx.x * (LIMB_WARPS / parts) + (threadIdx.x >> 5) / parts);
    const int i = min(i0 + g, inter - 1);
    const Fp4Limbs::Row rows[2] = {Fp4Limbs::row(w1s[e], i, q), Fp4Limbs::row(w3s[e], i, q)};
    const Fp4Limbs src{limb_smem};
    TileRing<Fp4Limbs> ring;
    tile_parts_first(src, rows, i0 < inter, d, ring);
    u16* xs = limb_rows_smem();
    stage_limb_row(x + (size_t)(pair / k) * d, d, xs, d + LIMB_PAD, threadIdx.x, blockDim.x);
    copy_async_wait_all();  // the tables
    __syncthreads();
    float v[2];
    if (tile_parts(src, rows, i0 < inter, d, xs, ring, limb_part_sums(d), v) && i0 + g < inter)
        h[(size_t)pair * inter + i0 + g] = swiglu(v[0], v[1], lim, wts[pair]);
}

// grid (ceil(d / (16 LIMB_WARPS / parts)), npairs), block 32 LIMB_WARPS,
// dynamic smem 4096 + 3 (inter + LIMB_PAD) 2 + 64 LIMB_WARPS bytes. Block
// x's tile t takes W2's rows j0 = 16 (x LIMB_WARPS / parts + t) .. j0 + 15.
extern "C" __global__ void __launch_bounds__(32 * LIMB_WARPS, LIMB_DECODE_BLOCKS) expert_down_bf16(
    const Mat* __restrict__ w2s, const float* __restrict__ h, int inter, const int* __restrict__ idx,
    const int* __restrict__ pairs, int d, float* __restrict__ out) {
    limb_tables_copy(limb_smem);
    await_inputs();
    const int pair = pairs[blockIdx.y];
    const Mat w2 = w2s[idx[pair]];
    const int g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3, parts = limb_parts(inter);
    const int j0 = 16 * (blockIdx.x * (LIMB_WARPS / parts) + (threadIdx.x >> 5) / parts);
    const Fp4Limbs::Row rows[2] = {Fp4Limbs::row(w2, min(j0 + g, d - 1), q),
                                   Fp4Limbs::row(w2, min(j0 + g + 8, d - 1), q)};
    const Fp4Limbs src{limb_smem};
    TileRing<Fp4Limbs> ring;
    tile_parts_first(src, rows, j0 < d, inter, ring);
    u16* xs = limb_rows_smem();
    stage_limb_row(h + (size_t)pair * inter, inter, xs, inter + LIMB_PAD, threadIdx.x, blockDim.x);
    copy_async_wait_all();  // the tables
    __syncthreads();
    float v[2];
    if (tile_parts(src, rows, j0 < d, inter, xs, ring, limb_part_sums(inter), v)) {
        if (j0 + g < d) out[(size_t)pair * d + j0 + g] = v[0];
        if (j0 + g + 8 < d) out[(size_t)pair * d + j0 + g + 8] = v[1];
    }
}

// Rows of f32 as limb rows: the first K values of row r of x (x_stride
// apart) to out + 3 K r (limbs hi, mid, lo, each K bf16 in limb_pos order).
// grid (rows), block 256.
extern "C" __global__ void limb_rows(const float* __restrict__ x, int K, int x_stride, u16* __restrict__ out) {
    await_inputs();
    const size_t r = blockIdx.x;
    stage_limb_row(x + r * x_stride, K, out + 3 * r * K, K, threadIdx.x, blockDim.x);
}

// Prefill: a group of up to LIMB_TOKENS pairs of one expert against a warp's
// two tiles of 16 rows (rows[2 t] its tile t's row g, rows[2 t + 1] its row
// g + 8). The group's limb rows (`limb_rows`' output; src(t) the first of
// token t's three, a group of fewer pairs staging its last again) come a K
// block at a time through LIMB_STAGES stages of shared memory, each limb L
// of token t a row of LIMB_K + LIMB_PAD bf16 at (L LIMB_TOKENS + t).
// acc[t][j][L]: tile t, tokens 8 j .. 8 j + 7, limb L.
#define LIMB_STAGE_ROWS (3 * LIMB_TOKENS)
#define LIMB_STAGE_ELEMS (LIMB_STAGE_ROWS * (LIMB_K + LIMB_PAD))
template <class Src>
__device__ __forceinline__ void stage_limb_block(Src src, int lstride, int b, u16* stage) {
    // 16 copies of 16 bytes a row
    for (int c = threadIdx.x; c < LIMB_STAGE_ROWS * 16; c += blockDim.x) {
        const int row = c >> 4, L = row / LIMB_TOKENS, t = row % LIMB_TOKENS;
        copy_async16((float*)(stage + row * (LIMB_K + LIMB_PAD) + 8 * (c & 15)),
                     (const float*)(src(t) + (size_t)L * lstride + LIMB_K * b + 8 * (c & 15)));
    }
}

// out[t][j][u]: the sums over the K parts (limb_parts), in part order,
// of tile t's rows g (u < 2) and g + 8 (u >= 2) for tokens 8 j + 2 q + (u & 1);
// lstride: the bf16 from one limb row of a token to its next.
template <class W, class Src>
__device__ __forceinline__ void tiles_group(const W& wsrc, const typename W::Row (&rows)[4], bool active, int K,
                                            Src src, int lstride, u16* stages, float (&out)[2][2][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int nb = K / LIMB_K, part_blocks = nb / limb_parts(K);
    float acc[2][2][3][4];
    #pragma unroll
    for (int t = 0; t < 2; t++)
        #pragma unroll
        for (int j = 0; j < 2; j++) {
            #pragma unroll
            for (int u = 0; u < 4; u++) out[t][j][u] = -0.0f;
            #pragma unroll
            for (int L = 0; L < 3; L++)
                #pragma unroll
                for (int u = 0; u < 4; u++) acc[t][j][L][u] = 0.0f;
        }
    #pragma unroll
    for (int s = 0; s < LIMB_STAGES - 1; s++) {
        if (s < nb) stage_limb_block(src, lstride, s, stages + s * LIMB_STAGE_ELEMS);
        copy_async_commit();
    }
    typename W::template Block<4> next;
    if (active) wsrc.template load<false>(rows, 0, next);
    for (int b = 0; b < nb; b++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(LIMB_STAGES - 2) : "memory");
        __syncthreads();
        if (b + LIMB_STAGES - 1 < nb)
            stage_limb_block(src, lstride, b + LIMB_STAGES - 1, stages + ((b + LIMB_STAGES - 1) % LIMB_STAGES) * LIMB_STAGE_ELEMS);
        copy_async_commit();
        const typename W::template Block<4> blk = next;
        if (!active) continue;
        if (b + 1 < nb) wsrc.template load<false>(rows, b + 1, next);
        const u16* st = stages + (b % LIMB_STAGES) * LIMB_STAGE_ELEMS + g * (LIMB_K + LIMB_PAD) + 4 * q;
        typename W::template Ready<4> rd;
        wsrc.ready(blk, rd);
        #pragma unroll
        for (int w = 0; w < 4; w++) {
            u32 p[4][4];
            #pragma unroll
            for (int r = 0; r < 4; r++) wsrc.bf16x8(blk, rd, r, w, p[r]);
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int s = 2 * w + hh;
                uint2 x[2][3];
                #pragma unroll
                for (int j = 0; j < 2; j++)
                    #pragma unroll
                    for (int L = 0; L < 3; L++)
                        x[j][L] = *(const uint2*)(st + (L * LIMB_TOKENS + 8 * j) * (LIMB_K + LIMB_PAD) + 16 * s);
                #pragma unroll
                for (int t = 0; t < 2; t++)
                    #pragma unroll
                    for (int j = 0; j < 2; j++)
                        #pragma unroll
                        for (int L = 0; L < 3; L++)
                            mma_bf16(acc[t][j][L], p[2 * t][2 * hh], p[2 * t + 1][2 * hh], p[2 * t][2 * hh + 1],
                                     p[2 * t + 1][2 * hh + 1], x[j][L].x, x[j][L].y);
            }
        }
        if ((b + 1) % part_blocks == 0) {
            #pragma unroll
            for (int t = 0; t < 2; t++)
                #pragma unroll
                for (int j = 0; j < 2; j++)
                    #pragma unroll
                    for (int u = 0; u < 4; u++) {
                        out[t][j][u] = __fadd_rn(out[t][j][u], limb_sum(acc[t][j][0][u], acc[t][j][1][u], acc[t][j][2][u]));
                        acc[t][j][0][u] = acc[t][j][1][u] = acc[t][j][2][u] = 0.0f;
                    }
        }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
}

// Each of a warp's sums (tiles_group's out, its tiles of 16 rows from j0)
// whose token c < nt and row r < rows, as store(c, r, v).
template <class Store>
__device__ __forceinline__ void for_group_sums(const float (&sums)[2][2][4], int j0, int rows, int nt, Store store) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    #pragma unroll
    for (int t = 0; t < 2; t++)
        #pragma unroll
        for (int j = 0; j < 2; j++)
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                const int c = 8 * j + 2 * q + (u & 1), r = j0 + 16 * t + g + 8 * (u >> 1);
                if (c < nt && r < rows) store(c, r, sums[t][j][u]);
            }
}

__device__ __forceinline__ u16* limb_stages_smem() { return (u16*)(limb_smem + 256); }

// grid (ceil(inter / (16 LIMB_WARPS)), min(ngroups, 65535)), block 32
// LIMB_WARPS, dynamic smem 4096 + LIMB_STAGES LIMB_STAGE_ELEMS 2 bytes.
// Warp w of block x takes intermediate rows i0 = 16 (x LIMB_WARPS + w) ..
// i0 + 15 as two tiles of 8 (W1's rows g, W3's g + 8, as the decode tile).
// xl: the tokens' limb rows (limb_rows of the d-wide input).
extern "C" __global__ void __launch_bounds__(32 * LIMB_WARPS) expert_gate_up_bf16_groups(
    const Mat* __restrict__ w1s, const Mat* __restrict__ w3s, const u16* __restrict__ xl, int d,
    const int* __restrict__ idx, const double* __restrict__ wts, int k, const int* __restrict__ pairs,
    const int* __restrict__ groups, int ngroups, float lim, int inter, float* __restrict__ h) {
    limb_tables_copy(limb_smem);
    await_inputs();
    copy_async_wait_all();  // the tables
    __syncthreads();
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int i0 = 16 * (blockIdx.x * LIMB_WARPS + (threadIdx.x >> 5));
    const bool active = i0 < inter;
    for (int y = blockIdx.y; y < ngroups; y += gridDim.y) {
        const int nt = groups[2 * y + 1];
        if (nt == 0) return;
        const int* tp = pairs + groups[2 * y];
        const int e = idx[tp[0]];
        Fp4Limbs::Row rows[4];
        #pragma unroll
        for (int t = 0; t < 2; t++) {
            const int i = min(i0 + 8 * t + g, inter - 1);
            rows[2 * t] = Fp4Limbs::row(w1s[e], i, q);
            rows[2 * t + 1] = Fp4Limbs::row(w3s[e], i, q);
        }
        float sums[2][2][4];
        tiles_group(Fp4Limbs{limb_smem}, rows, active, d,
                    [&](int t) { return xl + (size_t)(tp[min(t, nt - 1)] / k) * 3 * d; }, d, limb_stages_smem(), sums);
        if (!active) continue;
        #pragma unroll
        for (int t = 0; t < 2; t++) {
            const int i = i0 + 8 * t + g;
            #pragma unroll
            for (int j = 0; j < 2; j++)
                #pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int c = 8 * j + 2 * q + u;
                    if (c < nt && i < inter) {
                        const int pair = tp[c];
                        h[(size_t)pair * inter + i] = swiglu(sums[t][j][u], sums[t][j][2 + u], lim, wts[pair]);
                    }
                }
        }
    }
}

// grid (ceil(d / (32 LIMB_WARPS)), min(ngroups, 65535)), block 32
// LIMB_WARPS, dynamic smem as expert_gate_up_bf16_groups'. Warp w of block
// x takes W2's rows j0 = 32 (x LIMB_WARPS + w) .. j0 + 31 as two tiles of
// 16. hl: the pairs' limb rows (limb_rows of the inter-wide middles).
extern "C" __global__ void __launch_bounds__(32 * LIMB_WARPS) expert_down_bf16_groups(
    const Mat* __restrict__ w2s, const u16* __restrict__ hl, int inter, const int* __restrict__ idx,
    const int* __restrict__ pairs, const int* __restrict__ groups, int ngroups, int d, float* __restrict__ out) {
    limb_tables_copy(limb_smem);
    await_inputs();
    copy_async_wait_all();  // the tables
    __syncthreads();
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int j0 = 32 * (blockIdx.x * LIMB_WARPS + (threadIdx.x >> 5));
    const bool active = j0 < d;
    for (int y = blockIdx.y; y < ngroups; y += gridDim.y) {
        const int nt = groups[2 * y + 1];
        if (nt == 0) return;
        const int* tp = pairs + groups[2 * y];
        const Mat w2 = w2s[idx[tp[0]]];
        Fp4Limbs::Row rows[4];
        #pragma unroll
        for (int r = 0; r < 4; r++) rows[r] = Fp4Limbs::row(w2, min(j0 + 16 * (r >> 1) + 8 * (r & 1) + g, d - 1), q);
        float sums[2][2][4];
        tiles_group(Fp4Limbs{limb_smem}, rows, active, inter,
                    [&](int t) { return hl + (size_t)tp[min(t, nt - 1)] * 3 * inter; }, inter, limb_stages_smem(),
                    sums);
        if (active) for_group_sums(sums, j0, d, nt, [&](int c, int r, float v) { out[(size_t)tp[c] * d + r] = v; });
    }
}
