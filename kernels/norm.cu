// norm.cu — RMSNorm of rows: x * rsqrt(mean(x^2) + eps) [* w]   (CPU twin: cpu/ops/norm.rs)
// In f64, one rounding per output, as the CPU twin. grid (rows), block 256.
// In place allowed (x == y). Rows of a multiple of 4 values (16-byte
// aligned) are read as float4, up to eight per thread in flight; each
// thread's sum of squares runs over its vectors in order, then block_sum.
// The weight's float4s a thread reads before the kernel waits for its
// inputs (its first NORM_W4 of the row, thread-strided as below: widths up
// to 4 * NORM_W4 * blockDim), so that they are in registers, not a memory
// round trip after the sum of squares.
#define NORM_W4 4
struct NormWeight {
    float4 g[NORM_W4];
};
__device__ __forceinline__ void norm_weight_early(const float* __restrict__ w, int width, NormWeight& nw) {
    if (!w || (width & 3) != 0 || (((size_t)w) & 15) != 0) return;
    const float4* w4 = (const float4*)w;
    #pragma unroll
    for (int u = 0; u < NORM_W4; u++) {
        const int i = threadIdx.x + u * blockDim.x;
        if (i < (width >> 2)) nw.g[u] = w4[i];
    }
}

// One output: x * r, times the weight g where there is one.
__device__ __forceinline__ float norm_one(float x, double r, float g, const float* w) {
    const double v = (double)x * r;
    return (float)(w ? v * (double)g : v);
}

// One row (all threads of the block).
// `nw`: the weight's first float4s as norm_weight_early read them.
__device__ __forceinline__ void rms_norm_row(const float* xr, float* yr, const float* __restrict__ w, int width,
                                             float eps, double* red, const NormWeight& nw) {
    const bool vec = (width & 3) == 0 && (((size_t)xr) & 15) == 0 && (((size_t)yr) & 15) == 0 &&
                     (((size_t)w) & 15) == 0;
    double ss = 0.0;
    if (vec) {
        const float4* x4 = (const float4*)xr;
        const int n4 = width >> 2;
        for (int base = threadIdx.x; base < n4; base += 8 * blockDim.x) {
            float4 v[8];
            load_vec8(x4, n4, base, v);
            #pragma unroll
            for (int u = 0; u < 8; u++) {
                if (base + u * blockDim.x < n4) {
                    ss = fma((double)v[u].x, (double)v[u].x, ss);
                    ss = fma((double)v[u].y, (double)v[u].y, ss);
                    ss = fma((double)v[u].z, (double)v[u].z, ss);
                    ss = fma((double)v[u].w, (double)v[u].w, ss);
                }
            }
        }
    } else {
        for (int i = threadIdx.x; i < width; i += blockDim.x) ss = fma((double)xr[i], (double)xr[i], ss);
    }
    ss = block_sum(ss, red);
    const double r = 1.0 / sqrt(ss / (double)width + (double)eps);
    if (vec) {
        const float4* x4 = (const float4*)xr;
        const float4* w4 = (const float4*)w;
        float4* y4 = (float4*)yr;
        const int n4 = width >> 2;
        // NORM_W4 vectors a thread at a time: the first round's weights are nw's
        for (int base = threadIdx.x; base < n4; base += NORM_W4 * blockDim.x) {
            float4 v[NORM_W4], g[NORM_W4];
            #pragma unroll
            for (int u = 0; u < NORM_W4; u++) {
                const int i = base + u * blockDim.x;
                if (i < n4) {
                    v[u] = x4[i];
                    g[u] = !w ? make_float4(1.0f, 1.0f, 1.0f, 1.0f) : base == (int)threadIdx.x ? nw.g[u] : w4[i];
                }
            }
            #pragma unroll
            for (int u = 0; u < NORM_W4; u++) {
                const int i = base + u * blockDim.x;
                if (i < n4) y4[i] = make_float4(norm_one(v[u].x, r, g[u].x, w), norm_one(v[u].y, r, g[u].y, w),
                                                norm_one(v[u].z, r, g[u].z, w), norm_one(v[u].w, r, g[u].w, w));
            }
        }
        return;
    }
    for (int i = threadIdx.x; i < width; i += blockDim.x) yr[i] = norm_one(xr[i], r, w ? w[i] : 1.0f, w);
}

extern "C" __global__ void rms_norm_f32(const float* x, float* y, const float* __restrict__ w, int width, float eps) {
    NormWeight nw;
    norm_weight_early(w, width, nw);
    await_inputs();
    __shared__ double red[32];
    rms_norm_row(x + (size_t)blockIdx.x * width, y + (size_t)blockIdx.x * width, w, width, eps, red, nw);
}

