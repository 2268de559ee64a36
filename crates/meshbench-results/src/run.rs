//! The document `meshbench run` writes: environment, effective configuration and one cell per
//! (scenario, load point, repetition), each with load results and per-component resources.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{LoadModel, LoadReport};

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
    /// Each machine's CPU with no cell running, before the first cell and before each later
    /// round: what a cell's CPU outside its components is judged against. Absent in results
    /// from before it was measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backgrounds: Vec<crate::Background>,
    /// Where a run of rounds until decided stopped, and why; absent for a fixed number of
    /// repetitions, and while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<crate::RoundsStop>,
    /// Cells given up, with why: each ended its run there (a resumed run runs it again, and
    /// keeps this record of the attempt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_cells: Vec<FailedCell>,
}

/// A cell that did not finish, and why.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailedCell {
    pub scenario: String,
    pub placement: Option<String>,
    pub load_point: LoadPoint,
    pub repetition: u32,
    pub search: Option<u32>,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub failed_at: String,
    /// The platform's account: what failed and the cluster's or the OS's reason (a kubelet
    /// that stopped answering, a pod that cannot start, a component that exited early).
    pub error: String,
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
    /// On a cluster: each mesh it may run as detection found it (installed or not, its
    /// version and mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_meshes: Vec<MeshInstallation>,
}

/// A mesh a cluster runs (or not), as meshbench detected it from its CRDs, its control
/// plane's pods and its configuration.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MeshInstallation {
    /// The scenario that runs it (`istio`, `istio-ambient`, `linkerd`, `cilium`,
    /// `consul-connect`).
    pub scenario: String,
    /// Whether the scenario can run on the cluster.
    pub usable: bool,
    /// From its control plane's image tag.
    pub version: Option<String>,
    /// As the mesh names it (`sidecar`, `ambient`, `encryption: wireguard; ...`).
    pub mode: Option<String>,
    /// Where its control plane runs.
    pub namespace: Option<String>,
    /// Istio's revision, when not the default.
    pub revision: Option<String>,
    /// Why the scenario cannot run there.
    pub reason: Option<String>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub profile: String,
    /// What the experiment reproduces, from its spec.
    #[serde(default)]
    pub description: String,
    /// `local` (sized for the machine) or `original` (the study's own scale).
    #[serde(default = "local_scale")]
    pub scale: String,
    /// Where the experiment ran, e.g. `local-lab/loopback`.
    pub platform: String,
    pub scenarios: Vec<ScenarioConfig>,
    /// `intra-node`, `inter-node`: where the client and server pods run.
    #[serde(default)]
    pub placements: Vec<String>,
    /// Scenarios of the profile this machine cannot run, with why and how to fix it.
    #[serde(default)]
    pub unavailable: Vec<UnavailableScenario>,
    /// `open-loop-constant-rate`, `closed-loop`, `sequential` or `users` (load points of the
    /// last three have `rps` 0).
    #[serde(default = "constant_rate")]
    pub model: LoadModel,
    /// The application under test: `echo` (a client and an echo server), `zero-trust-app`
    /// (E3: the experimenter calls the calculator) or `counter-chain` (E4).
    #[serde(default = "echo_application")]
    pub application: String,
    pub load_points: Vec<LoadPoint>,
    /// The most repetitions of any load point.
    pub repetitions: u32,
    /// Repetitions of each load point, in the order of `load_points` (empty: `repetitions`
    /// for every point).
    #[serde(default)]
    pub repetitions_per_point: Vec<u32>,
    pub duration_seconds: f64,
    pub warmup_seconds: f64,
    /// Pause after every cell.
    #[serde(default)]
    pub cooldown_seconds: f64,
    pub request_timeout_seconds: f64,
    pub sample_interval_ms: u64,
    pub workload: WorkloadConfig,
    #[serde(default)]
    pub outliers: OutlierPolicyConfig,
    /// The experiment spec (YAML) as run, so the document describes itself.
    pub spec: Option<String>,
    /// Whether the load generator had a CPU of its own (`--pin`); absent where pinning does
    /// not apply (a cluster) or in results from before it was recorded.
    #[serde(default)]
    pub pinned: Option<bool>,
    /// The capacity model's objective and search: each cell is then one step of a search
    /// for the highest constant rate that meets the objective, `load_points` lists the rates
    /// it visited, and a cell's `repetition` is its try at that rate.
    #[serde(default)]
    pub capacity: Option<CapacityConfig>,
    /// Rounds until every finding is decided (`repetitions: {until: decided, ...}`): the
    /// findings' intervals are then valid over a look after every round. Absent for a fixed
    /// number of repetitions.
    #[serde(default)]
    pub until_decided: Option<crate::UntilDecided>,
    /// The findings of the profile's study, checked by the report against this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<crate::Claim>,
}

