//! trunk: the DeepSeek V4 model — config, weights, synthetic models, the CPU
//! oracle, and (later) the GPU forward and generation.

pub mod config;
pub mod cpu;
pub mod gpu;
pub mod state;
pub mod synth;
pub mod weights;

pub use config::Dsv4Config;
pub mod bank;
pub mod drafter;
pub mod generate;
pub mod model;
pub mod speculative;
pub mod tokenizer;
