//! The hyper-connection sites of `Dsv4Gpu` and a layer's order of work
//! around them: each block's site (`hc_site`: the post of the block before,
//! the mixes, the collapse and the block's input norm, with the Sinkhorn on
//! the side stream), the head's site, and the MoE posts each layer applies
//! or leaves to the next (kernels/hc.cu; CPU twin: cpu/ops/hc.rs).

use std::ops::Range;

use anyhow::Result;

use super::device::Gpu;
use super::forward::{Dsv4Gpu, Pass};
use super::options::Fault;
use super::state::{hc_rows_smem, hc_slices, GpuState, Scratch, HC_ROWS_SMEM_MAX, HC_ROWS_TOKENS, HC_SLICE};
use super::weights::{DevHc, DevLayer};
use crate::launch;

/// The post of a block (kernels/hc.cu `post_stream`): the streams it
/// reads (`from`), the block's output `out` (with `moe`, its slot
/// outputs, slots a token, and whether to leave out the shared expert in
/// `out`), and the mixes `mix` of the block's site.
#[derive(Clone, Copy)]
struct Post {
    from: u64,
    out: u64,
    moe: Option<(u64, usize, bool)>,
    mix: u64,
}

/// One site's launch (`hc_site` or `hc_site_rows`): the streams `x` (rows
/// `rows` where not 0), which `post`, where there is one, writes from its
/// own buffer first; the `nm` mixes' per-slice partials; the collapsed rows
/// `y`, normalized by the RMS norm of weight `norm` where it is set.
struct Site {
    x: u64,
    rows: u64,
    post: Option<Post>,
    nm: usize,
    partials: u64,
    norm: Option<u64>,
    y: u64,
}

/// For each layer of a stage, (layer, pending, finish): whether it
/// applies the layer before's MoE post at its attention site, and whether
/// it applies its own at its end. A layer finishes where the streams must
/// be whole: the stage's last layer (they leave the stage or reach the
/// head) and every `captured` one (they are copied out).
pub(super) fn post_plan(layers: Range<usize>, captured: impl Fn(usize) -> bool) -> Vec<(usize, bool, bool)> {
    let end = layers.end;
    let mut pending = false;
    layers
        .map(|l| {
            let finish = l + 1 == end || captured(l);
            let step = (l, pending, finish);
            pending = !finish;
            step
        })
        .collect()
}

impl Dsv4Gpu {
    /// The head rows (`n` indices at the device address `rows`) of the
    /// streams collapsed into `sc.hy` (`hc_site` with `hc_head`'s mixes), and
    /// with `norm` (the final norm's weight) normalized.
    pub(super) fn hc_head(
        &self,
        g: &Gpu,
        sc: &Scratch,
        hcw: &DevHc,
        rows: u64,
        n: usize,
        norm: Option<u64>,
    ) -> Result<()> {
        let site = Site {
            x: sc.x.ptr,
            rows,
            post: None,
            nm: self.config.hc_mult,
            partials: sc.head_mix.ptr,
            norm,
            y: sc.hy.ptr,
        };
        self.hc_site(g, sc, hcw, site, n)
    }

