//! E5's "TLS handshake time", from the proxies themselves: each of our proxies times every
//! handshake into its `meshbench_proxy_tls_handshake_duration_seconds` histogram (by direction) and writes its
//! metrics to a file when it stops; this reads those files after a cell. Third-party proxies
//! keep their own statistics and are not read here.

use std::path::Path;

use meshbench_meshes::{PROXY_METRICS_DIR_SUFFIX, PROXY_METRICS_FILE};
use meshbench_results::HandshakeTimes;
use prometheus_parse::{HistogramCount, Scrape, Value};

const HISTOGRAM: &str = "meshbench_proxy_tls_handshake_duration_seconds";

/// Every proxy's handshakes from the metrics files in `cell_dir`, by component name. A file
/// that cannot be read or parsed is skipped with a warning: it never costs the cell.
pub fn read_handshakes(cell_dir: &Path) -> Vec<HandshakeTimes> {
    let Ok(entries) = std::fs::read_dir(cell_dir) else {
        return vec![];
    };
    let mut out = vec![];
    let mut dirs: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        let Some(component) = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(PROXY_METRICS_DIR_SUFFIX))
        else {
            continue;
        };
        let path = dir.join(PROXY_METRICS_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => out.extend(parse(component, &text)),
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "no proxy metrics"),
        }
    }
    out
}

/// The handshake histogram of one proxy's metrics text, per direction that saw any.
pub fn parse(component: &str, text: &str) -> Vec<HandshakeTimes> {
    let scrape = match Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))) {
        Ok(scrape) => scrape,
        Err(e) => {
            tracing::warn!(component, error = %e, "unparsable proxy metrics");
            return vec![];
        }
    };
    let value_of = |metric: &str, direction: &str| {
        scrape.samples.iter().find_map(|s| {
            (s.metric == metric && s.labels.get("direction") == Some(direction)).then_some(match s
                .value
            {
                Value::Untyped(v) | Value::Counter(v) | Value::Gauge(v) => v,
                _ => 0.0,
            })
        })
    };
    let mut out = vec![];
    for sample in scrape.samples.iter().filter(|s| s.metric == HISTOGRAM) {
        let (Value::Histogram(buckets), Some(direction)) =
            (&sample.value, sample.labels.get("direction"))
        else {
            continue;
        };
        let count = value_of(&format!("{HISTOGRAM}_count"), direction).unwrap_or(0.0);
        let sum = value_of(&format!("{HISTOGRAM}_sum"), direction).unwrap_or(0.0);
        if count < 1.0 {
            continue;
        }
        out.push(HandshakeTimes {
            component: component.to_owned(),
            direction: direction.to_owned(),
            count: count as u64,
            mean_ms: sum / count * 1e3,
            p50_ms_at_most: bucket_bound(buckets, count * 0.5),
            p99_ms_at_most: bucket_bound(buckets, count * 0.99),
        });
    }
    out
}

/// The upper bound (ms) of the first cumulative bucket holding `rank` observations; `None`
/// when only the `+Inf` bucket does.
fn bucket_bound(buckets: &[HistogramCount], rank: f64) -> Option<f64> {
    buckets
        .iter()
        .find(|b| b.count >= rank)
        .map(|b| b.less_than)
        .filter(|le| le.is_finite())
        .map(|le| le * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mean_and_bucket_bounds_per_direction() {
        let text = "# TYPE meshbench_proxy_tls_handshake_duration_seconds histogram\n\
            meshbench_proxy_tls_handshake_duration_seconds_sum{direction=\"inbound\"} 0.006\n\
            meshbench_proxy_tls_handshake_duration_seconds_count{direction=\"inbound\"} 4\n\
            meshbench_proxy_tls_handshake_duration_seconds_bucket{le=\"0.001\",direction=\"inbound\"} 1\n\
            meshbench_proxy_tls_handshake_duration_seconds_bucket{le=\"0.002\",direction=\"inbound\"} 3\n\
            meshbench_proxy_tls_handshake_duration_seconds_bucket{le=\"0.005\",direction=\"inbound\"} 4\n\
            meshbench_proxy_tls_handshake_duration_seconds_bucket{le=\"+Inf\",direction=\"inbound\"} 4\n\
            meshbench_proxy_tls_handshake_duration_seconds_sum{direction=\"outbound\"} 0\n\
            meshbench_proxy_tls_handshake_duration_seconds_count{direction=\"outbound\"} 0\n\
            meshbench_proxy_tls_handshake_duration_seconds_bucket{le=\"+Inf\",direction=\"outbound\"} 0\n\
            # EOF\n";
        let times = parse("echo-server-1-sidecar", text);
        assert_eq!(times.len(), 1, "a direction without handshakes is left out");
        let t = &times[0];
        assert_eq!((t.direction.as_str(), t.count), ("inbound", 4));
        assert!((t.mean_ms - 1.5).abs() < 1e-9);
        assert_eq!(t.p50_ms_at_most, Some(2.0));
        assert_eq!(t.p99_ms_at_most, Some(5.0));
    }
}
