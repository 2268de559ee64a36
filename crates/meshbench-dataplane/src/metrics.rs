//! The proxy's Prometheus metrics (served by `admin`).
//! Counters are atomics: recording costs a few nanoseconds on the hot path, and a sidecar can
//! run with metrics off to measure exactly that (E1's throughput decomposition).

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Direction {
    Inbound,
    Outbound,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Flow {
    /// From the connection's initiator to its acceptor.
    Forward,
    Backward,
}

/// Label values in Prometheus' lower-case convention.
macro_rules! lower_case_label {
    ($ty:ty { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl EncodeLabelValue for $ty {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                use std::fmt::Write;
                encoder.write_str(match self {
                    $(Self::$variant => $text),+
                })
            }
        }
    };
}

lower_case_label!(Direction { Inbound => "inbound", Outbound => "outbound" });
lower_case_label!(Flow { Forward => "forward", Backward => "backward" });
lower_case_label!(Verdict { Allow => "allow", Deny => "deny" });

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: Direction,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    direction: Direction,
    status_code: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    direction: Direction,
    flow: Flow,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
enum Verdict {
    Allow,
    Deny,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuthzLabels {
    decision: Verdict,
}

/// Latencies by direction, each a histogram of [`latency_histogram`]'s buckets.
type LatencyFamily = Family<DirectionLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs to ~6.5 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
}

pub struct ProxyMetrics {
    registry: Registry,
    responses: Family<ResponseLabels, Counter>,
    request_duration: LatencyFamily,
    connections_opened: Family<DirectionLabels, Counter>,
    connections_closed: Family<DirectionLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    authorization: Family<AuthzLabels, Counter>,
    tls_handshake_duration: LatencyFamily,
    certificate_expiry: Gauge,
    certificate_rotations: Counter,
}

impl ProxyMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("meshbench_proxy");
        let responses = Family::default();
        let request_duration = LatencyFamily::new_with_constructor(latency_histogram);
        let connections_opened = Family::default();
        let connections_closed = Family::default();
        let bytes = Family::default();
        let authorization = Family::default();
        let tls_handshake_duration = LatencyFamily::new_with_constructor(latency_histogram);
        let certificate_expiry = Gauge::default();
        let certificate_rotations = Counter::default();
        registry.register(
            "responses",
            "HTTP responses by direction and status (L7 mode)",
            responses.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its response headers (L7 mode)",
            request_duration.clone(),
        );
        registry.register(
            "tcp_connections_opened",
            "TCP connections accepted",
            connections_opened.clone(),
        );
        registry.register(
            "tcp_connections_closed",
            "TCP connections closed",
            connections_closed.clone(),
        );
        registry.register(
            "tcp_bytes",
            "Bytes carried, forward from the connection's initiator (L7: requests and responses as written on)",
            bytes.clone(),
        );
        registry.register(
            "authorization_decisions",
            "Authorization decisions, per connection (L4) or per request (L7)",
            authorization.clone(),
        );
        registry.register(
            "tls_handshake_duration_seconds",
            "Duration of TLS handshakes",
            tls_handshake_duration.clone(),
        );
        registry.register(
            "certificate_expiration_timestamp_seconds",
            "When the proxy's workload certificate expires, Unix seconds",
            certificate_expiry.clone(),
        );
        registry.register(
            "certificate_rotations",
            "Workload certificates renewed through the CA since the proxy started",
            certificate_rotations.clone(),
        );
        ProxyMetrics {
            registry,
            responses,
            request_duration,
            connections_opened,
            connections_closed,
            bytes,
            authorization,
            tls_handshake_duration,
            certificate_expiry,
            certificate_rotations,
        }
    }

    pub fn set_certificate_expiry(&self, unix_seconds: i64) {
        self.certificate_expiry.set(unix_seconds);
    }

    /// A renewed certificate is in use from now on, expiring at `unix_seconds`.
    pub fn certificate_rotated(&self, unix_seconds: i64) {
        self.certificate_rotations.inc();
        self.certificate_expiry.set(unix_seconds);
    }

    /// Counts a connection as opened now and closed when the guard drops.
    pub(crate) fn connection(self: &Arc<Self>, direction: Direction) -> ConnectionGuard {
        self.connections_opened
            .get_or_create(&DirectionLabels { direction })
            .inc();
        ConnectionGuard {
            metrics: self.clone(),
            direction,
        }
    }

    pub(crate) fn tls_handshake(&self, direction: Direction, took: Duration) {
        self.tls_handshake_duration
            .get_or_create(&DirectionLabels { direction })
            .observe(took.as_secs_f64());
    }

    pub(crate) fn authorized(&self, allowed: bool) {
        let decision = if allowed {
            Verdict::Allow
        } else {
            Verdict::Deny
        };
        self.authorization
            .get_or_create(&AuthzLabels { decision })
            .inc();
    }

    pub(crate) fn carried(&self, direction: Direction, forward: u64, backward: u64) {
        for (flow, n) in [(Flow::Forward, forward), (Flow::Backward, backward)] {
            self.bytes
                .get_or_create(&BytesLabels { direction, flow })
                .inc_by(n);
        }
    }

    pub(crate) fn response(&self, direction: Direction, status: StatusCode, started: Instant) {
        self.responses
            .get_or_create(&ResponseLabels {
                direction,
                status_code: status.as_u16(),
            })
            .inc();
        self.request_duration
            .get_or_create(&DirectionLabels { direction })
            .observe(started.elapsed().as_secs_f64());
    }

    /// The OpenMetrics text exposition (what Prometheus asks for when it scrapes).
    pub fn encode_openmetrics(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// The classic Prometheus text format (0.0.4), for promtool, curl and older scrapers:
    /// counters are declared under their `_total` sample name and there is no `# EOF`.
    pub fn encode_prometheus_text(&self) -> String {
        let openmetrics = self.encode_openmetrics();
        let counters: Vec<&str> = openmetrics
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
            .collect();
        let mut out = String::with_capacity(openmetrics.len() + 64);
        for line in openmetrics.lines() {
            if line == "# EOF" {
                continue;
            }
            let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
                let rest = line.strip_prefix(prefix)?;
                let (name, tail) = rest.split_once(' ')?;
                counters
                    .contains(&name)
                    .then(|| format!("{prefix}{name}_total {tail}"))
            });
            out.push_str(renamed.as_deref().unwrap_or(line));
            out.push('\n');
        }
        out
    }
}

impl std::fmt::Debug for ProxyMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyMetrics").finish_non_exhaustive()
    }
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) struct ConnectionGuard {
    metrics: Arc<ProxyMetrics>,
    direction: Direction,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.metrics
            .connections_closed
            .get_or_create(&DirectionLabels {
                direction: self.direction,
            })
            .inc();
    }
}
