//! The thresholds past which a measurement is flagged noisy: one set, read by the run reports
//! (meshbench-report's `trust`) and the benchmarks alike, so "noisy" means the same in both.

/// Steal above this share of all CPUs: the hypervisor ran something else while this machine
/// wanted the CPU.
pub const STEAL_SHARE: f64 = 0.05;
/// Requests sent late by the generator with their connection free, as a share of those sent:
/// the generator's own lateness, not the target's.
pub const LATE_SHARE: f64 = 0.01;
