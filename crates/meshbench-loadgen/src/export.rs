//! Exports for other tools: Fortio's result JSON (so Fortio's UI can show our runs) and an
//! HdrHistogram interval log (`.hlog`, readable by HdrHistogram's log processors and plotters).

use std::io::Write;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use meshbench_results::LoadReport;

use crate::{LatencyRecorder, LoadResult};

const FORTIO_PERCENTILES: [f64; 6] = [50.0, 75.0, 90.0, 99.0, 99.9, 100.0];

/// Fortio's `HTTPRunnerResults` JSON (durations in seconds), for `fortio report`'s UI. Built
/// from the public report, so a run's cells export the same way long after they ran; `None`
/// when the report's histogram is not one meshbench wrote.
pub fn fortio_json(report: &LoadReport, started: SystemTime) -> Option<Value> {
    let histogram = LatencyRecorder::decode(&report.histogram)?;
    let mut ret_codes = serde_json::Map::new();
    let mut socket_errors = 0u64;
    for (outcome, n) in &report.outcomes {
        match outcome
            .strip_prefix("http_")
            .and_then(|code| code.parse::<u16>().ok())
        {
            Some(code) => {
                ret_codes.insert(code.to_string(), json!(n));
            }
            // Fortio files every connection-level failure under -1.
            None => socket_errors += n,
        }
    }
    if socket_errors > 0 {
        ret_codes.insert("-1".to_owned(), json!(socket_errors));
    }
    let requested_qps = match report.requested_rps {
        Some(rps) => rps.to_string(),
        None => "max".to_owned(),
    };
    let model = serde_json::to_value(report.model)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let seconds = report.window.seconds.max(0.0);
    Some(json!({
        "RunType": "HTTP",
        "Labels": format!("meshbench {model}"),
        "StartTime": humantime::format_rfc3339_nanos(started).to_string(),
        "RequestedQPS": requested_qps,
        "RequestedDuration": humantime::format_duration(Duration::from_secs_f64(seconds)).to_string(),
        "ActualQPS": report.achieved_rps,
        "ActualDuration": (seconds * 1e9) as u64,
        "NumThreads": report.connections,
        "Version": format!("meshbench-{}", env!("CARGO_PKG_VERSION")),
        "DurationHistogram": fortio_histogram(histogram.histogram()),
        "Exactly": 0,
        "Jitter": false,
        "Uniform": report.requested_rps.is_some(),
        "RetCodes": ret_codes,
        "URL": report.target,
        "NumConnections": report.connections,
        "SocketCount": report.connections,
        "AbortOn": 0,
    }))
}

/// Fortio's histogram object from an HDR histogram of microseconds.
fn fortio_histogram(h: &Histogram<u64>) -> Value {
    let seconds = |us: u64| us as f64 / 1e6;
    let total = h.len();
    if total == 0 {
        return json!({"Count": 0, "Min": 0, "Max": 0, "Sum": 0, "Avg": 0, "StdDev": 0, "Data": null});
    }
    let mut data = Vec::new();
    let mut cumulative = 0u64;
    let mut start = h.min();
    for bucket in h.iter_log(1, 2.0) {
        let count = bucket.count_since_last_iteration();
        if count == 0 {
            continue;
        }
        cumulative += count;
        let end = h
            .highest_equivalent(bucket.value_iterated_to())
            .min(h.max());
        data.push(json!({
            "Start": seconds(start),
            "End": seconds(end),
            "Percent": cumulative as f64 * 100.0 / total as f64,
            "Count": count,
        }));
        start = end;
    }
    let percentiles: Vec<Value> = FORTIO_PERCENTILES
        .iter()
        .map(|p| json!({"Percentile": p, "Value": seconds(h.value_at_quantile(p / 100.0))}))
        .collect();
    json!({
        "Count": total,
        "Min": seconds(h.min()),
        "Max": seconds(h.max()),
        "Sum": h.mean() * total as f64 / 1e6,
        "Avg": h.mean() / 1e6,
        "StdDev": h.stdev() / 1e6,
        "Data": data,
        "Percentiles": percentiles,
    })
}

/// Writes one interval histogram per second of the window (microseconds; the max column in
/// milliseconds).
pub fn write_hlog(
    result: &LoadResult,
    started: SystemTime,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder
        .add_comment("meshbench load: latency from the intended send time, microseconds")
        .with_start_time(started)
        .with_max_value_divisor(1_000.0);
    let mut log = builder.begin_log_with(out, &mut serializer)?;
    for (second, bucket) in result.recorder.seconds.iter().enumerate() {
        log.write_histogram(
            &bucket.latency,
            Duration::from_secs(second as u64),
            Duration::from_secs(1),
            None,
        )
        .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    }
    Ok(())
}
