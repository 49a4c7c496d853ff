// linear_tensor.cu — the attention's FP8 projections on the BF16 tensor cores
//   (the `tensor` sums, gpu/forward.rs `ProductSums::Tensor`; CPU twin:
//   cpu/ops/linear.rs, whose exact sums these approximate inside the band,
//   gates/src/band.rs `Realization::GpuTensor`)
//
// The arithmetic of moe_tensor.cu's kernels, on FP8 rows (`Fp8Limbs`) whose
// 128 x 128 scales are powers of two that keep every weight a normal BF16
// (gpu/products.rs `dense_limbs`): three BF16 limbs an input value, K in
// parts, each part's chains from zero, the parts summed in order in f32.
// y[t, j] = sum_k x[t, k] W[row0 + z nrows + j, k] for group z (as
// linear.cu's `linear_grouped`: its inputs x_group floats on, its outputs
// z nrows on).

// One token: grid (ceil(nrows / (16 LIMB_WARPS / parts)), 1, groups), block
// 32 LIMB_WARPS, dynamic smem 3 (K + LIMB_PAD) 2 + 64 LIMB_WARPS bytes
// (gpu/products.rs `dense_limb_smem_one`). Block x's tile t takes rows
// j0 = 16 (x LIMB_WARPS / parts + t) .. j0 + 15 of its group.
#define LIMB_DENSE_BLOCKS 4  // blocks an SM: the registers of Fp8Limbs' ring
extern "C" __global__ void __launch_bounds__(32 * LIMB_WARPS, LIMB_DENSE_BLOCKS) linear_bf16_one(
    Mat w, const float* __restrict__ x, int x_group, float* __restrict__ y, int row0, int nrows) {
    const int z = blockIdx.z, K = w.cols;
    const int g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3, parts = limb_parts(K);
    const int j0 = 16 * (blockIdx.x * (LIMB_WARPS / parts) + (threadIdx.x >> 5) / parts);
    const int r0 = row0 + z * nrows;
    const Fp8Limbs::Row rows[2] = {Fp8Limbs::row(w, r0 + min(j0 + g, nrows - 1), q),
                                   Fp8Limbs::row(w, r0 + min(j0 + g + 8, nrows - 1), q)};
    TileRing<Fp8Limbs> ring;
    tile_parts_first(Fp8Limbs{}, rows, j0 < nrows, K, ring);  // the weights: no earlier kernel writes them
    await_inputs();
    u16* xs = (u16*)limb_smem;
    stage_limb_row(x + (size_t)z * x_group, K, xs, K + LIMB_PAD, threadIdx.x, blockDim.x);
    __syncthreads();
    float v[2];
    if (tile_parts(Fp8Limbs{}, rows, j0 < nrows, K, xs, ring, (float*)(xs + 3 * (K + LIMB_PAD)), v)) {
        y += (size_t)z * nrows;
        if (j0 + g < nrows) y[j0 + g] = v[0];
        if (j0 + g + 8 < nrows) y[j0 + g + 8] = v[1];
    }
}

// Tokens in groups of LIMB_TOKENS: grid (ceil(nrows / (32 LIMB_WARPS)),
// min(ceil(n / LIMB_TOKENS), 65535), groups), block 32 LIMB_WARPS, dynamic
// smem LIMB_STAGES LIMB_STAGE_ELEMS 2 bytes (`dense_limb_smem_groups`).
// Warp w of block x takes rows j0 = 32 (x LIMB_WARPS + w) .. j0 + 31 as two
// tiles of 16. xl: the tokens' limb rows (`limb_rows` of their first kl
// values: 3 kl bf16 a token), group z's from column z x_group on.
extern "C" __global__ void __launch_bounds__(32 * LIMB_WARPS) linear_bf16_groups(
    Mat w, const u16* __restrict__ xl, int kl, int x_group, float* __restrict__ y, int y_stride, int n, int row0,
    int nrows) {
    await_inputs();
    const int z = blockIdx.z, K = w.cols, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    const int j0 = 32 * (blockIdx.x * LIMB_WARPS + (threadIdx.x >> 5));
    const bool active = j0 < nrows;
    const int r0 = row0 + z * nrows;
    Fp8Limbs::Row rows[4];
    #pragma unroll
    for (int r = 0; r < 4; r++) rows[r] = Fp8Limbs::row(w, r0 + min(j0 + 16 * (r >> 1) + 8 * (r & 1) + g, nrows - 1), q);
    const u16* xz = xl + (size_t)z * x_group;
    y += (size_t)z * nrows;
    for (int t0 = blockIdx.y * LIMB_TOKENS; t0 < n; t0 += gridDim.y * LIMB_TOKENS) {
        const int nt = min(LIMB_TOKENS, n - t0);
        float sums[2][2][4];
        tiles_group(Fp8Limbs{}, rows, active, K, [&](int t) { return xz + (size_t)(t0 + min(t, nt - 1)) * 3 * kl; },
                    kl, (u16*)limb_smem, sums);
        if (active)
            for_group_sums(sums, j0, nrows, nt, [&](int c, int r, float v) { y[(size_t)(t0 + c) * y_stride + r] = v; });
    }
}
