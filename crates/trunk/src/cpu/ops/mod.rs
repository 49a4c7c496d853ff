//! The CPU ops of the oracle, one file each; the GPU kernels in `kernels/`
//! are their twins and are checked against them.

pub mod attention;
pub mod compressor;
pub mod hc;
pub mod indexer;
pub mod linear;
pub mod moe;
pub mod norm;
pub mod quant;
pub mod rope;