// rms_norm_f32 then rope_rows (forward) on each row, the same operations
// in the same order, for two sets of rows in one launch: blocks 0 ..
// rows - 1 take rows of x (n tokens x heads, weight w), the others rows of
// x2 (one a token, weight w2); token t at position pos0 + t. The weight
// and each thread's rotation (cos and sin of its pair's angle) are taken
// before the kernel waits for its inputs. In place. grid (rows + the
// tokens of x2), block 256.
extern "C" __global__ void rms_norm_rope(float* x, const float* __restrict__ w, int heads, int rows, float* x2,
                                         const float* __restrict__ w2, int width, float eps,
                                         const float* __restrict__ inv_freq, int npairs, int pos0) {
    const bool second = (int)blockIdx.x >= rows;
    const int row = second ? blockIdx.x - rows : blockIdx.x;
    const float* g = second ? w2 : w;
    NormWeight nw;
    norm_weight_early(g, width, nw);
    float c = 1.0f, s = 0.0f;
    const float p = (float)(pos0 + (second ? row : row / heads));
    if ((int)threadIdx.x < npairs) rope_angle(p, inv_freq[threadIdx.x], false, c, s);
    await_inputs();
    __shared__ double red[32];
    float* xr = (second ? x2 : x) + (size_t)row * width;
    rms_norm_row(xr, xr, g, width, eps, red, nw);
    __syncthreads();  // the normalized row, written by every thread, read back below
    float* r = xr + (width - 2 * npairs);
    if ((int)threadIdx.x < npairs) rotate_pair(&r[2 * threadIdx.x], &r[2 * threadIdx.x + 1], c, s);
    rope_pairs(r, p, inv_freq, blockDim.x, npairs, false);  // pairs past the block's first round
}

// rms_norm_rope with a warp a row, NORM_ROPE_WARPS rows a block (block 32
// NORM_ROPE_WARPS threads, grid ceil((rows + n2) / NORM_ROPE_WARPS); rows
// of x then n2 rows of x2, as rms_norm_rope's blocks), for rows of at most
// 512 values read as float4s whose rotated part starts at a float4
// (layer_ops.rs norm_rope_warps; 16-byte aligned rows and weights). Lane l
// does what threads l, l + 32, l + 64 and l + 96 of rms_norm_rope's block
// of 128 do: float4 q = l + 32 u (u < 4), its chain of squares from zero,
// each u's chains summed by warp_sum (warp u's butterfly), the four totals
// added from zero in u order (block_sum's), the same outputs rounded once;
// then the pairs of its own float4s rotated in registers (rotate_pair on
// the same normalized floats, with their angles taken before the wait).
// No barrier, one write a value: the same bits.
#define NORM_ROPE_WARPS 4

// A lane's part of rms_norm_rope_warps' row (float4s q = lane + 32 u, u <
// 4, of a row of n4 float4s whose rotated part starts at float4 r4): the
// weight's float4s (ones where there is none) and its pairs' rotations at
// position p, taken before the kernel waits for its inputs.
struct NormRopeLane {
    float4 gw[4];
    float c[4][2], s[4][2];
};
__device__ __forceinline__ void norm_rope_lane_early(const float* __restrict__ g, bool live, int n4, int r4, float p,
                                                     const float* __restrict__ inv_freq, NormRopeLane& e) {
    const int lane = threadIdx.x & 31;
    #pragma unroll
    for (int u = 0; u < 4; u++) {
        const int q = lane + 32 * u;
        e.gw[u] = g && live && q < n4 ? ((const float4*)g)[q] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        e.c[u][0] = e.c[u][1] = 1.0f;
        e.s[u][0] = e.s[u][1] = 0.0f;
        if (live && q < n4 && q >= r4) {
            const int i = 2 * (q - r4);
            rope_angle(p, inv_freq[i], false, e.c[u][0], e.s[u][0]);
            rope_angle(p, inv_freq[i + 1], false, e.c[u][1], e.s[u][1]);
        }
    }
}

// The row normalized and rotated in the lanes' registers (v: the lane's
// float4s, zeros past n4; every lane of the warp takes part): the sums and
// roundings of rms_norm_rope_warps, below.
__device__ __forceinline__ void norm_rope_lane(float4 (&v)[4], const float* g, int n4, int r4, int width, float eps,
                                               const NormRopeLane& e) {
    const int lane = threadIdx.x & 31;
    double part[4];
    #pragma unroll
    for (int u = 0; u < 4; u++) {
        double ss = 0.0;
        if (lane + 32 * u < n4) {
            ss = fma((double)v[u].x, (double)v[u].x, ss);
            ss = fma((double)v[u].y, (double)v[u].y, ss);
            ss = fma((double)v[u].z, (double)v[u].z, ss);
            ss = fma((double)v[u].w, (double)v[u].w, ss);
        }
        part[u] = warp_sum(ss);
    }
    double ss = 0.0;
    #pragma unroll
    for (int u = 0; u < 4; u++) ss += part[u];
    const double r = 1.0 / sqrt(ss / (double)width + (double)eps);
    #pragma unroll
    for (int u = 0; u < 4; u++) {
        const int q = lane + 32 * u;
        if (q < n4) {
            float a = norm_one(v[u].x, r, e.gw[u].x, g), b = norm_one(v[u].y, r, e.gw[u].y, g);
            float c = norm_one(v[u].z, r, e.gw[u].z, g), d = norm_one(v[u].w, r, e.gw[u].w, g);
            if (q >= r4) {
                rotate_pair(&a, &b, e.c[u][0], e.s[u][0]);
                rotate_pair(&c, &d, e.c[u][1], e.s[u][1]);
            }
            v[u] = make_float4(a, b, c, d);
        }
    }
}

