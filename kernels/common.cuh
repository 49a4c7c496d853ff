// common.cuh — types and number-format helpers shared by every kernel.
//
// The engine compiles all kernels as one NVRTC translation unit: this
// header first, then each op file. No CUDA headers are needed.
//
// Weights are described by `Mat` (row-major [rows, cols], like nn.Linear):
//   FMT_F32, FMT_BF16: dense;
//   FMT_FP8: E4M3 bytes with one f32 scale per 128x128 tile;
//   FMT_FP4: E2M1 nibbles, two per byte along a row (low nibble first), one
//            E8M0 scale byte per 32 columns.
// Every op reduces in a fixed order that does not depend on how many tokens
// a launch holds, so chunked prefill and decode give identical bits.
//
// Faithful arithmetic: where the CPU oracle (cpu/ops) computes an op in f64
// and rounds once to f32, the kernel does the same (products of f32 values
// are exact in f64, so sums agree with the CPU up to f64 rounding and the
// final f32 rounding almost always agrees bit for bit); where the CPU uses
// f32 operations (RoPE, quantization) the kernel uses the same operations
// with contraction disabled. The two realizations then agree to the last
// bit nearly everywhere, and the fp8 variant's quantizers see the same
// inputs on both sides.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

#define FMT_F32 0
#define FMT_BF16 1
#define FMT_FP8 2
#define FMT_FP4 3

struct Mat {
    u64 data;     // element bytes
    u64 scales;   // FP8: f32 tile scales; FP4: E8M0 bytes; else 0
    int rows;
    int cols;
    int fmt;
    int scaled;   // 1: scaled-code products are exact for every chunk (see Code below)
};

// Programmatic dependent launch: the engine launches each kernel on its
// stream so that the kernel's blocks may start while the kernel before it
// is still running (gpu/device.rs `Gpu::launch`). Every kernel's threads
// call this before reading anything an earlier kernel wrote or writing
// anything it reads (constant weights may be read before): it waits until
// the kernel before has completed and its writes are visible, then lets
// the kernel after start its own blocks. Every thread of every kernel
// calls it, so no kernel completes before the one it follows (the
// kernels_compile test walks each kernel's PTX for a path that reaches
// `ret`, or a store to global memory, before the wait); a kernel launched
// without the attribute passes straight through.
__device__ __forceinline__ void await_inputs() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Thread block clusters (kernels declared with __cluster_dims__): a
// barrier over every thread of the cluster's blocks, in two halves (arrive
// releases this thread's writes, shared memory of the peers' included;
// wait acquires the others'), and a store into block `rank`'s shared
// memory at the address `p` has in this block's.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ void store_peer(double* p, int rank, double v) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f64 [%0], %1;" ::"r"(r), "d"(v) : "memory");
}

__device__ __forceinline__ float bf16_bits(u32 b) { return __uint_as_float(b << 16); }

// E4M3 code -> value (NaN for S.1111.111).
__device__ __forceinline__ float e4m3_decode(u32 v) {
    u32 e = (v >> 3) & 0xF, m = v & 7;
    float f;
    // m * 2^-9; m as a float by the 2^23 trick (exact), not a conversion instruction
    if (e == 0) f = (__uint_as_float(0x4B000000u | m) - 8388608.0f) * 0.001953125f;
    else if (e == 15 && m == 7) f = __uint_as_float(0x7fc00000u);
    else f = __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (v & 0x80) ? -f : f;
}

// E2M1 nibble -> value.
__device__ __forceinline__ float e2m1_decode(u32 b) {
    u32 e = (b >> 1) & 3, m = b & 1;
    float f = (e == 0) ? __uint_as_float(m ? 0x3F000000u : 0u) : __uint_as_float(((e + 126u) << 23) | (m << 22));
    return (b & 8) ? -f : f;
}

// E8M0 scale byte -> 2^(e-127).
__device__ __forceinline__ float e8m0_decode(u32 e) {
    if (e == 255) return __uint_as_float(0x7fc00000u);
    if (e == 0) return __uint_as_float(0x00400000u);
    return __uint_as_float(e << 23);
}

