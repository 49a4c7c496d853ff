//! The attention and MoE blocks and the head of `Dsv4Gpu`, as kernel
//! launches (the same steps as `cpu/forward.rs`).

use anyhow::{Context, Result};

use super::device::Gpu;
use super::forward::{Dsv4Gpu, Fault, MoeArm, Pass};
use super::products::{
    expert_mma_smem, group_smem, limb_parts, limb_smem_groups, limb_smem_one, row_smem, DECODE_WARPS, GROUP_BLOCK,
    GROUP_TOKENS, LIMB_TOKENS, LIMB_WARPS, MMA_BLOCK, MMA_PAIRS,
};
use super::state::{GpuState, ARGMAX_SLICES, LOGIT_ROWS};
use super::weights::{DevLayer, MatLayout};
use crate::config::{AttnKind, ScoringFunc};
use crate::cpu::ops::indexer;
use crate::cpu::{Logits, Variant};
use crate::launch;

/// Rows per warp of `expert_gate_up` (of W1 and of W3 each) and of
/// `expert_down` (kernels/moe.cu `ER_GATE_UP`, `ER_DOWN`).
const ER_GATE_UP: usize = 2;
const ER_DOWN: usize = 4;

/// Pairs an expert on average from which the fused MoE arm takes the expert
/// groups (kernels/moe.cu `expert_gate_up_groups`, `expert_down_groups`;
/// [`GROUP_TOKENS`] pairs of one expert a block): below it most groups would
/// hold a pair or two, and the per-pair kernels use the SMs better. At
/// DeepSeek-V4-Flash widths (256 experts, 6 a token) from 171 tokens.
const EXPERT_GROUP_MIN_PAIRS: usize = 4;

/// Shared bytes `attention_rows` takes per key: its logit (f64) and the
/// key row's address.
pub(super) const ATTENTION_SMEM_PER_KEY: usize = 16;

/// Keys per `indexer_scores` block (kernels/indexer.cu `IDX_KB`).
const INDEXER_KEYS_PER_BLOCK: usize = 8;

/// Index heads at most (kernels/indexer.cu `IDX_HEADS`; the forward checks
/// the config) and the values of a head the tensor-core scores take (`32
/// IDX_KM`: four a lane, one m16n8k4 instruction's k).
const INDEXER_HEADS: usize = 64;
const INDEXER_MMA_DIM: usize = 128;
/// `indexer_scores_mma`'s warps (`IDXM_WARPS`: 4 tiles of 16 heads by 2 of
/// 8 keys), the keys of a stage (`IDXM_KEYS`) and the doubles of a staged
/// key row (`IDXM_ROW`: 128 values, 28 of padding between leaves and 8 at
/// the end).
const INDEXER_MMA_WARPS: usize = 8;
const INDEXER_MMA_KEYS: usize = 16;
const INDEXER_MMA_ROW: usize = 164;
/// Doubles of `indexer_scores_mma`'s queries (`IDXM_Q2` double2s: the
/// heads' values and a double2 of padding a leaf).
const INDEXER_MMA_QUERIES: usize = INDEXER_HEADS * INDEXER_MMA_DIM + 2 * 32;
/// Shared bytes of `indexer_scores_mma`: the queries as f64, a stage's keys
/// as f64 and its terms (a key's row of [`INDEXER_HEADS`]).
pub(super) const INDEXER_MMA_SMEM: usize =
    (INDEXER_MMA_QUERIES + INDEXER_MMA_KEYS * INDEXER_MMA_ROW + INDEXER_MMA_KEYS * INDEXER_HEADS) * 8;

// two blocks an SM (its launch bounds), of the 227 KiB an SM's blocks may take
const _: () = assert!(2 * INDEXER_MMA_SMEM <= 227 << 10);

/// Whether the scores of `n` tokens go on the FP64 tensor cores
/// (`indexer_scores_mma`, indexer_scores' bits): heads of
/// [`INDEXER_MMA_DIM`] values, whole tiles of 16 heads, and a token a
/// block for at least as many tokens as SMs. Fewer tokens (decode's one)
/// keep `indexer_scores`, which spreads a token's keys over blocks.
fn indexer_mma(heads: usize, di: usize, n: usize, sm_count: usize) -> bool {
    di == INDEXER_MMA_DIM && heads.is_multiple_of(16) && heads <= INDEXER_HEADS && n >= sm_count
}

/// The attention kernels' key groups (kernels/attention.cu `ATT_GROUPS`:
/// key j in group j % 16, a warp each).
const ATTENTION_GROUPS: usize = 16;

/// Output rows of f64 partials `attention_rows` keeps in the same shared
/// memory after the keys (groups g + 8 added into g).
pub(super) const ATTENTION_GROUP_PARTIALS: usize = ATTENTION_GROUPS / 2;

/// Keys `attention_rows` can hold: the 48 KiB a launch gets without opting
/// in, less its 32 static doubles (3056; at DeepSeek-V4-Flash widths an
/// HCA layer reaches it at about 375k positions).
pub(super) const ATTENTION_MAX_KEYS: usize = ((48 << 10) - 32 * 8) / ATTENTION_SMEM_PER_KEY;

/// Head widths above which a head may be split between the two blocks of
/// `attention_rows_pair` (each takes 2 of a lane's 4 float4s of the
/// output, 256 elements; kernels/attention.cu `attention_heads`).
const ATTENTION_SPLIT_MIN_DIM: usize = 256;

/// Keys `attention_rows_h2` (two heads a block, a logit per head) can hold
/// in the same 48 KiB; with more, the launch takes one head a block.
const ATTENTION_H2_MAX_KEYS: usize = ((48 << 10) - 32 * 8) / (ATTENTION_SMEM_PER_KEY + 8);
// DeepSeek-V4-Flash's prefill keys (a window of 128, 512 selected entries) fit
const _: () = assert!(128 + 512 <= ATTENTION_H2_MAX_KEYS);

/// Heads a block of the prefill's attention on the tensor cores
/// (kernels/attention.cu `ATT_MMA_HEADS`: the instruction's m), and the head
/// width it takes (a lane's 16 elements: one instruction's k).
const ATTENTION_MMA_HEADS: usize = 16;
const ATTENTION_MMA_DIM: usize = 512;
/// Doubles of a row of `attention_mma`'s weights (`ATT_MMA_ROW`: 16 heads
/// and 4 of padding); a row a key, in [`ATTENTION_GROUPS`] groups of whole
/// instructions' keys.
const ATTENTION_MMA_ROW: usize = 20;
/// Leaves of key values each warp of `attention_mma`'s logits has in
/// flight (`ATT_MMA_AHEAD`), and the floats of a key in a leaf's slot
/// (`ATT_MMA_KEY`: 16 and 4 of padding).
const ATTENTION_MMA_AHEAD: usize = 4;
const ATTENTION_MMA_KEY: usize = 20;
/// What `attention_mma` opts in to: its weights, the queries and the key
/// addresses (one 512-thread block an SM either way); the rest of the 227
/// KiB a block may take holds its static reductions.
pub(super) const ATTENTION_MMA_SMEM_MAX: usize = 224 << 10;

/// Shared bytes of `attention_mma` for a launch whose tokens see at most
/// `keys` keys (the weights: [`ATTENTION_GROUPS`] x ceil(keys / 16) rows;
/// the 16 heads' queries as f64, which the outputs' rings of key values
/// take after the logits; the key rows' addresses, an even count; the
/// logits' rings: 8 keys a leaf, a ring a warp), or None past what it opts
/// in to.
fn attention_mma_smem(keys: usize) -> Option<u32> {
    let rows = ATTENTION_GROUPS * keys.div_ceil(ATTENTION_GROUPS);
    let rings = ATTENTION_GROUPS * ATTENTION_MMA_AHEAD * 8 * ATTENTION_MMA_KEY * 4;
    let bytes = rows * ATTENTION_MMA_ROW * 8
        + ATTENTION_MMA_HEADS * ATTENTION_MMA_DIM * 8
        + keys.next_multiple_of(2) * 8
        + rings;
    (bytes <= ATTENTION_MMA_SMEM_MAX).then_some(bytes as u32)
}
// DeepSeek-V4-Flash's prefill keys fit
const _: () = assert!((16 * 40 * 20 + 16 * 512 + 640) * 8 + 16 * 4 * 8 * 20 * 4 <= ATTENTION_MMA_SMEM_MAX);

/// Threads of an `rms_norm_rope` block (kernels/norm.cu: one row a block)
/// for rows of `width` values and `npairs` rotated pairs: 128 where each
/// thread then takes the same one float4 (or none) and the same pair as
/// with 256, and the block's sum of squares is the same (block_sum adds
/// the warps' totals in order from zero; the fifth to eighth warps' are
/// zeros): the heads' rows of 512 at DeepSeek-V4-Flash's widths. Twice
/// the rows an SM holds at once. Else 256 (the row's float4s, or its
/// floats where they are not whole, thread-strided over 256).
pub(super) fn norm_rope_block(width: usize, npairs: usize) -> u32 {
    if width.is_multiple_of(4) && width <= 4 * 128 && npairs <= 128 {
        128
    } else {
        256
    }
}

/// Rows of an `rms_norm_rope_warps` block (kernels/norm.cu
/// `NORM_ROPE_WARPS`: a warp a row).
pub(super) const NORM_ROPE_WARPS: usize = 4;

/// Key rows a block of `rms_norm_f32_key_rope` takes after its latent rows
/// (kernels/norm.cu `KEY_ROPE_WARPS`: a warp a row; its latent rows' blocks
/// are `rms_norm_f32`'s 256 threads).
const KEY_ROPE_WARPS: usize = 8;

/// Whether `rms_norm_rope_warps` takes rows of `width` values with
/// `npairs` rotated pairs (16-byte aligned rows and weights): where
/// `rms_norm_rope` takes blocks of 128 threads, whose work its lanes do
/// four threads each, and the rotated part starts at a float4, so that
/// each lane rotates the pairs of its own float4s.
pub(super) fn norm_rope_warps(width: usize, npairs: usize) -> bool {
    norm_rope_block(width, npairs) == 128 && 2 * npairs <= width && (width - 2 * npairs).is_multiple_of(4)
}

/// Whether every device address of `ptrs` is 16-byte aligned (0, no
/// buffer, is): the float4 loads of the warp-a-row norms.
fn float4_aligned(ptrs: &[u64]) -> bool {
    ptrs.iter().all(|p| p % 16 == 0)
}

