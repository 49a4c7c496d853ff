//! The weight products' launches on a [`Gpu`]: one token through the
//! whole-row kernels (`linear_t1_r*`), several through the prefill's
//! tensor-core tiles (`linear_mma`, for scaled FP8 and FP4 rows), its group
//! kernels or its 8x8 tiles (kernels/linear.cu; the experts' kernels in
//! kernels/moe.cu share the geometry). Each kernel's geometry (values a
//! chunk, rows a warp, tokens a group, staged shared bytes) sits beside
//! the launch that uses it.

use anyhow::{anyhow, Result};
use cudarc::driver::LaunchConfig;

use super::device::Gpu;

/// Values per 16-byte weight chunk of a `Mat` format (kernels/common.cuh `Fmt`).
fn chunk_values(fmt: i32) -> usize {
    match fmt {
        1 => 8,  // BF16
        2 => 16, // FP8
        3 => 32, // FP4
        _ => 4,  // F32
    }
}

/// The most dynamic shared memory a whole-row decode kernel opts in to:
/// two blocks still fit on an H100/H200 SM (228 KiB).
pub const ROW_SMEM_MAX: usize = 112 << 10;

/// The kernels whose dynamic shared memory may pass the default 48 KiB:
/// those that stage a whole activation row (kernels/rows.cuh
/// `staged_row_dots`) and the prefill tiles (kernels/linear.cu
/// `linear_tile_pairs`); they opt in to [`ROW_SMEM_MAX`].
const WHOLE_ROW_KERNELS: [&str; 4] = ["expert_gate_up", "expert_down", "linear_f32", "linear_grouped"];

/// The one-token product kernels (kernels/linear.cu `LINEAR_T1`): for each
/// rows a warp ([`rows_per_warp`]), one per weight format (the index:
/// `Mat.fmt`, F32, BF16, FP8, FP4). Each stages a whole activation row,
/// like [`WHOLE_ROW_KERNELS`], and keeps its weights' shared-memory ring
/// after it, so they opt in to [`DECODE_SMEM_MAX`].
pub const LINEAR_T1_KERNELS: [(usize, [&str; 4]); 3] = [
    (1, ["linear_t1_r1_f32", "linear_t1_r1_bf16", "linear_t1_r1_fp8", "linear_t1_r1_fp4"]),
    (2, ["linear_t1_r2_f32", "linear_t1_r2_bf16", "linear_t1_r2_fp8", "linear_t1_r2_fp4"]),
    (4, ["linear_t1_r4_f32", "linear_t1_r4_bf16", "linear_t1_r4_fp8", "linear_t1_r4_fp4"]),
];

/// The one-token product of the `tensor` sums (kernels/linear_tensor.cu):
/// the attention's FP8 projections for one token.
pub(super) const LINEAR_LIMBS_ONE_KERNEL: &str = "linear_bf16_one";

/// Tokens (or pairs of one expert) the prefill's group kernels stage whole
/// at once (kernels/rows.cuh `GROUP_TOKENS`; kernels/linear.cu
/// `linear_groups`, kernels/moe.cu `expert_gate_up_groups`,
/// `expert_down_groups`), the weight rows a warp takes at once
/// (kernels/rows.cuh `GROUP_ROWS`), their block (8 warps) and the most
/// shared memory they opt in to: the group's staged rows, one block an SM.
pub const GROUP_TOKENS: usize = 4;
const GROUP_ROWS: usize = 4;
pub const GROUP_BLOCK: u32 = 256;
const GROUP_SMEM_MAX: usize = 200 << 10;
// a block may take at most 227 KiB on H100/H200
const _: () = assert!(GROUP_SMEM_MAX <= 227 << 10);
const GROUP_KERNELS: [&str; 3] = ["linear_groups", "expert_gate_up_groups", "expert_down_groups"];

/// Shared bytes of a group's `tokens` staged rows of `cols` for weights of
/// format `fmt`, or None above what the group kernels opt in to.
pub fn group_smem(fmt: i32, cols: usize, tokens: usize) -> Option<u32> {
    let e = chunk_values(fmt);
    let bytes = tokens * (cols / e * (e + 2) * 8);
    (bytes <= GROUP_SMEM_MAX).then_some(bytes as u32)
}

/// The tokens a `linear_groups` block stages for rows of `cols` (format
/// `fmt`) and their shared bytes: [`GROUP_TOKENS`], or half as many for
/// rows too wide for that; None where even those do not fit (the 8x8
/// tiles take the product).
fn linear_group_tokens(fmt: i32, cols: usize) -> Option<(usize, u32)> {
    [GROUP_TOKENS, GROUP_TOKENS / 2].into_iter().find_map(|t| Some((t, group_smem(fmt, cols, t)?)))
}

/// Tokens of a block of the prefill's dense products on the FP64 tensor
/// cores (`linear_mma`) and weight rows of a warp's tile (kernels/rows.cuh
/// `MMA_TOKENS`: two of the instruction's n; `MMA_ROWS`: its m, also the
/// experts' tile's).
const MMA_TOKENS: usize = 16;
const MMA_ROWS: usize = 16;
/// The tensor-core kernels' block (rows.cuh `MMA_BLOCK`): 12 warps, as many
/// as their registers let an SM hold (ptxas 13.0: 168 a thread).
pub const MMA_BLOCK: u32 = 384;
/// Levels of a thread's stack of subtrees (rows.cuh `mma_leaf_push`: the
/// sums of 1, 2, 4, 8 and 16 leaves), 8 f64 each.
const MMA_LEVELS: usize = 5;
/// What the tensor-core kernels opt in to: their staged leaves and stacks
/// take more than the group kernels' (one block an SM either way, by
/// registers); 1 KiB of the 227 a block may take is left for their static
/// tables of token rows (`mma_token_rows`).
const MMA_SMEM_MAX: usize = 226 << 10;
const MMA_KERNELS: [&str; 5] =
    ["linear_mma", "linear_mma_short", "linear_mma_bf16", "expert_gate_up_mma", "expert_down_mma"];

/// Slabs (of each token) a tensor-core stage holds (kernels/rows.cuh
/// `MMA_STAGE_SLABS`): a slab is an instruction's k values, 16, or 8 for
/// BF16 ([`mma_k`]); 16 / (K S) leaves, for rows of K chunks a lane and
/// S slabs a chunk (K S = cols / (32 k)).
const MMA_STAGE_SLABS: usize = 16;

/// Chunks of a row of `cols` in format `fmt` that each warp lane takes (the
/// tensor-core rounds' K: kernels/rows.cuh `mma_round`).
fn lane_chunks(fmt: i32, cols: usize) -> usize {
    cols / chunk_values(fmt) / 32
}

/// Values a tensor-core instruction takes of a chunk in format `fmt`
/// (kernels/rows.cuh `MmaK::V`): 16, or a BF16 chunk's 8 (m16n8k8).
fn mma_k(fmt: i32) -> usize {
    chunk_values(fmt).min(16)
}

/// Shared bytes of a dense tensor-core block for rows of `cols` in format
/// `fmt` (kernels/rows.cuh `mma_round_k`: two stages of [`MMA_TOKENS`]
/// tokens' leaves, a row of K S slabs and 2 of padding each, in f64; the
/// threads' stacks; a stage's fetched f32 values), or None where the
/// tile does not take such rows: rows other than [`mma_rows`], or of more
/// slabs a lane than a stage holds (FP4 past 8192 columns).
fn mma_tile_smem(fmt: i32, cols: usize, scaled: bool) -> Option<u32> {
    let k = mma_k(fmt);
    let lane_slabs = cols / (32 * k);
    if !(mma_rows(fmt, cols, scaled, true) && lane_slabs <= MMA_STAGE_SLABS) {
        return None;
    }
    let stage = MMA_TOKENS * (MMA_STAGE_SLABS / lane_slabs) * (k * lane_slabs + 2) * 8;
    let bytes = 2 * stage + MMA_BLOCK as usize * MMA_LEVELS * 8 * 8 + MMA_TOKENS * MMA_STAGE_SLABS * k * 4;
    (bytes <= MMA_SMEM_MAX).then_some(bytes as u32)
}