    /// One site's launches (kernels/hc.cu) for `n` tokens with the
    /// mixes of `hcw`.
    fn hc_site(&self, g: &Gpu, sc: &Scratch, hcw: &DevHc, site: Site, n: usize) -> Result<()> {
        let c = &self.config;
        let (hc, d) = (c.hc_mult, c.hidden_size);
        // a post writes another buffer than it reads (other blocks still read
        // the old streams); without one the kernel reads the streams in place
        debug_assert!(site.post.is_none_or(|p| p.from != site.x), "hc_site's post must not write in place");
        // one token: hc_site, the post and the mixes summed 32 a lane at once; several: hc_post, where
        // there is a post, then hc_site_rows, 16 rows of fn by 8 tokens a warp on the FP64 tensor cores
        // (mix_mma, warp_sum's tree), and hc_collapse_rows; the same bits
        let slices = hc_slices(hc, d);
        // the normalized row, where the site norms it, through the collapse's dynamic shared memory
        let norm_smem = if site.norm.is_some() { d * 4 } else { 0 } as u32;
        if n == 1 {
            let post = site.post.unwrap_or(Post { from: site.x, out: 0, moe: None, mix: 0 });
            let (slots, k, skip) = post.moe.unwrap_or((0, 0, false));
            launch!(g, "hc_site", Gpu::cfg((slices as u32, 1, 1), HC_SLICE as u32, norm_smem);
                post.from, site.x, site.rows, post.out, slots, k as i32, skip as i32, post.mix, hcw.fn_.ptr,
                site.nm as i32, site.partials, sc.site_done.ptr, c.rms_norm_eps as f32, hcw.base.ptr,
                hcw.scale.ptr, hc as i32, d as i32, c.hc_eps as f32, site.norm.unwrap_or(0), site.y);
        } else {
            // the post of every token (its own launch: many blocks an SM keep its loads in flight), the
            // partials of HC_ROWS_TOKENS tokens a block, then each token's collapse
            if let Some(post) = site.post {
                self.post_launch(g, post, site.x, n)?;
            }
            let smem = hc_rows_smem(site.nm);
            anyhow::ensure!(
                smem <= HC_ROWS_SMEM_MAX,
                "hc_site_rows: {smem} bytes of shared memory for {} mixes (at most {HC_ROWS_SMEM_MAX})",
                site.nm
            );
            let grid = n.div_ceil(HC_ROWS_TOKENS) * slices;
            launch!(g, "hc_site_rows", Gpu::cfg((grid as u32, 1, 1), HC_SLICE as u32, smem as u32);
                site.x, site.rows, hcw.fn_.ptr, site.nm as i32, site.partials, hc as i32, d as i32, n as i32);
            launch!(g, "hc_collapse_rows", Gpu::cfg((n as u32, 1, 1), HC_SLICE as u32, norm_smem);
                site.partials, site.nm as i32, site.x, site.rows, c.rms_norm_eps as f32, hcw.base.ptr,
                hcw.scale.ptr, hc as i32, d as i32, c.hc_eps as f32, site.norm.unwrap_or(0), site.y);
        }
        Ok(())
    }

    /// A block's site: `hc_site` with the block's mixes of the streams `x`
    /// (after `post`, from its own buffer into `x`, where there is one), its
    /// input normalized by `norm` into `out`; then, on the side stream, the
    /// Sinkhorn mixes `mix` that the next post reads.
    #[allow(clippy::too_many_arguments)]
    fn block_site(
        &self,
        g: &Gpu,
        sc: &Scratch,
        hc: &DevHc,
        norm: u64,
        x: u64,
        post: Option<Post>,
        out: u64,
        n: usize,
    ) -> Result<()> {
        let c = &self.config;
        let h = c.hc_mult;
        let nmix = (2 + h) * h;
        if post.is_some() {
            // the post reads the mixes of the site before: its Sinkhorn is done
            g.side_join()?;
        }
        let site = Site { x, rows: 0, post, nm: nmix, partials: sc.mixes.ptr, norm: Some(norm), y: out };
        self.hc_site(g, sc, hc, site, n)?;
        // post and comb only matter after the block: the side stream
        g.side_fork()?;
        launch!(g => side, "hc_sinkhorn", Gpu::cfg((n as u32, 1, 1), 256, 0);
            sc.mixes.ptr, hc_slices(h, c.hidden_size) as i32, (h * c.hidden_size) as i32, c.rms_norm_eps as f32,
            hc.base.ptr, hc.scale.ptr, h as i32, c.hc_sinkhorn_iters as i32, c.hc_eps as f32, sc.mix.ptr);
        Ok(())
    }

    /// `hc_post` alone: the streams `x = post(post.from)` (after the
    /// Sinkhorn of `post.mix` on the side stream).
    fn hc_post(&self, g: &Gpu, post: Post, x: u64, n: usize) -> Result<()> {
        g.side_join()?;
        self.post_launch(g, post, x, n)
    }

