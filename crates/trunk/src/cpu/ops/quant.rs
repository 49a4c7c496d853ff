//! Activation quantization of the `fp8` variant, where the reference
//! quantizes (`exact` does none of it):
//! - `act`: FP8 E4M3 per 1x128 block with a power-of-two scale, on the input
//!   of every FP8/FP4 weight product;
//! - `kv`: the non-rope dims of each K=V row (window and compressed entries)
//!   through FP8 in 1x64 blocks;
//! - `indexer`: Hadamard rotation of indexer queries and keys, then FP4 E2M1
//!   in 1x32 blocks (the official revision's indexer).

use crate::weights::formats::{fp4_roundtrip_blocks, fp8_roundtrip_blocks};

/// Activation-quantization variant of a realization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Variant {
    /// No activation quantization.
    #[default]
    Exact,
    /// FP8/FP4 activation quantization where the reference applies it.
    Fp8,
}

impl std::str::FromStr for Variant {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "exact" => Ok(Variant::Exact),
            "fp8" => Ok(Variant::Fp8),
            _ => anyhow::bail!("unknown variant `{s}` (expected exact or fp8)"),
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Variant::Exact => "exact",
            Variant::Fp8 => "fp8",
        })
    }
}

impl Variant {
    /// Rows of `width` as the input of an FP8/FP4 weight product.
    pub fn act(self, x: &[f32], width: usize) -> std::borrow::Cow<'_, [f32]> {
        match self {
            Variant::Exact => std::borrow::Cow::Borrowed(x),
            Variant::Fp8 => {
                let mut v = x.to_vec();
                for row in v.chunks_mut(width) {
                    fp8_roundtrip_blocks(row, 128);
                }
                std::borrow::Cow::Owned(v)
            }
        }
    }

    /// A K=V row (one head) as stored in the cache.
    pub fn kv(self, row: &mut [f32], rope_dim: usize) {
        if self == Variant::Fp8 {
            let nope = row.len() - rope_dim;
            fp8_roundtrip_blocks(&mut row[..nope], 64);
        }
    }

    /// An indexer query head or key as scored.
    pub fn indexer(self, row: &mut [f32]) {
        if self == Variant::Fp8 {
            hadamard(row);
            fp4_roundtrip_blocks(row, 32);
        }
    }
}

/// Orthonormal Walsh-Hadamard transform (Sylvester order) in place;
/// `x.len()` must be a power of two.
pub fn hadamard(x: &mut [f32]) {
    let n = x.len();
    assert!(n.is_power_of_two(), "Hadamard size {n} is not a power of two");
    let mut v: Vec<f64> = x.iter().map(|&a| a as f64).collect();
    let mut h = 1;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (v[j], v[j + h]);
                v[j] = a + b;
                v[j + h] = a - b;
            }
        }
        h *= 2;
    }
    let s = 1.0 / (n as f64).sqrt();
    for (o, a) in x.iter_mut().zip(v) {
        *o = (a * s) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hadamard_is_orthonormal_and_involutive() {
        let orig: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut x = orig.clone();
        hadamard(&mut x);
        let n0: f32 = orig.iter().map(|a| a * a).sum();
        let n1: f32 = x.iter().map(|a| a * a).sum();
        assert!((n0 - n1).abs() < 1e-5);
        hadamard(&mut x);
        for (a, b) in x.iter().zip(&orig) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn exact_variant_changes_nothing_and_fp8_rounds() {
        let x: Vec<f32> = (0..256).map(|i| (i as f32 * 0.731).sin() * 3.0).collect();
        assert_eq!(&*Variant::Exact.act(&x, 128), &x[..]);
        assert_ne!(&*Variant::Fp8.act(&x, 128), &x[..]);
        let mut r = x[..64].to_vec();
        Variant::Fp8.kv(&mut r, 16);
        assert_eq!(&r[48..], &x[48..64], "rope dims stay exact");
        assert_ne!(&r[..48], &x[..48]);
    }
}
