//! bench: measurements. `roofline` runs the GPU decode/prefill benchmark
//! against ceilings measured in the same run; `park` times snapshot/restore
//! of a decode state against the host link; the Criterion benches live in
//! benches/.

pub mod park;
pub mod roofline;
