//! The CPU oracle: the semantic truth every GPU realization is judged against.

pub mod forward;
pub mod ops;

pub use forward::{CpuOracle, LayerStat, Logits};
pub use ops::quant::Variant;
