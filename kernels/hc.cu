// hc.cu — manifold-constrained hyper-connections   (CPU twin: cpu/ops/hc.rs)
//
// A site (hc_site, one launch for one token; hc_post where there is a post,
// hc_site_rows and hc_collapse_rows for several): the post of the block
// before it where there is one, x'_k = post_k * out + sum_j comb[j][k] x_j;
// the mixes m = fn . (x' / rms(x')) over the hc*d streams (as per-slice
// partials);
// then, in the last block of each token, pre = sigmoid(m*s0 + b) + eps, the
// collapsed input sum_j pre_j x'_j and the block's RMS norm of it (or, at
// the head, the final collapse of selected rows, normed or not).
// hc_sinkhorn (beside the block, on a second stream): post = 2 sigmoid(m*s1
// + b), comb = Sinkhorn(softmax_row(m*s2 + b) + eps); writes mix[t] =
// [pre(hc) | post(hc) | comb(hc*hc)] in f64.
// hc_post: the post alone (the end of a layer, and before hc_site_rows; the
// MoE's slots and shared expert combined here).
// All in f64 with one rounding per output. The mixes' dot products are
// summed per slice of HC_SLICE elements, then over the slices (the CPU
// twin's f64 order differs from it only in rounding); the rest follows the
// CPU twin's order.

#define HC_MAX 8
#define HC_MIX_MAX ((2 + HC_MAX) * HC_MAX)
// Elements of the flat streams per hc_site block (its block size).
#define HC_SLICE 256
// hc_site_rows' blocks an SM (its register bound).
#define HC_ROWS_BLOCKS 3
// Tokens of an hc_site_rows block: the tensor-core instruction's n (fn's
// rows, staged once a block, serve them all).
#define HC_ROWS_TOKENS 8

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// pre_j = sigmoid(m_j * s0 + b_j) + eps, from the mix m_j (times 1/rms).
__device__ __forceinline__ double pre_weight(double mj, float s0, float bj, float hc_eps) {
    return sigmoid_d(mj * (double)s0 + (double)bj) + (double)hc_eps;
}

// Values 0 .. nv-1 of one token's slice partials (stride nm + 1), summed
// over the slices: lane l takes slices l, l + 32, ... in order, then the
// butterfly; warp w of the block sums values w, w + nwarps, ... Writes the
// mixes (times 1/rms of the width values) to m[0 .. nv-2]. Every block that
// calls it gets the same bits. The partials are read through L2 (other
// blocks of the same launch wrote them). Ends with a barrier.
__device__ __forceinline__ void slice_sums(const double* __restrict__ p, int slices, int nm, int nv, int width,
                                           float norm_eps, double* m, double* ss) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int v = warp; v < nv; v += nwarps) {
        double acc = 0.0;
        for (int s = lane; s < slices; s += 32) acc += __ldcg(p + (size_t)s * (nm + 1) + v);
        acc = warp_sum(acc);
        if (lane == 0) {
            if (v == 0) *ss = acc;
            else m[v - 1] = acc;
        }
    }
    __syncthreads();
    const double r = 1.0 / sqrt(*ss / (double)width + (double)norm_eps);
    for (int v = threadIdx.x; v + 1 < nv; v += blockDim.x) m[v] *= r;
    __syncthreads();
}

// pre_j for j < hc into pre_s (shared), from one token's slice partials p
// (nm mixes a slice): slice_sums, then thread j's pre_weight with b_j and
// s0 as the caller read them (hc_site before its wait, hc_site_rows in its
// last block). Every thread; ends with a barrier.
__device__ __forceinline__ void pre_weights(const double* __restrict__ p, int slices, int nm, int hc, int width,
                                            float norm_eps, float s0, float bj, float hc_eps, double* pre_s) {
    __shared__ double m[HC_MAX];
    __shared__ double ss;
    slice_sums(p, slices, nm, hc + 1, width, norm_eps, m, &ss);
    if ((int)threadIdx.x < hc) pre_s[threadIdx.x] = pre_weight(m[threadIdx.x], s0, bj, hc_eps);
    __syncthreads();
}

