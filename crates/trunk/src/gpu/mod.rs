//! The GPU realization of DSV4 on cudarc (dynamic loading: builds and runs
//! its CPU tests where there is no CUDA). Each op is a kernel in kernels/
//! with a CPU twin in cpu/ops.

mod attention;
pub mod device;
pub mod forward;
mod graph;
mod head;
mod indexer;
#[cfg(test)]
mod kernel_model;
mod moe;
pub mod nvrtc;
pub mod options;
mod products;
pub mod profile;
mod projections;
mod sites;
pub mod state;
pub mod weights;

pub use device::unavailable_reason;
pub use forward::{Dsv4Gpu, VramLine};
pub use options::{Fault, GpuOptions, MoeArm, ProductSums};
pub use state::GpuState;
