//! Checkpoint I/O: safetensors and GGUF containers, the number formats, the
//! three naming layouts and the typed model weights.

pub mod formats;
pub mod gguf;
pub mod gguf_meta;
pub mod matrix;
pub mod model;
pub mod names;
pub mod safetensors;
pub mod tensor;

pub use model::{Dsv4Weights, ExpertArm};
pub use names::CheckpointLayout;