// The whole collapsed row of token row xt into c (d floats): element i is
// sum_j pre_j x_j[i] in f64, in j order, rounded once; each thread's float4s
// of U rounds and of G streams at a time loading at once (G = HC_MAX: every
// stream), through L2 (other blocks of the launch wrote the streams). All
// threads; the caller syncs.
template <int U, int G>
__device__ __forceinline__ void collapse_row(const float* __restrict__ xt, const double* pre, int hc, int d, float* c) {
    if ((d & 3) != 0 || (((size_t)xt) & 15) != 0 || (((size_t)c) & 15) != 0) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            double acc = 0.0;
            #pragma unroll
            for (int q = 0; q < HC_MAX; q++)
                if (q < hc) acc += pre[q] * (double)__ldcg(xt + (size_t)q * d + i);
            c[i] = (float)acc;
        }
        return;
    }
    const int n4 = d >> 2;
    for (int base = threadIdx.x; base < n4; base += U * blockDim.x) {
        double a[U][4];
        #pragma unroll
        for (int u = 0; u < U; u++) a[u][0] = a[u][1] = a[u][2] = a[u][3] = 0.0;
        #pragma unroll
        for (int q0 = 0; q0 < HC_MAX; q0 += G) {
            if (q0 >= hc) break;
            float4 v[U][G];
            #pragma unroll
            for (int u = 0; u < U; u++) {
                const int i = base + u * blockDim.x;
                #pragma unroll
                for (int q = 0; q < G; q++)
                    if (q0 + q < hc && i < n4) v[u][q] = __ldcg((const float4*)(xt + (size_t)(q0 + q) * d) + i);
            }
            #pragma unroll
            for (int u = 0; u < U; u++) {
                #pragma unroll
                for (int q = 0; q < G; q++) {
                    if (q0 + q < hc) {
                        const double p = pre[q0 + q];
                        a[u][0] += p * (double)v[u][q].x;
                        a[u][1] += p * (double)v[u][q].y;
                        a[u][2] += p * (double)v[u][q].z;
                        a[u][3] += p * (double)v[u][q].w;
                    }
                }
                // after the last group: element i's sum is whole
                const int i = base + u * blockDim.x;
                if (q0 + G >= hc && i < n4)
                    *(float4*)(c + 4 * i) =
                        make_float4((float)a[u][0], (float)a[u][1], (float)a[u][2], (float)a[u][3]);
            }
        }
    }
}

// The output of the block before a site at element i of token t: `out`,
// or (where `slots` is not null) the MoE's k slot outputs and the shared
// expert's (in `out`; left out where skip_shared) summed in f64, rounded
// once.
__device__ __forceinline__ float block_output(const float* __restrict__ out, const float* __restrict__ slots, int k,
                                              int skip_shared, int t, int d, int i) {
    if (!slots) return out[(size_t)t * d + i];
    double acc = 0.0;
    for (int s = 0; s < k; s++) acc += (double)slots[((size_t)t * k + s) * d + i];
    if (!skip_shared) acc += (double)out[(size_t)t * d + i];
    return (float)acc;
}

// The old streams' values x_j at element i of token row xt.
__device__ __forceinline__ void old_streams(const float* xt, int hc, int d, int i, float (&old)[HC_MAX]) {
    #pragma unroll
    for (int j = 0; j < HC_MAX; j++) old[j] = j < hc ? xt[(size_t)j * d + i] : 0.0f;
}

// Stream k of the post at one element: post_k * o + sum_j comb[j][k] x_j,
// from the mixes m of the site before (hc_sinkhorn's layout) and the old
// streams' values x_j (J >= hc of them).
template <int J = HC_MAX>
__device__ __forceinline__ float post_stream(const double* __restrict__ m, int hc, int k, double o, const float* old) {
    double acc = m[hc + k] * o;
    #pragma unroll
    for (int j = 0; j < J; j++)
        if (j < hc) acc += m[2 * hc + j * hc + k] * (double)old[j];
    return (float)acc;
}