// Decode 8 consecutive weights W[r, k..k+8) (k % 8 == 0) to f32.
__device__ __forceinline__ void load8(const Mat& m, int r, int k, float* w) {
    if (m.fmt == FMT_BF16) {
        const uint4 v = *(const uint4*)((const u16*)m.data + (size_t)r * m.cols + k);
        w[0] = bf16_bits(v.x & 0xffff); w[1] = __uint_as_float(v.x & 0xffff0000u);
        w[2] = bf16_bits(v.y & 0xffff); w[3] = __uint_as_float(v.y & 0xffff0000u);
        w[4] = bf16_bits(v.z & 0xffff); w[5] = __uint_as_float(v.z & 0xffff0000u);
        w[6] = bf16_bits(v.w & 0xffff); w[7] = __uint_as_float(v.w & 0xffff0000u);
    } else if (m.fmt == FMT_FP8) {
        const uint2 v = *(const uint2*)((const u8*)m.data + (size_t)r * m.cols + k);
        const float s = ((const float*)m.scales)[(size_t)(r >> 7) * ((m.cols + 127) >> 7) + (k >> 7)];
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            w[j] = e4m3_decode((v.x >> (8 * j)) & 0xff) * s;
            w[4 + j] = e4m3_decode((v.y >> (8 * j)) & 0xff) * s;
        }
    } else if (m.fmt == FMT_FP4) {
        const u32 v = *(const u32*)((const u8*)m.data + ((size_t)r * m.cols + k) / 2);
        const float s = e8m0_decode(((const u8*)m.scales)[(size_t)r * (m.cols >> 5) + (k >> 5)]);
        #pragma unroll
        for (int j = 0; j < 8; j++) w[j] = e2m1_decode((v >> (4 * j)) & 0xf) * s;
    } else {
        const float4 a = *(const float4*)((const float*)m.data + (size_t)r * m.cols + k);
        const float4 b = *(const float4*)((const float*)m.data + (size_t)r * m.cols + k + 4);
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
        w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    }
}

// Weight rows are read in 16-byte chunks: 4 F32, 8 BF16, 16 FP8 or 32 FP4
// values. Lane l of the warp that owns a row takes chunks l, l + 32, ...;
// each chunk's products are summed into a partial (f64, from zero, in
// column order), the partial is added to the lane's sum, and the 32 lane
// sums meet in a fixed butterfly. That order depends only on the row
// length, never on how many tokens share the weights, and every kernel
// that reduces a weight row (prefill tiles, decode rows, the experts)
// keeps it.

template <int FMT> struct Fmt;
template <> struct Fmt<FMT_F32> { static const int E = 4; };
template <> struct Fmt<FMT_BF16> { static const int E = 8; };
template <> struct Fmt<FMT_FP8> { static const int E = 16; };
template <> struct Fmt<FMT_FP4> { static const int E = 32; };

// A weight row as the dot loop reads it: its chunks and its scales.
struct RowRef {
    const uint4* chunks;
    const u8* scales;
};

template <int FMT>
__device__ __forceinline__ RowRef row_ref(const Mat& m, int r) {
    RowRef rr;
    rr.chunks = (const uint4*)m.data + (size_t)r * (m.cols / Fmt<FMT>::E);
    if (FMT == FMT_FP8) rr.scales = (const u8*)((const float*)m.scales + (size_t)(r >> 7) * ((m.cols + 127) >> 7));
    else if (FMT == FMT_FP4) rr.scales = (const u8*)m.scales + (size_t)r * (m.cols >> 5);
    else rr.scales = 0;
    return rr;
}

// The scale of chunk ci (1 where there is none).
template <int FMT>
__device__ __forceinline__ float row_scale(const RowRef& rr, int ci) {
    if (FMT == FMT_FP8) return ((const float*)rr.scales)[ci >> 3];  // column ci*16, tile of 128
    if (FMT == FMT_FP4) return e8m0_decode(rr.scales[ci]);
    return 1.0f;
}

// Value j of a chunk with scale s, dequantized to f32 as the CPU does.
template <int FMT>
__device__ __forceinline__ float dequant_value(const uint4& c, int j, float s) {
    const u32 v[4] = {c.x, c.y, c.z, c.w};
    if (FMT == FMT_F32) return __uint_as_float(v[j]);
    if (FMT == FMT_BF16) return (j & 1) ? __uint_as_float(v[j >> 1] & 0xffff0000u) : bf16_bits(v[j >> 1] & 0xffff);
    if (FMT == FMT_FP8) return e4m3_decode((v[j >> 2] >> (8 * (j & 3))) & 0xff) * s;
    return e2m1_decode((v[j >> 3] >> (4 * (j & 7))) & 0xf) * s;
}

