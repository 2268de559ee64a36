//! The load generator's result: what was asked, what was achieved, how every request ended,
//! and the latency distribution (summary plus the full HDR histogram).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Encoding of [`EncodedHistogram::data`]: HdrHistogram's V2 compressed format, base64, as
/// written by HdrHistogram's Java/Go/Rust implementations (readable by their log tools).
pub const HISTOGRAM_ENCODING: &str = "hdrhistogram-v2-deflate+base64";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadReport {
    pub schema_version: u32,
    /// Always `"meshbench.load"`.
    pub kind: String,
    pub target: String,
    pub model: LoadModel,
    pub connections: u32,
    /// Requested request rate; `None` for models without a target rate.
    pub requested_rps: Option<f64>,
    /// Requests that got an HTTP response (any status) and whose intended send time fell in
    /// the window, per second of the window. Failed connections do not count as achieved.
    pub achieved_rps: f64,
    pub window: MeasurementWindow,
    /// Requests scheduled in the window (open loop: rate x window).
    pub scheduled: u64,
    /// Requests actually sent in the window.
    pub sent: u64,
    /// Scheduled requests never sent because the connection was still busy when the window
    /// closed: the generator or the target could not keep up.
    pub unsent: u64,
    /// Requests sent at least 1 ms after their intended send time.
    pub late: u64,
    /// Every sent request ends in exactly one outcome; the counts add up to `sent`.
    /// Keys: `http_<status>`, `connect_refused`, `connection_reset`, `tls_<reason>`, `timeout`,
    /// `other`.
    pub outcomes: BTreeMap<String, u64>,
    /// Latency from each request's intended send time to the end of its response body
    /// (coordinated-omission corrected), successful and failed requests alike.
    pub latency: LatencySummary,
    /// Latency from the actual send time (what closed-loop tools report).
    pub latency_uncorrected: LatencySummary,
    /// Full distribution behind `latency`.
    pub histogram: EncodedHistogram,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LoadModel {
    /// Constant rate spread evenly over the connections; latency from the intended send time.
    OpenLoopConstantRate,
}

/// The measured window, on the machine's CLOCK_MONOTONIC, so other samplers on the same
/// machine (CPU, memory) can be cut to exactly the same interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MeasurementWindow {
    pub start_monotonic_ns: u64,
    pub end_monotonic_ns: u64,
    pub seconds: f64,
    /// Warm-up before the window, excluded from every figure.
    pub warmup_seconds: f64,
}

/// Latency distribution summary, all in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LatencySummary {
    pub count: u64,
    pub min_us: u64,
    pub mean_us: f64,
    pub stddev_us: f64,
    pub p50_us: u64,
    pub p75_us: u64,
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p99_9_us: u64,
    pub max_us: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EncodedHistogram {
    /// See [`HISTOGRAM_ENCODING`].
    pub encoding: String,
    /// Unit of the recorded values: `"us"`.
    pub unit: String,
    pub significant_digits: u8,
    pub data: String,
}
