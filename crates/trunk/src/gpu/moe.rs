//! The MoE block of `Dsv4Gpu` as kernel launches (the same steps as
//! `cpu/forward.rs`): the shared expert on a branch, the router's product
//! and `moe_route`, and the routed experts in the arm the options and the
//! token count take (one pair a block, expert groups, tensor-core tiles).

use anyhow::{Context, Result};

use super::device::Gpu;
use super::forward::Dsv4Gpu;
use super::options::MoeArm;
use super::products::{
    expert_mma_smem, group_smem, limb_parts, limb_smem_groups, limb_smem_one, row_smem, DECODE_WARPS, GROUP_BLOCK,
    GROUP_TOKENS, LIMB_TOKENS, LIMB_WARPS, MMA_BLOCK, MMA_PAIRS,
};
use super::state::GpuState;
use super::weights::{DevLayer, MatLayout};
use crate::config::ScoringFunc;
use crate::launch;

/// Rows per warp of `expert_gate_up` (of W1 and of W3 each) and of
/// `expert_down` (kernels/moe.cu `ER_GATE_UP`, `ER_DOWN`).
const ER_GATE_UP: usize = 2;
const ER_DOWN: usize = 4;

/// The routed experts' one-token kernels, gate/up then down (one pair a
/// block: a decode step's pairs, each reading its expert's rows once):
/// the f64 sums' (kernels/moe.cu) and the `tensor` sums' (kernels/moe_tensor.cu).
pub(super) const EXPERT_ONE_TOKEN_KERNELS: [&str; 2] = ["expert_gate_up", "expert_down"];
pub(super) const EXPERT_ONE_TOKEN_LIMB_KERNELS: [&str; 2] = ["expert_gate_up_bf16", "expert_down_bf16"];

/// Pairs an expert on average from which the fused MoE arm takes the expert
/// groups (kernels/moe.cu `expert_gate_up_groups`, `expert_down_groups`;
/// [`GROUP_TOKENS`] pairs of one expert a block): below it most groups would
/// hold a pair or two, and the per-pair kernels use the SMs better. At
/// DeepSeek-V4-Flash widths (256 experts, 6 a token) from 171 tokens.
const EXPERT_GROUP_MIN_PAIRS: usize = 4;

impl Dsv4Gpu {
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
            (EXPERT_ONE_TOKEN_LIMB_KERNELS, x(inter, 8, d), x(d, 16, inter), block, gu, down)
        } else {
            let smem = |fmt: i32, cols: usize| {
                row_smem(fmt, cols)
                    .with_context(|| format!("an expert input of {cols} values does not fit in shared memory"))
            };
            let x = |rows: usize, per_warp: usize| rows.div_ceil(DECODE_WARPS * per_warp) as u32;
            let block = (DECODE_WARPS * 32) as u32;
            let (gu, down) = (smem(f13, d)?, smem(f2, inter)?);
            (EXPERT_ONE_TOKEN_KERNELS, x(inter, ER_GATE_UP), x(d, ER_DOWN), block, gu, down)
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
}

#[cfg(test)]
mod tests {
    use crate::synth::rng::Rng;

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
