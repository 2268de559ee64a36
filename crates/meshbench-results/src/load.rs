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
    /// Open loop: requests due in the window (rate x window). Other models: requests sent.
    pub scheduled: u64,
    /// Requests actually sent in the window.
    pub sent: u64,
    /// Scheduled requests never sent because the connection was still busy when the window
    /// closed: the generator or the target could not keep up.
    pub unsent: u64,
    /// Requests sent at least 1 ms after their intended send time.
    pub late: u64,
    /// Every sent request ends in exactly one outcome; the counts add up to `sent`.
    /// Keys: `http_<status>`, `grpc_<code>` (`grpc_ok`, `grpc_permission_denied`, ...),
    /// `connect_refused`, `connection_reset`, `tls_<reason>`, `timeout`, `other`.
    pub outcomes: BTreeMap<String, u64>,
    /// Latency from each request's intended send time to the end of its response body
    /// (coordinated-omission corrected), successful and failed requests alike.
    pub latency: LatencySummary,
    /// Latency from the actual send time (what closed-loop tools report).
    pub latency_uncorrected: LatencySummary,
    /// Full distribution behind `latency`.
    pub histogram: EncodedHistogram,
    /// Full distribution behind `latency_uncorrected`, so that reports of several
    /// generators merge exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram_uncorrected: Option<EncodedHistogram>,
    /// Wire protocol: `http/1.1`, `http/1.1 (no keep-alive)`, `h2c`, `h2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Parameters of the sequential and users models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<ModelParameters>,
    /// The generator's own cost and whether it, not the target, limited the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorStats>,
    /// Per second of the measured window, by completion time.
    #[serde(default)]
    pub time_series: Vec<SecondStats>,
    /// Every measured request, when asked for (`--samples`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<RequestSample>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelParameters {
    pub group_size: Option<u64>,
    pub group_interval_ms: Option<f64>,
    pub users: Option<u32>,
    pub requests_per_user: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeneratorStats {
    pub threads: u32,
    /// CPU time of the generator process over the run.
    pub cpu_seconds: f64,
    pub cpu_us_per_request: f64,
    /// Requests sent late although their connection was free: the generator's own lateness.
    pub late_while_idle: u64,
    /// True when the generator, not the target, limited the run; its figures then
    /// understate what the target can do.
    pub limited: bool,
    /// Whether its threads were busy for more than 90% of the run: the generator's own limit,
    /// as opposed to sends left late because something else had the CPU. Absent in reports
    /// from before it was recorded (`limited` then says either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturated: Option<bool>,
    /// Requests whose clock readings were out of order (an answer before its send, a send
    /// before its slot): their latency was taken from a fresh CLOCK_MONOTONIC reading
    /// instead, an upper bound. Absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub untrusted_timestamps: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecondStats {
    /// Seconds since the end of a timed warm-up (or the run's start).
    pub second: u32,
    /// Requests that got an HTTP response.
    pub responses: u64,
    /// Requests that did not end in a 2xx response.
    pub failures: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestSample {
    /// Intended send time, microseconds after the series origin.
    pub t_us: u64,
    /// From the intended send time to the end of the response.
    pub latency_us: u64,
    pub outcome: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LoadModel {
    /// Constant rate spread evenly over the connections; latency from the intended send time.
    OpenLoopConstantRate,
    /// Each connection sends as soon as its previous request ended.
    ClosedLoop,
    /// One request at a time, in groups with a pause between groups (E3).
    Sequential,
    /// Concurrent users, each sending a fixed number of requests back to back (E4).
    Users,
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
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC on the generator's machine: the window on the
    /// wall clock is `start_monotonic_ns + realtime_offset_ns`, which samplers on other
    /// machines (a Kubernetes node's kubelet) cut their readings to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime_offset_ns: Option<i64>,
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

/// Whether an outcome key of [`LoadReport::outcomes`] is a success: a 2xx HTTP response or a
/// gRPC OK.
pub fn is_success_outcome(key: &str) -> bool {
    key.starts_with("http_2") || key == "grpc_ok"
}
