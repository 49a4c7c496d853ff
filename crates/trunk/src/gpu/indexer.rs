//! The indexer's selection in a CSA layer as kernel launches: each token's
//! scores of the compressed entries it sees (`indexer_scores`, or on the
//! FP64 tensor cores `indexer_scores_mma`, the same bits) and their top
//! `index_topk` (`indexer_topk`) (kernels/indexer.cu; CPU twin:
//! cpu/ops/indexer.rs). The queries, their weights and the entries are the
//! attention block's (`attention.rs`).

use anyhow::Result;

use super::device::Gpu;
use super::forward::Dsv4Gpu;
use super::state::Scratch;
use crate::launch;

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

impl Dsv4Gpu {
    /// The entries each of the chunk's `n` tokens (positions from `t0`)
    /// attends to, written to `sc.sel`: the top `index_topk` by the scores
    /// of its queries (`sc.iq`, rotated) and head weights (`sc.iw`) against
    /// the layer's indexer entries at `entries`, one every `ratio`
    /// positions.
    pub(super) fn indexer_select(
        &self,
        g: &Gpu,
        sc: &Scratch,
        entries: u64,
        n: usize,
        t0: usize,
        ratio: usize,
    ) -> Result<()> {
        let c = &self.config;
        let (hi, di) = (c.index_n_heads, c.index_head_dim);
        // entries the chunk's last token sees
        let vis_max = (t0 + n) / ratio;
        let me = sc.max_entries;
        if indexer_mma(hi, di, n, g.sm_count) {
            let block = (INDEXER_MMA_WARPS * 32) as u32;
            launch!(g, "indexer_scores_mma", Gpu::cfg((n as u32, 1, 1), block, INDEXER_MMA_SMEM as u32);
                sc.iq.ptr, sc.iw.ptr, entries, hi as i32, ratio as i32, t0 as i32, me as i32, (hi as f32).sqrt(),
                sc.scores.ptr);
        } else {
            // key groups per token: at most what the SMs hold at once (the blocks loop over groups)
            let fit = g.resident_grid("indexer_scores", 256, 0, n)?;
            let groups = vis_max.div_ceil(INDEXER_KEYS_PER_BLOCK).clamp(1, fit);
            launch!(g, "indexer_scores", Gpu::cfg((n as u32, groups as u32, 1), 256, 0);
                sc.iq.ptr, sc.iw.ptr, entries, hi as i32, di as i32, ratio as i32, t0 as i32, me as i32,
                (hi as f32).sqrt(), sc.scores.ptr);
        }
        launch!(g, "indexer_topk", Gpu::cfg((n as u32, 1, 1), 1024, 0);
            sc.scores.ptr, ratio as i32, t0 as i32, me as i32, c.index_topk as i32, sc.sel.ptr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernel_model::{assert_butterfly_bits, butterfly, kernel_define, spread, wavefronts};
    use crate::synth::rng::Rng;

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
}