// hc_site_rows' mixes on the FP64 tensor cores. A warp's value of one
// row u of fn times x' over its 32 elements is warp_sum's tree of the 32
// products (hc_site's bits): the pairs (j, j + 16), then (j, j + 8), (j,
// j + 4), (j, j + 2), (0, 1). A float times a float is exact in f64, so
// pair j is fma(g_{j+16}, x_{j+16}, g_j x_j): the chain of fmas that one
// m16n8k4 instruction computes over k = (j, j + 16) from -0 (k = 2, 3 add
// the products 0 x -0 = -0, which change no value), for 16 rows of fn (m)
// and 8 tokens (n). The 16 pairs go onto a stack of subtrees in registers
// in bit-reversed order (leaf_brev4, mma_leaf_push_regs), which adds them
// in the tree's order. The squares' tree (x'^2) by one thread (square_tree).
// Staged rows (fn's, as f64; the tokens' x') hold a warp's 32 elements as
// HC_X_GROUP doubles (the second half one double on: element j + 16 at j +
// 17) and a row is HC_X_ROW doubles (= 10 mod 16): a fragment's 16 reads
// (8 rows g, the halves q) fall in 16 distinct double-wide banks.
#define HC_MMA_ROWS 16
#define HC_X_GROUP 33
#define HC_X_ROW (HC_SLICE / 32 * HC_X_GROUP + 2)

// Where element e (< HC_SLICE) of a slice lies in a staged row.
__device__ __forceinline__ int hc_x_at(int e) { return (e >> 5) * HC_X_GROUP + (e & 31) + ((e >> 4) & 1); }

// warp_sum's tree of the 32 squares of x (a group of a staged row), by one
// thread: the pairs (j, j + 16) as one fma each, then level by level.
__device__ __forceinline__ double square_tree(const double* x) {
    double p[8];
    #pragma unroll
    for (int j = 0; j < 8; j++) p[j] = fma(x[j + 17], x[j + 17], x[j] * x[j]);
    #pragma unroll
    for (int j = 0; j < 8; j++) p[j] += fma(x[j + 25], x[j + 25], x[j + 8] * x[j + 8]);
    #pragma unroll
    for (int o = 4; o > 0; o >>= 1) {
        #pragma unroll
        for (int j = 0; j < o; j++) p[j] += p[j + o];
    }
    return p[0];
}

// This thread's element e of fn's rows u0 .. u0 + HC_MMA_ROWS - 1 (zeros
// past nm or width): loads in flight for fn_tile_store.
__device__ __forceinline__ void fn_tile_load(const float* __restrict__ fn, int u0, int nm, int width, int e,
                                             float (&f)[HC_MMA_ROWS]) {
    #pragma unroll
    for (int r = 0; r < HC_MMA_ROWS; r++)
        f[r] = e < width && u0 + r < nm ? __ldg(fn + (size_t)(u0 + r) * width + e) : 0.0f;
}
__device__ __forceinline__ void fn_tile_store(const float (&f)[HC_MMA_ROWS], double* fs, int pe) {
    #pragma unroll
    for (int r = 0; r < HC_MMA_ROWS; r++) fs[r * HC_X_ROW + pe] = (double)f[r];
}

// hc_site_rows' slice partials before the warps' sum, for each of the
// block's T = 8 tokens j: red[(j W + w) (nm + 1)] = the squares' tree over
// warp w's 32 elements of x', red[(j W + w) (nm + 1) + 1 + u] row u of fn
// times them. xs holds the tokens' x' (token j's row at xs + j HC_X_ROW,
// written before the call; the first barrier is here), f this thread's
// element of fn's first HC_MMA_ROWS rows (fn_tile_load); fs a tile's rows
// of fn. Warp w takes its 32 elements' tiles of 16 rows by the 8 tokens.
// All threads; the caller syncs before reading red.
template <int T>
__device__ __forceinline__ void mix_mma(const float* __restrict__ fn, int nm, int width, int e, float (&f)[HC_MMA_ROWS],
                                        double* fs, const double* xs, double* red) {
    constexpr int W = HC_SLICE / 32;
    static_assert(T == 8, "the instruction's n: 8 tokens");
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3, pe = hc_x_at(threadIdx.x);
    // thread (g, q < 2) reads element l (q = 0) or l + 16 (q = 1) of row g of a tile and of token g; q = 2, 3
    // read the same words (no more wavefronts) and take A = 0, B = -0
    const double* fa = fs + g * HC_X_ROW + w * HC_X_GROUP + 17 * (q & 1);
    const double* xb = xs + g * HC_X_ROW + w * HC_X_GROUP + 17 * (q & 1);
    const bool real = q < 2;
    for (int u0 = 0; u0 < max(nm, 1); u0 += HC_MMA_ROWS) {
        fn_tile_store(f, fs, pe);
        __syncthreads();  // the tile's rows (and, the first time, xs) are staged
        if (u0 + HC_MMA_ROWS < nm) fn_tile_load(fn, u0 + HC_MMA_ROWS, nm, width, e, f);
        if (u0 == 0)
            for (int i = threadIdx.x; i < T * W; i += blockDim.x)
                red[i * (nm + 1)] = square_tree(xs + i / W * HC_X_ROW + i % W * HC_X_GROUP);
        double st[4][4], x[4];
        #pragma unroll
        for (int mi = 0; mi < 16; mi++) {
            const int l = leaf_brev4(mi);
            const double av0 = fa[l], av1 = fa[8 * HC_X_ROW + l], bv = xb[l];
            const double a[2] = {real ? av0 : 0.0, real ? av1 : 0.0};
            #pragma unroll
            for (int i = 0; i < 4; i++) x[i] = -0.0;
            mma_k4(x, a, real ? bv : -0.0);
            mma_leaf_push_regs(st, x, mi);
        }
        // x[i]: row u0 + g + 8 (i / 2), token 2 q + i % 2
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int u = u0 + g + 8 * (i >> 1), j = 2 * q + (i & 1);
            if (u < nm) red[(j * W + w) * (nm + 1) + 1 + u] = x[i];
        }
        __syncthreads();  // the tile's fragments are read: the next may overwrite fs
    }
}