/// The capacity model: the objective, and how the search for the highest rate that meets it
/// goes (meshbench-stats' `capacity` module).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacityConfig {
    pub slo_p99_ms: f64,
    /// Failed or never-sent requests as a share of those due.
    pub slo_error_rate: f64,
    pub start_rps: f64,
    pub max_rps: f64,
    pub min_rps: f64,
    /// The search stops when the rate that missed is within this share above the one that met.
    pub precision: f64,
    pub max_steps: u32,
    /// A p99 within this share of the objective is measured again, up to `max_tries` times.
    pub close: f64,
    pub max_tries: u32,
    /// The share of the requested rate a cell must achieve to meet the objective.
    pub sustained: f64,
    /// Independent searches per scenario (a spec's `repetitions`): their spread is the
    /// capacity's uncertainty between runs, which one search's bracket does not show.
    #[serde(default = "one_search")]
    pub searches: u32,
}

fn one_search() -> u32 {
    1
}

fn local_scale() -> String {
    "local".to_owned()
}

fn echo_application() -> String {
    "echo".to_owned()
}

fn constant_rate() -> LoadModel {
    LoadModel::OpenLoopConstantRate
}

/// Which repetitions the analysis leaves out; their cells stay in the results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutlierPolicyConfig {
    /// Per load point and placement, drop this many repetitions: those whose baseline cell had
    /// the highest maximum latency (E2's policy), with every scenario's cell of them.
    pub drop_highest_baseline_max: u32,
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
    /// The third-party software the scenario runs, each with the version it reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub software: Vec<SoftwareVersion>,
}

/// A third-party binary and what its version command printed (`envoy --version`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SoftwareVersion {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnavailableScenario {
    pub name: String,
    pub reason: String,
    /// The command that installs what is missing.
    pub install: String,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadPoint {
    /// Requested rate; 0 for a point without a target rate (closed loop, sequential, users).
    pub rps: f64,
    /// Connections; the number of users for the users model, 1 for the sequential model.
    pub connections: u32,
    /// Sequential model: the requests of the experiment. Users model: requests per user.
    pub requests: Option<u64>,
    /// Sequential model: requests per group, and the pause between groups.
    pub group_size: Option<u64>,
    pub group_interval_ms: Option<f64>,
    /// E3's application: the largest operand (100, or 10^16 for the "bigger numbers" run).
    pub max_operand: Option<u64>,
    /// E4's counter chain: the services one request crosses.
    pub services: Option<u32>,
}

impl LoadPoint {
    /// A short human label: `400 rps / 16 conns`, `closed loop / 16 conns`,
    /// `2000 requests in groups of 100 every 10 ms, operands to 100`, `8 users x 5 requests,
    /// 10 services`.
    pub fn label(&self) -> String {
        let mut label = if let (Some(requests), Some(group)) = (self.requests, self.group_size) {
            let mut text = format!("{requests} requests in groups of {group}");
            if let Some(ms) = self.group_interval_ms.filter(|ms| *ms > 0.0) {
                text.push_str(&format!(" every {} ms", trim_number(ms)));
            }
            text
        } else if let Some(requests) = self.requests {
            format!("{} users x {requests} requests", self.connections)
        } else if self.rps > 0.0 {
            format!("{} rps / {} conns", trim_number(self.rps), self.connections)
        } else {
            format!("closed loop / {} conns", self.connections)
        };
        if let Some(max) = self.max_operand {
            label.push_str(&format!(", operands to {max}"));
        }
        if let Some(services) = self.services {
            label.push_str(&format!(", {services} services"));
        }
        label
    }
}

fn trim_number(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    pub role: String,
    pub delay_ms: f64,
    pub response_bytes: u64,
    /// Request body size (POST), 0 for GET without a body.
    #[serde(default)]
    pub request_bytes: u64,
    pub protocol: String,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    pub scenario: String,
    /// `intra-node` or `inter-node`; absent in results from before placements.
    pub placement: Option<String>,
    pub load_point: LoadPoint,
    /// The repetition; in a capacity run, the try of this rate within its search.
    pub repetition: u32,
    /// In a capacity run, which of the scenario's independent searches the cell is a step
    /// of (from 1); absent elsewhere and in results from before repeated searches.
    pub search: Option<u32>,
    pub started_at: String,
    pub load: LoadReport,
    /// One entry per measured process, sampled over exactly the load window.
    pub resources: Vec<ComponentResources>,
    /// What a capture on the inter-node link saw during the cell, when one was taken.
    pub wire: Option<WireObservation>,
    /// TLS handshakes our proxies timed (their own histograms, read when they stopped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handshakes: Vec<HandshakeTimes>,
    /// The whole machine's CPU over the same window (one entry per machine: the local lab's
    /// one, or each Kubernetes node that exposes it), so CPU no component was charged for
    /// (the kernel's network processing in softirq, other processes) shows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<MachineCpu>,
    /// Components that stopped, or that meshbench lost sight of, while the cell ran: a
    /// sidecar OOM-killed, a pod deleted, a node's kubelet or the API server unreachable.
    /// The cell's figures then measure the fault too; empty when nothing was seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disruptions: Vec<crate::Disruption>,
}