// One row by one warp, in place (norm_rope_lane_early before the wait).
__device__ __forceinline__ void norm_rope_warp_row(float* row, const float* g, int n4, int r4, int width, float eps,
                                                   const NormRopeLane& e) {
    const int lane = threadIdx.x & 31;
    float4* x4 = (float4*)row;
    float4 v[4];
    #pragma unroll
    for (int u = 0; u < 4; u++) {
        const int q = lane + 32 * u;
        v[u] = q < n4 ? x4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    norm_rope_lane(v, g, n4, r4, width, eps, e);
    #pragma unroll
    for (int u = 0; u < 4; u++)
        if (lane + 32 * u < n4) x4[lane + 32 * u] = v[u];
}

extern "C" __global__ void __launch_bounds__(32 * NORM_ROPE_WARPS)
    rms_norm_rope_warps(float* x, const float* __restrict__ w, int heads, int rows, float* x2,
                        const float* __restrict__ w2, int n2, int width, float eps, const float* __restrict__ inv_freq,
                        int npairs, int pos0) {
    const int at = blockIdx.x * NORM_ROPE_WARPS + (threadIdx.x >> 5);
    const bool live = at < rows + n2, second = at >= rows;
    const int row = second ? at - rows : at, n4 = width >> 2, r4 = (width - 2 * npairs) >> 2;
    const float* g = second ? w2 : w;
    NormRopeLane e;
    norm_rope_lane_early(g, live, n4, r4, (float)(pos0 + (second ? row : row / heads)), inv_freq, e);
    await_inputs();
    if (!live) return;
    norm_rope_warp_row((second ? x2 : x) + (size_t)row * width, g, n4, r4, width, eps, e);
}

// The query's latent norm and the keys' norm and rotation of a decode step
// in one launch, each row as its own kernel forms it: blocks 0 .. rows - 1
// rms_norm_f32 (rows of x, weight w, width), the next blocks n2 rows of x2
// (weight w2, width2, token t at position pos0 + t), a warp a row as
// rms_norm_rope_warps (layer_ops.rs `norm_rope_warps` widths), and each
// key row's rotations (npairs (cos, sin) a token, rope_angle's) written to
// rot: the heads' rows at the same positions are left to the attention
// (attention_rows_pair_normed), which takes them from there. grid (rows +
// ceil(n2 / KEY_ROPE_WARPS)), block 256.
#define KEY_ROPE_WARPS 8
extern "C" __global__ void __launch_bounds__(32 * KEY_ROPE_WARPS)
    rms_norm_f32_key_rope(float* x, const float* __restrict__ w, int width, int rows, float* x2,
                          const float* __restrict__ w2, int n2, int width2, float eps,
                          const float* __restrict__ inv_freq, int npairs, int pos0, float* __restrict__ rot) {
    if ((int)blockIdx.x < rows) {
        NormWeight nw;
        norm_weight_early(w, width, nw);
        await_inputs();
        __shared__ double red[32];
        float* xr = x + (size_t)blockIdx.x * width;
        rms_norm_row(xr, xr, w, width, eps, red, nw);
        return;
    }
    const int row = (blockIdx.x - rows) * KEY_ROPE_WARPS + (threadIdx.x >> 5);
    const bool live = row < n2;
    const int n4 = width2 >> 2, r4 = (width2 - 2 * npairs) >> 2;
    NormRopeLane e;
    norm_rope_lane_early(w2, live, n4, r4, (float)(pos0 + row), inv_freq, e);
    await_inputs();
    if (!live) return;
    float4* rt = (float4*)(rot + (size_t)row * 2 * npairs);
    #pragma unroll
    for (int u = 0; u < 4; u++) {
        const int q = (threadIdx.x & 31) + 32 * u;
        if (q < n4 && q >= r4) rt[q - r4] = make_float4(e.c[u][0], e.s[u][0], e.c[u][1], e.s[u][1]);
    }
    norm_rope_warp_row(x2 + (size_t)row * width2, w2, n4, r4, width2, eps, e);
}
