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

pub use device::{require_available, unavailable_reason};
pub use forward::{Dsv4Gpu, VramLine, MAX_HC_STREAMS};
pub use options::{Fault, GpuOptions, MoeArm, ProductSums};
pub use state::GpuState;

/// The kernels that read each weight once a decode step: the one-token
/// products (the LM head's among them) and the routed experts' one-token
/// kernels, on either sums. They load their weights' codes under the L2
/// evict-first policy (kernels/common.cuh `stream_policy`), which
/// tests/kernels_compile.rs checks in their PTX.
pub fn weight_streaming_kernels() -> Vec<&'static str> {
    let one_token_products = products::LINEAR_T1_KERNELS.iter().flat_map(|(_, names)| names);
    one_token_products
        .chain(&moe::EXPERT_ONE_TOKEN_KERNELS)
        .chain(&moe::EXPERT_ONE_TOKEN_LIMB_KERNELS)
        .chain([&products::LINEAR_LIMBS_ONE_KERNEL])
        .copied()
        .collect()
}
