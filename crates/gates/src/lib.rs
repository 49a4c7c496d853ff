//! gates: the checks that prove a realization right. Every gate has a test
//! that injects a real fault and sees the gate fail.
//!
//! - `band`: the drift band a legitimate disagreement must stay inside;
//! - `tf`: the teacher-forced gate against a banked CPU trajectory;
//! - `chunks`: batch invariance of the GPU forward;
//! - `gpu`: the GPU as a realization, and GPU-against-CPU comparison;
//! - `host_cache`: park/restore of the decode state, bit for bit;
//! - `drafters`: two realizations of one drafter plugin, proposal by proposal.

pub mod band;
pub mod chunks;
pub mod drafters;
pub mod gpu;
pub mod host_cache;
pub mod tf;