/// The most tokens a chunk may have for its decode attention to take one
/// head a cluster of two blocks (`attention_rows_pair`): the clusters
/// fill at most half of the `sm_count` SMs. Only such chunks read the
/// rotations the key's norm writes (`Scratch::rot`, sized by this).
pub(super) fn attention_pair_tokens(sm_count: usize, heads: usize) -> usize {
    sm_count / 2 / heads.max(1)
}

/// One launch of the heads' RMS norm and rotation: `rows` rows of `x`
/// (`heads` a token; weight `w`, 0 for none) and `n2` rows of `x2` (one a
/// token; weight `w2`), `width` values each, normalized then their last
/// `npairs` pairs rotated at the token's position from `pos0`, in place.
/// `rms_norm_rope_warps` where it takes the widths and the addresses, else
/// `rms_norm_rope`: the same bits.
pub(super) struct NormRope {
    pub x: u64,
    pub w: u64,
    pub heads: usize,
    pub rows: usize,
    pub x2: u64,
    pub w2: u64,
    pub n2: usize,
    pub width: usize,
    pub eps: f32,
    pub inv_freq: u64,
    pub npairs: usize,
    pub pos0: usize,
}

impl NormRope {
    pub(super) fn launch(&self, g: &Gpu) -> Result<()> {
        let (heads, rows, n2, width) = (self.heads as i32, self.rows as i32, self.n2 as i32, self.width as i32);
        let (npairs, pos0) = (self.npairs as i32, self.pos0 as i32);
        if float4_aligned(&[self.x, self.w, self.x2, self.w2]) && norm_rope_warps(self.width, self.npairs) {
            let blocks = (self.rows + self.n2).div_ceil(NORM_ROPE_WARPS) as u32;
            launch!(g, "rms_norm_rope_warps", Gpu::cfg((blocks, 1, 1), (32 * NORM_ROPE_WARPS) as u32, 0);
                self.x, self.w, heads, rows, self.x2, self.w2, n2, width, self.eps, self.inv_freq, npairs, pos0);
        } else {
            let blocks = (self.rows + self.n2) as u32;
            launch!(g, "rms_norm_rope", Gpu::cfg((blocks, 1, 1), norm_rope_block(self.width, self.npairs), 0);
                self.x, self.w, heads, rows, self.x2, self.w2, width, self.eps, self.inv_freq, npairs, pos0);
        }
        Ok(())
    }
}

