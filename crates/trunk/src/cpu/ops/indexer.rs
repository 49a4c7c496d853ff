//! The lightning indexer of CSA layers: for a query at position `p`, score
//! every visible compressed key `k_s` (`s < (p+1)/ratio`) by
//! `sum_h w_h relu(q_h . k_s) / sqrt(di)` with `w_h` from `weights_proj`
//! scaled by `1/sqrt(n_heads)`, and keep the `index_topk` best.

use super::linear::dot;

/// Scores of `keys` for one query; `q` is `[n_heads, di]`, `w` is `[n_heads]`.
pub fn scores(q: &[f32], w: &[f32], keys: &[&[f32]], di: usize) -> Vec<f64> {
    let n_heads = w.len();
    let sm = 1.0 / (di as f64).sqrt();
    keys.iter()
        .map(|k| (0..n_heads).map(|h| dot(&q[h * di..(h + 1) * di], k).max(0.0) * sm * w[h] as f64).sum::<f64>())
        .collect()
}

/// Indices of the `k` highest scores (ties to the lower index), ascending.
pub fn top_k(scores: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx.sort_unstable();
    idx
}

/// Whether `top_k` of `visible` scores keeps every one of them, in order,
/// whatever the scores: then a query's selection is its visible entries
/// `0 .. visible`, and a forward may take them without the indexer's
/// queries, scores and top-k (the GPU forward does, `gpu/attention.rs`).
pub fn selects_all(visible: usize, k: usize) -> bool {
    visible <= k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_keeps_the_best_and_breaks_ties_low() {
        assert_eq!(top_k(&[0.1, 0.9, 0.5, 0.9, -1.0], 2), vec![1, 3]);
        assert_eq!(top_k(&[0.1, 0.9, 0.5, 0.9, -1.0], 3), vec![1, 2, 3]);
        assert_eq!(top_k(&[0.3, 0.3, 0.3], 1), vec![0]);
        assert_eq!(top_k(&[0.3], 5), vec![0]);
    }

    #[test]
    fn selects_all_exactly_where_top_k_keeps_every_entry_in_order() {
        let mut rng = crate::synth::rng::Rng::new(3, "selects_all", 0);
        for k in [1, 6, 16, 512] {
            for visible in [0, 1, k / 2, k - 1, k, k + 1, k + 7, 2 * k] {
                let scores: Vec<f64> = (0..visible).map(|_| rng.uniform() - 0.5).collect();
                let all = top_k(&scores, k) == (0..visible).collect::<Vec<_>>();
                assert_eq!(selects_all(visible, k), all, "k {k}, visible {visible}");
            }
        }
    }
}
