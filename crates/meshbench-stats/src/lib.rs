//! Statistics of samples (latencies, RTTs, per-run means). This crate owns the definitions
//! so every figure meshbench prints is computed one way: the analyzer role, reports and
//! comparisons all call into it.

mod describe;

pub use describe::{percentile, Summary};