// Decode the 16-byte chunk `c` (chunk index ci of row r) into w[0..E).
template <int FMT>
__device__ __forceinline__ void decode_chunk(const Mat& m, int r, int ci, const uint4& c, float* w) {
    const float s = row_scale<FMT>(row_ref<FMT>(m, r), ci);
    #pragma unroll
    for (int j = 0; j < Fmt<FMT>::E; j++) w[j] = dequant_value<FMT>(c, j, s);
}

// Scaled-code products (the decode kernels, where Mat.scaled is set).
// A weight's code bits placed in the high word of an f64 (sign to the sign
// bit, exponent and mantissa just below the f64 exponent's top bits) make
// the f64 value * 2^-P exactly, the code's subnormals included (they land
// on f64 subnormals with the same factor): two integer instructions a
// weight instead of a decode, a scale multiply and a conversion. With the
// activation staged as x * 2^(P - 127), each product is value * x * 2^-127:
// exact, and for finite f32 x never subnormal nor infinite. A chunk's
// partial times scale * 2^127 (a power of two) is then the partial the
// dequantized weights give, to the bit: power-of-two scaling commutes with
// f64 rounding away from subnormals and overflow. Mat.scaled is set at
// upload where that holds for every chunk (gpu/weights.rs `codes_scale_exactly`:
// no Inf/NaN codes, FP8 scales powers of two in [2^-126, 2^119], FP4 scale
// bytes <= 252); other matrices take the same order on dequantized weights.
template <int FMT> struct Code;
template <> struct Code<FMT_F32> { static const int P = 896; };
template <> struct Code<FMT_BF16> { static const int P = 896; };
template <> struct Code<FMT_FP8> { static const int P = 1016; };
template <> struct Code<FMT_FP4> { static const int P = 1022; };

// 2^e as an f64 (-1022 <= e <= 1023).
__device__ __forceinline__ double pow2d(int e) { return __hiloint2double((e + 1023) << 20, 0); }

// Code `pos` of a 32-bit word of FP4 nibbles or FP8 bytes (the lowest
// first) as value * 2^-P; `pos` need not be known at compile time (the
// tensor-core products, rows.cuh `mma_round`).
template <int FMT>
__device__ __forceinline__ int word_code_hi(u32 word, int pos) {
    if (FMT == FMT_FP4) {  // nibble to the top, then S.EE.M to bits 31, 21..19
        const int t = (int)(word << (28 - 4 * pos));
        return (int)((u32)(t >> 9) & 0x80380000u);
    }
    // FMT_FP8: byte to the top, then S.EEEE.MMM to bits 31, 23..17
    const int t = (int)(word << (24 - 8 * pos));
    return (int)((u32)(t >> 7) & 0x80FE0000u);
}
template <int FMT>
__device__ __forceinline__ double word_code_value(u32 word, int pos) {
    return __hiloint2double(word_code_hi<FMT>(word, pos), 0);
}

// Value j of a chunk as value * 2^-P.
template <int FMT>
__device__ __forceinline__ double code_value(const uint4& c, int j) {
    const u32 v[4] = {c.x, c.y, c.z, c.w};
    if (FMT == FMT_FP4) return word_code_value<FMT_FP4>(v[j >> 3], j & 7);
    if (FMT == FMT_FP8) return word_code_value<FMT_FP8>(v[j >> 2], j & 3);
    if (FMT == FMT_BF16) {  // half to the top, then S.E8.M7 to bits 31, 27..13
        const int t = (int)((j & 1) ? v[j >> 1] : v[j >> 1] << 16);
        return __hiloint2double((int)((u32)(t >> 3) & 0x8FFFE000u), 0);
    }
    const int t = (int)v[j];  // S.E8.M23 to bits 31, 27..0 and the low word's top three
    return __hiloint2double((int)((u32)(t >> 3) & 0x8FFFFFFFu), (int)(v[j] << 29));
}