// hc_site reads the first HC_MIX_EARLY rows of fn (all of them for hc <= 4)
// before it waits for its inputs.
#define HC_MIX_EARLY 24

// One site's hyper-connection work: hc_site for one token (decode), one
// launch; for several (prefill) hc_post where there is a post, then
// hc_site_rows and hc_collapse_rows; the same bits. hc_site: grid
// (slices), block HC_SLICE, dynamic shared memory d floats where norm_w is
// set. Its block b takes the flat element e = b * HC_SLICE + tid of token
// t's streams (row rows[t] of x_in, or t where rows is null; hc_site_rows:
// of each of its tokens):
// - with mix_prev (the site before's mixes): the post of the block before
//   (out, slots, k, skip_shared as block_output) from x_in into x_out,
//   which must be another buffer (other blocks still read the old
//   streams); without, x' is x_in's element (rows only here: the head);
// - the slice's mix partials [sum x'^2 | fn_0 . x' | ... | fn_{nm-1} . x']
//   into partials[t, s] (each a warp butterfly's bits, then the warps in
//   order; hc_site sums 32 values a lane at once with warp_sums32, which
//   holds 32 doubles a thread, and hc_site_rows 16 rows of fn by 8 tokens
//   a warp on the FP64 tensor cores, mix_mma);
// - hc_site's last block to finish (an atomic count in done[t], which that
//   block sets back to 0; hc_collapse_rows for each token of several): pre
//   from the partials summed over the slices, then the collapsed row
//   sum_j pre_j x'_j into y[t], normalized by the RMS norm with weight
//   norm_w where it is set.
#define HC_SITE_PARAMS                                                                                           \
    const float *__restrict__ x_in, float *__restrict__ x_out, const int *__restrict__ rows,                    \
        const float *__restrict__ out, const float *__restrict__ slots, int k, int skip_shared,                 \
        const double *__restrict__ mix_prev, const float *__restrict__ fn, int nm, double *__restrict__ partials, \
        unsigned *__restrict__ done, float norm_eps, const float *__restrict__ base,                             \
        const float *__restrict__ scale, int hc, int d, float hc_eps, const float *__restrict__ norm_w,          \
        float *__restrict__ y
#define HC_SITE_ARGS \
    x_in, x_out, rows, out, slots, k, skip_shared, mix_prev, fn, nm, partials, done, norm_eps, base, scale, hc, d, \
        hc_eps, norm_w, y

// Element e of token t's streams after the post of the block before (into
// x_out) where there is one (mix_prev), else x_in's element (see below).
__device__ __forceinline__ float site_stream(const float* __restrict__ x_in, float* __restrict__ x_out, size_t row,
                                             const float* __restrict__ out, const float* __restrict__ slots, int k,
                                             int skip_shared, const double* __restrict__ mix_prev, int t, int hc,
                                             int d, int e) {
    const int width = hc * d;
    const float* xt = x_in + row * width;
    if (!mix_prev) return xt[e];
    const int q = e / d, i = e % d;
    float old[HC_MAX];
    old_streams(xt, hc, d, i, old);
    const double o = block_output(out, slots, k, skip_shared, t, d, i);
    const float xf = post_stream(mix_prev + (size_t)t * (2 + hc) * hc, hc, q, o, old);
    x_out[row * width + e] = xf;
    return xf;
}