/// A machine's CPU over a cell's load window, by state, in cores (mean over the window; the
/// states add up to `cpus`). The states are absent where the source has no such split (a
/// kubelet gives only its node's total).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineCpu {
    /// Where the figures come from: `/proc/stat`, or `kubelet-summary` (a node's root
    /// cgroup, through its kubelet).
    pub source: String,
    /// The Kubernetes node; absent for the local lab's machine.
    pub node: Option<String>,
    /// Other nodes of the cluster that run on the same kernel (the same boot id: a test
    /// cluster's nodes on one machine): the reading is the machine's, and their components
    /// count against it too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_machine_nodes: Vec<String>,
    /// Logical CPUs.
    pub cpus: u32,
    pub user_cores: Option<f64>,
    pub nice_cores: Option<f64>,
    pub system_cores: Option<f64>,
    /// Hardware interrupts and softirqs (the kernel's network receive and transmit work,
    /// charged to no process or cgroup).
    pub irq_cores: Option<f64>,
    pub softirq_cores: Option<f64>,
    pub iowait_cores: Option<f64>,
    pub idle_cores: Option<f64>,
    /// Time the hypervisor ran something else while this machine wanted the CPU.
    pub steal_cores: Option<f64>,
    /// Every task's CPU from the root cgroup's exact accounting. The states above are
    /// sampled at the scheduler tick on kernels with tick-based accounting and miss work
    /// between ticks at low load; absent where the root cgroup is unreadable.
    pub tasks_cores: Option<f64>,
    /// How the kernel timed `irq_cores` and `softirq_cores`: `precise`, or `tick-sampled`
    /// (only the scheduler ticks that landed in an interrupt, no measurement at low load);
    /// absent where the kernel's configuration was unreadable.
    pub interrupt_accounting: Option<String>,
    /// Where the readings are sparser than the window (a kubelet refreshes its node's figures
    /// at its housekeeping interval, 10 s by default): the longest gap between the readings
    /// around the window's start or end, in seconds. The counter is interpolated across it,
    /// so the figure assumes a steady rate there; absent for the local lab's dense readings.
    pub edge_gap_seconds: Option<f64>,
    /// The lowest and highest CPU frequency read (MHz), across CPUs, at the window's start
    /// and end; absent where the machine does not expose it.
    pub mhz_min: Option<f64>,
    pub mhz_max: Option<f64>,
}

impl MachineCpu {
    /// A machine known only by its tasks' total (a node's root cgroup through its kubelet):
    /// no states, no frequency.
    pub fn tasks_only(source: &str, node: &str, cpus: u32, tasks_cores: f64) -> Self {
        MachineCpu {
            source: source.to_owned(),
            node: Some(node.to_owned()),
            same_machine_nodes: vec![],
            cpus,
            user_cores: None,
            nice_cores: None,
            system_cores: None,
            irq_cores: None,
            softirq_cores: None,
            iowait_cores: None,
            idle_cores: None,
            steal_cores: None,
            tasks_cores: Some(tasks_cores),
            interrupt_accounting: None,
            edge_gap_seconds: None,
            mhz_min: None,
            mhz_max: None,
        }
    }

    /// Cores doing anything by state: user, nice, system, irq and softirq; `None` where the
    /// source has no states.
    pub fn busy_cores(&self) -> Option<f64> {
        Some(
            self.user_cores?
                + self.nice_cores?
                + self.system_cores?
                + self.irq_cores?
                + self.softirq_cores?,
        )
    }

    /// irq and softirq; `None` where the source has no states.
    pub fn interrupt_cores(&self) -> Option<f64> {
        Some(self.irq_cores? + self.softirq_cores?)
    }

    /// Whether components on `node` run on this machine.
    pub fn covers(&self, node: Option<&str>) -> bool {
        self.node.is_none()
            || self.node.as_deref() == node
            || node.is_some_and(|n| self.same_machine_nodes.iter().any(|m| m == n))
    }
}

/// One proxy's TLS handshakes in one direction over its whole life in the cell (E5's
/// "TLS handshake time"): from its `tls_handshake_duration_seconds` histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandshakeTimes {
    /// e.g. `echo-server-1-sidecar`, `node-2-agent`.
    pub component: String,
    /// `inbound` (the proxy was the TLS server) or `outbound`.
    pub direction: String,
    pub count: u64,
    pub mean_ms: f64,
    /// Upper bound of the histogram bucket holding the median and the 99th percentile.
    pub p50_ms_at_most: Option<f64>,
    pub p99_ms_at_most: Option<f64>,
}

/// A packet capture's verdict on the traffic of a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WireObservation {
    /// Where the capture ran, e.g. `node-1/uplink`, or the loopback backend's recording
    /// relays.
    pub link: String,
    /// The pcap file, relative to the result directory; empty where recording relays stood
    /// for the link (loopback backend).
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

#[serde_with::skip_serializing_none]
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
    pub working_set_mib_mean: Option<f64>,
    pub working_set_mib_max: Option<f64>,
    /// The node it ran on: a Kubernetes node's name; absent on the local lab, whose nodes
    /// the cell's placement names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}
