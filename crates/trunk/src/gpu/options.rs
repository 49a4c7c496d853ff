//! The options of the GPU forward: the variant, the MoE arm, the product
//! sums (exact, or the tensor cores inside the band) and a deliberate fault
//! for the gates' tests.

use anyhow::{bail, Context, Result};

pub use crate::cpu::ops::moe::MoeArm;
use crate::cpu::Variant;

/// A deliberate fault, for testing that the gates catch real bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Leave the shared expert out of one layer.
    DropSharedExpert { layer: usize },
    /// Rotate one layer's queries and keys one position too far.
    ShiftRope { layer: usize },
    /// Record each greedy decode step's graph with the arguments of the
    /// position before its own.
    StaleStep,
}

impl std::str::FromStr for Fault {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        if s == "stale-step" {
            return Ok(Fault::StaleStep);
        }
        let (kind, layer) = s.split_once(':').context("fault is drop-shared:LAYER, shift-rope:LAYER or stale-step")?;
        let layer: usize = layer.parse().context("fault layer")?;
        match kind {
            "drop-shared" => Ok(Fault::DropSharedExpert { layer }),
            "shift-rope" => Ok(Fault::ShiftRope { layer }),
            _ => bail!("unknown fault `{kind}` (drop-shared:LAYER, shift-rope:LAYER or stale-step)"),
        }
    }
}

/// How the GPU sums the products of the routed experts and of the
/// attention's projections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProductSums {
    /// Exact f64 products summed in the CPU oracle's order and rounded once
    /// (kernels/common.cuh): the GPU's logits are the CPU's bit for bit.
    #[default]
    Exact,
    /// The BF16 tensor cores (kernels/moe_tensor.cu, linear_tensor.cu):
    /// each activation as three BF16 limbs, each weight an exact BF16,
    /// products accumulated in f32 one K step of 16 at a time. Chunked
    /// prefill and decode still give identical bits; against the CPU oracle
    /// the logits move inside the band (gates `Realization::GpuTensor`).
    /// The routed experts where they are FP4 with widths multiples of 128
    /// (gpu/products.rs `limb_arm`), and the attention's `wq_a`, `wkv`,
    /// `wq_b`, `wo_a` and `wo_b` where they are FP8 whose weights are exact
    /// BF16 (`dense_limbs`) and the variant is exact
    /// ([`Dsv4Gpu::dense_tensor`]); every other product keeps the exact sums.
    Tensor,
}

impl std::str::FromStr for ProductSums {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "exact" => Ok(ProductSums::Exact),
            "tensor" => Ok(ProductSums::Tensor),
            _ => bail!("unknown product sums `{s}` (exact or tensor)"),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuOptions {
    pub variant: Variant,
    pub moe: MoeArm,
    pub fault: Option<Fault>,
    pub sums: ProductSums,
}

#[cfg(test)]
mod tests {
    use super::{Fault, ProductSums};

    #[test]
    fn faults_parse_from_the_command_line_form() {
        assert_eq!("drop-shared:2".parse::<Fault>().unwrap(), Fault::DropSharedExpert { layer: 2 });
        assert_eq!("shift-rope:0".parse::<Fault>().unwrap(), Fault::ShiftRope { layer: 0 });
        assert_eq!("stale-step".parse::<Fault>().unwrap(), Fault::StaleStep);
        for bad in ["stale-step:1", "drop-shared", "shift-rope:x", "flip:1", ""] {
            assert!(bad.parse::<Fault>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn sums_parse_and_default_to_exact() {
        assert_eq!(ProductSums::default(), ProductSums::Exact);
        assert_eq!("exact".parse::<ProductSums>().unwrap(), ProductSums::Exact);
        assert_eq!("tensor".parse::<ProductSums>().unwrap(), ProductSums::Tensor);
        let e = "bf16".parse::<ProductSums>().unwrap_err().to_string();
        assert!(e.contains("exact or tensor"), "{e}");
    }
}