// Slice s's partials of a token (part[q] = red's warps' values q summed
// in warp order, red's warp w at red + w * stride).
__device__ __forceinline__ void site_partials(const double* red, int stride, int nm, double* __restrict__ part) {
    for (int q = threadIdx.x; q <= nm; q += blockDim.x) {
        double acc = 0.0;
        for (int w = 0; w < HC_SLICE / 32; w++) acc += red[w * stride + q];
        part[q] = acc;
    }
}

// The last block's work for token t (row `row` of the streams, its slice
// partials at p): pre, then the collapsed row into y[t], normalized where
// norm_w is set (the row through the dynamic shared memory, as a collapse
// then rms_norm_f32 over it: the same bits). U, G: collapse_row's. The
// norm's weights: `nw` as read before the wait (EARLY), else read here
// after the collapse (fewer registers held through it).
template <int U, int G, bool EARLY>
__device__ __forceinline__ void site_collapse(const double* __restrict__ p, int slices, int nm, int hc, int d,
                                              float norm_eps, float s0, float b, float hc_eps, const float* xc,
                                              const float* __restrict__ norm_w, NormWeight& nw,
                                              float* __restrict__ yt) {
    __shared__ double pre_s[HC_MAX];
    pre_weights(p, slices, nm, hc, hc * d, norm_eps, s0, b, hc_eps, pre_s);
    if (!norm_w) {
        collapse_row<U, G>(xc, pre_s, hc, d, yt);
        return;
    }
    __shared__ double red_norm[32];
    float* c = (float*)xs_dyn;
    collapse_row<U, G>(xc, pre_s, hc, d, c);
    __syncthreads();
    if constexpr (!EARLY) norm_weight_early(norm_w, d, nw);
    rms_norm_row(c, yt, norm_w, d, norm_eps, red_norm, nw);
}

// hc_site: one token, grid (slices).
__device__ __forceinline__ void hc_site_one(HC_SITE_PARAMS) {
    __shared__ double red[HC_SLICE / 32][HC_MIX_MAX + 1];
    __shared__ unsigned ticket;
    const int width = hc * d, slices = (width + HC_SLICE - 1) / HC_SLICE;
    const int t = blockIdx.x / slices, s = blockIdx.x % slices, tid = threadIdx.x, lane = tid & 31,
              warp = tid >> 5;
    const int e = s * HC_SLICE + tid;
    const bool in = e < width;
    // fn's first rows and the tail's weights (base, scale, the norm's) in every block before the wait, so
    // that they load while the kernel before finishes and the last block, which alone uses the tail's, has
    // them at hand
    float early[HC_MIX_EARLY];
    float b = 0.0f, s0 = 0.0f;
    NormWeight nw;
    #pragma unroll
    for (int u = 0; u < HC_MIX_EARLY; u++) early[u] = in && u < nm ? fn[(size_t)u * width + e] : 0.0f;
    if (tid < hc) b = base[tid], s0 = scale[0];
    norm_weight_early(norm_w, d, nw);
    await_inputs();
    const size_t row = rows ? (size_t)rows[t] : (size_t)t;
    const float xf = in ? site_stream(x_in, x_out, row, out, slots, k, skip_shared, mix_prev, t, hc, d, e) : 0.0f;
    const double xv = xf;
    // slot 0: x'^2, slot 1 + u: row u of fn times x'; 32 slots a round
    double v[32];
    v[0] = xv * xv;
    #pragma unroll
    for (int u = 0; u < 31; u++) {
        const float f = u < HC_MIX_EARLY ? early[u] : (in && u < nm ? fn[(size_t)u * width + e] : 0.0f);
        v[1 + u] = u < nm ? (double)f * xv : 0.0;
    }
    double sum = warp_sums32(v);
    if (lane <= nm) red[warp][lane] = sum;
    for (int g = 32; g <= nm; g += 32) {
        #pragma unroll
        for (int j = 0; j < 32; j++) {
            const int u = g + j - 1;
            v[j] = u < nm ? (double)(in ? fn[(size_t)u * width + e] : 0.0f) * xv : 0.0;
        }
        sum = warp_sums32(v);
        if (g + lane <= nm) red[warp][g + lane] = sum;
    }
    __syncthreads();
    site_partials(&red[0][0], HC_MIX_MAX + 1, nm, partials + ((size_t)t * slices + s) * (nm + 1));
    // the last block of the token: every block's partials and streams are written
    __threadfence();
    __syncthreads();
    if (tid == 0) ticket = atomicAdd(done + t, 1u);
    __syncthreads();
    if (ticket + 1 != slices) return;
    if (tid == 0) done[t] = 0;
    __threadfence();
    // the collapse: two float4s of every stream in flight
    site_collapse<2, HC_MAX, true>(partials + (size_t)t * slices * (nm + 1), slices, nm, hc, d, norm_eps, s0, b,
                                   hc_eps, (mix_prev ? x_out : x_in) + row * width, norm_w, nw, y + (size_t)t * d);
}

