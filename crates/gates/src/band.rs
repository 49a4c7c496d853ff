//! The drift band: how far two realizations' logits may legitimately differ.
//!
//! A disagreement between realizations A and B at a position is legitimate
//! only when the swing it needs is inside
//! `band = 3 * sqrt(2) * (C_A + C_B) * |top1|` (DESIGN.md), with `C` a
//! realization's relative drift of a logit.
//!
//! Derivation. Both realizations compute every op the same way: products
//! of f32 values are exact in f64, sums and the transcendental functions run
//! in f64, and each op's result is rounded once to f32 (the GPU kernels are
//! written to do exactly what their CPU twins do; kernels/common.cuh). Two
//! such results differ only when an f64 evaluation lands within an f64
//! rounding error of an f32 rounding boundary; each op then contributes at
//! most one f32 unit roundoff `u`. Relative errors of successive ops in an
//! RMS-normalized network add roughly in quadrature, so after `S` rounding
//! stages a logit drifts by about `u * sqrt(S)`; with `S = 16 L` stages for
//! `L` layers (projections, norms, attention, compressors, experts,
//! hyper-connections):
//!   C = u * sqrt(16 L) * A,
//! the same for the CPU oracle and the GPU. The `fp8` variant quantizes
//! inputs that are identical on both sides, so it adds no drift of its own.
//!
//! Calibration (docs/gates.md): over every teacher-forced run on the H200
//! (tiny and small, exact and fp8, both expert arms, devices 0 and 0,0, 160
//! positions each) the measured |GPU - CPU| at the banked token's logit was
//! 0 (bit-identical logits at every position). An earlier GPU realization
//! that accumulated in f32 measured a largest relative top-1 drift of
//! 4.9e-7 (exact) and is the reason for `A`: the band then had to cover
//! `sqrt(K)`-scale f32 accumulation error, which `A = 4` keeps for any
//! realization that rounds more often than its twin.
//!
//! The GPU's `tensor` sums (trunk `ProductSums::Tensor`,
//! kernels/moe_tensor.cu and linear_tensor.cu) round more: a row sum of a
//! product on them is a chain of `S = K / 16` f32 accumulations on the
//! BF16 tensor cores (its products exact: three BF16 limbs of each
//! activation, exact BF16 weights). The tensor cores' f32 accumulation is
//! not assumed to round to nearest, so the chain's errors are taken as
//! one-sided, adding linearly: about `S / 2` units of a partial's size, and
//! a partial of an RMS-scaled dot product is at most the sum's size, so
//! `u S / 2` relative. (The kernels cut K into up to four parts, each a
//! chain of its own: the bound holds for the whole K.) With each such
//! product `i` a token's logits pass through in quadrature with the other
//! stages:
//!   C = u * sqrt(16 L + sum_i S_i^2 / 4) * A.
//! Calibration: docs/gates.md.

use trunk::cpu::Variant;

/// f32 unit roundoff.
pub const U_F32: f64 = 1.0 / 16_777_216.0;

/// Safety factor over the per-stage rounding (docs/gates.md).
pub const A: f64 = 4.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Realization {
    Cpu,
    Gpu,
    /// The GPU with some products on the `tensor` sums: the sum over those
    /// products (every layer's) of the squares of their chains' steps,
    /// `(K / 16)^2` a product of rows of K values ([`tensor_steps`]).
    GpuTensor {
        squared_steps: u64,
    },
}

/// [`Realization::GpuTensor`]'s `squared_steps` for products whose rows
/// are `widths` values long.
pub fn tensor_steps(widths: &[usize]) -> u64 {
    widths.iter().map(|&k| ((k / 16) as u64).pow(2)).sum()
}

/// The relative drift coefficient `C` of a realization of a model with
/// `layers` layers. The CPU and the exact GPU round each op once (see
/// above), so their `C` does not depend on the realization or the variant;
/// the `tensor` expert sums add their chains' rounding.
pub fn drift_coeff(r: Realization, variant: Variant, layers: usize) -> f64 {
    let _ = variant;
    let stages = (16 * layers) as f64;
    let chains = match r {
        Realization::Cpu | Realization::Gpu => 0.0,
        Realization::GpuTensor { squared_steps } => squared_steps as f64 / 4.0,
    };
    U_F32 * (stages + chains).sqrt() * A
}

/// The band for a position whose top-1 logit is `top1`.
pub fn band(c_a: f64, c_b: f64, top1: f64) -> f64 {
    3.0 * std::f64::consts::SQRT_2 * (c_a + c_b) * top1.abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_follow_the_derivation() {
        let c8 = drift_coeff(Realization::Gpu, Variant::Exact, 8);
        assert!((c8 - U_F32 * 128f64.sqrt() * A).abs() < 1e-20);
        assert!(drift_coeff(Realization::Cpu, Variant::Fp8, 43) > c8, "deeper models drift more");
        assert_eq!(band(0.0, 0.0, 5.0), 0.0);
        assert!((band(1e-6, 1e-6, 10.0) - 3.0 * 2f64.sqrt() * 2e-5).abs() < 1e-15);
        // the tensor sums: no such product is the exact GPU; each adds its
        // chains (the flash experts' widths: 256 and 128 steps)
        let none = Realization::GpuTensor { squared_steps: tensor_steps(&[]) };
        assert_eq!(drift_coeff(none, Variant::Exact, 8), c8);
        let four = Realization::GpuTensor { squared_steps: tensor_steps(&[4096, 2048].repeat(4)) };
        let c4 = drift_coeff(four, Variant::Exact, 4);
        assert!((c4 - U_F32 * (64.0 + 4.0 * (256.0f64 * 256.0 + 128.0 * 128.0) / 4.0).sqrt() * A).abs() < 1e-18);
        assert!(c4 > 30.0 * drift_coeff(Realization::Gpu, Variant::Exact, 4));
    }
}