    /// The `hc_post` launch of `post` into `x` for `n` tokens (its mixes
    /// already joined).
    fn post_launch(&self, g: &Gpu, post: Post, x: u64, n: usize) -> Result<()> {
        let (hc, d) = (self.config.hc_mult, self.config.hidden_size);
        let (slots, k, skip) = post.moe.unwrap_or((0, 0, false));
        launch!(g, "hc_post", Gpu::cfg((n as u32, d.div_ceil(4 * 256) as u32, 1), 256, 0);
            post.from, x, post.out, slots, k as i32, skip as i32, post.mix, hc as i32, d as i32);
        Ok(())
    }

    /// The post of layer `l`'s MoE: the streams its ffn site left in `x2`,
    /// its slots and shared expert (left out under the drop-shared fault),
    /// the ffn site's mixes.
    fn moe_post(&self, sc: &Scratch, l: usize) -> Post {
        let skip = matches!(self.opts.fault, Some(Fault::DropSharedExpert { layer }) if layer == l);
        let moe = Some((sc.slot_out.ptr, self.config.num_experts_per_tok, skip));
        Post { from: sc.x2.ptr, out: sc.sout.ptr, moe, mix: sc.mix.ptr }
    }

    /// Layer `l` on stage `si`. The streams come in `x`, or, where `pending`
    /// (the layer before left its MoE's post to this one), in `x2` with that
    /// post still to apply, which the attention site does first. With
    /// `finish`, the layer applies its own MoE's post and leaves the streams
    /// in `x` (the last layer of a stage, or one whose streams are captured);
    /// otherwise it leaves them in `x2` with the post pending.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn layer(
        &self,
        st: &mut GpuState,
        si: usize,
        l: usize,
        dl: &DevLayer,
        ids: u64,
        n: usize,
        t0: usize,
        pass: Pass,
        pending: bool,
        finish: bool,
    ) -> Result<()> {
        let stage = &self.stages[si];
        let g = &*stage.gpu;
        let sc = &st.scratch[si];
        // attention site: the layer before's post where it waits (x2 into x)
        self.mark(si, "hc")?;
        let post = pending.then(|| self.moe_post(sc, l - 1));
        self.block_site(g, sc, &dl.hc_attn, dl.attn_norm.ptr, sc.x.ptr, post, sc.h.ptr, n)?;
        self.attention(st, si, l, dl, n, t0, pass)?;
        let sc = &st.scratch[si];
        // ffn site: the attention's post (x into x2), then its mixes
        self.mark(si, "hc")?;
        let post = Post { from: sc.x.ptr, out: sc.a.ptr, moe: None, mix: sc.mix.ptr };
        self.block_site(g, sc, &dl.hc_ffn, dl.ffn_norm.ptr, sc.x2.ptr, Some(post), sc.h.ptr, n)?;
        self.moe(st, si, dl, ids, n)?;
        if finish {
            let sc = &st.scratch[si];
            self.mark(si, "hc")?;
            self.hc_post(g, self.moe_post(sc, l), sc.x.ptr, n)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernel_model::{
        assert_butterfly_bits, butterfly, kernel_define, reduce_scatter, source, spread, wavefronts,
    };
    use super::post_plan;
    use crate::synth::rng::Rng;

    #[test]
    fn the_moe_post_waits_for_the_next_layer_within_a_stage() {
        // four layers on one stage: the last finishes, the others leave their post pending
        let plan = post_plan(0..4, |_| false);
        assert_eq!(plan, vec![(0, false, false), (1, true, false), (2, true, false), (3, true, true)]);
        // a stage of layers 2..5 whose layer 3 is captured: 3 finishes, 4 starts whole and ends the stage
        let plan = post_plan(2..5, |l| l == 3);
        assert_eq!(plan, vec![(2, false, false), (3, true, true), (4, false, true)]);
        // every post pending at a layer is applied by the next: none is lost
        for captured in [|_: usize| false, |l: usize| l.is_multiple_of(2), |_: usize| true] {
            let plan = post_plan(0..7, captured);
            for w in plan.windows(2) {
                assert_eq!(w[1].1, !w[0].2, "layer {} after layer {}", w[1].0, w[0].0);
            }
            assert!(!plan[0].1 && plan.last().unwrap().2);
        }
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
        let src = source("hc.cu");
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
        let src = source("hc.cu");
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
}