extern "C" __global__ void hc_site(HC_SITE_PARAMS) { hc_site_one(HC_SITE_ARGS); }

// hc_site_rows: the slices' partials of HC_ROWS_TOKENS tokens a block
// (tokens T g .. T g + T - 1 of the n, group g = blockIdx.x / slices) of
// the streams x (row rows[t] of token t, or t where rows is null; the host
// runs hc_post first where the site has a post), grid (ceil(n / T)
// slices); hc_collapse_rows then does the last block's work of hc_site for
// each token. The dynamic shared memory (state.rs hc_rows_smem): a tile of
// fn's rows (HC_MMA_ROWS rows of HC_X_ROW doubles), then the tokens' x' (T
// such rows), then their warps' values (T W rows of nm + 1 doubles).
extern "C" __global__ void __launch_bounds__(HC_SLICE, HC_ROWS_BLOCKS)
    hc_site_rows(const float* __restrict__ x, const int* __restrict__ rows, const float* __restrict__ fn, int nm,
                 double* __restrict__ partials, int hc, int d, int n) {
    constexpr int T = HC_ROWS_TOKENS;
    const int width = hc * d, slices = (width + HC_SLICE - 1) / HC_SLICE;
    const int grp = blockIdx.x / slices, s = blockIdx.x % slices;
    const int e = s * HC_SLICE + threadIdx.x, t0 = grp * T, nt = min(T, n - t0), pe = hc_x_at(threadIdx.x);
    const bool in = e < width;
    double* fs = xs_dyn;
    double* xs = fs + HC_MMA_ROWS * HC_X_ROW;
    double* red = xs + T * HC_X_ROW;
    // fn's first tile in flight while the streams load
    float f[HC_MMA_ROWS];
    fn_tile_load(fn, 0, nm, width, e, f);
    await_inputs();
    // the tokens' elements, all in flight at once
    float v[T];
    #pragma unroll
    for (int j = 0; j < T; j++) {
        const int t = t0 + j;
        v[j] = in && j < nt ? x[(rows ? (size_t)rows[t] : (size_t)t) * width + e] : 0.0f;
    }
    #pragma unroll
    for (int j = 0; j < T; j++) xs[j * HC_X_ROW + pe] = v[j];
    mix_mma<T>(fn, nm, width, e, f, fs, xs, red);
    // the tokens' slice partials at once, a (token, value) a thread: site_partials' sums (a value's warps
    // in order from zero)
    constexpr int W = HC_SLICE / 32;
    const int nv = nm + 1;
    for (int i = threadIdx.x; i < nt * nv; i += blockDim.x) {
        const int j = i / nv, q = i % nv;
        const double* rj = red + j * W * nv + q;
        double acc = 0.0;
        #pragma unroll
        for (int w = 0; w < W; w++) acc += rj[w * nv];
        partials[((size_t)(t0 + j) * slices + s) * nv + q] = acc;
    }
}

