//! What a load run does: the load model, when it stops, what it excludes as warm-up, and the
//! requests it sends. Validation names the CLI flag at fault.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use serde::{Deserialize, Serialize};

use crate::{Error, Target};

/// How requests are paced. In a spec: `{kind: open-loop, rps: 400}`, `{kind: closed-loop}`,
/// `{kind: sequential, group_size: 10, group_interval: 100ms}`,
/// `{kind: users, users: 8, requests_per_user: 5}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LoadModel {
    /// Constant rate spread evenly over the connections, latency from the intended send time
    /// (wrk2, Fortio `-uniform`).
    OpenLoop { rps: f64 },
    /// Every connection sends its next request as soon as the previous one ended (wrk, E1's
    /// throughput decomposition).
    ClosedLoop,
    /// One request at a time, in groups of `group_size`, pausing `group_interval` between
    /// groups (E3's experimenter). The total need not be a multiple of the group size.
    Sequential {
        group_size: u64,
        #[serde(default, with = "humantime_serde")]
        group_interval: Duration,
    },
    /// `users` concurrent users, each sending `requests_per_user` requests back to back on its
    /// own connection (apache ab, E4).
    Users { users: u32, requests_per_user: u64 },
}

impl LoadModel {
    pub fn name(&self) -> &'static str {
        match self {
            LoadModel::OpenLoop { .. } => "open-loop",
            LoadModel::ClosedLoop => "closed-loop",
            LoadModel::Sequential { .. } => "sequential",
            LoadModel::Users { .. } => "users",
        }
    }
}

/// When the measured part of a run ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    After(Duration),
    /// After this many measured requests (warm-up requests not counted).
    Requests(u64),
}

/// What is excluded from the results at the start.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Warmup {
    #[default]
    None,
    Time(Duration),
    Requests(u64),
}

/// The HTTP protocol spoken to the target; in a spec `http1` (the default),
/// `http1-no-keepalive`, `http2` or `grpc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Protocol {
    /// HTTP/1.1; without keep-alive every request opens a new connection.
    Http1 { keep_alive: bool },
    /// HTTP/2: h2c (prior knowledge) for `http://`, ALPN h2 over TLS for `https://`.
    Http2,
    /// Unary gRPC calls over HTTP/2 (h2c or h2): the URL's path is the method
    /// ([`crate::DEFAULT_GRPC_METHOD`] when it has none), the request body the serialized
    /// message.
    Grpc,
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol::Http1 { keep_alive: true }
    }
}

impl Protocol {
    const NAMES: [(&'static str, Protocol); 4] = [
        ("http1", Protocol::Http1 { keep_alive: true }),
        ("http1-no-keepalive", Protocol::Http1 { keep_alive: false }),
        ("http2", Protocol::Http2),
        ("grpc", Protocol::Grpc),
    ];
}

impl TryFrom<String> for Protocol {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        Protocol::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| *p)
            .ok_or_else(|| {
                format!(
                    "unknown protocol {name:?} (expected http1, http1-no-keepalive, http2 or grpc)"
                )
            })
    }
}

impl From<Protocol> for String {
    fn from(protocol: Protocol) -> String {
        Protocol::NAMES
            .iter()
            .find(|(_, p)| *p == protocol)
            .map_or("http1", |(n, _)| n)
            .to_owned()
    }
}

impl Protocol {
    pub fn name(&self, tls: bool) -> &'static str {
        match (self, tls) {
            (Protocol::Http1 { keep_alive: true }, _) => "http/1.1",
            (Protocol::Http1 { keep_alive: false }, _) => "http/1.1 (no keep-alive)",
            (Protocol::Http2, false) => "h2c",
            (Protocol::Http2, true) => "h2",
            (Protocol::Grpc, false) => "grpc (h2c)",
            (Protocol::Grpc, true) => "grpc (h2)",
        }
    }
}

/// The request every worker sends.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub method: Method,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

impl Default for RequestSpec {
    fn default() -> Self {
        RequestSpec {
            method: Method::GET,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub target: Target,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub model: LoadModel,
    /// Connections for the open- and closed-loop models; the sequential model uses one and
    /// the users model one per user.
    pub connections: u32,
    pub stop: Stop,
    pub warmup: Warmup,
    /// Per-request timeout, from the actual send.
    pub timeout: Duration,
    pub protocol: Protocol,
    pub request: RequestSpec,
    /// Close a connection after this many requests and open a new one.
    pub max_requests_per_connection: Option<u64>,
    /// Generator threads; connections are spread over them.
    pub threads: usize,
    /// Keep every request's intended time, latency and outcome (E3's list of RTTs).
    pub keep_samples: bool,
    /// Append each second of the window to this file as one JSON line while the run lasts (a
    /// preview for watchers; the report's series is exact).
    pub live: Option<std::path::PathBuf>,
}

impl LoadConfig {
    /// A constant-rate open-loop run over HTTP/1.1 keep-alive GETs, the most common case.
    pub fn open_loop(target: Target, rps: f64, connections: u32, duration: Duration) -> Self {
        LoadConfig {
            target,
            tls: None,
            model: LoadModel::OpenLoop { rps },
            connections,
            stop: Stop::After(duration),
            warmup: Warmup::None,
            timeout: Duration::from_secs(5),
            protocol: Protocol::Http1 { keep_alive: true },
            request: RequestSpec::default(),
            max_requests_per_connection: None,
            threads: 1,
            keep_samples: false,
            live: None,
        }
    }

    /// Number of workers: each owns one connection at a time and one request in flight.
    pub fn workers(&self) -> u32 {
        match self.model {
            LoadModel::Sequential { .. } => 1,
            LoadModel::Users { users, .. } => users,
            LoadModel::OpenLoop { .. } | LoadModel::ClosedLoop => self.connections,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let invalid = |field, value: String, reason: &str| {
            Err(Error::InvalidConfig {
                field,
                value,
                reason: reason.to_owned(),
            })
        };
        match self.model {
            LoadModel::OpenLoop { rps } if !(rps.is_finite() && rps > 0.0) => {
                return invalid("--rps", rps.to_string(), "must be a positive number");
            }
            LoadModel::Sequential { group_size: 0, .. } => {
                return invalid("--group-size", "0".into(), "must be at least 1");
            }
            LoadModel::Users { users: 0, .. } => {
                return invalid("--users", "0".into(), "must be at least 1");
            }
            LoadModel::Users {
                requests_per_user: 0,
                ..
            } => {
                return invalid("--requests-per-user", "0".into(), "must be at least 1");
            }
            _ => {}
        }
        if self.connections == 0 {
            return invalid("--connections", "0".into(), "must be at least 1");
        }
        match self.stop {
            Stop::After(d) if d.is_zero() => {
                return invalid("--duration", "0s".into(), "must be longer than zero")
            }
            Stop::Requests(0) => return invalid("--requests", "0".into(), "must be at least 1"),
            _ => {}
        }
        if self.timeout.is_zero() {
            return invalid("--timeout", "0s".into(), "must be longer than zero");
        }
        if self.threads == 0 {
            return invalid("--threads", "0".into(), "must be at least 1");
        }
        if self.max_requests_per_connection == Some(0) {
            return invalid(
                "--max-requests-per-connection",
                "0".into(),
                "must be at least 1",
            );
        }
        if self.target.tls && self.tls.is_none() {
            return Err(Error::TlsRequired {
                url: self.target.url.clone(),
            });
        }
        Ok(())
    }
}