/// The dense tile's kernel for rows of `cols` in format `fmt`: BF16 rows
/// take `linear_mma_bf16`; scaled FP8 and FP4 rows of 1 or 2 chunks a lane
/// (`wq_b`'s, the indexer's queries') `linear_mma_short`, longer ones
/// `linear_mma` (kernels/rows.cuh `MMA_CHUNKS_FEW`, `MMA_CHUNKS_ALL`: each
/// kernel with registers of its own).
fn mma_kernel(fmt: i32, cols: usize) -> &'static str {
    if fmt == 1 {
        "linear_mma_bf16"
    } else if lane_chunks(fmt, cols) <= 2 {
        "linear_mma_short"
    } else {
        "linear_mma"
    }
}

/// Whether the tensor-core tiles take rows of `cols` in format `fmt`:
/// scaled codes (`scaled`) of FP8 and FP4, and in the dense tile
/// (`dense`) of BF16 too (`linear_mma_bf16`; the experts' tile takes no
/// BF16), whose chunks give each warp lane 1, 2, 4, 8 or 16.
fn mma_rows(fmt: i32, cols: usize, scaled: bool, dense: bool) -> bool {
    let coded = scaled && (fmt == 2 || fmt == 3 || (dense && fmt == 1));
    let k = lane_chunks(fmt, cols);
    coded && cols.is_multiple_of(32 * chunk_values(fmt)) && k.is_power_of_two() && k <= 16
}

/// Pairs of one expert a group of the prefill's routed experts on the
/// tensor cores (kernels/rows.cuh `MMA_PAIRS`: the instruction's n), staged
/// whole (`expert_gate_up_mma`, `expert_down_mma`).
pub const MMA_PAIRS: usize = 8;

/// The longest rows whose pairs `expert_down_mma` stages as scaled f64
/// (kernels/rows.cuh `MMA_WIDE_COLS`; longer rows, and `expert_gate_up_mma`'s
/// pairs, as f32, converted where they are read). 8 rows of 2048 f64 and
/// the stacks fit in [`MMA_SMEM_MAX`]; rows of 4096 would not.
const MMA_WIDE_COLS: usize = 2048;

/// Shared bytes of an expert group on the tensor cores (kernels/rows.cuh
/// `stage_mma_pairs`: [`MMA_PAIRS`] rows of f64 with 2 values of padding
/// each where `down` (W2's pairs, `expert_down_mma`) and the rows have at
/// most [`MMA_WIDE_COLS`] values, else of f32 with 16; then the threads'
/// stacks of subtrees, `mma_pair_push`: 16 f64 each) for rows of `cols` in
/// format `fmt`, or None where the experts' tile does not take such rows:
/// the tensor cores' rows whose staged pairs fit what the kernels opt in to.
pub fn expert_mma_smem(fmt: i32, cols: usize, scaled: bool, down: bool) -> Option<u32> {
    if !mma_rows(fmt, cols, scaled, false) {
        return None;
    }
    let wide = down && cols <= MMA_WIDE_COLS;
    let pairs = if wide { MMA_PAIRS * (cols + 2) * 8 } else { MMA_PAIRS * (cols + 16) * 4 };
    let bytes = pairs + MMA_BLOCK as usize * 16 * 8;
    (bytes <= MMA_SMEM_MAX).then_some(bytes as u32)
}

/// The `tensor` expert sums (kernels/moe_tensor.cu): the K block a thread
/// of a tile reads a row in (`LIMB_K`), the bf16 of padding after each
/// staged limb row (`LIMB_PAD`), the pairs of a prefill group
/// (`LIMB_TOKENS`), its staged K blocks (`LIMB_STAGES`) and the warps of a
/// block (`LIMB_WARPS`).
pub const LIMB_K: usize = 128;
const LIMB_PAD: usize = 16;
pub const LIMB_TOKENS: usize = 16;
const LIMB_STAGES: usize = 3;
pub const LIMB_WARPS: usize = 4;
/// The code tables at the start of their shared memory: a 16-byte entry
/// for each of the 256 E8M0 scale bytes.
const LIMB_TABLES: usize = 256 * 16;
/// The shared bytes the tensor expert kernels may take without opting in.
const LIMB_SMEM_MAX: usize = 48 << 10;

/// Shared bytes of `expert_gate_up_bf16` / `expert_down_bf16` for one
/// token's input of `cols` values: the tables, its three limb rows and the
/// warps' part sums (16 f32 each).
pub fn limb_smem_one(cols: usize) -> usize {
    LIMB_TABLES + 3 * (cols + LIMB_PAD) * 2 + LIMB_WARPS * 16 * 4
}

/// The K parts of rows of `cols` values (kernels/moe_tensor.cu
/// `limb_parts`): 4, 2 or 1, whichever first divides its K blocks. A decode
/// block's warps take `LIMB_WARPS / parts` tiles, one part each.
pub fn limb_parts(cols: usize) -> usize {
    let blocks = cols / LIMB_K;
    [4, 2, 1].into_iter().find(|p| blocks.is_multiple_of(*p)).unwrap_or(1)
}

/// Shared bytes of the tensor expert group kernels: the tables and
/// `LIMB_STAGES` K blocks of a group's limb rows.
pub fn limb_smem_groups() -> usize {
    LIMB_TABLES + LIMB_STAGES * 3 * LIMB_TOKENS * (LIMB_K + LIMB_PAD) * 2
}

/// Whether a layer's routed experts take the `tensor` sums: W1 and W3
/// (format `f13`, rows of `d`) and W2 (`f2`, rows of `inter`) all FP4, both
/// widths whole K blocks, and one token's limb rows within
/// [`LIMB_SMEM_MAX`]. Other layers keep the exact sums, in prefill and in
/// decode alike.
pub fn limb_arm(f13: i32, f2: i32, d: usize, inter: usize) -> bool {
    f13 == 3
        && f2 == 3
        && d.is_multiple_of(LIMB_K)
        && inter.is_multiple_of(LIMB_K)
        && limb_smem_one(d.max(inter)) <= LIMB_SMEM_MAX
        && limb_smem_groups() <= LIMB_SMEM_MAX
}

/// Shared bytes of `linear_bf16_one` (kernels/linear_tensor.cu) for rows
/// of `cols` values: the token's three limb rows and the warps' part sums.
pub fn dense_limb_smem_one(cols: usize) -> usize {
    3 * (cols + LIMB_PAD) * 2 + LIMB_WARPS * 16 * 4
}

/// Shared bytes of `linear_bf16_groups`: `LIMB_STAGES` K blocks of a
/// group's limb rows.
pub fn dense_limb_smem_groups() -> usize {
    LIMB_STAGES * 3 * LIMB_TOKENS * (LIMB_K + LIMB_PAD) * 2
}

/// The shared bytes `linear_bf16_one` opts in to: rows up to 16384 values.
const DENSE_LIMB_SMEM_MAX: usize = 3 * (16384 + LIMB_PAD) * 2 + LIMB_WARPS * 16 * 4;