// After hc_site_rows: token t = blockIdx.x's pre from its slices' partials,
// then its collapsed row into y[t], normalized where norm_w is set (the
// row in the dynamic shared memory, d floats): hc_site's last block's
// work, with its bits. xs: the streams after the post (hc_site_rows'
// x_out, or x_in without a post), row rows[t] (or t where rows is null).
// grid (n), block HC_SLICE.
extern "C" __global__ void __launch_bounds__(HC_SLICE) hc_collapse_rows(const double* __restrict__ partials, int nm,
                                                                      const float* __restrict__ xs,
                                                                      const int* __restrict__ rows, float norm_eps,
                                                                      const float* __restrict__ base,
                                                                      const float* __restrict__ scale, int hc, int d,
                                                                      float hc_eps, const float* __restrict__ norm_w,
                                                                      float* __restrict__ y) {
    const int t = blockIdx.x, tid = threadIdx.x, slices = (hc * d + HC_SLICE - 1) / HC_SLICE;
    const float b = tid < hc ? base[tid] : 0.0f, s0 = tid < hc ? scale[0] : 0.0f;
    await_inputs();
    const size_t row = rows ? (size_t)rows[t] : (size_t)t;
    NormWeight nw;
    // one float4 of four streams in flight, the norm's weights read after the collapse
    site_collapse<1, 4, false>(partials + (size_t)t * slices * (nm + 1), slices, nm, hc, d, norm_eps, s0, b, hc_eps,
                               xs + row * hc * d, norm_w, nw, y + (size_t)t * d);
}

// One Sinkhorn half-step on the hc x hc matrix a by warp 0 (lane l holds
// cells l and l + 32): each cell divided by its row's (rows) or column's
// sum plus eps, the sum in index order as the CPU twin's.
__device__ __forceinline__ void sinkhorn_normalize(double* a, int hc, double eps, bool rows) {
    const int lane = threadIdx.x & 31, cells = hc * hc;
    double v[2];
    for (int r = 0; r < 2; r++) {
        const int c = lane + 32 * r;
        if (c < cells) {
            const int first = rows ? c / hc * hc : c % hc, step = rows ? 1 : hc;
            double s = 0.0;
            for (int q = 0; q < hc; q++) s += a[first + q * step];
            v[r] = a[c] / (s + eps);
        }
    }
    __syncwarp();
    for (int r = 0; r < 2; r++)
        if (lane + 32 * r < cells) a[lane + 32 * r] = v[r];
    __syncwarp();
}

// From the slice partials: pre, post and the Sinkhorn comb, written to
// mix[t] (the Sinkhorn by warp 0; each sum in the CPU twin's order). Only
// hc_post reads them, so the engine runs this beside the block on a second
// stream. grid (n), block 256.
extern "C" __global__ void hc_sinkhorn(const double* __restrict__ partials, int slices, int width, float norm_eps,
                                       const float* __restrict__ base, const float* __restrict__ scale, int hc,
                                       int iters, float hc_eps, double* __restrict__ mix) {
    await_inputs();
    __shared__ double m[HC_MIX_MAX];
    __shared__ double a[HC_MAX * HC_MAX];
    __shared__ double b[HC_MAX * HC_MAX];
    __shared__ double ss;
    const int t = blockIdx.x, tid = threadIdx.x;
    const int nmix = (2 + hc) * hc;
    slice_sums(partials + (size_t)t * slices * (nmix + 1), slices, nmix, nmix + 1, width, norm_eps, m, &ss);
    if (tid >= 32) return;
    const double eps = hc_eps;
    // Sinkhorn in warp 0: lane l holds cells l and l + 32
    const int lane = tid;
    double* out = mix + (size_t)t * nmix;
    if (lane < hc) {
        out[lane] = pre_weight(m[lane], scale[0], base[lane], hc_eps);
        out[hc + lane] = 2.0 * sigmoid_d(m[hc + lane] * (double)scale[1] + (double)base[hc + lane]);
    }
    const int cells = hc * hc;
    for (int c = lane; c < cells; c += 32) a[c] = m[2 * hc + c] * (double)scale[2] + (double)base[2 * hc + c];
    __syncwarp();
    // row softmax + eps
    for (int c = lane; c < cells; c += 32) {
        const int j = c / hc;
        double mx = -1e300;
        for (int q = 0; q < hc; q++) mx = fmax(mx, a[j * hc + q]);
        b[c] = exp(a[c] - mx);
    }
    __syncwarp();
    for (int c = lane; c < cells; c += 32) {
        const int j = c / hc;
        double s = 0.0;
        for (int q = 0; q < hc; q++) s += b[j * hc + q];
        a[c] = b[c] / s + eps;
    }
    __syncwarp();
    for (int it = 0; it < iters; it++) {
        if (it > 0) sinkhorn_normalize(a, hc, eps, true);
        sinkhorn_normalize(a, hc, eps, false);
    }
    for (int c = lane; c < cells; c += 32) out[2 * hc + c] = a[c];
}

