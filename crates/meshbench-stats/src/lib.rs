//! Statistics of samples (latencies, RTTs, per-run means). This crate owns the definitions
//! so every figure meshbench prints is computed one way: the analyzer role, reports and
//! comparisons all call into it.

mod block;
pub mod capacity;
mod compare;
mod describe;
mod distribution;
mod fit;
mod paired;
mod positive;
mod sequential;

pub use block::{
    block_bootstrap_difference, block_bootstrap_estimate, block_length, combined_interval,
    ratio_interval, BlockEstimate, BlockInterval, SecondValue, MIN_SECONDS,
};
pub use compare::{bootstrap_median_difference, mann_whitney, Interval, MannWhitney};
pub use describe::{percentile, Summary};
pub use distribution::{DecodeError, Distribution};
pub use fit::{linear_fit, mean_confidence_interval, LinearFit};
pub use paired::{expected_cross_coverage, paired_ratio_interval, MIN_ROUNDS};
pub use positive::{positive_interval, PositiveMethod};
pub use sequential::{look_level, rounds_planned_to_decide, rounds_to_decide, sequential_interval};