/// The width of the limb rows a product of `groups` groups of rows of
/// `cols` values, inputs `x_group` apart, takes from each input row: None
/// where the `tensor` sums do not take it (weights not FP8 exact as BF16:
/// `bf16_exact`, gpu/weights.rs `codes_bf16_exactly`; rows or group
/// offsets not whole K blocks; rows too wide for one token's limbs in
/// shared memory); the product keeps the exact sums, in prefill and in
/// decode alike.
pub fn dense_limbs(bf16_exact: bool, cols: usize, groups: usize, x_group: usize) -> Option<usize> {
    let fits = bf16_exact
        && cols.is_multiple_of(LIMB_K)
        && (groups == 1 || x_group.is_multiple_of(LIMB_K))
        && dense_limb_smem_one(cols) <= DENSE_LIMB_SMEM_MAX;
    fits.then(|| (groups - 1) * x_group + cols)
}

/// `linear_mma`'s shared bytes ([`mma_tile_smem`]) for inputs at `x`
/// (stride `x_stride`, groups `x_group` floats apart) through rows
/// `row0 + z * nrows ..` of `w` for each of `groups` groups `z`, or None
/// where it does not take the product: rows the tile does not take (the
/// others keep `linear_groups`), inputs off 16 bytes, or FP8 groups that
/// do not start at a multiple of 16 rows (the tile reads one scale a chunk
/// for its 16 rows, their 128-row block's: kernels/rows.cuh `mma_round_k`).
fn mma_smem(
    w: &super::weights::MatArg,
    x: u64,
    x_stride: usize,
    x_group: usize,
    row0: usize,
    groups: usize,
    nrows: usize,
) -> Option<u32> {
    let aligned = x.is_multiple_of(16) && x_stride.is_multiple_of(4) && x_group.is_multiple_of(4);
    let tiles_in_blocks =
        w.fmt != 2 || (row0.is_multiple_of(MMA_ROWS) && (groups == 1 || nrows.is_multiple_of(MMA_ROWS)));
    mma_tile_smem(w.fmt, w.cols as usize, w.scaled != 0).filter(|_| aligned && tiles_in_blocks)
}

/// Rows and tokens of a prefill tile, the block of `linear_f32` and
/// `linear_grouped` (kernels/linear.cu `TILE_ROWS`, `TILE_TOKENS`; 8 warps).
const TILE_ROWS: usize = 8;
const TILE_TOKENS: usize = 8;
const TILE_BLOCK: u32 = 256;

/// Shared bytes of a prefill tile's window for weights of format `fmt`
/// (kernels/linear.cu `TILE_SMEM`: 8 tokens x 32 chunks of f64 values, two
/// padding values each, then the same activations as f32 in the staging
/// area they are copied into).
fn tile_smem(fmt: i32) -> u32 {
    let e = chunk_values(fmt);
    (TILE_TOKENS * 32 * ((e + 2) * 8 + e * 4)) as u32
}