// a[i] += v's element i, in f64
__device__ __forceinline__ void add4(double (&a)[4], const float4& v) {
    a[0] += (double)v.x;
    a[1] += (double)v.y;
    a[2] += (double)v.z;
    a[3] += (double)v.w;
}

// The post alone (hc_site's first step, at the end of a layer, and before
// hc_site_rows): x_out = post(x_in) with the block's output as
// block_output reads it, four elements i0 .. i0 + 3 a thread (i0 = 4
// (blockIdx.y blockDim.x + threadIdx.x)) of token t = blockIdx.x: as
// float4s where d and the pointers allow, every stream's and slot's load
// in flight at once (at most HC_POST_STREAMS streams, the first
// HC_POST_SLOTS slots; the sums in block_output's order, the same bits;
// more streams one element at a time). x_out may be x_in (each thread
// reads its elements of every stream before it writes). grid (n, ceil(d /
// 1024)), block 256.
#define HC_POST_STREAMS 4
#define HC_POST_SLOTS 8
extern "C" __global__ void __launch_bounds__(256, 2)
    hc_post(const float* x_in, float* x_out, const float* __restrict__ out, const float* __restrict__ slots, int k,
            int skip_shared, const double* __restrict__ mix, int hc, int d) {
    await_inputs();
    const int t = blockIdx.x;
    const int i0 = 4 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (i0 >= d) return;
    const double* m = mix + (size_t)t * (2 + hc) * hc;
    const float* xt = x_in + (size_t)t * hc * d;
    const size_t ptrs = (size_t)x_in | (size_t)x_out | (size_t)out | (size_t)slots;
    if ((d & 3) != 0 || (ptrs & 15) != 0 || hc > HC_POST_STREAMS) {
        for (int i = i0; i < min(i0 + 4, d); i++) {
            float old[HC_MAX];
            old_streams(xt, hc, d, i, old);
            const double o = block_output(out, slots, k, skip_shared, t, d, i);
            #pragma unroll
            for (int q = 0; q < HC_MAX; q++)
                if (q < hc) x_out[((size_t)t * hc + q) * d + i] = post_stream(m, hc, q, o, old);
        }
        return;
    }
    float4 x4[HC_POST_STREAMS];
    #pragma unroll
    for (int j = 0; j < HC_POST_STREAMS; j++)
        if (j < hc) x4[j] = *(const float4*)(xt + (size_t)j * d + i0);
    float4 o4;
    if (!slots) {
        o4 = *(const float4*)(out + (size_t)t * d + i0);
    } else {
        const float4* sl = (const float4*)(slots + (size_t)t * k * d + i0);
        const int d4 = d >> 2;
        float4 s4[HC_POST_SLOTS], sh;
        #pragma unroll
        for (int s = 0; s < HC_POST_SLOTS; s++)
            if (s < k) s4[s] = sl[(size_t)s * d4];
        if (!skip_shared) sh = *(const float4*)(out + (size_t)t * d + i0);
        double a[4] = {0.0, 0.0, 0.0, 0.0};
        #pragma unroll
        for (int s = 0; s < HC_POST_SLOTS; s++) {
            if (s < k) add4(a, s4[s]);
        }
        for (int s = HC_POST_SLOTS; s < k; s++) add4(a, sl[(size_t)s * d4]);
        if (!skip_shared) add4(a, sh);
        o4 = make_float4((float)a[0], (float)a[1], (float)a[2], (float)a[3]);
    }
    float old[4][HC_POST_STREAMS];
    #pragma unroll
    for (int j = 0; j < HC_POST_STREAMS; j++) {
        old[0][j] = x4[j].x;
        old[1][j] = x4[j].y;
        old[2][j] = x4[j].z;
        old[3][j] = x4[j].w;
    }
    #pragma unroll
    for (int q = 0; q < HC_POST_STREAMS; q++) {
        if (q < hc)
            *(float4*)(x_out + ((size_t)t * hc + q) * d + i0) =
                make_float4(post_stream<HC_POST_STREAMS>(m, hc, q, (double)o4.x, old[0]),
                            post_stream<HC_POST_STREAMS>(m, hc, q, (double)o4.y, old[1]),
                            post_stream<HC_POST_STREAMS>(m, hc, q, (double)o4.z, old[2]),
                            post_stream<HC_POST_STREAMS>(m, hc, q, (double)o4.w, old[3]));
    }
}