// The stored scale of chunk ci of a scaled-code row (FP8: the f32 bits of
// its 128-column block's; FP4: its E8M0 byte), and the factor its
// scaled-code partial takes: scale * 2^127.
template <int FMT>
__device__ __forceinline__ u32 chunk_scale(const RowRef& rr, int ci) {
    return FMT == FMT_FP8 ? ((const u32*)rr.scales)[ci >> 3] : (u32)rr.scales[ci];
}
template <int FMT>
__device__ __forceinline__ double scale_factor(u32 scale) {
    return pow2d(FMT == FMT_FP8 ? (int)(scale >> 23) : (int)scale);  // 2^(E-127) * 2^127, 2^(e-127) * 2^127
}

// scale * 2^127 of chunk ci, the factor its scaled-code partial takes.
template <int FMT>
__device__ __forceinline__ double chunk_factor(const RowRef& rr, int ci) {
    if (FMT == FMT_FP8 || FMT == FMT_FP4) return scale_factor<FMT>(chunk_scale<FMT>(rr, ci));
    return pow2d(127);
}

// The shared-state-space address of a generic pointer into shared memory,
// as cp.async takes it.
__device__ __forceinline__ unsigned shared_address(const void* p) {
    unsigned a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
// Asynchronous 4-byte copy from global to shared memory (cp.async; the
// copy bypasses registers). Each thread's copies since its last commit
// form a group; copy_async_wait_all waits for all of this thread's groups,
// and a barrier after it makes every thread's copies visible to the block.
__device__ __forceinline__ void copy_async4(float* dst, const float* src) {
    const unsigned a = shared_address(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(a), "l"(src) : "memory");
}
// The same for 16 bytes (both addresses 16-byte aligned; .cg: through L2
// only, as nothing else in the block reads them from L1).
__device__ __forceinline__ void copy_async16(float* dst, const float* src) {
    const unsigned a = shared_address(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(src) : "memory");
}
// Weights a decode step reads once (the one-token products' rows, the
// LM head's, the experts'; the kernels are gpu/mod.rs
// `weight_streaming_kernels`): loaded under an L2 policy that evicts them
// first, so that the ~2 GB a step streams does not push out of L2 what its
// latency-bound kernels read again (the caches' rows, the activations and
// partial sums between kernels, the routing). Each loop forms the policy
// once, ahead of its loads (perf.md, fifty-second session: 0.03-0.06 ms a
// step less at 1k).
__device__ __forceinline__ unsigned long long stream_policy() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ void copy_async16_stream(void* dst, const void* src, unsigned long long policy) {
    const unsigned a = shared_address(dst);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(a), "l"(src),
                 "l"(policy)
                 : "memory");
}
__device__ __forceinline__ uint4 load_stream16(const uint4* p, unsigned long long policy) {
    uint4 v;
    asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(policy));
    return v;
}
// Plain global loads through a pointer whose origin an empty asm hides
// (rows.cuh mma_round_k), which the compiler would otherwise read through
// generic loads.
__device__ __forceinline__ uint4 load_global16(const uint4* p) {
    uint4 v;
    asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ u32 load_global32(const u32* p) {
    u32 v;
    asm("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Sum of one f64 per lane over the warp, every lane getting it (a fixed
// butterfly: the same bits on every lane and every run).
__device__ __forceinline__ double warp_sum(double v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One step of warp_sums32: of the 2 O values v[0 .. 2 O), the lane keeps
// the half its bit O selects and adds the partner's (lane ^ O) same half,
// into v[0 .. O).
template <int O>
__device__ __forceinline__ void reduce_scatter_step(double* v) {
    const bool hi = (threadIdx.x & O) != 0;
    #pragma unroll
    for (int i = 0; i < O; i++) {
        const double lo_half = v[i], hi_half = v[i + O];
        const double keep = hi ? hi_half : lo_half, send = hi ? lo_half : hi_half;
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}

// warp_sum of 32 values a lane at once, as a reduce-scatter (steps at
// O = 16, 8, 4, 2, 1). The pairs and their order are warp_sum's, so each
// total has warp_sum's bits, with 31 shuffles in place of 160. Lane l is
// left with the total of value l (returned).
__device__ __forceinline__ double warp_sums32(double (&v)[32]) {
    reduce_scatter_step<16>(v);
    reduce_scatter_step<8>(v);
    reduce_scatter_step<4>(v);
    reduce_scatter_step<2>(v);
    reduce_scatter_step<1>(v);
    return v[0];
}

// Eight 16-byte loads in flight: v[u] = x4[base + u * blockDim.x] for
// those below n4 (the others are left as they are).
__device__ __forceinline__ void load_vec8(const float4* x4, int n4, int base, float4* v) {
    #pragma unroll
    for (int u = 0; u < 8; u++) {
        const int i = base + u * blockDim.x;
        if (i < n4) v[u] = x4[i];
    }
}

// The dynamic shared memory kernels stage rows in (the whole-row products
// of rows.cuh, hc.cu's norms; one declaration for the translation unit).
extern __shared__ __align__(16) double xs_dyn[];

// Fixed-order block sum of one value per thread (blockDim.x a multiple of 32,
// at most 1024). `red` holds 32 doubles of shared memory. All threads get it.
__device__ __forceinline__ double block_sum(double v, double* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double t = 0.0;
    const int nw = blockDim.x >> 5;
    for (int i = 0; i < nw; i++) t += red[i];
    __syncthreads();
    return t;
}

// Block maximum of one value per thread (float or double; blockDim.x a
// multiple of 32, at most 1024). `red` holds 32 values of shared memory.
// All threads get it.
template <class T>
__device__ __forceinline__ T block_max(T v, T* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    T t = red[0];
    const int nw = blockDim.x >> 5;
    for (int i = 1; i < nw; i++) t = fmax(t, red[i]);
    __syncthreads();
    return t;
}

// RoPE rotation of one pair with the CPU's f32 operations (no contraction).
__device__ __forceinline__ void rotate_pair(float* a, float* b, float c, float s) {
    const float x = *a, y = *b;
    *a = __fsub_rn(__fmul_rn(x, c), __fmul_rn(y, s));
    *b = __fadd_rn(__fmul_rn(y, c), __fmul_rn(x, s));
}

// The rotation of the pair with inverse frequency f at position p: the
// angle in f32 (p * f), cos/sin in double of that angle (rope.cu).
__device__ __forceinline__ void rope_angle(float p, float f, bool inverse, float& c, float& s) {
    const float ang = __fmul_rn(p, f);
    c = (float)cos((double)ang);
    s = (float)sin((double)ang);
    if (inverse) s = -s;
}

// RoPE of pairs i0 .. i1 - 1 of one row's rotated part r at position p
// (pair i by thread i - i0, then i - i0 - blockDim, ...).
__device__ __forceinline__ void rope_pairs(float* r, float p, const float* __restrict__ inv_freq, int i0, int i1,
                                           bool inverse) {
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        float c, s;
        rope_angle(p, inv_freq[i], inverse, c, s);
        rotate_pair(&r[2 * i], &r[2 * i + 1], c, s);
    }
}

// 2^ceil(log2(amax / maxcode)), as the UE8M0 reference computes it.
__device__ __forceinline__ float pow2_scale(float amax, float maxcode) {
    const u32 b = __float_as_uint(amax / maxcode);
    int e = (b >> 23) & 0xff;
    if (e == 0) return __uint_as_float(1u << 23);
    if (b & 0x7fffff) e += 1;
    e = e < 1 ? 1 : (e > 254 ? 254 : e);
    return __uint_as_float((u32)e << 23);
}

// Round to the nearest E4M3 value, ties to even (|x| <= 448 given).
__device__ __forceinline__ float e4m3_round(float x) {
    const float a = fabsf(x);
    float q;
    if (a < 0.015625f) {
        q = rintf(a * 512.f) * 0.001953125f;
    } else {
        int e;
        frexpf(a, &e);
        const float step = ldexpf(1.f, e - 4);
        q = fminf(rintf(a / step) * step, 448.f);
    }
    return copysignf(q, x);
}

// Round to the nearest E2M1 value, ties to even (|x| <= 6 given).
__device__ __forceinline__ float e2m1_round(float x) {
    const float a = fabsf(x);
    float q;
    if (a < 1.f) {
        q = rintf(a * 2.f) * 0.5f;
    } else {
        int e;
        frexpf(a, &e);
        const float step = ldexpf(1.f, e - 2);
        q = fminf(rintf(a / step) * step, 6.f);
    }
    return copysignf(q, x);
}
