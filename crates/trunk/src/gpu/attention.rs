//! The attention block of `Dsv4Gpu` as kernel launches (the same steps as
//! `cpu/forward.rs`): the query and key projections and their norms and
//! rotations, the compressors and the indexer on a branch beside them, the
//! attention kernel a shape of launch takes, the output projection.

use anyhow::Result;

use super::device::Gpu;
use super::forward::{Dsv4Gpu, Pass};
use super::options::Fault;
use super::state::GpuState;
use super::weights::DevLayer;
use crate::config::AttnKind;
use crate::cpu::ops::indexer;
use crate::cpu::Variant;
use crate::launch;

/// Shared bytes `attention_rows` takes per key: its logit (f64) and the
/// key row's address.
pub(super) const ATTENTION_SMEM_PER_KEY: usize = 16;

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
            self.indexer_select(g, sc, eb, n, t0, ratio)?;
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
}

#[cfg(test)]
mod tests {
    use super::super::kernel_model::{butterfly, kernel_define};
    use crate::synth::rng::Rng;

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
}
