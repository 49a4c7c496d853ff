//! Interleaved partial RoPE on the last `rope_dim` dims of a head: pairs
//! `(2i, 2i+1)` of the rope slice rotate by `pos * inv_freq[i]`.
//!
//! Two frequency sets: `main` (base `rope_theta`, window-only layers) and
//! `compress` (base `compress_rope_theta` with YaRN, CSA/HCA layers and
//! their compressors and indexer). Frequencies and angles are computed in
//! f32 as transformers does; cos/sin of the f32 angle in f64.

use crate::config::{Dsv4Config, Yarn};

#[derive(Clone, Debug)]
pub struct Rope {
    pub inv_freq: Vec<f32>,
}

impl Rope {
    pub fn new(base: f64, dim: usize, yarn: Option<&Yarn>) -> Self {
        let half = dim / 2;
        let base32 = base as f32;
        let pos_freqs: Vec<f32> = (0..half).map(|i| base32.powf((2 * i) as f32 / dim as f32)).collect();
        let inv_freq = match yarn {
            None => pos_freqs.iter().map(|p| 1.0 / p).collect(),
            Some(y) => {
                let corr = |rot: f64| {
                    (dim as f64 * (y.original_max_position_embeddings as f64 / (rot * 2.0 * std::f64::consts::PI)).ln())
                        / (2.0 * base.ln())
                };
                let low = corr(y.beta_fast).floor().max(0.0);
                let high = corr(y.beta_slow).ceil().min(dim as f64 - 1.0);
                let high = if low == high { high + 0.001 } else { high };
                let factor = y.factor as f32;
                (0..half)
                    .map(|i| {
                        let ramp = ((i as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
                        let extrap = 1.0 - ramp;
                        let inv_extra = 1.0 / pos_freqs[i];
                        let inv_inter = 1.0 / (factor * pos_freqs[i]);
                        inv_inter * (1.0 - extrap) + inv_extra * extrap
                    })
                    .collect()
            }
        };
        Rope { inv_freq }
    }

    pub fn main(cfg: &Dsv4Config) -> Self {
        Rope::new(cfg.rope_theta, cfg.rope_dim, None)
    }

    pub fn compress(cfg: &Dsv4Config) -> Self {
        Rope::new(cfg.compress_rope_theta, cfg.rope_dim, cfg.yarn.as_ref())
    }

    /// (cos, sin) per pair at `pos`.
    pub fn cos_sin(&self, pos: usize) -> (Vec<f32>, Vec<f32>) {
        let p = pos as f32;
        self.inv_freq
            .iter()
            .map(|&f| {
                let a = (p * f) as f64;
                (a.cos() as f32, a.sin() as f32)
            })
            .unzip()
    }

    /// Rotate the trailing `2 * inv_freq.len()` dims of `x` (one head) by
    /// `pos`; `inverse` rotates back.
    pub fn apply(&self, x: &mut [f32], pos: usize, inverse: bool) {
        let (cos, sin) = self.cos_sin(pos);
        self.apply_with(x, &cos, &sin, inverse);
    }

    pub fn apply_with(&self, x: &mut [f32], cos: &[f32], sin: &[f32], inverse: bool) {
        let rd = 2 * cos.len();
        let off = x.len() - rd;
        for i in 0..cos.len() {
            let (c, s) = (cos[i], if inverse { -sin[i] } else { sin[i] });
            let a = x[off + 2 * i];
            let b = x[off + 2 * i + 1];
            x[off + 2 * i] = a * c - b * s;
            x[off + 2 * i + 1] = b * c + a * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_undoes_rotation() {
        let r = Rope::new(
            160000.0,
            8,
            Some(&Yarn { factor: 16.0, original_max_position_embeddings: 256, beta_fast: 32.0, beta_slow: 1.0 }),
        );
        let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.7).collect();
        let mut x = orig.clone();
        r.apply(&mut x, 77, false);
        assert_ne!(x, orig);
        assert_eq!(&x[..8], &orig[..8], "nope dims untouched");
        r.apply(&mut x, 77, true);
        for (a, b) in x.iter().zip(&orig) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn yarn_interpolates_low_frequencies() {
        let plain = Rope::new(160000.0, 8, None);
        let y = Rope::new(
            160000.0,
            8,
            Some(&Yarn { factor: 16.0, original_max_position_embeddings: 256, beta_fast: 32.0, beta_slow: 1.0 }),
        );
        // the highest frequency is extrapolated (kept), the lowest interpolated (/16)
        assert_eq!(plain.inv_freq[0], y.inv_freq[0]);
        assert!((y.inv_freq[3] * 16.0 - plain.inv_freq[3]).abs() < 1e-9);
    }
}
