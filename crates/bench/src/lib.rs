//! bench: measurements. `park` times snapshot/restore of a decode state
//! against the host link; the Criterion benches live in benches/.

pub mod park;
