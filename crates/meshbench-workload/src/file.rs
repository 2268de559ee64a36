//! What `meshbench workload --config FILE` reads and each `workload <app>` subcommand's flags
//! are turned into: where the app listens, its TLS, and which app with its settings. The lab
//! and the verifier write one per app instead of command lines. Mixes (`1ms:90,50ms:10`)
//! stay text here and are parsed when the app starts, so an error names the field.
//!
//! ```yaml
//! listen: 10.244.1.2:8080
//! app: {kind: echo, delay: 200ms, response_size: 1KiB}
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_identity::ServerTlsFiles;
use meshbench_role::RoleConfig;
use serde::{Deserialize, Serialize};

use crate::{parse_delay, parse_size, parse_status, EchoConfig, GrpcEchoConfig, Mix};

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub listen: SocketAddr,
    /// Serve TLS 1.3 with this SVID; with `client_ca`, require client certificates (mTLS).
    pub tls: Option<ServerTlsFiles>,
    /// Runtime worker threads (default: one per core).
    pub threads: Option<usize>,
    pub app: WorkloadApp,
}

/// The application and its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WorkloadApp {
    /// Waits a delay, then answers a status and a body of a size; each may be a mix.
    Echo {
        #[serde(default = "no_delay")]
        delay: String,
        #[serde(default = "one_kib")]
        response_size: String,
        #[serde(default = "ok")]
        status: String,
    },
    /// Fortio's unary gRPC ping; without `response_size` it echoes the request's payload.
    GrpcEcho {
        #[serde(default = "no_delay")]
        delay: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_size: Option<String>,
    },
    /// E3's calculator.
    Calculator,
    /// E3's analyzer.
    Analyzer,
    /// E3's experimenter, calling the calculator at its base URL; with `once`, it runs that
    /// one experiment from this process and exits instead of serving.
    Experimenter {
        calculator: String,
        #[serde(default = "ten_seconds", with = "humantime_serde")]
        timeout: Duration,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        once: Option<ExperimentOnce>,
    },
    /// E3's security checker.
    SecurityChecker {
        #[serde(default = "checker_name")]
        name: String,
        #[serde(default = "default_namespace")]
        namespace: String,
        #[serde(default = "five_seconds", with = "humantime_serde")]
        timeout: Duration,
    },
    /// E4's counter, forwarding to `next` until the count is reached.
    Counter {
        #[serde(default = "counter_name")]
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<String>,
        #[serde(default = "thirty_seconds", with = "humantime_serde")]
        timeout: Duration,
    },
}

/// One experiment run by the experimenter itself: E3's request body and where its results
/// go (a meshbench load report, and E3's own answer).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentOnce {
    pub experiment: serde_json::Map<String, serde_json::Value>,
    /// Where the load report goes; [`STDOUT`] prints it as one line of JSON (a pod's log).
    pub json: PathBuf,
    /// Where E3's answer goes; [`STDOUT`] prints it as one line of JSON, after the report.
    pub result: Option<PathBuf>,
    /// Wait until this file exists before the first request (at most the load generator's
    /// `START_GATE_LIMIT`): how an orchestrator holds the experimenter back until its path
    /// is in place.
    pub start_gate: Option<PathBuf>,
    /// Wait at most this long until the calculator answers over HTTP (any status) before
    /// the first request: a cluster's service routes come a moment after its pods.
    #[serde(default, with = "humantime_serde")]
    pub wait_for_calculator: Option<Duration>,
}

/// The path that means standard output in [`ExperimentOnce`].
pub const STDOUT: &str = "-";

meshbench_role::serde_defaults! {
    no_delay: String = "0s".into(),
    one_kib: String = "1KiB".into(),
    ok: String = "200".into(),
    ten_seconds: Duration = Duration::from_secs(10),
    five_seconds: Duration = Duration::from_secs(5),
    thirty_seconds: Duration = Duration::from_secs(30),
    checker_name: String = "security-checker".into(),
    counter_name: String = "counter".into(),
    default_namespace: String = "default".into(),
}

impl WorkloadFile {
    pub fn new(listen: SocketAddr, app: WorkloadApp) -> Self {
        WorkloadFile {
            listen,
            tls: None,
            threads: None,
            app,
        }
    }
}

impl WorkloadApp {
    /// An echo answering `response_bytes` after `delay`, every time.
    pub fn fixed_echo(delay: Duration, response_bytes: u64) -> Self {
        WorkloadApp::Echo {
            delay: format!("{}us", delay.as_micros()),
            response_size: response_bytes.to_string(),
            status: ok(),
        }
    }

