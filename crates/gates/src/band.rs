//! The drift band: how far two realizations' logits may legitimately differ.
//!
//! A disagreement between realizations A and B at a position is legitimate
//! only when the swing it needs is inside
//! `band = 3 * sqrt(2) * (C_A + C_B) * |top1|` (DESIGN.md), with `C` a
//! realization's relative drift of a logit.
//!
//! Derivation (the shape). A realization rounds every op's output once
//! (unit roundoff `u`); an RMS-normalized network keeps relative errors of
//! stages roughly additive in quadrature, so after `S` rounding stages a
//! logit carries a relative error of about `u * sqrt(S)`. An f32 dot product
//! accumulated in f32 over `K` terms adds about `u * sqrt(K)` (random-walk
//! rounding); accumulated in f64 it adds nothing at f32 precision. With
//! `S = 16 L` stages for `L` layers (projections, norms, attention, experts,
//! hyper-connections):
//!   C_cpu = u * sqrt(16 L)                 (f64 accumulation, f32 storage)
//!   C_gpu = u * sqrt(16 L * K) * A         (f32 accumulation, K = hidden size)
//! `fp8` realizations round activations to E4M3 (3 mantissa bits) at every
//! quantization point; a drift of the input can move an element across a
//! rounding boundary, which changes it by one E4M3 step. Their drift uses
//! `u_fp8 = 2^-4` weighted by the measured flip effect `A_FP8`:
//!   C(fp8) = C(exact) + u_fp8 * sqrt(16 L) * A_FP8.
//! The factors `A` and `A_FP8` are calibrated by measurement (docs/gates.md):
//! the largest observed |GPU - CPU| / |top1| over the calibration runs, with
//! the band required to cover it with room to spare.

use trunk::cpu::Variant;

/// f32 unit roundoff.
pub const U_F32: f64 = 1.0 / 16_777_216.0;
/// Half an E4M3 step, relative.
pub const U_FP8: f64 = 1.0 / 16.0;

/// Calibrated amplification of the GPU's f32 accumulation (docs/gates.md).
pub const A_GPU: f64 = 4.0;
/// Calibrated effect of FP8 rounding flips (docs/gates.md).
pub const A_FP8: f64 = 0.05;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Realization {
    Cpu,
    Gpu,
}

/// The relative drift coefficient `C` of a realization of a model with
/// `layers` layers and hidden size `hidden`.
pub fn drift_coeff(r: Realization, variant: Variant, layers: usize, hidden: usize) -> f64 {
    let stages = (16 * layers) as f64;
    let base = match r {
        Realization::Cpu => U_F32 * stages.sqrt(),
        Realization::Gpu => U_F32 * (stages * hidden as f64).sqrt() * A_GPU,
    };
    match variant {
        Variant::Exact => base,
        Variant::Fp8 => base + U_FP8 * stages.sqrt() * A_FP8,
    }
}

/// The band for a position whose top-1 logit is `top1`.
pub fn band(c_a: f64, c_b: f64, top1: f64) -> f64 {
    3.0 * std::f64::consts::SQRT_2 * (c_a + c_b) * top1.abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_order_as_the_derivation_says() {
        let cpu = drift_coeff(Realization::Cpu, Variant::Exact, 8, 1024);
        let gpu = drift_coeff(Realization::Gpu, Variant::Exact, 8, 1024);
        let gpu8 = drift_coeff(Realization::Gpu, Variant::Fp8, 8, 1024);
        assert!(cpu < gpu && gpu < gpu8);
        assert!(drift_coeff(Realization::Gpu, Variant::Exact, 43, 4096) > gpu);
        assert_eq!(band(0.0, 0.0, 5.0), 0.0);
        assert!((band(1e-6, 1e-6, 10.0) - 3.0 * 2f64.sqrt() * 2e-5).abs() < 1e-15);
    }
}
