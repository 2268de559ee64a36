//! Benchmark results: meshbench's components measured side by side with their peers in one
//! run, and the ratios that decide whether a performance target is met.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Environment;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchReport {
    pub schema_version: u32,
    /// `"meshbench.bench"`.
    pub kind: String,
    /// Which benchmark, e.g. `loadgen`.
    pub bench: String,
    pub environment: Environment,
    /// How the run was set up (CPU pinning, target, durations), in words.
    pub setup: Vec<String>,
    pub measurements: Vec<BenchMeasurement>,
    pub ratios: Vec<BenchRatio>,
    /// Comparisons left out, and why (a peer whose added latency is not above direct's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One tool in one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchMeasurement {
    /// e.g. `closed-loop-16`, `fixed-5k`, `floor-1k`.
    pub case: String,
    pub tool: String,
    pub tool_version: String,
    /// 1-based, when the benchmark repeats its cases (rounds interleave the tools, so a slow
    /// minute of the machine hits every tool alike); ratios then compare medians.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition: Option<u32>,
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_second: f64,
    /// CPU time (user + system) of the tool's process.
    pub cpu_seconds: f64,
    pub cpu_us_per_request: f64,
    /// The tool's own p50, where it reports one.
    pub p50_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    /// Requests that did not get a 2xx response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    /// Resident memory of the measured process(es), where the case measures memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// How evenly a fixed-rate tool spaced its requests, from a packet capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing: Option<Pacing>,
}

/// The spacing of a fixed-rate run's requests as captured on the wire (all connections
/// together). An even schedule at R requests per second leaves 1/R between requests; a tool
/// that sends in bursts shows many much shorter gaps and some much longer ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pacing {
    /// Requests seen on the wire.
    pub requests: u64,
    /// 1 / the requested rate.
    pub even_gap_us: f64,
    pub gap_p10_us: f64,
    pub gap_p50_us: f64,
    pub gap_p90_us: f64,
    pub gap_p99_us: f64,
    /// Share of requests sent less than a quarter of the even gap after the previous one.
    pub burst_share: f64,
}

/// Ours divided by a peer's figure for one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchRatio {
    pub case: String,
    /// `ours` and `theirs` are taken over this many repetitions (absent: one run each): the
    /// bench's setup lines say how (medians, estimates pooled over every round's seconds, or
    /// means over rounds, the rounds the unit of the interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetitions: Option<u32>,
    pub metric: String,
    pub peer: String,
    pub ours: f64,
    pub theirs: f64,
    pub ratio: f64,
    /// The ratio's confidence interval, where its spread could be estimated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<RatioInterval>,
    /// The target the ratio is held to (`<= 0.8`, ...), if any.
    pub target: Option<String>,
    /// True when the target was met, false when missed; absent without a target, or when the
    /// verdict is inconclusive.
    pub met: Option<bool>,
    /// The target judged by the interval: met when it lies on the target's side, missed when
    /// on the other side, inconclusive when it straddles the bound (or could not be had).
    /// Absent where the ratio has no interval by design (the point decides `met`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<TargetVerdict>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RatioInterval {
    pub low: f64,
    pub high: f64,
    /// e.g. 0.95.
    pub level: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetVerdict {
    Met,
    Missed,
    Inconclusive,
}
