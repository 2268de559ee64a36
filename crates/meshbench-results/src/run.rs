//! The document `meshbench run` writes: environment, effective configuration and one cell per
//! (scenario, load point, repetition), each with load results and per-component resources.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::LoadReport;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    pub schema_version: u32,
    /// Always `"meshbench.run"`.
    pub kind: String,
    pub status: RunStatus,
    /// Why a run is partial (interrupted, failed cell).
    pub status_reason: Option<String>,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub finished_at: Option<String>,
    pub environment: Environment,
    pub config: RunConfig,
    /// Finished cells only, in the order they ran.
    pub cells: Vec<Cell>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Still running; the cells so far are final.
    Running,
    Complete,
    /// Stopped early (Ctrl-C or an error); the cells present are valid.
    Partial,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub hostname: String,
    pub os: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpu_cores: u32,
    pub memory_total_mib: u64,
    pub meshbench_version: String,
    pub git_commit: String,
    /// `release` or `debug`: a debug build changes every figure.
    pub build_profile: String,
    pub command_line: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub profile: String,
    /// Where the experiment ran, e.g. `local-lab/loopback`.
    pub platform: String,
    pub scenarios: Vec<ScenarioConfig>,
    /// `intra-node`, `inter-node`: where the client and server pods run.
    #[serde(default)]
    pub placements: Vec<String>,
    /// Scenarios of the profile this machine cannot run, with why and how to fix it.
    #[serde(default)]
    pub unavailable: Vec<UnavailableScenario>,
    pub load_points: Vec<LoadPoint>,
    pub repetitions: u32,
    pub duration_seconds: f64,
    pub warmup_seconds: f64,
    pub request_timeout_seconds: f64,
    pub sample_interval_ms: u64,
    pub workload: WorkloadConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioConfig {
    pub name: String,
    pub description: String,
    /// Whether traffic between client and server is mutually authenticated TLS.
    pub mtls: bool,
    /// SPIFFE IDs of the client and server, where identities are used.
    pub client_identity: Option<String>,
    pub server_identity: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnavailableScenario {
    pub name: String,
    pub reason: String,
    /// The command that installs what is missing.
    pub install: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadPoint {
    pub rps: f64,
    pub connections: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    pub role: String,
    pub delay_ms: f64,
    pub response_bytes: u64,
    pub protocol: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    pub scenario: String,
    /// `intra-node` or `inter-node`; absent in results from before placements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    pub load_point: LoadPoint,
    pub repetition: u32,
    pub started_at: String,
    pub load: LoadReport,
    /// One entry per measured process, sampled over exactly the load window.
    pub resources: Vec<ComponentResources>,
    /// What a capture on the inter-node link saw during the cell, when one was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<WireObservation>,
}

/// A packet capture's verdict on the traffic of a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WireObservation {
    /// Where the capture ran, e.g. `node-1/uplink`.
    pub link: String,
    /// The pcap file, relative to the result directory.
    pub pcap: String,
    pub packets: u64,
    /// TCP connections that carried payload.
    pub connections: u32,
    /// Connections whose every byte, both ways, was in TLS records.
    pub tls_connections: u32,
    /// The string the load generator put in every request (a header).
    pub marker: String,
    /// Whether the marker appeared in any captured payload: plaintext on the wire.
    pub marker_seen: bool,
    /// Versions and cipher suites servers chose (from ServerHellos).
    pub tls_versions: Vec<String>,
    pub cipher_suites: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComponentResources {
    /// e.g. `echo-server-1`, `echo-server-1-sidecar`, `node-1-agent`, `ca`.
    pub component: String,
    /// `app`, `load-generator`, `sidecar`, `node-agent`, `control-plane`.
    pub role: String,
    /// Where the figures come from: `procfs` (per-process /proc) or a cgroup.
    pub source: String,
    pub samples: u32,
    pub cpu_cores_mean: f64,
    pub cpu_cores_max: f64,
    pub rss_mib_mean: f64,
    pub rss_mib_max: f64,
    /// The cgroup's working set (usage minus inactive file cache, as kubelet reports it);
    /// absent when the figures come from /proc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_mib_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_mib_max: Option<f64>,
}