/// The kernel and launch of a tiled product (`kernels`: its one-token and
/// prefill forms) of `n` tokens through `nrows` rows of format `fmt` in each
/// of `groups` groups: a tile of 4 rows and one token for decode, of
/// [`TILE_ROWS`] x [`TILE_TOKENS`] otherwise; the same sums either way.
fn tile_launch(
    kernels: [&'static str; 2],
    fmt: i32,
    n: usize,
    nrows: usize,
    groups: usize,
) -> (&'static str, LaunchConfig) {
    let (kernel, rows, tokens, block, smem) = if n == 1 {
        (kernels[0], 4, 1, 128, 0)
    } else {
        (kernels[1], TILE_ROWS, TILE_TOKENS, TILE_BLOCK, tile_smem(fmt))
    };
    let grid = (nrows.div_ceil(rows) as u32, n.div_ceil(tokens) as u32, groups as u32);
    (kernel, Gpu::cfg(grid, block, smem))
}

/// Shared bytes a decode kernel needs to stage one whole activation row of
/// `cols` for weights of format `fmt` (kernels/rows.cuh `stage_row`:
/// f64 values, two padding values per chunk), or None above [`ROW_SMEM_MAX`].
pub fn row_smem(fmt: i32, cols: usize) -> Option<u32> {
    let e = chunk_values(fmt);
    let bytes = cols / e * (e + 2) * 8;
    (bytes <= ROW_SMEM_MAX).then_some(bytes as u32)
}

/// Stages of the shared-memory weight ring a warp of a one-token product
/// with `rpw` rows keeps (kernels/rows.cuh `SMEM_RING_STAGES`).
const fn ring_stages(rpw: usize) -> usize {
    if rpw == 1 {
        8
    } else {
        4
    }
}

/// Bytes of that ring a warp (kernels/rows.cuh `SMEM_RING_WARP_BYTES`): a
/// stage holds one 16-byte chunk a lane of every row.
const fn ring_smem(rpw: usize) -> usize {
    ring_stages(rpw) * rpw * 32 * 16
}

/// The most dynamic shared memory a one-token product opts in to: the
/// staged row (at most [`ROW_SMEM_MAX`]) and the rings of its warps: a
/// block of [`DECODE_WARPS`] always fits; `decode_block` takes a larger
/// one only where it fits too.
const DECODE_SMEM_MAX: usize = 227 << 10;
const _: () = assert!(ROW_SMEM_MAX + DECODE_WARPS * ring_smem(4) <= DECODE_SMEM_MAX);

/// Warps per block of the decode products (kernels/linear.cu, moe.cu).
pub const DECODE_WARPS: usize = 4;

/// The warps of a one-token product's block and its dynamic shared memory
/// (the staged row of `row` bytes, then a ring of [`ring_smem`] a warp of
/// `rpw` rows): of 1, 2 and 4 times [`DECODE_WARPS`], the block with which
/// an SM holds the most warps at once (`held(warps, smem)`: the blocks an
/// SM holds), the fewer warps on a tie, among the blocks whose grid over
/// `rows` still gives each of `sm_count` SMs a block. The row is staged
/// once a block, so larger blocks leave more shared memory to the rings.
fn decode_block(
    row: usize,
    rpw: usize,
    rows: usize,
    sm_count: usize,
    mut held: impl FnMut(usize, usize) -> Result<usize>,
) -> Result<(usize, usize)> {
    let smem_of = |warps: usize| row + warps * ring_smem(rpw);
    let mut best = (DECODE_WARPS, smem_of(DECODE_WARPS), 0);
    for warps in [DECODE_WARPS, 2 * DECODE_WARPS, 4 * DECODE_WARPS] {
        let smem = smem_of(warps);
        if smem > DECODE_SMEM_MAX || rows.div_ceil(warps * rpw) < sm_count {
            continue;
        }
        let on_sm = warps * held(warps, smem)?;
        if on_sm > best.2 {
            best = (warps, smem, on_sm);
        }
    }
    Ok((best.0, best.1))
}

/// Rows each warp of a decode product over `rows` rows takes (4, 2 or 1) on
/// a device of `sm_count` SMs: the most that still gives every SM two
/// blocks, so that short matrices keep all SMs busy and tall ones read more
/// rows per staged activation.
fn rows_per_warp(rows: usize, sm_count: usize) -> usize {
    let want = 2 * sm_count * DECODE_WARPS;
    [4, 2].into_iter().find(|&r| rows / r >= want).unwrap_or(1)
}
/// The dynamic shared memory kernel `k` opts in to past the default 48
/// KiB (every launch of it may then take up to that), or None.
pub(super) fn dynamic_smem_opt_in(k: &str) -> Option<usize> {
    if LINEAR_T1_KERNELS.iter().any(|(_, names)| names.contains(&k)) {
        Some(DECODE_SMEM_MAX)
    } else if WHOLE_ROW_KERNELS.contains(&k) {
        Some(ROW_SMEM_MAX)
    } else if GROUP_KERNELS.contains(&k) {
        Some(GROUP_SMEM_MAX)
    } else if MMA_KERNELS.contains(&k) {
        Some(MMA_SMEM_MAX)
    } else if k == LINEAR_LIMBS_ONE_KERNEL {
        Some(DENSE_LIMB_SMEM_MAX)
    } else if k == "hc_site_rows" {
        Some(super::state::HC_ROWS_SMEM_MAX)
    } else if k == "attention_mma" {
        Some(super::attention::ATTENTION_MMA_SMEM_MAX)
    } else if k == "indexer_scores_mma" {
        Some(super::indexer::INDEXER_MMA_SMEM)
    } else {
        None
    }
}

impl Gpu {
    /// `y[n, rows] = x[n, cols] . w^T` over all of `w`'s rows (kernels/linear.cu).
    pub fn lin(&self, w: &super::weights::DevMat, x: u64, y: u64, n: usize) -> Result<()> {
        let (rows, cols) = (w.arg.rows as usize, w.arg.cols as usize);
        self.linear(w, x, cols, y, rows, n, 0, rows)
    }

    /// Rows `row0 .. row0 + nrows` of `w` applied to `n` inputs of stride
    /// `x_stride`, written at stride `y_stride`.
    #[allow(clippy::too_many_arguments)]
    pub fn linear(
        &self,
        w: &super::weights::DevMat,
        x: u64,
        x_stride: usize,
        y: u64,
        y_stride: usize,
        n: usize,
        row0: usize,
        nrows: usize,
    ) -> Result<()> {
        if n == 1 && self.decode_rows(w, None, x, 0, y, row0, 1, nrows)? {
            return Ok(());
        }
        if n > 1 && self.groups(w, x, x_stride, 0, y, y_stride, n, row0, 1, nrows)? {
            return Ok(());
        }
        let (kernel, cfg) = tile_launch(["linear_f32_t1", "linear_f32"], w.arg.fmt, n, nrows, 1);
        crate::launch!(self, kernel, cfg;
            w.arg, x, x_stride as i32, y, y_stride as i32, n as i32, row0 as i32, nrows as i32);
        Ok(())
    }

    /// `groups` products in one launch: group `z` applies rows
    /// `z*rows_per_group ..` of `w` to the inputs at `x + z*x_group` floats
    /// (stride `x_stride`) and writes `y + z*rows_per_group` (stride
    /// `y_stride`); each sum is `linear`'s.
    #[allow(clippy::too_many_arguments)]
    pub fn linear_grouped(
        &self,
        w: &super::weights::DevMat,
        x: u64,
        x_stride: usize,
        x_group: usize,
        y: u64,
        y_stride: usize,
        n: usize,
        groups: usize,
        rows_per_group: usize,
    ) -> Result<()> {
        if n == 1 && self.decode_rows(w, None, x, x_group, y, 0, groups, rows_per_group)? {
            return Ok(());
        }
        if n > 1 && self.groups(w, x, x_stride, x_group, y, y_stride, n, 0, groups, rows_per_group)? {
            return Ok(());
        }
        let (kernel, cfg) = tile_launch(["linear_grouped_t1", "linear_grouped"], w.arg.fmt, n, rows_per_group, groups);
        crate::launch!(self, kernel, cfg;
            w.arg, x, x_stride as i32, x_group as i32, y, y_stride as i32, n as i32, rows_per_group as i32);
        Ok(())
    }

    /// [`Gpu::linear_grouped`] on the `tensor` sums (kernels/linear_tensor.cu)
    /// where [`dense_limbs`] takes `w`: one token by `linear_bf16_one`, more
    /// as limb rows (`limb_rows`, into `limbs`: 3 bf16 a token's input
    /// value) through `linear_bf16_groups`. Returns false (nothing launched) where
    /// it does not take `w`.
    #[allow(clippy::too_many_arguments)]
    pub fn linear_limbs(
        &self,
        w: &super::weights::DevMat,
        x: u64,
        x_stride: usize,
        x_group: usize,
        y: u64,
        y_stride: usize,
        n: usize,
        groups: usize,
        nrows: usize,
        limbs: &super::device::Buf<u16>,
    ) -> Result<bool> {
        let cols = w.arg.cols as usize;
        let Some(kl) = dense_limbs(w.bf16_exact, cols, groups, x_group) else {
            return Ok(false);
        };
        if n > 1 && limbs.len < n * 3 * kl {
            anyhow::bail!("limb rows for {n} tokens of {kl} values: scratch holds {} bf16", limbs.len);
        }
        let block = (LIMB_WARPS * 32) as u32;
        if n == 1 {
            let tiles = LIMB_WARPS / limb_parts(cols);
            let grid = (nrows.div_ceil(16 * tiles) as u32, 1, groups as u32);
            crate::launch!(self, LINEAR_LIMBS_ONE_KERNEL, Gpu::cfg(grid, block, dense_limb_smem_one(cols) as u32);
                w.arg, x, x_group as i32, y, 0i32, nrows as i32);
            return Ok(true);
        }
        crate::launch!(self, "limb_rows", Gpu::cfg((n as u32, 1, 1), 256, 0); x, kl as i32, x_stride as i32, limbs.ptr);
        let grid = (
            nrows.div_ceil(32 * LIMB_WARPS) as u32,
            n.div_ceil(LIMB_TOKENS).min(u16::MAX as usize) as u32,
            groups as u32,
        );
        crate::launch!(self, "linear_bf16_groups", Gpu::cfg(grid, block, dense_limb_smem_groups() as u32);
            w.arg, limbs.ptr, kl as i32, x_group as i32, y, y_stride as i32, n as i32, 0i32, nrows as i32);
        Ok(true)
    }

    /// `y = w x` and `y2 = w2 x` (`lin` twice): for one token and two
    /// matrices of one format, width and exactness of scaled codes, one
    /// launch of the whole-row kernels (each sum is `lin`'s).
    pub fn lin_pair(
        &self,
        w: &super::weights::DevMat,
        w2: &super::weights::DevMat,
        x: u64,
        y: u64,
        y2: u64,
        n: usize,
    ) -> Result<()> {
        let (a, b) = (&w.arg, &w2.arg);
        let paired = n == 1 && a.fmt == b.fmt && a.cols == b.cols && a.scaled == b.scaled;
        if paired && self.decode_rows(w, Some((w2, y2)), x, 0, y, 0, 1, (a.rows + b.rows) as usize)? {
            return Ok(());
        }
        self.lin(w, x, y, n)?;
        self.lin(w2, x, y2, n)
    }

    /// Several tokens through rows `row0 + z*nrows ..` of `w` for each group
    /// `z` (as `linear_grouped`): by `linear_mma` (`linear_mma_bf16` for
    /// BF16 rows) where [`mma_smem`] takes the rows ([`MMA_TOKENS`] tokens
    /// staged a block, its warps walking tiles of 16 rows on the FP64
    /// tensor cores), else by `linear_groups` ([`GROUP_TOKENS`] tokens
    /// staged whole a block, its warps walking the rows); the same sums
    /// either way. Returns false (nothing launched) where the staged rows
    /// do not fit in shared memory (the 8x8 tiles take those). Rows too
    /// wide for [`GROUP_TOKENS`] staged rows (`wo_b`'s 8192 columns) take
    /// groups of half as many.
    #[allow(clippy::too_many_arguments)]
    fn groups(
        &self,
        w: &super::weights::DevMat,
        x: u64,
        x_stride: usize,
        x_group: usize,
        y: u64,
        y_stride: usize,
        n: usize,
        row0: usize,
        groups: usize,
        nrows: usize,
    ) -> Result<bool> {
        if let Some(smem) = mma_smem(&w.arg, x, x_stride, x_group, row0, groups, nrows) {
            let token_groups = n.div_ceil(MMA_TOKENS);
            if token_groups <= u16::MAX as usize {
                let tiles = nrows.div_ceil(MMA_ROWS);
                let mma_warps = MMA_BLOCK as usize / 32;
                let blocks = self.sm_count.div_ceil(token_groups * groups).clamp(1, tiles.div_ceil(mma_warps));
                let grid = (blocks as u32, token_groups as u32, groups as u32);
                crate::launch!(self, mma_kernel(w.arg.fmt, w.arg.cols as usize), Gpu::cfg(grid, MMA_BLOCK, smem);
                    w.arg, x, x_stride as i32, x_group as i32, y, y_stride as i32, n as i32, row0 as i32,
                    nrows as i32);
                return Ok(true);
            }
        }
        let Some((tokens, smem)) = linear_group_tokens(w.arg.fmt, w.arg.cols as usize) else {
            return Ok(false);
        };
        let token_groups = n.div_ceil(tokens);
        if token_groups > u16::MAX as usize {
            return Ok(false); // past the grid's y limit
        }
        // one block an SM: enough blocks along the rows for a wave when the
        // tokens are few, each warp keeping at least GROUP_ROWS rows
        let warps = GROUP_BLOCK as usize / 32;
        let blocks = self.sm_count.div_ceil(token_groups * groups).clamp(1, nrows.div_ceil(GROUP_ROWS * warps));
        let grid = (blocks as u32, token_groups as u32, groups as u32);
        crate::launch!(self, "linear_groups", Gpu::cfg(grid, GROUP_BLOCK, smem);
            w.arg, x, x_stride as i32, x_group as i32, y, y_stride as i32, n as i32, row0 as i32, nrows as i32,
            tokens as i32);
        Ok(true)
    }

    /// One token through rows `row0 .. row0 + nrows` of `w` for each of
    /// `groups` groups (as `linear_grouped`), by the whole-row kernels
    /// `linear_t1_r{1,2,4}`; with `pair` (one group, row0 0), rows from
    /// `w.rows` on are the pair matrix's, written to its output. Returns
    /// false (nothing launched) where the staged row does not fit in shared
    /// memory.
    #[allow(clippy::too_many_arguments)]
    fn decode_rows(
        &self,
        w: &super::weights::DevMat,
        pair: Option<(&super::weights::DevMat, u64)>,
        x: u64,
        x_group: usize,
        y: u64,
        row0: usize,
        groups: usize,
        nrows: usize,
    ) -> Result<bool> {
        let Some(smem) = row_smem(w.arg.fmt, w.arg.cols as usize) else {
            return Ok(false);
        };
        // without a pair, the second matrix is the first (never reached: na = nrows)
        let (w2, y2, na) = match pair {
            Some((w2, y2)) => (w2.arg, y2, w.arg.rows),
            None => (w.arg, y, nrows as i32),
        };
        let rpw = rows_per_warp(nrows * groups, self.sm_count);
        let kernel = *LINEAR_T1_KERNELS
            .iter()
            .find(|(rows, _)| *rows == rpw)
            .zip(usize::try_from(w.arg.fmt).ok())
            .and_then(|((_, names), f)| names.get(f))
            .ok_or_else(|| anyhow!("a decode product of weight format {}: no kernel for it", w.arg.fmt))?;
        // the staged row, then each warp's weight ring (kernels/linear.cu `linear_rows_fmt`)
        let (warps, smem) = decode_block(smem as usize, rpw, nrows * groups, self.sm_count, |warps, smem| {
            self.resident_blocks(kernel, (warps * 32) as u32, smem as u32)
        })?;
        let (block, smem) = ((warps * 32) as u32, smem as u32);
        // at most the blocks the SMs hold at once (the kernels loop over row groups)
        let fit = self.resident_grid(kernel, block, smem, groups)?;
        let grid = (nrows.div_ceil(warps * rpw).min(fit) as u32, 1, groups as u32);
        crate::launch!(self, kernel, Gpu::cfg(grid, block, smem);
            w.arg, w2, na, x, x_group as i32, y, y2, row0 as i32, nrows as i32);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernel_model::{butterfly, source};
    use super::super::nvrtc;
    use super::*;
    use crate::gpu::weights::MatArg;

    #[test]
    fn limb_constants_are_the_kernels() {
        let src = source("moe_tensor.cu");
        for (name, v) in [
            ("LIMB_K", LIMB_K),
            ("LIMB_PAD", LIMB_PAD),
            ("LIMB_TOKENS", LIMB_TOKENS),
            ("LIMB_STAGES", LIMB_STAGES),
            ("LIMB_WARPS", LIMB_WARPS),
        ] {
            assert!(src.contains(&format!("#define {name} {v} ")), "{name} {v}");
        }
        for (k, bounds) in [
            ("expert_gate_up_bf16", "32 * LIMB_WARPS, LIMB_DECODE_BLOCKS"),
            ("expert_down_bf16", "32 * LIMB_WARPS, LIMB_DECODE_BLOCKS"),
            ("expert_gate_up_bf16_groups", "32 * LIMB_WARPS"),
            ("expert_down_bf16_groups", "32 * LIMB_WARPS"),
        ] {
            assert!(src.contains(&format!("__launch_bounds__({bounds}) {k}(")), "{k}");
            assert!(nvrtc::KERNELS.contains(&k), "{k} is not loaded");
        }
        // DeepSeek-V4-Flash widths take the arm; FP8 experts, ragged widths
        // and rows whose limbs would not fit do not
        assert!(limb_arm(3, 3, 4096, 2048));
        assert_eq!(limb_smem_one(4096), 4096 + 3 * 4112 * 2 + 256);
        assert!(src.contains("return nb % 4 == 0 ? 4 : nb % 2 == 0 ? 2 : 1;"));
        assert_eq!([4096, 2048, 1024, 256, 384].map(limb_parts), [4, 4, 4, 2, 1]);
        assert_eq!(limb_smem_groups(), 4096 + 3 * 48 * 144 * 2);
        assert!(!limb_arm(2, 3, 4096, 2048));
        assert!(!limb_arm(3, 2, 4096, 2048));
        assert!(!limb_arm(3, 3, 4096 + 32, 2048));
        assert!(!limb_arm(3, 3, 4096, 2048 + 64));
        assert!(limb_arm(3, 3, 7168, 2048));
        assert!(!limb_arm(3, 3, 8192, 2048));
        // the attention's projections (kernels/linear_tensor.cu)
        let dense = source("linear_tensor.cu");
        for (k, bounds) in
            [("linear_bf16_one", "32 * LIMB_WARPS, LIMB_DENSE_BLOCKS"), ("linear_bf16_groups", "32 * LIMB_WARPS")]
        {
            assert!(dense.contains(&format!("__launch_bounds__({bounds}) {k}(")), "{k}");
            assert!(nvrtc::KERNELS.contains(&k), "{k} is not loaded");
        }
        assert_eq!(dense_limb_smem_one(8192), 3 * 8208 * 2 + 256);
        assert_eq!(dense_limb_smem_groups(), 3 * 48 * 144 * 2);
        assert_eq!(dynamic_smem_opt_in("linear_bf16_one"), Some(dense_limb_smem_one(16384)));
        // DeepSeek-V4-Flash's projections take it (wo_a: 8 groups of 4096,
        // limbs of the whole 32768-wide row); other weights, ragged rows or
        // groups, and rows past 16384 do not
        assert_eq!(dense_limbs(true, 4096, 1, 0), Some(4096));
        assert_eq!(dense_limbs(true, 4096, 8, 4096), Some(32768));
        assert_eq!(dense_limbs(true, 1024, 1, 0), Some(1024));
        assert_eq!(dense_limbs(false, 4096, 1, 0), None);
        assert_eq!(dense_limbs(true, 4096 + 64, 1, 0), None);
        assert_eq!(dense_limbs(true, 4096, 8, 4096 + 64), None);
        assert_eq!(dense_limbs(true, 16384, 1, 0), Some(16384));
        assert_eq!(dense_limbs(true, 16384 + 128, 1, 0), None);
    }

    #[test]
    fn decode_rows_per_warp_keep_two_blocks_per_sm() {
        // the H200 (132 SMs) at DeepSeek-V4-Flash widths
        assert_eq!(rows_per_warp(129280, 132), 4); // LM head
        assert_eq!(rows_per_warp(32768, 132), 4); // wq_b
        assert_eq!(rows_per_warp(8 * 1024, 132), 4); // wo_a, 8 groups
        assert_eq!(rows_per_warp(4096, 132), 2); // wo_b
        assert_eq!(rows_per_warp(2048, 132), 1); // shared expert w1
        assert_eq!(rows_per_warp(1024, 132), 1); // wq_a
        for (rows, sms) in [(129280, 132), (4096, 132), (5000, 16), (100, 132)] {
            let r = rows_per_warp(rows, sms);
            let blocks = rows.div_ceil(DECODE_WARPS * r);
            assert!(r == 1 || blocks >= 2 * sms, "{rows} rows on {sms} SMs: {r} per warp leaves {blocks} blocks");
        }
    }

    #[test]
    fn linear_t1_kernels_are_named_by_rows_and_format() {
        // each table entry is a LINEAR_T1 line of kernels/linear.cu with the
        // table's rows a warp and format, and is loaded (nvrtc::KERNELS)
        let src = source("linear.cu");
        let fmts = ["FMT_F32", "FMT_BF16", "FMT_FP8", "FMT_FP4"];
        let mut defined = 0;
        for (rows, names) in LINEAR_T1_KERNELS {
            for (name, fmt) in names.into_iter().zip(fmts) {
                assert!(src.contains(&format!("LINEAR_T1({name}, {fmt}, {rows})\n")), "{name}");
                assert!(nvrtc::KERNELS.contains(&name), "{name} is not loaded");
                defined += 1;
            }
        }
        // and no other LINEAR_T1 kernel exists that the table would miss
        assert_eq!(src.matches("\nLINEAR_T1(").count(), defined);
        // the formats' numbers are Mat.fmt's (weights.rs, common.cuh)
        for (f, fmt) in fmts.iter().enumerate() {
            assert!(source("common.cuh").contains(&format!("#define {fmt} {f}\n")));
        }
    }

    #[test]
    fn staged_row_bytes_follow_the_chunk_layout() {
        // FP4 row of 4096: 128 chunks of 32 f64 values, two padding values each
        assert_eq!(row_smem(3, 4096), Some(128 * 34 * 8));
        // BF16 row of 4096: 512 chunks of 8
        assert_eq!(row_smem(1, 4096), Some(512 * 10 * 8));
        assert_eq!(row_smem(2, 16 * 33), Some(33 * 18 * 8));
        // FP8 8192 (wo_b) fits with the opt-in, F32 16384 (192 KiB) does not
        assert_eq!(row_smem(2, 8192), Some(512 * 18 * 8));
        assert_eq!(row_smem(0, 16384), None);
    }

    #[test]
    fn prefill_tiles_follow_the_kernels_window() {
        let src = source("linear.cu");
        assert!(src.contains(&format!("#define TILE_ROWS {TILE_ROWS}\n#define TILE_TOKENS {TILE_TOKENS}\n")));
        // 8 warps: 4 pairs of rows x 2 halves of the tokens
        assert_eq!(TILE_BLOCK as usize, 32 * (TILE_ROWS / 2) * (TILE_TOKENS / 4));
        assert!(src.contains("#define TILE_TOKEN(E) (32 * ((E) + 2))\n"));
        assert!(src.contains("#define TILE_SMEM(E) (TILE_TOKENS * TILE_TOKEN(E) + TILE_TOKENS * 32 * (E) / 2)\n"));
        // FP4: 8 tokens x 32 chunks of 32 f64 values and two padding values, and the 32 as f32
        assert_eq!(tile_smem(3), 8 * 32 * (34 * 8 + 32 * 4));
        assert_eq!(tile_smem(2), 8 * 32 * (18 * 8 + 16 * 4));
        // every format fits under the opt-in that both tile kernels take
        assert!((0..4).all(|f| tile_smem(f) as usize <= ROW_SMEM_MAX));
        assert!(["linear_f32", "linear_grouped"].iter().all(|k| WHOLE_ROW_KERNELS.contains(k)));
        // decode: 4 rows a block of 128; prefill: 8x8 tiles of 256 with the window's bytes
        let (k, c) = tile_launch(["one", "tiles"], 2, 1, 10, 3);
        assert_eq!((k, c.grid_dim, c.block_dim.0, c.shared_mem_bytes), ("one", (3, 1, 3), 128, 0));
        let (k, c) = tile_launch(["one", "tiles"], 2, 17, 10, 1);
        assert_eq!((k, c.grid_dim, c.block_dim.0, c.shared_mem_bytes), ("tiles", (2, 3, 1), 256, tile_smem(2)));
    }

    #[test]
    fn decode_blocks_hold_the_most_warps_an_sm() {
        // a model of the H200's SM: 227 KiB of shared memory (1 KiB reserved a block), 2048 threads
        let held = |warps: usize, smem: usize| Ok((227 * 1024 / (smem + 1024)).min(64 / warps));
        // the LM head (BF16 rows of 4096: 40 KiB staged, 4 rows a warp): 3 blocks of 4 warps, 2 of 8
        let row = row_smem(1, 4096).unwrap() as usize;
        assert_eq!(decode_block(row, 4, 129_280, 132, held).unwrap(), (8, row + 8 * 8192));
        // wo_b (FP8 rows of 8192: 72 KiB, 2 rows a warp): 2 blocks of 8 = 16 warps = 1 of 16: the fewer
        let row = row_smem(2, 8192).unwrap() as usize;
        assert_eq!(decode_block(row, 2, 4096, 132, held).unwrap(), (8, row + 8 * 4096));
        // too few rows for a block of 8 on every SM: 4 warps whatever the SM holds
        assert_eq!(decode_block(9216, 1, 1024, 132, held).unwrap(), (4, 9216 + 4 * 4096));
        // a block that does not fit (occupancy 0) is never taken
        let none_large = |warps: usize, _| Ok(if warps > 4 { 0 } else { 3 });
        assert_eq!(decode_block(row, 2, 1 << 20, 132, none_large).unwrap().0, 4);
        // every choice fits the opt-in
        for (fmt, cols) in [(0, 4096), (1, 4096), (2, 8192), (3, 8192)] {
            let row = row_smem(fmt, cols).unwrap() as usize;
            for rpw in [1, 2, 4] {
                let (_, smem) = decode_block(row, rpw, 1 << 20, 132, held).unwrap();
                assert!(smem <= DECODE_SMEM_MAX, "format {fmt}, {cols} columns, {rpw} rows a warp");
            }
        }
    }

    #[test]
    fn weight_rings_follow_the_kernels() {
        let rows = source("rows.cuh");
        let stages = format!("#define SMEM_RING_STAGES(ND) ((ND) == 1 ? {} : {})\n", ring_stages(1), ring_stages(2));
        assert!(rows.contains(&stages), "kernels/rows.cuh lacks {stages:?}");
        assert!(rows.contains("#define SMEM_RING_WARP_BYTES(ND) (SMEM_RING_STAGES(ND) * (ND) * 32 * 16)\n"));
        assert_eq!(ring_stages(4), ring_stages(2));
        // a warp of 4 FP8 rows: 4 stages of 4 x 32 chunks; of one row, 8 stages of 32
        assert_eq!((ring_smem(4), ring_smem(1)), (4 * 4 * 512, 8 * 512));
        // the rings follow the staged row at a 16-byte boundary (cp.async 16) in every format
        for (fmt, cols) in [(0, 4096), (1, 4096), (2, 8192), (3, 2048)] {
            assert_eq!(row_smem(fmt, cols).unwrap() % 16, 0, "format {fmt}");
        }
        assert!(LINEAR_T1_KERNELS
            .iter()
            .flat_map(|(_, names)| names.iter())
            .all(|k| { dynamic_smem_opt_in(k) == Some(DECODE_SMEM_MAX) }));
        assert_eq!(dynamic_smem_opt_in("expert_gate_up"), Some(ROW_SMEM_MAX));
    }

    /// kernels/rows.cuh `MmaPairsF32::scaled`: a token value v given to an FP8 or FP4 code's product as
    /// the f64 of v with P - 127 added to its exponent field (kernels/common.cuh `Code<FMT>::P`), where
    /// the DMUL by 2^(P - 127) stood. Exact for finite nonzero v; a zero's stand-in times any code (below
    /// 2^(16 - 1023) as value * 2^-P) leaves an fma's addend as it was; not so for BF16's codes.
    #[test]
    fn experts_pairs_scale_by_the_exponent_field() {
        let rows = source("rows.cuh");
        assert!(rows.contains("__double2hiint(d) + ((Code<FMT>::P - 127) << 20), __double2loint(d)"));
        let common = source("common.cuh");
        let p = |fmt: &str| -> i32 {
            let key = format!("struct Code<{fmt}> {{ static const int P = ");
            let at = common.find(&key).unwrap_or_else(|| panic!("common.cuh lacks {key:?}")) + key.len();
            common[at..].split(';').next().unwrap().parse().unwrap()
        };
        // the kernel adds to the high word of the f64 of v, as here to its bits
        let scaled = |v: f32, k: i32| f64::from_bits((v as f64).to_bits().wrapping_add((k as u64) << 52));
        let addends = [0.0, -0.0, f64::from_bits(1), -f64::from_bits(1), f64::MIN_POSITIVE, 1.0, -3.5e-300, 7.25e300];
        for fmt in ["FMT_FP8", "FMT_FP4"] {
            let k = p(fmt) - 127;
            let factor = 2f64.powi(k);
            // every sign and exponent of f32 (subnormals included) with a spread of mantissas
            for sign_exp in 0u32..512 {
                for m in [1u32, 2, 0x40_0000, 0x12_3457, 0x7F_FFFF] {
                    let v = f32::from_bits(sign_exp << 23 | m);
                    if v.is_finite() {
                        assert_eq!(scaled(v, k).to_bits(), (v as f64 * factor).to_bits(), "{fmt} {v:e}");
                    }
                }
            }
            // the product's exponent is below the smallest subnormal's half, 2^-1075
            assert!((16 - 1023) + (k - 1023) < -1076, "{fmt}");
            let code = 2f64.powi(16 - 1023);
            for zero in [scaled(0.0, k), scaled(-0.0, k)] {
                assert_eq!(zero.abs(), 2f64.powi(k - 1023), "{fmt}");
                for c in addends {
                    let r = code.mul_add(zero, c);
                    assert!(r == c && (c != 0.0 || r == 0.0), "{fmt}: fma(code, {zero:e}, {c:e}) = {r:e}");
                }
            }
        }
        // BF16's codes (up to near 2^-768 as value * 2^-P) would not round a zero's stand-in away
        let bf16_zero = scaled(0.0, p("FMT_BF16") - 127);
        assert_ne!(2f64.powi(-769).mul_add(bf16_zero, 0.0), 0.0);
    }

    #[test]
    fn mma_tiles_follow_the_kernels() {
        let rows = source("rows.cuh");
        assert!(rows.contains(&format!("#define MMA_TOKENS {MMA_TOKENS}\n")));
        assert!(rows.contains(&format!("#define MMA_ROWS {MMA_ROWS}\n")));
        assert!(rows.contains(&format!("#define MMA_BLOCK {MMA_BLOCK}\n")));
        assert!(rows.contains(&format!("#define MMA_LEVELS {MMA_LEVELS}\n")));
        assert!(rows.contains(&format!("#define MMA_STAGE_SLABS {MMA_STAGE_SLABS}\n")));
        assert!(rows.contains(&format!("#define MMA_PAIRS {MMA_PAIRS}\n")));
        assert!(rows.contains(&format!("#define MMA_WIDE_COLS {MMA_WIDE_COLS}\n")));
        // the experts' groups: FP4 rows of 4096 (W1, W3: 8 pairs of f32) and 2048 (W2: of f64), and the stacks
        assert_eq!(expert_mma_smem(3, 4096, true, false), Some(8 * 4112 * 4 + 384 * 128));
        assert_eq!(expert_mma_smem(3, 2048, true, true), Some(8 * 2050 * 8 + 384 * 128));
        assert_eq!(expert_mma_smem(2, 2048, true, true), Some(8 * 2050 * 8 + 384 * 128));
        // W1's and W3's pairs stay f32 at any width, and W2's past MMA_WIDE_COLS
        assert_eq!(expert_mma_smem(3, 2048, true, false), Some(8 * 2064 * 4 + 384 * 128));
        assert_eq!(expert_mma_smem(3, 4096, true, true), Some(8 * 4112 * 4 + 384 * 128));
        assert_eq!(expert_mma_smem(3, 2048, false, true), None);
        assert!(MMA_KERNELS.iter().all(|k| nvrtc::KERNELS.contains(k)));
        for k in MMA_KERNELS {
            assert_eq!(dynamic_smem_opt_in(k), Some(MMA_SMEM_MAX), "{k}");
            assert!(source(if k.starts_with("linear_mma") { "linear.cu" } else { "moe.cu" })
                .contains(&format!("__launch_bounds__({MMA_BLOCK}) {k}(")));
        }
        let mat = |fmt: i32, cols: i32, scaled: i32| MatArg { data: 0, scales: 0, rows: 4096, cols, fmt, scaled };
        // FP8 rows of 4096 (8 chunks a lane): two stages of 2 leaves of 16 tokens of 130 f64,
        // 384 stacks of 40 f64, 4096 fetched floats
        assert_eq!(
            mma_smem(&mat(2, 4096, 1), 256, 4096, 0, 0, 1, 4096),
            Some(2 * 2 * 16 * 130 * 8 + 384 * 320 + 4096 * 4)
        );
        // FP4 rows of 2048 (2 chunks a lane: 4 slabs), FP8 rows of 512 (1) and of 8192 (16: wo_b)
        assert_eq!(
            mma_smem(&mat(3, 2048, 1), 256, 2048, 0, 0, 1, 4096),
            Some(2 * 4 * 16 * 66 * 8 + 384 * 320 + 4096 * 4)
        );
        assert_eq!(
            mma_smem(&mat(2, 512, 1), 256, 512, 0, 0, 1, 4096),
            Some(2 * 16 * 16 * 18 * 8 + 384 * 320 + 4096 * 4)
        );
        assert_eq!(mma_smem(&mat(2, 8192, 1), 256, 8192, 0, 0, 1, 4096), Some(2 * 16 * 258 * 8 + 384 * 320 + 4096 * 4));
        // BF16 rows of 4096 (16 chunks of 8 a lane, one m16n8k8 step each): a stage of 1 leaf of 16
        // tokens of 130 f64, the stacks, 16 slabs of 8 fetched floats of 16 tokens; rows of 512 (2):
        // 8 leaves of 18 f64
        assert_eq!(mma_smem(&mat(1, 4096, 1), 256, 4096, 0, 0, 1, 4096), Some(2 * 16 * 130 * 8 + 384 * 320 + 2048 * 4));
        assert_eq!(
            mma_smem(&mat(1, 512, 1), 256, 512, 0, 0, 1, 4096),
            Some(2 * 8 * 16 * 18 * 8 + 384 * 320 + 2048 * 4)
        );
        // BF16 rows of any width in their own kernel; FP8 rows of 512 and 1024 (1 and 2 chunks a lane:
        // wq_b) and FP4 rows of 2048 (2) in the short rows' kernel, FP8 rows of 2048 (4) and more and FP4
        // rows of 4096 (4) in linear_mma
        assert_eq!((mma_kernel(1, 512), mma_kernel(1, 4096)), ("linear_mma_bf16", "linear_mma_bf16"));
        assert_eq!(
            (mma_kernel(2, 512), mma_kernel(2, 1024), mma_kernel(3, 2048)),
            ("linear_mma_short", "linear_mma_short", "linear_mma_short")
        );
        assert_eq!(
            (mma_kernel(2, 2048), mma_kernel(2, 8192), mma_kernel(3, 4096)),
            ("linear_mma", "linear_mma", "linear_mma")
        );
        // not taken: codes that do not scale exactly (BF16's too), F32, BF16 in the experts' tile,
        // chunks that leave lanes idle or are not a power of two a lane or more than 16, inputs
        // off 16 bytes
        assert_eq!(mma_smem(&mat(2, 4096, 0), 256, 4096, 0, 0, 1, 4096), None);
        assert_eq!(mma_smem(&mat(1, 4096, 0), 256, 4096, 0, 0, 1, 4096), None);
        assert_eq!(mma_smem(&mat(0, 4096, 1), 256, 4096, 0, 0, 1, 4096), None);
        assert_eq!(expert_mma_smem(1, 4096, true, false), None);
        assert_eq!(mma_smem(&mat(1, 8192, 1), 256, 8192, 0, 0, 1, 4096), None);
        assert_eq!(mma_smem(&mat(2, 256, 1), 256, 256, 0, 0, 1, 4096), None);
        assert_eq!(mma_smem(&mat(2, 1536, 1), 256, 1536, 0, 0, 1, 4096), None);
        assert_eq!(mma_smem(&mat(2, 4096, 1), 260, 4096, 0, 0, 1, 4096), None);
        assert_eq!(mma_smem(&mat(2, 4096, 1), 256, 4098, 0, 0, 1, 4096), None);
        assert_eq!(mma_smem(&mat(2, 4096, 1), 256, 4096, 2, 0, 1, 4096), None);
        assert_eq!(mma_smem(&mat(2, 16384, 1), 256, 16384, 0, 0, 1, 4096), None);
        // FP4 rows of 16384: 16 chunks a lane, but 32 slabs, more than a stage holds
        assert_eq!(mma_smem(&mat(3, 16384, 1), 256, 16384, 0, 0, 1, 4096), None);
        // FP8 tiles read their 16 rows' one scale block: groups from multiples of 16 rows (wo_a's 8 of
        // 1024), not groups of 40 rows nor rows from 8; FP4's tiles read each row's scales
        let fp8 = mat(2, 4096, 1);
        assert!(mma_smem(&fp8, 256, 4096, 4096, 0, 8, 1024).is_some());
        assert!(mma_smem(&fp8, 256, 4096, 0, 16, 1, 40).is_some());
        assert_eq!(mma_smem(&fp8, 256, 4096, 4096, 0, 2, 40), None);
        assert_eq!(mma_smem(&fp8, 256, 4096, 0, 8, 1, 4096), None);
        assert!(mma_smem(&mat(3, 2048, 1), 256, 2048, 2048, 8, 2, 40).is_some());
    }

    /// kernels/rows.cuh `mma_round` adds a tile's 32 leaves (the lanes'
    /// sums) in bit-reversed order onto a stack of subtrees
    /// (`mma_leaf_push`: leaf m adds the levels of its trailing ones, then
    /// stores the sum at the next): the same additions as `warp_sum`'s
    /// butterfly, so the same bits.
    #[test]
    fn leaf_stack_gives_the_butterfly_bits() {
        fn stacked(x: &[f64; 32], order: impl Fn(usize) -> usize) -> f64 {
            let mut st = [0.0f64; MMA_LEVELS];
            let mut s = 0.0;
            for m in 0..32 {
                s = x[order(m)];
                let ones = (!m).trailing_zeros() as usize;
                for e in &st[..ones] {
                    s += *e;
                }
                if ones < MMA_LEVELS {
                    st[ones] = s;
                }
            }
            s
        }
        let brev5 = |l: usize| (l as u32).reverse_bits() as usize >> 27;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut natural_differs, mut in_order_differs) = (0, 0);
        for _ in 0..2000 {
            let mut x = [0.0f64; 32];
            for e in x.iter_mut() {
                let r = next();
                let mag = f64::from_bits(0x3ff0_0000_0000_0000 | (r >> 12)) - 1.0;
                *e = mag * 2f64.powi((r % 61) as i32 - 30) * if r & (1 << 7) != 0 { -1.0 } else { 1.0 };
            }
            let want = butterfly(x);
            assert_eq!(stacked(&x, brev5).to_bits(), want.to_bits(), "{x:?}");
            // teeth: leaves stacked in their natural order, or summed left to right, differ
            natural_differs += usize::from(stacked(&x, |l| l).to_bits() != want.to_bits());
            in_order_differs += usize::from(x.iter().sum::<f64>().to_bits() != want.to_bits());
        }
        assert!(natural_differs > 500 && in_order_differs > 500, "{natural_differs} {in_order_differs}");
    }

    #[test]
    fn groups_follow_the_kernels() {
        assert!(source("rows.cuh").contains(&format!("#define GROUP_TOKENS {GROUP_TOKENS}\n")));
        let (moe, linear) = (source("moe.cu"), source("linear.cu"));
        assert!(source("rows.cuh").contains(&format!("#define GROUP_ROWS {GROUP_ROWS}\n")));
        assert!(moe.contains(&format!("__launch_bounds__({GROUP_BLOCK}) expert_gate_up_groups(")));
        assert!(moe.contains(&format!("__launch_bounds__({GROUP_BLOCK}) expert_down_groups(")));
        assert!(linear.contains(&format!("__launch_bounds__({GROUP_BLOCK}) linear_groups(")));
        assert!(GROUP_KERNELS.iter().all(|k| nvrtc::KERNELS.contains(k)));
        // DeepSeek-V4-Flash: FP4 experts, 4 staged rows of 4096 (W1, W3) and of 2048 (W2)
        assert_eq!(group_smem(3, 4096, 4), Some(4 * 128 * 34 * 8));
        assert_eq!(group_smem(3, 2048, 4), Some(4 * 64 * 34 * 8));
        // FP8 `wo_b` (8192 columns) too wide for 4 tokens: groups of 2; the
        // fused arm keeps the per-pair kernels for experts too wide
        assert_eq!(group_smem(2, 4096, 4), Some(4 * 256 * 18 * 8));
        assert_eq!(group_smem(2, 8192, 4), None);
        assert_eq!(group_smem(2, 8192, 2), Some(2 * 512 * 18 * 8));
        assert_eq!(group_smem(0, 8192, 2), Some(2 * 2048 * 6 * 8));
        assert_eq!(group_smem(0, 16384, 2), None);
        // the dense products: 4 tokens where they fit, else 2, else the tiles
        assert_eq!(linear_group_tokens(2, 4096), Some((4, 4 * 256 * 18 * 8)));
        assert_eq!(linear_group_tokens(2, 8192), Some((2, 2 * 512 * 18 * 8)));
        assert_eq!(linear_group_tokens(0, 16384), None);
    }
}