    /// The role's name, as its subcommand spells it.
    pub fn name(&self) -> &'static str {
        match self {
            WorkloadApp::Echo { .. } => "echo",
            WorkloadApp::GrpcEcho { .. } => "grpc-echo",
            WorkloadApp::Calculator => "calculator",
            WorkloadApp::Analyzer => "analyzer",
            WorkloadApp::Experimenter { .. } => "experimenter",
            WorkloadApp::SecurityChecker { .. } => "security-checker",
            WorkloadApp::Counter { .. } => "counter",
        }
    }
}

/// The echo's settings parsed; an error names the field and value.
pub fn echo_config(delay: &str, response_size: &str, status: &str) -> Result<EchoConfig, String> {
    Ok(EchoConfig {
        delay: Mix::parse("delay", delay, parse_delay).map_err(|e| e.to_string())?,
        response_size: Mix::parse("response_size", response_size, parse_size)
            .map_err(|e| e.to_string())?,
        status: Mix::parse("status", status, parse_status).map_err(|e| e.to_string())?,
    })
}

/// The gRPC echo's settings parsed; an error names the field and value.
pub fn grpc_echo_config(
    delay: &str,
    response_size: Option<&str>,
) -> Result<GrpcEchoConfig, String> {
    Ok(GrpcEchoConfig {
        delay: Mix::parse("delay", delay, parse_delay).map_err(|e| e.to_string())?,
        response_size: response_size
            .map(|size| Mix::parse("response_size", size, parse_size))
            .transpose()
            .map_err(|e| e.to_string())?,
    })
}

impl RoleConfig for WorkloadFile {
    const COMMAND: &'static [&'static str] = &["workload"];

    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| meshbench_role::resolve(p, base);
        if let Some(tls) = &mut self.tls {
            resolve(&mut tls.cert);
            resolve(&mut tls.key);
            if let Some(ca) = &mut tls.client_ca {
                resolve(ca);
            }
        }
        if let WorkloadApp::Experimenter {
            once: Some(once), ..
        } = &mut self.app
        {
            let resolve_file = |p: &mut PathBuf| {
                if p.as_os_str() != STDOUT {
                    resolve(p);
                }
            };
            resolve_file(&mut once.json);
            if let Some(result) = &mut once.result {
                resolve_file(result);
            }
            if let Some(gate) = &mut once.start_gate {
                resolve(gate);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_app_round_trips_and_defaults_are_the_flags_defaults() {
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let text = "listen: 127.0.0.1:8080\napp: {kind: echo}\n";
        let file: WorkloadFile = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(
            file.app,
            WorkloadApp::Echo {
                delay: "0s".into(),
                response_size: "1KiB".into(),
                status: "200".into()
            }
        );
        let mut experiment = serde_json::Map::new();
        experiment.insert("interactions".into(), 10.into());
        for app in [
            WorkloadApp::fixed_echo(Duration::from_millis(200), 1024),
            WorkloadApp::GrpcEcho {
                delay: "1ms".into(),
                response_size: Some("4KiB".into()),
            },
            WorkloadApp::Calculator,
            WorkloadApp::Analyzer,
            WorkloadApp::Experimenter {
                calculator: "http://calculator:8080".into(),
                timeout: Duration::from_secs(3),
                once: Some(ExperimentOnce {
                    experiment,
                    json: "load.json".into(),
                    result: None,
                    start_gate: Some("/tmp/gate".into()),
                    wait_for_calculator: Some(Duration::from_secs(60)),
                }),
            },
            WorkloadApp::SecurityChecker {
                name: "checker".into(),
                namespace: "ns".into(),
                timeout: Duration::from_secs(1),
            },
            WorkloadApp::Counter {
                name: "a".into(),
                next: Some("http://b:8080".into()),
                timeout: Duration::from_secs(2),
            },
        ] {
            let mut file = WorkloadFile::new(listen, app.clone());
            file.tls = Some(ServerTlsFiles {
                cert: "svid.pem".into(),
                key: "svid.key".into(),
                client_ca: None,
            });
            let again: WorkloadFile = serde_yaml_ng::from_str(&file.to_yaml()).unwrap();
            assert_eq!(again, file, "{}", file.to_yaml());
        }
    }

    #[test]
    fn a_bad_mix_names_its_field() {
        let err = echo_config("0s", "1KiB", "OK").unwrap_err();
        assert!(err.contains("status"), "{err}");
        let err = grpc_echo_config("soon", None).unwrap_err();
        assert!(err.contains("delay"), "{err}");
    }
}
