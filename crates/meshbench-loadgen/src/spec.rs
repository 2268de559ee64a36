//! What `meshbench load --config FILE` reads and its flags are turned into: a load run as
//! plain data (the URL, the model, when it stops, the request, client TLS files, where the
//! results go). The lab, the bench and the verifier write one instead of command lines; the
//! binary resolves it into a [`crate::LoadConfig`] (files read, TLS built) and runs it.
//!
//! ```yaml
//! url: http://10.96.0.10:8080/
//! model: {kind: open-loop, rps: 400}
//! connections: 16
//! duration: 30s
//! warmup: 5s
//! request: {method: POST, body: {payload-size: 1024}}
//! output: {json: load.json, quiet: true}
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_role::RoleConfig;
use serde::{Deserialize, Serialize};

use crate::{LoadModel, Protocol, Stop, Warmup};

/// Connections when a spec names none (as `--connections`).
pub const DEFAULT_CONNECTIONS: u32 = 16;
/// Per-request timeout when a spec names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a time-bound run lasts when a spec names no stop.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// How long one probe of `wait_for_target` waits for its answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// Target URL (http:// or https://).
    pub url: String,
    pub model: LoadModel,
    /// Connections for the open- and closed-loop models.
    #[serde(default = "default_connections")]
    pub connections: u32,
    /// Measured time, after warm-up. With neither this nor `requests`, the users model
    /// stops after every user's requests and the others after [`DEFAULT_DURATION`].
    #[serde(default, with = "humantime_serde")]
    pub duration: Option<Duration>,
    /// Stop after this many measured requests instead.
    pub requests: Option<u64>,
    /// Warm-up time excluded from the results.
    #[serde(default, with = "humantime_serde")]
    pub warmup: Option<Duration>,
    /// Warm-up requests excluded from the results instead.
    pub warmup_requests: Option<u64>,
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    #[serde(default = "one")]
    pub threads: usize,
    #[serde(default)]
    pub protocol: Protocol,
    #[serde(default)]
    pub request: RequestFile,
    pub max_requests_per_connection: Option<u64>,
    /// Client TLS for an https:// URL.
    pub tls: Option<ClientTlsSpec>,
    /// Before the run, send single requests until one gets an HTTP response (any status),
    /// for at most this long; they are not measured. A target that becomes reachable only
    /// after a while (a cluster service whose routes are still being programmed) is then
    /// not measured while it is not.
    #[serde(default, with = "humantime_serde")]
    pub wait_for_target: Option<Duration>,
    /// Before anything else (probes included), wait until this file exists, for at most
    /// [`START_GATE_LIMIT`]: how an orchestrator holds a generator back until the path it
    /// measures is in place (a node agent capturing the generator's pod, which it can only
    /// do once the pod has its address), and starts several generators together.
    #[serde(default)]
    pub start_gate: Option<std::path::PathBuf>,
    #[serde(default)]
    pub output: LoadOutput,
}

/// The longest a generator waits at its start gate.
pub const START_GATE_LIMIT: Duration = Duration::from_secs(300);

/// The request every worker sends, as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestFile {
    #[serde(default = "get")]
    pub method: String,
    /// `Name: value` lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    #[serde(default, with = "serde_yaml_ng::with::singleton_map")]
    pub body: Body,
}

impl Default for RequestFile {
    fn default() -> Self {
        RequestFile {
            method: get(),
            headers: vec![],
            body: Body::Empty,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Body {
    #[default]
    Empty,
    Text(String),
    File(PathBuf),
    /// This many bytes; for gRPC's default method, Fortio's ping message with a payload of
    /// this size.
    PayloadSize(u64),
}

/// Client TLS files: a client certificate for mTLS (optional), the bundle the server's
/// certificate must chain to, and the SPIFFE ID the server must present.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTlsSpec {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: PathBuf,
    pub expect_server_id: Option<String>,
}

/// Where the results go.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoadOutput {
    /// meshbench's load report (JSON).
    pub json: Option<PathBuf>,
    /// Include every request (intended time, latency, outcome) in `json`.
    pub samples: bool,
    /// A Fortio-compatible result.
    pub fortio_json: Option<PathBuf>,
    /// An HdrHistogram interval log, one histogram per second.
    pub hlog: Option<PathBuf>,
    /// Each second of the window as one JSON line while the run lasts (`second`,
    /// `responses`, `failures`, `p50_us`, `p99_us`), for watchers such as `meshbench serve`.
    pub live: Option<PathBuf>,
    /// Print nothing on success.
    pub quiet: bool,
    /// Print the load report as one line of JSON on stdout, after everything else: how a
    /// generator in a Kubernetes pod hands it back through its log.
    pub stdout_json: bool,
}

meshbench_role::serde_defaults! {
    default_connections: u32 = DEFAULT_CONNECTIONS,
    default_timeout: Duration = DEFAULT_TIMEOUT,
    one: usize = 1,
    get: String = "GET".into(),
}

impl LoadSpec {
    /// A run of `model` against `url` with every other field at its default.
    pub fn new(url: impl Into<String>, model: LoadModel) -> Self {
        LoadSpec {
            url: url.into(),
            model,
            connections: DEFAULT_CONNECTIONS,
            duration: None,
            requests: None,
            warmup: None,
            warmup_requests: None,
            timeout: DEFAULT_TIMEOUT,
            threads: 1,
            protocol: Protocol::default(),
            request: RequestFile::default(),
            max_requests_per_connection: None,
            tls: None,
            wait_for_target: None,
            start_gate: None,
            output: LoadOutput::default(),
        }
    }

