//! Manifold-constrained hyper-connections (mHC): the residual stream is `hc`
//! parallel copies of the hidden state.
//!
//! Before a block: `flat = x / rms(x)` over all `hc * D` values, mixes
//! `m = fn . flat`; `pre = sigmoid(m[..hc] * s0 + b) + eps`,
//! `post = 2 sigmoid(m[hc..2hc] * s1 + b)`, `comb` = Sinkhorn of
//! `softmax_row(m[2hc..] * s2 + b) + eps` (column normalize, then
//! `iters - 1` rounds of row and column normalization); the block reads
//! `sum_j pre_j x_j`. After it: `x'_k = post_k * out + sum_j comb[j][k] x_j`.
//! The head collapses the streams with `pre` alone.

use super::linear::dot;
use super::norm::rms_inv;
use crate::weights::model::HcWeights;

/// Mixing weights of one token at one site.
pub struct HcMix {
    pub pre: Vec<f64>,
    pub post: Vec<f64>,
    /// `comb[j * hc + k]`
    pub comb: Vec<f64>,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn mixes(w: &HcWeights, x: &[f32], eps: f32) -> Vec<f64> {
    let width = x.len();
    let r = rms_inv(x, eps);
    w.fn_.chunks(width).map(|row| dot(row, x) * r).collect()
}

/// The mixing weights of token streams `x` (`hc * D` values).
pub fn hc_pre(w: &HcWeights, x: &[f32], hc: usize, iters: usize, hc_eps: f32, norm_eps: f32) -> HcMix {
    let m = mixes(w, x, norm_eps);
    let eps = hc_eps as f64;
    let (s0, s1, s2) = (w.scale[0] as f64, w.scale[1] as f64, w.scale[2] as f64);
    let b = |i: usize| w.base[i] as f64;
    let pre: Vec<f64> = (0..hc).map(|j| sigmoid(m[j] * s0 + b(j)) + eps).collect();
    let post: Vec<f64> = (0..hc).map(|j| 2.0 * sigmoid(m[hc + j] * s1 + b(hc + j))).collect();
    let mut comb = vec![0.0f64; hc * hc];
    for j in 0..hc {
        let logits: Vec<f64> = (0..hc).map(|k| m[2 * hc + j * hc + k] * s2 + b(2 * hc + j * hc + k)).collect();
        let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = logits.iter().map(|l| (l - mx).exp()).collect();
        let s: f64 = e.iter().sum();
        for k in 0..hc {
            comb[j * hc + k] = e[k] / s + eps;
        }
    }
    let col_norm = |c: &mut [f64]| {
        for k in 0..hc {
            let s: f64 = (0..hc).map(|j| c[j * hc + k]).sum::<f64>() + eps;
            for j in 0..hc {
                c[j * hc + k] /= s;
            }
        }
    };
    let row_norm = |c: &mut [f64]| {
        for j in 0..hc {
            let s: f64 = c[j * hc..(j + 1) * hc].iter().sum::<f64>() + eps;
            for k in 0..hc {
                c[j * hc + k] /= s;
            }
        }
    };
    col_norm(&mut comb);
    for _ in 1..iters {
        row_norm(&mut comb);
        col_norm(&mut comb);
    }
    HcMix { pre, post, comb }
}

/// `sum_j pre_j x_j` (one token, `x` is `hc * d`).
pub fn collapse(pre: &[f64], x: &[f32], d: usize) -> Vec<f32> {
    (0..d).map(|i| pre.iter().enumerate().map(|(j, p)| p * x[j * d + i] as f64).sum::<f64>() as f32).collect()
}

/// `x'_k = post_k * out + sum_j comb[j][k] x_j`, in place on `x`.
pub fn hc_post(mix: &HcMix, out: &[f32], x: &mut [f32], d: usize) {
    let hc = mix.post.len();
    let old = x.to_vec();
    for k in 0..hc {
        for i in 0..d {
            let mut acc = mix.post[k] * out[i] as f64;
            for j in 0..hc {
                acc += mix.comb[j * hc + k] * old[j * d + i] as f64;
            }
            x[k * d + i] = acc as f32;
        }
    }
}

/// The head's collapse: `pre = sigmoid(m * s + b) + eps`, `sum_j pre_j x_j`.
pub fn hc_head(w: &HcWeights, x: &[f32], d: usize, hc_eps: f32, norm_eps: f32) -> Vec<f32> {
    let m = mixes(w, x, norm_eps);
    let pre: Vec<f64> =
        (0..m.len()).map(|j| sigmoid(m[j] * w.scale[0] as f64 + w.base[j] as f64) + hc_eps as f64).collect();
    collapse(&pre, x, d)
}

/// A drafter's taps for `n` tokens: per token, for each of `layers` in
/// order, the mean (f64 sum) over the hyper-connection streams of that
/// layer's output; `out(layer)` is the output `[n, hc, d]`.
pub fn stream_mean_taps<'a>(
    layers: &[usize],
    n: usize,
    hc: usize,
    d: usize,
    out: impl Fn(usize) -> &'a [f32],
) -> Vec<f32> {
    let mut taps = Vec::with_capacity(n * layers.len() * d);
    for i in 0..n {
        for &layer in layers {
            let x = out(layer);
            for c in 0..d {
                let s: f64 = (0..hc).map(|j| x[(i * hc + j) * d + c] as f64).sum();
                taps.push((s / hc as f64) as f32);
            }
        }
    }
    taps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinkhorn_gives_a_doubly_stochastic_comb() {
        let hc = 4;
        let d = 8;
        let w = HcWeights {
            fn_: (0..(2 + hc) * hc * hc * d).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.05).collect(),
            base: (0..(2 + hc) * hc).map(|i| (i as f32 * 0.3).sin()).collect(),
            scale: vec![1.0, 0.8, 1.3],
        };
        let x: Vec<f32> = (0..hc * d).map(|i| (i as f32 * 0.7).cos()).collect();
        let m = hc_pre(&w, &x, hc, 20, 1e-6, 1e-6);
        for j in 0..hc {
            let row: f64 = m.comb[j * hc..(j + 1) * hc].iter().sum();
            let col: f64 = (0..hc).map(|k| m.comb[k * hc + j]).sum();
            assert!((row - 1.0).abs() < 1e-3 && (col - 1.0).abs() < 1e-3, "row {row} col {col}");
        }
        assert!(m.pre.iter().all(|p| *p > 0.0 && *p < 1.0 + 1e-5));
        assert!(m.post.iter().all(|p| *p > 0.0 && *p < 2.0));
    }
}