impl Dsv4Gpu {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &self,
        st: &mut GpuState,
        si: usize,
        l: usize,
        dl: &DevLayer,
        n: usize,
        t0: usize,
        pass: Pass,
    ) -> Result<()> {
        let c = &self.config;
        let stage = &self.stages[si];
        let g: &Gpu = &stage.gpu;
        let (rope_main, rope_compress) = (stage.rope_main.ptr, stage.rope_compress.ptr);
        let lc = self.state_layout.layers[l];
        let (d, nh, hd, rd) = (c.hidden_size, c.num_attention_heads, c.head_dim, c.rope_dim);
        let npairs = (rd / 2) as i32;
        let kind = c.layer_types[l];
        if pass == Pass::Block && kind != AttnKind::Window {
            // before any launch: a block pass must not touch the compressed classes
            anyhow::bail!("a block pass runs window layers only (layer {l} is {kind:?})");
        }
        let rope = if kind == AttnKind::Window { rope_main } else { rope_compress };
        let shift = matches!(self.opts.fault, Some(Fault::ShiftRope { layer }) if layer == l);
        let pos0 = (t0 + shift as usize) as i32;
        let fp8 = self.opts.variant == Variant::Fp8;
        let eps = c.rms_norm_eps as f32;
        let sc = &st.scratch[si];

        self.mark(si, "attn.q_kv")?;
        let hq = self.act(g, &sc.h, &sc.hq, n, d)?;
        let (mut mode, mut entries, mut sel, mut topk, mut ratio, mut max_ent) =
            (0i32, 0u64, 0u64, 0i32, 1usize, 0usize);
        let pool_block = |w: usize| (w.max(32).div_ceil(32) * 32) as u32;
        // each compressor's weights and its pending and entry classes
        // (address, rows, entries' address)
        let class = |ci: usize| &st.kv.classes[ci];
        let comp_pool = match (&dl.compressor, lc.comp_pending, lc.comp_entries) {
            (Some(cw), Some(pend), Some(ent)) => Some((cw, class(pend).ptr, class(pend).rows, class(ent).ptr)),
            _ => None,
        };
        let index_pool = match (&dl.idx_compressor, &dl.idx_wq_b, &dl.idx_weights_proj, lc.idx_pending, lc.idx_entries)
        {
            (Some(ic), Some(wq), Some(wp), Some(pend), Some(ent)) => {
                Some((ic, wq, wp, class(pend).ptr, class(pend).rows, class(ent).ptr))
            }
            _ => None,
        };
        if let Some((_, _, _, eb)) = comp_pool {
            ratio = c.compress_ratio(l);
            mode = if kind == AttnKind::Hca { 1 } else { 2 };
            entries = eb;
            max_ent = st.capacity() / ratio + 1;
        }
        let closing = (t0 + n) / ratio - t0 / ratio;
        let (hi, di) = (c.index_n_heads, c.index_head_dim);
        // while the chunk's last token sees at most `index_topk` entries, the
        // indexer selects every visible entry in order whatever it scores
        // (cpu/ops/indexer.rs `selects_all`): its queries, weights, scores and
        // top-k are skipped, and the attention reads the entries as an HCA
        // layer does, the same keys in the same order (kernels/attention.cu
        // `key_row`), so the same bits. Its compressor still writes entries.
        // entries the chunk's last token sees
        let vis_max = (t0 + n) / ratio;
        let index_query = index_pool.filter(|_| !indexer::selects_all(vis_max, c.index_topk));
        // the compressors and the indexer's head weights read only the
        // layer's input: a branch beside the queries and keys
        let branched = comp_pool.is_some() || index_pool.is_some();
        if branched {
            g.branch(|| {
                if let Some((cw, pb, prows, eb)) = comp_pool {
                    let overlap = kind == AttnKind::Csa;
                    let w = if overlap { 2 * hd } else { hd };
                    g.lin_pair(&cw.wkv, &cw.wgate, sc.h.ptr, sc.ckv.ptr, sc.cgate.ptr, n)?;
                    if closing > 0 {
                        launch!(g, "compress_pool", Gpu::cfg((closing as u32, 1, 1), pool_block(hd), (hd * 8) as u32);
                            sc.ckv.ptr, sc.cgate.ptr, pb, prows as i32, t0 as i32, n as i32, ratio as i32,
                            overlap as i32, hd as i32, cw.ape.ptr, cw.norm.ptr, eps, rope_compress, npairs,
                            fp8 as i32, eb);
                    }
                    launch!(g, "compress_ring_append", Gpu::cfg((n.min(prows) as u32, 1, 1), 256, 0);
                        pb, prows as i32, sc.ckv.ptr, sc.cgate.ptr, w as i32, n as i32, t0 as i32);
                }
                if let Some((ic, _, _, pb, prows, eb)) = index_pool {
                    g.lin_pair(&ic.wkv, &ic.wgate, sc.h.ptr, sc.ikv.ptr, sc.igate.ptr, n)?;
                    if closing > 0 {
                        launch!(g, "compress_pool", Gpu::cfg((closing as u32, 1, 1), pool_block(di), (di * 8) as u32);
                            sc.ikv.ptr, sc.igate.ptr, pb, prows as i32, t0 as i32, n as i32, ratio as i32, 1i32,
                            di as i32, ic.ape.ptr, ic.norm.ptr, eps, rope_compress, npairs,
                            if fp8 { 2i32 } else { 0 }, eb);
                    }
                    launch!(g, "compress_ring_append", Gpu::cfg((n.min(prows) as u32, 1, 1), 256, 0);
                        pb, prows as i32, sc.ikv.ptr, sc.igate.ptr, (2 * di) as i32, n as i32, t0 as i32);
                }
                if let Some((_, _, wp, ..)) = index_query {
                    self.lin(g, wp, sc.h.ptr, sc.iw.ptr, n)?;
                }
                Ok(())
            })?;
        }
        // one head a cluster of two blocks (decode, where one head a block
        // would leave half the SMs idle; the kernel chosen below): these
        // blocks normalize and rotate their own head's query, and the key's
        // row is taken in the query latent's norm launch, off the path, with
        // the rotations the queries take at the same position (`sc.rot`):
        // the same sums and roundings as `NormRope`'s warps
        let pair = n <= attention_pair_tokens(g.sm_count, nh) && hd > ATTENTION_SPLIT_MIN_DIM;
        let heads_in_attention = pair
            && norm_rope_warps(hd, npairs as usize)
            && n * hd <= sc.rot.len
            && float4_aligned(&[sc.q.ptr, sc.kv.ptr, dl.kv_norm.ptr, sc.rot.ptr]);
        self.proj_pair(g, sc, &dl.wq_a, &dl.wkv, hq, sc.qr.ptr, sc.kv.ptr, n)?;
        if heads_in_attention {
            let blocks = (n + n.div_ceil(KEY_ROPE_WARPS)) as u32;
            launch!(g, "rms_norm_f32_key_rope", Gpu::cfg((blocks, 1, 1), (32 * KEY_ROPE_WARPS) as u32, 0);
                sc.qr.ptr, dl.q_norm.ptr, c.q_lora_rank as i32, n as i32, sc.kv.ptr, dl.kv_norm.ptr, n as i32,
                hd as i32, eps, rope, npairs, pos0, sc.rot.ptr);
        } else {
            self.norm(g, sc.qr.ptr, dl.q_norm.ptr, n, c.q_lora_rank)?;
        }
        let qrq = self.act(g, &sc.qr, &sc.qrq, n, c.q_lora_rank)?;
        // the indexer's queries read the same input: one launch for both
        // where they pair (`lin_pair`: one format and width, one token);
        // the indexer's keep the exact sums under the `tensor` sums
        match index_query {
            Some((_, wq, ..)) if !self.proj_tensor(&dl.wq_b) => {
                g.lin_pair(&dl.wq_b, wq, qrq, sc.q.ptr, sc.iq.ptr, n)?
            }
            Some((_, wq, ..)) => {
                self.proj(g, sc, &dl.wq_b, qrq, sc.q.ptr, n)?;
                self.lin(g, wq, qrq, sc.iq.ptr, n)?
            }
            None => self.proj(g, sc, &dl.wq_b, qrq, sc.q.ptr, n)?,
        }
        // each head's query normalized (no weight) and rotated, and the key
        // (with its norm's weight), in one launch
        if !heads_in_attention {
            NormRope {
                x: sc.q.ptr,
                w: 0,
                heads: nh,
                rows: n * nh,
                x2: sc.kv.ptr,
                w2: dl.kv_norm.ptr,
                n2: n,
                width: hd,
                eps,
                inv_freq: rope,
                npairs: npairs as usize,
                pos0: pos0 as usize,
            }
            .launch(g)?;
        }
        if fp8 {
            let nope = hd - rd;
            launch!(g, "kv_fp8_rows", Gpu::cfg((n as u32, nope.div_ceil(64) as u32, 1), 64, 0); sc.kv.ptr, hd as i32, nope as i32);
        }
        if let Some((_, _, _, _, _, eb)) = index_query {
            self.mark(si, "attn.indexer")?;
            launch!(g, "rope_rows", Gpu::cfg(((n * hi) as u32, 1, 1), 32, 0); sc.iq.ptr, hi as i32, di as i32, rope_compress, npairs, pos0, 0i32);
            if fp8 {
                launch!(g, "indexer_rows", Gpu::cfg(((n * hi) as u32, 1, 1), pool_block(di), (di * 8) as u32); sc.iq.ptr, di as i32);
            }
            if branched {
                g.branch_join()?;
            }
            let me = sc.max_entries;
            if indexer_mma(hi, di, n, g.sm_count) {
                let block = (INDEXER_MMA_WARPS * 32) as u32;
                launch!(g, "indexer_scores_mma", Gpu::cfg((n as u32, 1, 1), block, INDEXER_MMA_SMEM as u32);
                    sc.iq.ptr, sc.iw.ptr, eb, hi as i32, ratio as i32, t0 as i32, me as i32, (hi as f32).sqrt(),
                    sc.scores.ptr);
            } else {
                // key groups per token: at most what the SMs hold at once (the blocks loop over groups)
                let fit = g.resident_grid("indexer_scores", 256, 0, n)?;
                let groups = vis_max.div_ceil(INDEXER_KEYS_PER_BLOCK).clamp(1, fit);
                launch!(g, "indexer_scores", Gpu::cfg((n as u32, groups as u32, 1), 256, 0);
                    sc.iq.ptr, sc.iw.ptr, eb, hi as i32, di as i32, ratio as i32, t0 as i32, me as i32,
                    (hi as f32).sqrt(), sc.scores.ptr);
            }
            launch!(g, "indexer_topk", Gpu::cfg((n as u32, 1, 1), 1024, 0);
                sc.scores.ptr, ratio as i32, t0 as i32, me as i32, c.index_topk as i32, sc.sel.ptr);
            sel = sc.sel.ptr;
            topk = c.index_topk as i32;
            max_ent = c.index_topk;
        } else {
            if index_pool.is_some() {
                // every visible entry, as HCA reads them; at most `index_topk`
                // of them, the bound the indexed steps give the attention
                mode = 1;
                max_ent = c.index_topk;
            }
            if branched {
                g.branch_join()?;
            }
        }

        if pass == Pass::Block {
            (mode, topk, max_ent) = (3, n as i32, n);
        }
        self.mark(si, "attn.core")?;
        let kv_ring = &st.kv.classes[lc.kv];
        let max_keys = c.sliding_window + max_ent;
        // 16 heads a block on the tensor cores (the prefill), where that
        // still gives every SM two blocks and their weights fit
        let mma_smem = attention_mma_smem(max_keys)
            .filter(|_| hd == ATTENTION_MMA_DIM && nh % ATTENTION_MMA_HEADS == 0)
            .filter(|_| n * nh / ATTENTION_MMA_HEADS >= 2 * g.sm_count);
        // else two heads a block (each key row loaded once for both) where
        // that still gives every SM two blocks and both heads' logits fit
        let two = nh % 2 == 0 && n * nh / 2 >= 2 * g.sm_count && max_keys <= ATTENTION_H2_MAX_KEYS;
        // else one head a block on at most half the SMs (decode): each head
        // a cluster of two blocks, each computing half of the logits and
        // half of the output's elements (`pair` above)
        // the row kernels' logits (and addresses), then their groups' partials in the same memory
        let rows_smem = |per_key: usize| (max_keys * per_key).max(ATTENTION_GROUP_PARTIALS * hd * 8);
        let (kernel, heads_per_block, split, smem) = match (mma_smem, two, pair) {
            (Some(smem), ..) => ("attention_mma", ATTENTION_MMA_HEADS, 1, smem as usize),
            (None, true, _) => ("attention_rows_h2", 2, 1, rows_smem(ATTENTION_SMEM_PER_KEY + 8)),
            (None, false, true) => ("attention_rows_pair", 1, 2, rows_smem(ATTENTION_SMEM_PER_KEY)),
            (None, false, false) => ("attention_rows", 1, 1, rows_smem(ATTENTION_SMEM_PER_KEY)),
        };
        let cfg = Gpu::cfg((n as u32, (nh / heads_per_block) as u32, split), 512, smem as u32);
        let scale = 1.0f64 / (hd as f64).sqrt();
        if heads_in_attention {
            anyhow::ensure!(
                kernel == "attention_rows_pair",
                "layer {l}: the heads' norm was left to {kernel}, which does not take it"
            );
            launch!(g, "attention_rows_pair_normed", cfg;
                sc.q.ptr, kv_ring.ptr, kv_ring.rows as i32, sc.kv.ptr, entries, sel, topk, mode, ratio as i32,
                t0 as i32, c.sliding_window as i32, dl.sink.ptr, hd as i32, scale, npairs, eps, sc.rot.ptr,
                sc.attn.ptr);
        } else {
            launch!(g, kernel, cfg;
                sc.q.ptr, kv_ring.ptr, kv_ring.rows as i32, sc.kv.ptr, entries, sel, topk, mode, ratio as i32,
                t0 as i32, c.sliding_window as i32, dl.sink.ptr, hd as i32, scale, rope, npairs, pos0, sc.attn.ptr);
        }
        if pass == Pass::Commit {
            // beside the output projection; joined with the shared
            // expert's branch at the end of the layer's MoE (`moe`), before
            // anything writes the key again
            g.branch(|| {
                launch!(g, "ring_append", Gpu::cfg((n.min(kv_ring.rows) as u32, 1, 1), 256, 0);
                    kv_ring.ptr, kv_ring.rows as i32, sc.kv.ptr, hd as i32, n as i32, t0 as i32);
                Ok(())
            })?;
        }
        // grouped low-rank output projection
        self.mark(si, "attn.out")?;
        let (gs, ol) = (c.o_groups, c.o_lora_rank);
        let gin = nh * hd / gs;
        self.proj_grouped(g, sc, &dl.wo_a, sc.attn.ptr, nh * hd, gin, sc.oa.ptr, gs * ol, n, gs, ol)?;
        let oaq = self.act(g, &sc.oa, &sc.oaq, n, gs * ol)?;
        self.proj(g, sc, &dl.wo_b, oaq, sc.a.ptr, n)?;
        Ok(())
    }

    /// The MoE of `n` tokens (their ids at `ids`, a device address, for
    /// the hash-routed layers).
    pub(super) fn moe(&self, st: &mut GpuState, si: usize, dl: &DevLayer, ids: u64, n: usize) -> Result<()> {
        let c = &self.config;
        let g: &Gpu = &self.stages[si].gpu;
        let sc = &st.scratch[si];
        let (d, k, inter, ne) = (c.hidden_size, c.num_experts_per_tok, c.moe_intermediate_size, c.n_routed_experts);
        let lim = c.swiglu_limit as f32;
        self.mark(si, "moe.router")?;
        let hq = self.act(g, &sc.h, &sc.hq, n, d)?;
        // the shared expert: a branch beside the routing and the routed experts
        g.branch(|| {
            let si_inter = dl.shared.w1.arg.rows as usize;
            g.lin_pair(&dl.shared.w1, &dl.shared.w3, hq, sc.sg.ptr, sc.su.ptr, n)?;
            let len = n * si_inter;
            launch!(g, "swiglu_rows", Gpu::cfg((len.div_ceil(256) as u32, 1, 1), 256, 0); sc.sg.ptr, sc.su.ptr, lim, len as i32, sc.sh.ptr);
            let shq = self.act(g, &sc.sh, &sc.shq, n, si_inter)?;
            self.lin(g, &dl.shared.w2, shq, sc.sout.ptr, n)
        })?;
        self.lin(g, &dl.gate, sc.h.ptr, sc.rlogits.ptr, n)?;
        let func = match c.scoring_func {
            ScoringFunc::SqrtSoftplus => 0i32,
            ScoringFunc::Sigmoid => 1,
            ScoringFunc::Softmax => 2,
        };
        launch!(g, "moe_route", Gpu::cfg((n as u32, 1, 1), 256, (ne * 12) as u32);
            sc.rlogits.ptr, ne as i32, k as i32, dl.bias.as_ref().map_or(0, |b| b.ptr),
            dl.tid2eid.as_ref().map_or(0, |b| b.ptr), ids, func, c.norm_topk_prob as i32,
            c.routed_scaling_factor as f32, sc.ridx.ptr, sc.rwts.ptr);
        self.mark(si, "moe.experts")?;
        let npairs = n * k;
        // the expert kernels' grids and staged rows
        let (f13, f2) = dl.expert_fmts;
        // the `tensor` expert sums where the layer's experts lie in row tiles
        // (gpu/weights.rs `experts_layout`: the tensor sums and
        // gpu/products.rs `limb_arm`, decided at upload; kernels/moe_tensor.cu),
        // else the exact sums; prefill and decode alike
        let limbs = dl.experts_layout == MatLayout::RowTiles;
        let group_pairs = npairs >= EXPERT_GROUP_MIN_PAIRS * ne;
        // the pairs listed by expert into pair_lists (kernels/moe.cu
        // `moe_group_pairs`), and with a groups buffer (not 0) cut into
        // groups of up to `per_group` pairs of one expert
        let list_by_expert = |groups: u64, ngroups: usize, per_group: usize| -> Result<()> {
            launch!(g, "moe_group_pairs", Gpu::cfg((1, 1, 1), 1024, (2 * ne * 4) as u32);
                sc.ridx.ptr, npairs as i32, ne as i32, sc.pair_lists.ptr, groups, ngroups as i32, per_group as i32);
            Ok(())
        };
        if limbs && self.opts.moe == MoeArm::Fused && group_pairs {
            // groups of one expert's pairs on the tensor cores, their inputs
            // as limb rows (kernels/moe_tensor.cu `limb_rows`)
            let ngroups = npairs.div_ceil(LIMB_TOKENS) + ne;
            list_by_expert(sc.expert_groups.ptr, ngroups, LIMB_TOKENS)?;
            let grid_y = ngroups.min(u16::MAX as usize) as u32;
            let (block, smem) = ((LIMB_WARPS * 32) as u32, limb_smem_groups() as u32);
            launch!(g, "limb_rows", Gpu::cfg((n as u32, 1, 1), 256, 0); hq, d as i32, d as i32, sc.limbs.ptr);
            launch!(g, "expert_gate_up_bf16_groups",
                Gpu::cfg((inter.div_ceil(16 * LIMB_WARPS) as u32, grid_y, 1), block, smem);
                dl.w1s.ptr, dl.w3s.ptr, sc.limbs.ptr, d as i32, sc.ridx.ptr, sc.rwts.ptr, k as i32,
                sc.pair_lists.ptr, sc.expert_groups.ptr, ngroups as i32, lim, inter as i32, sc.hmid.ptr);
            let hm = self.act(g, &sc.hmid, &sc.hmidq, npairs, inter)?;
            launch!(g, "limb_rows", Gpu::cfg((npairs as u32, 1, 1), 256, 0); hm, inter as i32, inter as i32, sc.limbs.ptr);
            launch!(g, "expert_down_bf16_groups", Gpu::cfg((d.div_ceil(32 * LIMB_WARPS) as u32, grid_y, 1), block, smem);
                dl.w2s.ptr, sc.limbs.ptr, inter as i32, sc.ridx.ptr, sc.pair_lists.ptr, sc.expert_groups.ptr,
                ngroups as i32, d as i32, sc.slot_out.ptr);
            return g.branch_join();
        }
        // the one-token kernels (each pair's rows on its own): names, grids,
        // block and staged rows
        let ([gate_up_one, down_one], gu_x, down_x, block, gu_smem, down_smem) = if limbs {
            // a block's warps: LIMB_WARPS / parts tiles, one K part each
            let x = |rows: usize, per_tile: usize, cols: usize| {
                rows.div_ceil(per_tile * (LIMB_WARPS / limb_parts(cols))) as u32
            };
            let block = (LIMB_WARPS * 32) as u32;
            let (gu, down) = (limb_smem_one(d) as u32, limb_smem_one(inter) as u32);
            (["expert_gate_up_bf16", "expert_down_bf16"], x(inter, 8, d), x(d, 16, inter), block, gu, down)
        } else {
            let smem = |fmt: i32, cols: usize| {
                row_smem(fmt, cols)
                    .with_context(|| format!("an expert input of {cols} values does not fit in shared memory"))
            };
            let x = |rows: usize, per_warp: usize| rows.div_ceil(DECODE_WARPS * per_warp) as u32;
            let block = (DECODE_WARPS * 32) as u32;
            let (gu, down) = (smem(f13, d)?, smem(f2, inter)?);
            (["expert_gate_up", "expert_down"], x(inter, ER_GATE_UP), x(d, ER_DOWN), block, gu, down)
        };
        // the expert groups (their staged rows' shared bytes, pairs a group,
        // block and kernels), where there are enough pairs an expert for
        // groups and their rows fit: on the FP64 tensor cores where every
        // expert's rows are scaled codes the tile takes (kernels/moe.cu
        // `expert_gate_up_mma`), else the group kernels; the same sums
        let tensor = expert_mma_smem(f13, d, dl.experts_scaled, false)
            .zip(expert_mma_smem(f2, inter, dl.experts_scaled, true))
            .map(|s| (s, MMA_PAIRS, MMA_BLOCK, ["expert_gate_up_mma", "expert_down_mma"]));
        let groups = tensor
            .or_else(|| {
                group_smem(f13, d, GROUP_TOKENS)
                    .zip(group_smem(f2, inter, GROUP_TOKENS))
                    .map(|s| (s, GROUP_TOKENS, GROUP_BLOCK, ["expert_gate_up_groups", "expert_down_groups"]))
            })
            .filter(|_| group_pairs && !limbs);
        match (self.opts.moe, groups) {
            (MoeArm::Fused, Some(((gu_smem, down_smem), per_group, group_block, [gate_up, down]))) => {
                // the pairs listed by expert and cut into groups of one
                // expert's pairs (kernels/moe.cu `moe_group_pairs`), each
                // weight decoded once for the group's pairs
                let ngroups = npairs.div_ceil(per_group) + ne;
                list_by_expert(sc.expert_groups.ptr, ngroups, per_group)?;
                let grid_y = ngroups.min(u16::MAX as usize) as u32;
                launch!(g, gate_up, Gpu::cfg((1, grid_y, 1), group_block, gu_smem);
                    dl.w1s.ptr, dl.w3s.ptr, hq, d as i32, sc.ridx.ptr, sc.rwts.ptr, k as i32, sc.pair_lists.ptr,
                    sc.expert_groups.ptr, ngroups as i32, lim, inter as i32, sc.hmid.ptr);
                let hm = self.act(g, &sc.hmid, &sc.hmidq, npairs, inter)?;
                launch!(g, down, Gpu::cfg((1, grid_y, 1), group_block, down_smem);
                    dl.w2s.ptr, hm, inter as i32, sc.ridx.ptr, sc.pair_lists.ptr, sc.expert_groups.ptr,
                    ngroups as i32, d as i32, sc.slot_out.ptr);
            }
            (MoeArm::Fused, None) => {
                // a few tokens: the pairs listed by expert (no groups), so
                // that one expert's weights serve its pairs from L2; one
                // token's pairs as they come
                let pairs = if n > 1 {
                    list_by_expert(0, 0, 0)?;
                    sc.pair_lists.ptr
                } else {
                    sc.pairs.ptr
                };
                launch!(g, gate_up_one, Gpu::cfg((gu_x, npairs as u32, 1), block, gu_smem);
                    dl.w1s.ptr, dl.w3s.ptr, hq, d as i32, sc.ridx.ptr, sc.rwts.ptr, k as i32, pairs, lim,
                    inter as i32, sc.hmid.ptr);
                let hm = self.act(g, &sc.hmid, &sc.hmidq, npairs, inter)?;
                launch!(g, down_one, Gpu::cfg((down_x, npairs as u32, 1), block, down_smem);
                    dl.w2s.ptr, hm, inter as i32, sc.ridx.ptr, pairs, d as i32, sc.slot_out.ptr);
            }
            (MoeArm::PerExpert, _) => {
                let idx = g.download(&sc.ridx, npairs)?;
                let mut lists: Vec<Vec<i32>> = vec![Vec::new(); ne];
                for (p, &e) in idx.iter().enumerate() {
                    lists[e as usize].push(p as i32);
                }
                let flat: Vec<i32> = lists.iter().flatten().copied().collect();
                let sc = &mut st.scratch[si];
                g.write(&mut sc.pair_lists, &flat)?;
                let sc = &st.scratch[si];
                let mut off = 0;
                for list in &lists {
                    if !list.is_empty() {
                        launch!(g, gate_up_one, Gpu::cfg((gu_x, list.len() as u32, 1), block, gu_smem);
                            dl.w1s.ptr, dl.w3s.ptr, hq, d as i32, sc.ridx.ptr, sc.rwts.ptr, k as i32,
                            sc.pair_lists.at(off), lim, inter as i32, sc.hmid.ptr);
                    }
                    off += list.len();
                }
                let hm = self.act(g, &sc.hmid, &sc.hmidq, npairs, inter)?;
                let mut off = 0;
                for list in &lists {
                    if !list.is_empty() {
                        launch!(g, down_one, Gpu::cfg((down_x, list.len() as u32, 1), block, down_smem);
                            dl.w2s.ptr, hm, inter as i32, sc.ridx.ptr, sc.pair_lists.at(off), d as i32, sc.slot_out.ptr);
                    }
                    off += list.len();
                }
            }
        }
        // the slots and the shared expert are combined by hc_post, after both
        g.branch_join()
    }

    /// Logits (or their argmax) of the rows `which` selects.
    pub(super) fn head(
        &self,
        st: &mut GpuState,
        n: usize,
        which: Logits,
        greedy: bool,
    ) -> Result<(Vec<f32>, Vec<i32>)> {
        let c = &self.config;
        let si = st.scratch.len() - 1;
        let stage = &self.stages[si];
        let g = &stage.gpu;
        let rows: Vec<i32> = match which {
            Logits::All => (0..n as i32).collect(),
            Logits::Last => vec![n as i32 - 1],
            Logits::None => vec![],
        };
        let v = c.vocab_size;
        self.mark(si, "head")?;
        let mut logits = Vec::new();
        let mut arg = Vec::new();
        for chunk in rows.chunks(LOGIT_ROWS) {
            let cnt = chunk.len();
            g.write(&mut st.scratch[si].head_rows, chunk)?;
            let sc = &st.scratch[si];
            let argmax = greedy.then_some(sc.argmax.ptr);
            self.head_rows(sc, sc.head_rows.ptr, cnt, argmax)?;
            if greedy {
                arg.extend(g.download(&sc.argmax, cnt)?);
            } else {
                logits.extend(g.download(&sc.logits, cnt * v)?);
            }
        }
        for s in &self.stages {
            s.gpu.sync()?;
        }
        Ok((logits, arg))
    }

    /// Enqueue the logits of `cnt` head rows (their indices at `rows`, a
    /// device address) on the last stage: the streams collapsed, the final
    /// norm, the head; with `argmax` (a device address), each row's
    /// greedy token written there too.
    pub(super) fn head_rows(
        &self,
        sc: &super::state::Scratch,
        rows: u64,
        cnt: usize,
        argmax: Option<u64>,
    ) -> Result<()> {
        let stage = self.stages.last().expect("a model has a stage");
        let g = &stage.gpu;
        let head = stage.head.as_ref().expect("the last stage holds the head");
        let norm = stage.norm.as_ref().expect("the last stage holds the final norm").ptr;
        let hcw = stage.hc_head.as_ref().expect("the last stage holds hc_head");
        self.hc_head(g, sc, hcw, rows, cnt, Some(norm))?;
        self.lin(g, head, sc.hy.ptr, sc.logits.ptr, cnt)?;
        if let Some(out) = argmax {
            launch!(g, "argmax_slices", Gpu::cfg((cnt as u32, ARGMAX_SLICES as u32, 1), 256, 0);
                sc.logits.ptr, self.config.vocab_size as i32, sc.argmax_v.ptr, sc.argmax_i.ptr);
            launch!(g, "argmax_rows", Gpu::cfg((cnt as u32, 1, 1), ARGMAX_SLICES as u32, 0);
                sc.argmax_v.ptr, sc.argmax_i.ptr, out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::synth::rng::Rng;

    /// kernels/common.cuh `warp_sum`: lane l adds lane l ^ o's value, o = 16, 8, 4, 2, 1.
    fn butterfly(mut v: [f64; 32]) -> f64 {
        for o in [16, 8, 4, 2, 1] {
            let prev = v;
            for (l, x) in v.iter_mut().enumerate() {
                *x = prev[l] + prev[l ^ o];
            }
        }
        v[0]
    }

    /// kernels/norm.cu `rms_norm_row`'s sum of squares of a row of `x`
    /// (whole float4s, aligned) in a block of `block` threads: thread t's
    /// fmas over float4s t, t + block, ... in order, each warp's butterfly,
    /// then the warps' totals in order from zero (`block_sum`).
    fn norm_sum_of_squares(x: &[f32], block: usize) -> f64 {
        let n4 = x.len() / 4;
        let thread = |t: usize| {
            (t..n4)
                .step_by(block)
                .fold(0.0f64, |ss, i| x[4 * i..4 * i + 4].iter().fold(ss, |ss, &v| (v as f64).mul_add(v as f64, ss)))
        };
        (0..block / 32).fold(0.0, |total, w| total + butterfly(std::array::from_fn(|l| thread(32 * w + l))))
    }

    /// `norm_rope_block`'s 128 threads give the 256 threads' bits for the
    /// widths it takes them for, and not for rows past 512 values.
    #[test]
    fn norm_rope_blocks_of_128_keep_the_sums() {
        let mut rng = Rng::new(7, "norm-rope", 0);
        for width in [16, 64, 128, 256, 512, 1024, 2048] {
            let mut same = true;
            for _ in 0..200 {
                let mut x = vec![0.0f32; width];
                rng.fill_normal(&mut x, 0.0, 1.0);
                same &= norm_sum_of_squares(&x, 128).to_bits() == norm_sum_of_squares(&x, 256).to_bits();
            }
            assert_eq!(super::norm_rope_block(width, 32) == 128, width <= 512, "width {width}");
            assert_eq!(same, width <= 512, "width {width}");
        }
        assert_eq!(super::norm_rope_block(510, 32), 256);
        assert_eq!(super::norm_rope_block(512, 200), 256);
    }

    /// `rms_norm_rope_warps`' sum of squares (lane l's chains of float4s
    /// l + 32 u, each u's chains summed by the butterfly, the four totals
    /// from zero in u order) gives `rms_norm_rope`'s bits at the widths
    /// `norm_rope_warps` takes; a lane's chains added before the butterfly
    /// do not (the test's teeth). Each rotated pair lies in one lane's
    /// float4, where that lane's rotation of it finds it.
    #[test]
    fn norm_rope_warps_keep_the_sums() {
        assert_eq!(kernel_define("norm.cu", "NORM_ROPE_WARPS"), super::NORM_ROPE_WARPS);
        assert_eq!(kernel_define("norm.cu", "KEY_ROPE_WARPS"), super::KEY_ROPE_WARPS);
        let mut rng = Rng::new(8, "norm-rope-warps", 0);
        let mut teeth = false;
        for width in [16, 64, 128, 256, 512] {
            assert!(super::norm_rope_warps(width, 8));
            for _ in 0..200 {
                let mut x = vec![0.0f32; width];
                rng.fill_normal(&mut x, 0.0, 1.0);
                let chain = |q: usize| {
                    let v = x.get(4 * q..4 * q + 4).unwrap_or(&[]);
                    v.iter().fold(0.0f64, |ss, &v| (v as f64).mul_add(v as f64, ss))
                };
                let warps = (0..4).fold(0.0, |t, u| t + butterfly(std::array::from_fn(|l| chain(l + 32 * u))));
                assert_eq!(warps.to_bits(), norm_sum_of_squares(&x, 256).to_bits(), "width {width}");
                let lanes_first = butterfly(std::array::from_fn(|l| (0..4).fold(0.0, |a, u| a + chain(l + 32 * u))));
                teeth |= lanes_first.to_bits() != warps.to_bits();
            }
        }
        assert!(teeth, "the lanes' chains in another order never changed a sum: the test has no teeth");
        for (width, npairs) in [(512, 32), (512, 64), (512, 0), (64, 16), (64, 32)] {
            assert!(super::norm_rope_warps(width, npairs), "{width} {npairs}");
            // float4 q >= r4 rotates pairs 2 (q - r4) and 2 (q - r4) + 1 at its elements 0, 1 and 2, 3
            let r4 = (width - 2 * npairs) / 4;
            let mut pairs: Vec<usize> = Vec::new();
            for q in r4..width / 4 {
                for k in 0..2 {
                    let i = 2 * (q - r4) + k;
                    assert_eq!(4 * q + 2 * k, width - 2 * npairs + 2 * i);
                    pairs.push(i);
                }
            }
            assert_eq!(pairs, (0..npairs).collect::<Vec<_>>());
        }
        // rotated parts off a float4, rows past 512 values or not of whole float4s, more pairs than values
        for (width, npairs) in [(512, 31), (512, 33), (1024, 32), (510, 32), (516, 32), (64, 33)] {
            assert!(!super::norm_rope_warps(width, npairs), "{width} {npairs}");
        }
    }

    /// A reduce-scatter of W sums a lane over the warp: halved at each o
    /// of `halve` (each lane keeps the half its bit o selects and adds the
    /// partner's same half), then the one left summed at each o of `rest`
    /// as `warp_sum` does. Returns each lane's (the value its bits select,
    /// its total). kernels/indexer.cu `indexer_scores`: W = 8, halved at
    /// 16, 8, 4, then 2 and 1; kernels/common.cuh `warp_sums32`: W = 32,
    /// halved at 16, 8, 4, 2, 1.
    fn reduce_scatter<const W: usize>(d: &[[f64; W]; 32], halve: &[usize], rest: &[usize]) -> Vec<(usize, f64)> {
        let mut d = *d;
        let mut width = W;
        for &o in halve {
            width /= 2;
            let prev = d;
            for (l, dl) in d.iter_mut().enumerate() {
                let j0 = if l & o != 0 { width } else { 0 };
                for (i, x) in dl.iter_mut().take(width).enumerate() {
                    *x = prev[l][j0 + i] + prev[l ^ o][j0 + i];
                }
            }
        }
        for &o in rest {
            let prev = d;
            for (l, dl) in d.iter_mut().enumerate() {
                dl[0] = prev[l][0] + prev[l ^ o][0];
            }
        }
        (0..32)
            .map(|l| {
                let mut width = W;
                let value = halve.iter().fold(0, |v, &o| {
                    width /= 2;
                    v + if l & o != 0 { width } else { 0 }
                });
                (value, d[l][0])
            })
            .collect()
    }

    /// `reduce_scatter` of `halve` and `rest` on random lanes gives each
    /// value the butterfly's bits on the lanes `writes` selects, and the
    /// halvings in the order `swapped` do not (the test's teeth).
    fn assert_butterfly_bits<const W: usize>(
        seed: u64,
        halve: &[usize],
        rest: &[usize],
        swapped: &[usize],
        writes: impl Fn(usize) -> bool,
    ) {
        let mut rng = Rng::new(seed, "reduce_scatter", W as u64);
        let mut other_order_differs = false;
        for _ in 0..2000 {
            let d: [[f64; W]; 32] = std::array::from_fn(|_| std::array::from_fn(|_| spread(&mut rng)));
            let want: Vec<f64> = (0..W).map(|k| butterfly(std::array::from_fn(|l| d[l][k]))).collect();
            let got = reduce_scatter(&d, halve, rest);
            let mut written: Vec<usize> = (0..32).filter(|&l| writes(l)).map(|l| got[l].0).collect();
            written.sort_unstable();
            assert_eq!(written, (0..W).collect::<Vec<_>>(), "each value written once");
            for l in (0..32).filter(|&l| writes(l)) {
                let (k, v) = got[l];
                assert_eq!(v.to_bits(), want[k].to_bits(), "value {k} on lane {l}");
            }
            other_order_differs |= reduce_scatter(&d, swapped, rest)
                .iter()
                .enumerate()
                .any(|(l, &(k, v))| writes(l) && v.to_bits() != want[k].to_bits());
        }
        assert!(other_order_differs, "a different pairing never changed a sum: the test has no teeth");
    }

    /// The value of `#define name N` in kernels/`file` (a number).
    fn kernel_define(file: &str, name: &str) -> usize {
        let src = super::super::nvrtc::SOURCES.iter().find(|(n, _)| *n == file).unwrap().1;
        let at = src.find(&format!("#define {name} ")).unwrap_or_else(|| panic!("{file}: {name}"));
        src[at..].split_whitespace().nth(2).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{file}: {name}"))
    }

    fn spread(rng: &mut Rng) -> f64 {
        let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
        let exp = (rng.next_u64() % 61) as i32 - 30;
        sign * rng.uniform() * 2f64.powi(exp)
    }

    #[test]
    fn attention_keys_fit_one_and_two_heads_a_block() {
        // 48 KiB less the 32 static doubles: 16 bytes a key for one head
        // (a logit and the row's address), 24 for two
        assert_eq!(super::ATTENTION_MAX_KEYS, 3056);
        assert_eq!(super::ATTENTION_H2_MAX_KEYS, 2037);
        // the kernels' head counts: attention_rows and attention_rows_pair one,
        // attention_rows_h2 two
        let src = super::super::nvrtc::SOURCES.iter().find(|(n, _)| *n == "attention.cu").unwrap().1;
        let body = |entry: &str| {
            let at = src.find(&format!(" {entry}(")).unwrap();
            src[at..].split("attention_heads<").nth(1).unwrap().split(',').next().unwrap().to_string()
        };
        assert_eq!(body("attention_rows"), "1");
        assert_eq!(body("attention_rows_pair"), "1");
        assert_eq!(body("attention_rows_pair_normed"), "1");
        assert_eq!(body("attention_rows_h2"), "2");
    }

    #[test]
    fn attention_mma_layout_follows_the_kernel() {
        let define = |name: &str| kernel_define("attention.cu", name);
        assert_eq!(define("ATT_MMA_HEADS"), super::ATTENTION_MMA_HEADS);
        assert_eq!(define("ATT_MMA_ROW"), super::ATTENTION_MMA_ROW);
        assert_eq!(define("ATT_GROUPS"), super::ATTENTION_GROUPS);
        assert_eq!(define("ATT_MMA_AHEAD"), super::ATTENTION_MMA_AHEAD);
        assert_eq!(define("ATT_MMA_KEY"), super::ATTENTION_MMA_KEY);
        // the outputs' rings (a slot of 16 keys x 16 values a step) fill the queries' 64 KiB
        assert_eq!(super::ATTENTION_GROUPS * define("ATT_MMA_OUT_AHEAD") * 16 * 16 * 4, 16 * 512 * 8);
        // a lane's elements of a head (kernels/attention.cu `ATT_Q4` float4s) are one instruction's k
        assert_eq!(define("ATT_Q4") * 128, super::ATTENTION_MMA_DIM);
        // the Flash prefill's 640 keys: 40 rows a group, 64 KiB of queries, 640 addresses,
        // 16 rings of 4 leaves of 8 keys of 20 floats
        let rings = 16 * 4 * 8 * 20 * 4;
        assert_eq!(super::attention_mma_smem(640), Some(16 * 40 * 20 * 8 + 65536 + 640 * 8 + rings));
        // one key past a whole row of each group takes a row more of each, and an address of padding
        assert_eq!(super::attention_mma_smem(641), Some(16 * 41 * 20 * 8 + 65536 + 642 * 8 + rings));
        let most = (1..4096).take_while(|&k| super::attention_mma_smem(k).is_some()).last().unwrap();
        assert_eq!(most, 720);
        assert!(super::attention_mma_smem(721).is_none());
        assert_eq!(super::super::products::dynamic_smem_opt_in("attention_mma"), Some(super::ATTENTION_MMA_SMEM_MAX));
    }

    #[test]
    fn indexer_mma_layout_follows_the_kernel() {
        let define = |name: &str| kernel_define("indexer.cu", name);
        assert_eq!(define("IDX_HEADS"), super::INDEXER_HEADS);
        assert_eq!(32 * define("IDX_KM"), super::INDEXER_MMA_DIM);
        assert_eq!(define("IDXM_WARPS"), super::INDEXER_MMA_WARPS);
        assert_eq!(define("IDXM_KEYS"), super::INDEXER_MMA_KEYS);
        assert_eq!(define("IDXM_ROW"), super::INDEXER_MMA_ROW);
        // 4 tiles of 16 heads by 2 of 8 keys: a warp each
        assert_eq!(super::INDEXER_MMA_WARPS, (super::INDEXER_HEADS / 16) * (super::INDEXER_MMA_KEYS / 8));
        // the queries' 64 KiB and 512 bytes, 16 keys of 164 doubles, 16 x 64 terms
        let src = super::super::nvrtc::SOURCES.iter().find(|(n, _)| *n == "indexer.cu").unwrap().1;
        assert!(src.contains("#define IDXM_Q2 (32 * (IDX_HEADS / 16) * 32 + 32)"));
        assert_eq!(super::INDEXER_MMA_QUERIES, 2 * (32 * (define("IDX_HEADS") / 16) * 32 + 32));
        assert_eq!(super::INDEXER_MMA_SMEM, 65536 + 512 + 16 * 164 * 8 + 16 * 64 * 8);
        let opt_in = super::super::products::dynamic_smem_opt_in("indexer_scores_mma");
        assert_eq!(opt_in, Some(super::INDEXER_MMA_SMEM));
        assert!(super::super::nvrtc::KERNELS.contains(&"indexer_scores_mma"));
        // DeepSeek-V4-Flash's indexer (64 heads of 128) from 132 tokens on an H200's 132 SMs; not
        // for decode's one token, heads of 64 values, 8 heads or more than 64
        assert!(super::indexer_mma(64, 128, 4096, 132));
        assert!(super::indexer_mma(64, 128, 132, 132));
        assert!(super::indexer_mma(16, 128, 256, 132));
        assert!(!super::indexer_mma(64, 128, 131, 132));
        assert!(!super::indexer_mma(64, 128, 1, 132));
        assert!(!super::indexer_mma(64, 64, 4096, 132));
        assert!(!super::indexer_mma(8, 128, 4096, 132));
        assert!(!super::indexer_mma(80, 128, 4096, 132));
    }

    /// Wavefronts a warp's shared-memory access of 8-byte words takes (the
    /// most distinct words in one of the 16 double-wide banks).
    fn wavefronts(words: impl Iterator<Item = usize>) -> usize {
        let mut banks: Vec<Vec<usize>> = vec![Vec::new(); 16];
        for w in words {
            if !banks[w % 16].contains(&w) {
                banks[w % 16].push(w);
            }
        }
        banks.iter().map(Vec::len).max().unwrap()
    }

    #[test]
    fn indexer_mma_fragments_give_the_scores_bits() {
        // kernels/indexer.cu `idxm_at`: where value l + 32 m of a staged key row lies
        fn at(l: usize, m: usize) -> usize {
            4 * l + 4 * (l >> 2) + m
        }
        let src = super::super::nvrtc::SOURCES.iter().find(|(n, _)| *n == "indexer.cu").unwrap().1;
        assert!(src.contains("int idxm_at(int l, int m) { return 4 * l + 4 * (l >> 2) + m; }"));
        let (heads, di, keys, row) = (super::INDEXER_HEADS, super::INDEXER_MMA_DIM, 16, super::INDEXER_MMA_ROW);
        assert!(at(31, 3) < row);
        let mut rng = Rng::new(3, "indexer-mma", 0);
        let (mut q, mut k) = (vec![0f32; heads * di], vec![0f32; keys * di]);
        rng.fill_normal(&mut q, 0.0, 1.0);
        rng.fill_normal(&mut k, 0.0, 1.0);
        // indexer_scores' dot: lane l's chain of fmas over values l + 32 m, then the lanes' tree
        let dot = |h: usize, s: usize, tree: fn([f64; 32]) -> f64| {
            tree(std::array::from_fn(|l| {
                (0..4).fold(0.0, |acc, m| (q[h * di + l + 32 * m] as f64).mul_add(k[s * di + l + 32 * m] as f64, acc))
            }))
        };
        // the shared memory as the kernel lays it out: the queries' pairs of heads g and g + 8 at
        // (l, tile, m, g); the keys by idxm_at, staged a float4 an item
        // kernels/indexer.cu `idxm_q_at`: where a query value's pair of heads lies (double2s)
        fn q_at(l: usize, tile: usize, m: usize, g: usize) -> usize {
            (l * 4 + tile) * 32 + m * 8 + g + l
        }
        assert!(src.contains("{ return (l * 4 + tile) * 32 + m * 8 + g + l; }"));
        let mut qs = vec![[f64::NAN; 2]; super::INDEXER_MMA_QUERIES / 2];
        for pr in 0..heads / 2 {
            let (tile, g) = (pr >> 3, pr & 7);
            for e in 0..di {
                let h = 16 * tile + g;
                qs[q_at(e & 31, tile, e >> 5, g)] = [q[h * di + e] as f64, q[(h + 8) * di + e] as f64];
            }
        }
        let mut ks = vec![f64::NAN; keys * row];
        for i in 0..keys * di / 4 {
            let (key, e) = (i / (di / 4), 4 * (i % (di / 4)));
            for j in 0..4 {
                ks[key * row + at(e & 31, e >> 5) + 4 * j] = k[key * di + e + j] as f64;
            }
        }
        for warp in 0..super::INDEXER_MMA_WARPS {
            let (tile, n0) = (warp & 3, 8 * (warp >> 2));
            let mut st = [[[0f64; 4]; 5]; 32];
            let mut x = [[0f64; 4]; 32];
            for mi in 0..32usize {
                // the mi-th instruction takes leaf l: A[r][c] = q[16 tile + r][l + 32 c], B[c][n] = key n0 + n's
                let l = ((mi as u32).reverse_bits() >> 27) as usize;
                let a = |r: usize, c: usize| qs[q_at(l, tile, c, r & 7)][r >> 3];
                let b = |c: usize, n: usize| ks[(n0 + n) * row + at(l, c)];
                for (lane, (xl, sl)) in x.iter_mut().zip(st.iter_mut()).enumerate() {
                    let (g, qq) = (lane >> 2, lane & 3);
                    // thread (g, q)'s outputs D[g + 8 (i / 2)][2 q + i % 2]: the chain over k from zero
                    let mut xv: [f64; 4] = std::array::from_fn(|i| {
                        let (r, n) = (g + 8 * (i >> 1), 2 * qq + (i & 1));
                        (0..4).fold(0.0, |acc, c| a(r, c).mul_add(b(c, n), acc))
                    });
                    let ones = mi.trailing_ones() as usize;
                    for level in &sl[..ones] {
                        xv = std::array::from_fn(|i| level[i] + xv[i]);
                    }
                    if ones < 5 {
                        sl[ones] = xv;
                    }
                    *xl = xv;
                }
            }
            for (lane, xl) in x.iter().enumerate() {
                for (i, v) in xl.iter().enumerate() {
                    let (h, s) = (16 * tile + (lane >> 2) + 8 * (i >> 1), n0 + 2 * (lane & 3) + (i & 1));
                    assert_eq!(v.to_bits(), dot(h, s, butterfly).to_bits(), "head {h}, key {s}");
                }
            }
        }
        // another order of the lanes' sum gives other bits
        let sequential = |v: [f64; 32]| v.iter().sum::<f64>();
        assert!((0..heads).any(|h| (0..keys).any(|s| dot(h, s, sequential) != dot(h, s, butterfly))));
        // two wavefronts (the least for 32 doubles) for a warp's B reads of a leaf (thread (g, q):
        // key g's value q) and for each of the staging's four stores (lane j: key i / 32 of item i)
        for l in 0..32 {
            assert_eq!(wavefronts((0..32).map(|ln| (ln >> 2) * row + at(l, ln & 3))), 2);
        }
        // four (512 bytes) for the queries' reads (a leaf and tile) and stores (a pair and value)
        for (l, tile) in (0..32).flat_map(|l| (0..4).map(move |t| (l, t))) {
            let words = (0..32).flat_map(|ln| [0, 1].map(|h| 2 * q_at(l, tile, ln & 3, ln >> 2) + h));
            assert_eq!(wavefronts(words), 4);
        }
        for (pr, m) in (0..heads / 2).flat_map(|pr| (0..4).map(move |m| (pr, m))) {
            let words = (0..32).flat_map(|l| [0, 1].map(|h| 2 * q_at(l, pr >> 3, m, pr & 7) + h));
            assert_eq!(wavefronts(words), 4, "pair {pr}, value {m}");
        }
        for (w, jj) in (0..keys * di / 4 / 32).flat_map(|w| (0..4).map(move |jj| (w, jj))) {
            let word = |i: usize| (i / 32) * row + at((4 * (i % 32)) & 31, (4 * (i % 32)) >> 5) + 4 * jj;
            assert_eq!(wavefronts((32 * w..32 * w + 32).map(word)), 2, "warp {w}, store {jj}");
        }
    }

    #[test]
    fn indexer_reduce_scatter_gives_the_butterfly_bits() {
        // eight heads a warp; the lanes with (lane & 3) == 0 write, head 4 b4 + 2 b3 + b2
        assert_butterfly_bits::<8>(7, &[16, 8, 4], &[2, 1], &[4, 8, 16], |l| l & 3 == 0);
    }

    #[test]
    fn hc_site_reduce_scatter_gives_the_butterfly_bits() {
        // 32 sums a lane; lane l is left with value l. The butterfly is warp_sum's, whose tree
        // hc_site_rows computes on the tensor cores (tree32 below): hc_site (decode) and
        // hc_site_rows (prefill) give the same bits
        assert_butterfly_bits::<32>(11, &[16, 8, 4, 2, 1], &[], &[1, 2, 4, 8, 16], |_| true);
        let d: [[f64; 32]; 32] = std::array::from_fn(|l| std::array::from_fn(|k| (l * 32 + k) as f64));
        assert!(reduce_scatter(&d, &[16, 8, 4, 2, 1], &[]).iter().enumerate().all(|(l, &(k, _))| k == l));
    }

    /// warp_sum's tree of 32 products of floats by one thread, level by
    /// level, each pair (j, j + 16) one fma of the second product onto the
    /// first: the reference for hc_site_rows' sums (kernels/hc.cu
    /// `mix_mma`'s leaves and stack, `square_tree`).
    fn tree32(g: &[f32; 32], x: &[f32; 32]) -> f64 {
        let leaf = |j: usize| (g[j + 16] as f64).mul_add(x[j + 16] as f64, g[j] as f64 * x[j] as f64);
        let mut p: [f64; 8] = std::array::from_fn(leaf);
        for (j, pj) in p.iter_mut().enumerate() {
            *pj += leaf(j + 8);
        }
        for o in [4, 2, 1] {
            for j in 0..o {
                p[j] += p[j + o];
            }
        }
        p[0]
    }

    #[test]
    fn hc_site_rows_trees_give_the_butterfly_bits() {
        // the tree by one thread (hc_site_rows' reference below, its squares' square_tree) against
        // warp_sum's butterfly (hc_site's bits) over the same 32 products of floats, which are
        // exact in f64
        let mut rng = Rng::new(13, "hc_tree", 32);
        let mut sequential_differs = false;
        for _ in 0..4000 {
            let g: [f32; 32] = std::array::from_fn(|_| spread(&mut rng) as f32);
            let x: [f32; 32] = std::array::from_fn(|_| spread(&mut rng) as f32);
            let products: [f64; 32] = std::array::from_fn(|l| g[l] as f64 * x[l] as f64);
            let want = butterfly(products);
            assert_eq!(tree32(&g, &x).to_bits(), want.to_bits(), "{g:?} {x:?}");
            // the squares (kernels/hc.cu `square_tree`)
            assert_eq!(
                tree32(&x, &x).to_bits(),
                butterfly(std::array::from_fn(|l| x[l] as f64 * x[l] as f64)).to_bits()
            );
            sequential_differs |= products.iter().sum::<f64>().to_bits() != want.to_bits();
        }
        assert!(sequential_differs, "another order never changed a sum: the test has no teeth");
    }

    /// kernels/hc.cu `hc_x_at`: where element e of a slice lies in a staged
    /// row (a warp's 32 a group, the second half one double on).
    fn hc_x_at(e: usize) -> usize {
        use super::super::state::HC_X_GROUP;
        (e >> 5) * HC_X_GROUP + (e & 31) + ((e >> 4) & 1)
    }

    #[test]
    fn hc_site_rows_mma_gives_the_tree_bits() {
        // mix_mma's fragments, instruction by instruction: warp w's leaf l of rows g, g + 8 and
        // token g (thread (g, q < 2): element l + 16 q of its group; q = 2, 3: A = 0, B = -0), the
        // instruction's chain of fmas over k from -0, the 16 leaves onto the stack in bit-reversed
        // order; against warp_sum's tree (hc_site's bits) of fn's row times x'
        use super::super::state::{HC_MMA_ROWS, HC_ROWS_TOKENS, HC_SLICE, HC_X_GROUP, HC_X_ROW};
        let src = super::super::nvrtc::SOURCES.iter().find(|(n, _)| *n == "hc.cu").unwrap().1;
        assert!(src.contains("int hc_x_at(int e) { return (e >> 5) * HC_X_GROUP + (e & 31) + ((e >> 4) & 1); }"));
        assert!(src.contains("+ w * HC_X_GROUP + 17 * (q & 1);"));
        let (rows, tokens) = (HC_MMA_ROWS, HC_ROWS_TOKENS);
        let mut rng = Rng::new(17, "hc_mma", 0);
        let brev4 = |mi: usize| ((mi & 1) << 3) | ((mi & 2) << 1) | ((mi & 4) >> 1) | ((mi & 8) >> 3);
        let mut natural_differs = false;
        for _ in 0..40 {
            let f: Vec<f32> = (0..rows * HC_SLICE).map(|_| spread(&mut rng) as f32).collect();
            let x: Vec<f32> = (0..tokens * HC_SLICE).map(|_| spread(&mut rng) as f32).collect();
            let (mut fs, mut xs) = (vec![f64::NAN; rows * HC_X_ROW], vec![f64::NAN; tokens * HC_X_ROW]);
            for e in 0..HC_SLICE {
                for r in 0..rows {
                    fs[r * HC_X_ROW + hc_x_at(e)] = f[r * HC_SLICE + e] as f64;
                }
                for t in 0..tokens {
                    xs[t * HC_X_ROW + hc_x_at(e)] = x[t * HC_SLICE + e] as f64;
                }
            }
            for w in 0..HC_SLICE / 32 {
                // the instruction's output (m, n) for leaf l: k = 0, 1 from the threads (m % 8, k),
                // (n, k); k = 2, 3 from (_, 2), (_, 3)
                let leaf = |m: usize, n: usize, l: usize| {
                    (0..4).fold(-0.0f64, |acc, k| {
                        let (a, b) = if k < 2 {
                            let at = w * HC_X_GROUP + 17 * k + l;
                            (fs[m * HC_X_ROW + at], xs[n * HC_X_ROW + at])
                        } else {
                            (0.0, -0.0)
                        };
                        a.mul_add(b, acc)
                    })
                };
                for (m, n) in (0..rows).flat_map(|m| (0..tokens).map(move |n| (m, n))) {
                    let push_all = |order: &dyn Fn(usize) -> usize| {
                        let mut st = [0f64; 4];
                        let mut v = 0.0;
                        for mi in 0..16 {
                            v = leaf(m, n, order(mi));
                            let ones = (mi as u32).trailing_ones() as usize;
                            for s in st.iter().take(ones) {
                                v += s;
                            }
                            if ones < 4 {
                                st[ones] = v;
                            }
                        }
                        v
                    };
                    let g: [f32; 32] = std::array::from_fn(|j| f[m * HC_SLICE + 32 * w + j]);
                    let xw: [f32; 32] = std::array::from_fn(|j| x[n * HC_SLICE + 32 * w + j]);
                    let want = tree32(&g, &xw);
                    assert_eq!(push_all(&brev4).to_bits(), want.to_bits(), "warp {w}, row {m}, token {n}");
                    natural_differs |= push_all(&|mi| mi).to_bits() != want.to_bits();
                }
                // the squares' tree over a staged group (square_tree: element j + 16 at j + 17)
                for n in 0..tokens {
                    let xg = &xs[n * HC_X_ROW + w * HC_X_GROUP..];
                    let sq = |j: usize| xg[j + 17].mul_add(xg[j + 17], xg[j] * xg[j]);
                    let mut p: [f64; 8] = std::array::from_fn(|j| sq(j) + sq(j + 8));
                    for o in [4, 2, 1] {
                        for j in 0..o {
                            p[j] += p[j + o];
                        }
                    }
                    let xw: [f32; 32] = std::array::from_fn(|j| x[n * HC_SLICE + 32 * w + j]);
                    assert_eq!(p[0].to_bits(), tree32(&xw, &xw).to_bits());
                }
            }
        }
        assert!(natural_differs, "the leaves in another order never changed a sum: the test has no teeth");
        // a warp's fragment reads (A's rows g and g + 8, B's tokens g; q = 2, 3 the words of q - 2)
        // take one wavefront, its staging stores of a row two
        for (w, l) in (0..HC_SLICE / 32).flat_map(|w| (0..16).map(move |l| (w, l))) {
            let word = |lane: usize| (lane >> 2) * HC_X_ROW + w * HC_X_GROUP + 17 * (lane & 1) + l;
            assert_eq!(wavefronts((0..32).map(word)), 1, "warp {w}, leaf {l}");
            assert_eq!(wavefronts((0..32).map(|lane| word(lane) + 8 * HC_X_ROW)), 1, "warp {w}, leaf {l}");
            assert_eq!(wavefronts((0..32).map(|lane| 3 * HC_X_ROW + hc_x_at(32 * w + lane))), 2);
        }
    }

    #[test]
    fn hc_site_rows_staging_follows_the_kernel() {
        let define = |name: &str| kernel_define("hc.cu", name);
        use super::super::state::{
            hc_rows_smem, HC_MMA_ROWS, HC_ROWS_SMEM_MAX, HC_ROWS_TOKENS, HC_SLICE, HC_X_GROUP, HC_X_ROW,
        };
        assert_eq!(define("HC_SLICE"), HC_SLICE);
        assert_eq!(define("HC_MMA_ROWS"), HC_MMA_ROWS);
        assert_eq!(define("HC_ROWS_TOKENS"), HC_ROWS_TOKENS);
        assert_eq!(define("HC_X_GROUP"), HC_X_GROUP);
        let src = super::super::nvrtc::SOURCES.iter().find(|(n, _)| *n == "hc.cu").unwrap().1;
        assert!(src.contains("#define HC_X_ROW (HC_SLICE / 32 * HC_X_GROUP + 2)"));
        assert_eq!(HC_X_ROW % 16, 10);
        // every element of a slice its own place in a staged row
        let mut at: Vec<usize> = (0..HC_SLICE).map(hc_x_at).collect();
        at.sort_unstable();
        at.dedup();
        assert_eq!(at.len(), HC_SLICE);
        assert!(at[HC_SLICE - 1] < HC_X_ROW);
        // Flash: 24 mixes a site (a tile of 16 rows of fn and 8 tokens' x' as f64, then 8 tokens'
        // 8 warps' 25 values), 4 at the head
        let staged = (16 + 8) * 266 * 8;
        assert_eq!(hc_rows_smem(24), staged + 8 * 8 * 25 * 8);
        assert_eq!(hc_rows_smem(4), staged + 8 * 8 * 5 * 8);
        // with the kernel's static memory under 2 KiB, three blocks an SM's 227 KiB hold at Flash
        // widths (the launch bounds' three)
        assert_eq!(define("HC_ROWS_BLOCKS"), 3);
        assert!(3 * (hc_rows_smem(24) + 2048) <= 227 << 10);
        // eight streams (80 mixes), within what the kernel opts in to
        assert_eq!(hc_rows_smem(80), staged + 8 * 8 * 81 * 8);
        assert!(hc_rows_smem(80) <= HC_ROWS_SMEM_MAX);
        assert!(hc_rows_smem(400) > HC_ROWS_SMEM_MAX);
        assert_eq!(super::super::products::dynamic_smem_opt_in("hc_site_rows"), Some(HC_ROWS_SMEM_MAX));
    }

    /// kernels/indexer.cu `order_key`: doubles to u64 in their total order.
    fn order_key(f: f64) -> u64 {
        let b = f.to_bits();
        if b >> 63 == 1 {
            !b
        } else {
            b | 1 << 63
        }
    }

    /// kernels/indexer.cu `indexer_topk`'s threshold, a byte at a time as
    /// `select_byte` finds it: the candidates' histogram of the byte, lane
    /// l's eight bins bin(l, 0) .. bin(l, 7) (the kernel's: 255 - 8l - u,
    /// from the top), `above` the count in the earlier lanes' bins (the
    /// lanes' exclusive scan), then the bin within the lane where the
    /// need-th largest falls. It stops after a byte where `stop(whole)`
    /// holds, `whole` being whether that rank is the bin's whole count (every
    /// key sharing the bytes found is selected): the kernel stops on `whole`.
    /// Returns the threshold and the mask of the bytes found.
    fn radix_threshold(
        keys: &[u64],
        topk: usize,
        bin: impl Fn(usize, usize) -> usize,
        stop: impl Fn(bool) -> bool,
    ) -> (u64, u64) {
        let (mut prefix, mut mask, mut need) = (0u64, 0u64, topk);
        for shift in (0..8).rev().map(|b| 8 * b) {
            let mut hist = [0usize; 256];
            for &k in keys.iter().filter(|&&k| k & mask == prefix) {
                hist[((k >> shift) & 255) as usize] += 1;
            }
            let mut pick = None;
            let mut above = 0;
            for l in 0..32 {
                let inc = above + (0..8).map(|u| hist[bin(l, u)]).sum::<usize>();
                if above < need && need <= inc {
                    let mut a = above;
                    for u in 0..8 {
                        let c = hist[bin(l, u)];
                        if a < need && need <= a + c {
                            pick = Some((bin(l, u), need - a, need - a == c));
                        }
                        a += c;
                    }
                }
                above = inc;
            }
            let (b, rank, whole) = pick.expect("the need-th largest lies in some bin");
            prefix |= (b as u64) << shift;
            mask |= 255 << shift;
            need = rank;
            if stop(whole) {
                break;
            }
        }
        (prefix, mask)
    }

    /// The kernel's selection from T under `mask`: every key above it, then
    /// ties at T by index, up to topk; in index order.
    fn select_from(keys: &[u64], topk: usize, t: u64, mask: u64) -> Vec<usize> {
        let n = keys.len();
        let above: Vec<usize> = (0..n).filter(|&s| keys[s] & mask > t).collect();
        let ties = (0..n).filter(|&s| keys[s] & mask == t).take(topk - above.len());
        let mut sel: Vec<usize> = above.iter().copied().chain(ties).collect();
        sel.sort_unstable();
        sel
    }

    /// The kernel's bin order: from the top.
    fn from_top(l: usize, u: usize) -> usize {
        255 - 8 * l - u
    }

    /// The bitwise search `indexer_topk` used before: the largest T with
    /// count(key >= T) >= topk.
    fn bitwise_threshold(keys: &[u64], topk: usize) -> u64 {
        let mut t = 0u64;
        for bit in (0..64).rev() {
            let cand = t | 1 << bit;
            if keys.iter().filter(|&&k| k >= cand).count() >= topk {
                t = cand;
            }
        }
        t
    }

    #[test]
    fn indexer_radix_select_finds_the_topk_threshold() {
        let mut rng = Rng::new(11, "radix_select", 0);
        let (mut stopped, mut always_wrong) = (0, 0);
        for case in 0..400 {
            let n = 2 + rng.below(600) as usize;
            let topk = 1 + rng.below(n as u64 - 1) as usize;
            // many ties (a few distinct values, zeros), or a wide spread with negatives
            let distinct = 1 + rng.below(8);
            let scores: Vec<f64> = (0..n)
                .map(|_| match case % 3 {
                    0 => rng.below(distinct) as f64 * 0.25,
                    1 => spread(&mut rng),
                    _ => spread(&mut rng).abs() * if rng.below(4) == 0 { 0.0 } else { 1.0 },
                })
                .collect();
            let keys: Vec<u64> = scores.iter().map(|&s| order_key(s)).collect();
            let (t, mask) = radix_threshold(&keys, topk, from_top, |_| false);
            assert_eq!((t, mask), (bitwise_threshold(&keys, topk), u64::MAX), "case {case}: n {n} topk {topk}");
            let want = crate::cpu::ops::indexer::top_k(&scores, topk);
            assert_eq!(select_from(&keys, topk, t, mask), want, "case {case}");
            // stopping once the bin is wholly selected selects the same entries
            let (te, me) = radix_threshold(&keys, topk, from_top, |whole| whole);
            assert_eq!(te, t & me, "case {case}");
            assert_eq!(select_from(&keys, topk, te, me), want, "case {case}: stopped early");
            stopped += usize::from(me != u64::MAX);
            // stopping after the first byte whatever its bin holds does not
            let (ta, ma) = radix_threshold(&keys, topk, from_top, |_| true);
            always_wrong += usize::from(select_from(&keys, topk, ta, ma) != want);
        }
        assert!(
            stopped > 100 && always_wrong > 100,
            "stopped early {stopped}, wrong when always stopping {always_wrong}"
        );
    }

    #[test]
    fn indexer_radix_select_fails_with_the_bins_scanned_upward() {
        // the same passes counting from the smallest byte find another threshold
        let scores: Vec<f64> = (0..100).map(|i| i as f64 * 0.5).collect();
        let keys: Vec<u64> = scores.iter().map(|&s| order_key(s)).collect();
        assert_eq!(radix_threshold(&keys, 10, from_top, |_| false).0, bitwise_threshold(&keys, 10));
        assert_ne!(radix_threshold(&keys, 10, |l, u| 8 * l + u, |_| false).0, bitwise_threshold(&keys, 10));
    }

    /// kernels/moe.cu `moe_route`'s top k: the larger of two (value,
    /// expert) pairs, value down then expert up.
    fn route_better(a: (f64, i32), b: (f64, i32)) -> bool {
        a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
    }

    /// k passes of a block argmax of `v` over the experts not yet taken
    /// (the kernel before the warps' lists).
    fn route_passes(v: &[f64], k: usize) -> Vec<i32> {
        let mut chosen: Vec<i32> = Vec::new();
        for _ in 0..k {
            let mut best = (-1e300, i32::MAX);
            for (e, &x) in v.iter().enumerate() {
                if !chosen.contains(&(e as i32)) && route_better((x, e as i32), best) {
                    best = (x, e as i32);
                }
            }
            chosen.push(best.1);
        }
        chosen
    }

    /// `moe_route` with the warps' lists: each warp of `block` threads (thread
    /// t holds experts t, t + block, ...) its own `per_warp` best in order
    /// (the kernel: k), then the k best of the lists.
    fn route_warps(v: &[f64], k: usize, per_warp: usize, block: usize) -> Vec<i32> {
        let mut lists = Vec::new();
        for w in 0..block / 32 {
            let mine: Vec<usize> = (0..v.len()).filter(|e| (e % block) / 32 == w).collect();
            let mut taken: Vec<usize> = Vec::new();
            for _ in 0..per_warp {
                let mut best = (-1e300, i32::MAX);
                for &e in mine.iter().filter(|e| !taken.contains(e)) {
                    if route_better((v[e], e as i32), best) {
                        best = (v[e], e as i32);
                    }
                }
                if best.1 != i32::MAX {
                    taken.push(best.1 as usize);
                }
                lists.push(best);
            }
        }
        let mut gone = vec![false; lists.len()];
        let mut chosen = Vec::new();
        for _ in 0..k {
            let mut best = (-1e300, i32::MAX);
            for (c, &x) in lists.iter().enumerate() {
                if !gone[c] && route_better(x, best) {
                    best = x;
                }
            }
            for (c, x) in lists.iter().enumerate() {
                gone[c] |= x.1 == best.1;
            }
            chosen.push(best.1);
        }
        chosen
    }

    #[test]
    fn route_by_warps_chooses_the_block_argmax_passes() {
        let src = include_str!("../../../../kernels/moe.cu");
        assert!(src.contains("return v > b || (v == b && i < bi);"), "the kernel's order moved");
        assert_eq!(src.matches("if (route_before(").count(), 3, "a comparison of the kernel's left its order");
        let mut rng = Rng::new(11, "route", 0);
        for (n, k, block) in [(256, 6, 256), (256, 8, 256), (64, 6, 256), (384, 6, 128), (256, 16, 256)] {
            for round in 0..50 {
                // few distinct values, so that ties decide many places
                let levels = if round % 2 == 0 { 4 } else { 1000 };
                let v: Vec<f64> = (0..n).map(|_| rng.below(levels) as f64 * 0.25 - 1.0).collect();
                assert_eq!(route_warps(&v, k, k, block), route_passes(&v, k), "n {n} k {k} block {block}");
            }
        }
        // lists shorter than k miss experts where a warp holds several of the
        // top k
        let v: Vec<f64> = (0..256).map(|e| if e < 32 { 1.0 + e as f64 } else { 0.0 }).collect();
        assert_eq!(route_passes(&v, 6), [31, 30, 29, 28, 27, 26]);
        assert_ne!(route_warps(&v, 6, 5, 256), route_passes(&v, 6));
    }
}