    /// When the run ends: the spec's duration or requests, else the model's natural end.
    pub fn stop(&self) -> Stop {
        match (self.duration, self.requests, &self.model) {
            (Some(d), _, _) => Stop::After(d),
            (None, Some(n), _) => Stop::Requests(n),
            (
                None,
                None,
                LoadModel::Users {
                    users,
                    requests_per_user,
                },
            ) => Stop::Requests(u64::from(*users) * requests_per_user),
            (None, None, _) => Stop::After(DEFAULT_DURATION),
        }
    }

    /// One request on one connection, unmeasured: [`LoadSpec::wait_for_target`]'s probe.
    pub fn probe(&self) -> LoadSpec {
        LoadSpec {
            model: LoadModel::ClosedLoop,
            connections: 1,
            duration: None,
            requests: Some(1),
            warmup: None,
            warmup_requests: None,
            timeout: self.timeout.min(PROBE_TIMEOUT),
            threads: 1,
            wait_for_target: None,
            start_gate: None,
            output: LoadOutput {
                quiet: true,
                ..LoadOutput::default()
            },
            ..self.clone()
        }
    }

    /// What the run excludes at the start.
    pub fn warmup(&self) -> Warmup {
        match (self.warmup, self.warmup_requests) {
            (Some(d), _) => Warmup::Time(d),
            (None, Some(n)) => Warmup::Requests(n),
            (None, None) => Warmup::None,
        }
    }
}

impl RoleConfig for LoadSpec {
    const COMMAND: &'static [&'static str] = &["load"];

    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| meshbench_role::resolve(p, base);
        if let Body::File(path) = &mut self.request.body {
            resolve(path);
        }
        if let Some(tls) = &mut self.tls {
            for path in [&mut tls.cert, &mut tls.key].into_iter().flatten() {
                resolve(path);
            }
            resolve(&mut tls.ca);
        }
        let out = &mut self.output;
        for path in [
            &mut out.json,
            &mut out.fortio_json,
            &mut out.hlog,
            &mut out.live,
        ]
        .into_iter()
        .flatten()
        {
            resolve(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module's documented example, line for line.
    const EXAMPLE: &str = "url: http://10.96.0.10:8080/
model: {kind: open-loop, rps: 400}
connections: 16
duration: 30s
warmup: 5s
request: {method: POST, body: {payload-size: 1024}}
output: {json: load.json, quiet: true}
";

    #[test]
    fn the_documented_example_reads_and_round_trips() {
        let text = EXAMPLE;
        let spec: LoadSpec = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(spec.model, LoadModel::OpenLoop { rps: 400.0 });
        assert_eq!(spec.stop(), Stop::After(Duration::from_secs(30)));
        assert_eq!(spec.warmup(), Warmup::Time(Duration::from_secs(5)));
        assert_eq!(spec.request.body, Body::PayloadSize(1024));
        assert_eq!(spec.request.method, "POST");
        let again: LoadSpec = serde_yaml_ng::from_str(&spec.to_yaml()).unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn every_model_round_trips() {
        for model in [
            LoadModel::OpenLoop { rps: 12.5 },
            LoadModel::ClosedLoop,
            LoadModel::Sequential {
                group_size: 10,
                group_interval: Duration::from_millis(250),
            },
            LoadModel::Users {
                users: 8,
                requests_per_user: 5,
            },
        ] {
            let mut spec = LoadSpec::new("http://127.0.0.1:1/", model.clone());
            spec.requests = Some(100);
            spec.warmup_requests = Some(3);
            spec.request.body = Body::Text("{}".into());
            spec.protocol = Protocol::Http1 { keep_alive: false };
            let again: LoadSpec = serde_yaml_ng::from_str(&spec.to_yaml()).unwrap();
            assert_eq!(again, spec, "{}", spec.to_yaml());
        }
        let users = LoadSpec::new(
            "http://127.0.0.1:1/",
            LoadModel::Users {
                users: 8,
                requests_per_user: 5,
            },
        );
        assert_eq!(users.stop(), Stop::Requests(40));
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let err = serde_yaml_ng::from_str::<LoadSpec>(
            "url: http://x/\nmodel: {kind: closed-loop}\nrate: 3\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("rate"), "{err}");
    }
}
