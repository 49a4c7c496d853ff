// Prototype, not part of the engine (not in kernels/, not compiled by memra): the FP4 products of
// perf.md "The gap", item 9, on mma.sync m16n8k32 s8, written in the sixteenth session (2026-11-30)
// to count its loop's SASS. Compiled as kernels/common.cuh followed by this file, NVRTC 13.0
// (compute_90, --std=c++17), ptxas 13.0 -arch=sm_90 -O3: 86 registers, no spills; the loop over 32
// chunks (16 rows x 32 values each, a warp) is 1370 instructions, 512 weights a thread: 2.68 a weight.
// Not run: its inputs (fragment-ordered codes, staged limbs) have no producer yet.

// Prototype (not part of the engine): FP4 x staged-limb products on mma.sync m16n8k32 s8,
// to count SASS instructions a weight. One warp: 16 rows x nch chunks of 32 values.
// codes: fragment-ordered FP4 (per 16-row tile and pair of chunks, lane l's 16 bytes);
// limbs: per chunk, lane l's B fragment (two s8x4 words: k 4t..4t+3 and 16+4t.. of column g);
// cexp: per chunk, the exponent that turns the limb sum into today's partial;
// scales: E8M0 per (row, chunk). Today's order: virtual lane v = c % 32 sums its chunks
// c = v, v + 32, ... into acc with fma(p, f, acc); thread t of a quad holds v = t, t + 4, ...

// the s8 magnitudes (2 x value: 0 1 2 3 4 6 8 12) by byte permutes of an 8-entry table
struct Tabs { u32 p0, p1; };
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 c) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// 8 FP4 codes of v (k order, nibble = S.mmm with mmm the magnitude's index) to the s8 magnitudes
// of all of them (all) and of the positive ones (pos; prmt's sign mode gives 0 where S is set, the
// table's bytes being below 128): the weights are 2 pos - all
__device__ __forceinline__ void dec8(const Tabs& tb, u32 v, u32* all, u32* pos) {
    const u32 hi = v >> 16;
    all[0] = prmt(tb.p0, tb.p1, v & 0x7777u);
    all[1] = prmt(tb.p0, tb.p1, hi & 0x7777u);
    pos[0] = prmt(tb.p0, tb.p1, v);
    pos[1] = prmt(tb.p0, tb.p1, hi);
}
// a constant the compiler keeps in a register (not rematerialized before each use)
__device__ __forceinline__ u32 opaque(u32 v) {
    asm volatile("{ .reg .u32 t; mov.u32 t, %%tid.x; shr.u32 t, t, 31; xor.b32 %0, %0, t; }" : "+r"(v));
    return v;
}

__device__ __forceinline__ void mma16832(const u32* a, int2 b, int* d) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

extern "C" __global__ void proto_fp4_limbs(const uint4* __restrict__ codes, const u8* __restrict__ scales,
                                           const int2* __restrict__ limbs_g, const int* __restrict__ cexp_g,
                                           int nch, float* __restrict__ out) {
    extern __shared__ int2 limbs[];  // nch * 32 int2, then nch ints
    int* cexp = (int*)(limbs + nch * 32);
    for (int i = threadIdx.x; i < nch * 32; i += blockDim.x) limbs[i] = limbs_g[i];
    for (int i = threadIdx.x; i < nch; i += blockDim.x) cexp[i] = cexp_g[i];
    __syncthreads();
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, tile = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const uint4* ct = codes + (size_t)tile * (nch / 2) * 32;
    const u8* s0 = scales + (size_t)(tile * 16 + g) * nch;
    const u8* s1 = s0 + 8 * nch;
    const double k0 = pow2d(16 * t);
    Tabs tb;
    tb.p0 = opaque(0x03020100u); tb.p1 = opaque(0x0c080604u);
    double acc0[8], acc1[8];
    #pragma unroll
    for (int i = 0; i < 8; i++) acc0[i] = acc1[i] = 0.0;
    for (int c0 = 0; c0 < nch; c0 += 32) {
        #pragma unroll
        for (int q = 0; q < 32; q += 4) {  // four chunks: each quad thread ends with one chunk's partial
            double r0[4], r1[4];
            #pragma unroll
            for (int u = 0; u < 4; u += 2) {
                const uint4 a = ct[((c0 + q + u) >> 1) * 32 + lane];
                #pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int c = c0 + q + u + h;
                    u32 all[4], pos[4];
                    dec8(tb, h ? a.z : a.x, all, pos);          // this thread's two words of the tile
                    dec8(tb, h ? a.w : a.y, all + 2, pos + 2);  // (the fragment order is fixed at upload)
                    const int2 b = limbs[c * 32 + lane];
                    int d[4] = {0, 0, 0, 0}, e[4] = {0, 0, 0, 0};
                    mma16832(pos, b, d);
                    mma16832(all, b, e);
                    #pragma unroll
                    for (int i = 0; i < 4; i++) d[i] = 2 * d[i] - e[i];
                    // two limbs in one s32 (|d| <= 32 * 12 * 128, so d0 + 256 d1 < 2^24), then its weight 2^(16 t)
                    r0[u + h] = (double)(d[0] + (d[1] << 8)) * k0;
                    r1[u + h] = (double)(d[2] + (d[3] << 8)) * k0;
                }
            }
            // reduce-scatter over the quad: thread t keeps chunk q + t's sums (exact: integers < 2^53)
            const bool hi2 = (t & 2) != 0, hi1 = (t & 1) != 0;
            #pragma unroll
            for (int i = 0; i < 2; i++) {
                const double k0v = hi2 ? r0[i + 2] : r0[i], s0v = hi2 ? r0[i] : r0[i + 2];
                const double k1v = hi2 ? r1[i + 2] : r1[i], s1v = hi2 ? r1[i] : r1[i + 2];
                r0[i] = k0v + __shfl_xor_sync(0xffffffffu, s0v, 2);
                r1[i] = k1v + __shfl_xor_sync(0xffffffffu, s1v, 2);
            }
            const double p0 = (hi1 ? r0[1] : r0[0]) + __shfl_xor_sync(0xffffffffu, hi1 ? r0[0] : r0[1], 1);
            const double p1 = (hi1 ? r1[1] : r1[0]) + __shfl_xor_sync(0xffffffffu, hi1 ? r1[0] : r1[1], 1);
            const int c = c0 + q + t;
            const double e = pow2d(cexp[c]);
            acc0[q >> 2] = fma(p0 * e, pow2d((int)s0[c]), acc0[q >> 2]);
            acc1[q >> 2] = fma(p1 * e, pow2d((int)s1[c]), acc1[q >> 2]);
        }
    }
    // (the butterfly over virtual lanes and the store are outside the loop)
    double a0 = 0.0, a1 = 0.0;
    #pragma unroll
    for (int i = 0; i < 8; i++) { a0 += acc0[i]; a1 += acc1[i]; }
    if (t == 0) { out[tile * 16 + g] = (float)a0; out[tile * 16 + g + 8] = (float)a1; }
}
