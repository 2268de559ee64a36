//! The platform seam: where a run's cells happen. The runner decides what a cell is (its
//! topology, the apps and their configs, the scenario's mesh, the instrument and its
//! `LoadSpec`) and records what it measured; a [`Platform`] realizes the cell's topology as a
//! [`Site`], starts the apps and the mesh there, runs the instrument while sampling every
//! component, records the wire when asked, and removes everything it created. The local lab
//! (`meshbench-local`, netns or loopback) is one platform; Kubernetes (`meshbench-kube`) is
//! the other, each implementing these two traits in its own crate without touching the
//! runner.
//!
//! Invariants a platform keeps:
//! - a site removes what it created when [`Site::finish`] runs *and* when it is dropped
//!   unfinished (a failed or interrupted cell), so nothing outlives its cell;
//! - the resources it reports are cut to the instrument's measurement window, for every
//!   component it started (apps, proxies, agents, control plane, the instrument itself);
//! - configs and keys reach components without passing through the results directory, which
//!   the components' users may not be able to read; outputs worth keeping are copied into the
//!   cell's directory.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use meshbench_identity::{ClientTlsFiles, ServerTlsFiles};
use meshbench_loadgen::LoadSpec;
use meshbench_meshes::{BoxFuture, Scenario};
use meshbench_policy::Policy;
use meshbench_results::{
    ComponentResources, Disruption, LoadReport, MachineBackground, MachineCpu, UnavailableScenario,
    WireObservation,
};
use meshbench_topology::{Pod, Topology};
use meshbench_workload::WorkloadFile;

use crate::Error;

/// A mesh's or a site's failure, as the runner records it for a cell.
pub type SiteError = meshbench_meshes::Error;

/// In a cell's directory while its load runs: one JSON line per second of the window
/// (`SecondStats`), written by the load generator for watchers. Every platform
/// puts it there.
pub const LIVE_SERIES: &str = "live.jsonl";

/// One cell, as a platform needs to know it.
pub struct CellPlace<'a> {
    /// For messages.
    pub label: &'a str,
    pub topology: &'a Topology,
    /// The cell's directory in the results.
    pub dir: &'a Path,
    /// Whether the cell records its traffic on the wire (see [`Platform::records_wire`]).
    pub capture_wire: bool,
}

/// What a cell's wire recording needs: the marker every request carries, and the pod the
/// requests go to.
#[derive(Clone, Copy)]
pub struct WireRecording<'a> {
    pub marker: &'a str,
    pub server: &'a Pod,
}

/// The client, the server and the service in front of it: a cell's two-pod part.
#[derive(Clone, Copy)]
pub struct ClientServer<'a> {
    pub client: &'a Pod,
    pub server: &'a Pod,
    pub service: &'a str,
}

/// How the client reaches the server through the mesh.
pub struct Entry {
    pub url: String,
    /// The client's own TLS, when the app does mTLS itself.
    pub client_tls: Option<ClientTlsFiles>,
}

/// What measures a cell; the site decides where its results are written.
pub enum Instrument {
    Load(Box<LoadSpec>),
    /// E3's experimenter running one experiment (`WorkloadApp::Experimenter` with `once`).
    Experimenter(Box<WorkloadFile>),
}

/// What a cell measured.
pub struct Measured {
    pub load: LoadReport,
    pub resources: Vec<ComponentResources>,
    pub wire: Option<WireObservation>,
    /// The whole machine's CPU over the load window (each node's, on a cluster).
    pub machines: Vec<MachineCpu>,
    /// What stopped, or could not be reached, while the cell ran.
    pub disruptions: Vec<Disruption>,
}

/// The machines at rest, as [`Platform::background`] read them.
pub struct AtRest {
    /// The length of each reading in the machines' series.
    pub interval: Duration,
    pub machines: Vec<MachineBackground>,
}

/// Where a run's cells happen.
pub trait Platform {
    /// How results name it: `local-lab/netns`.
    fn name(&self) -> String;

    /// Refuses what it cannot run, before anything is written.
    fn check(&self, profile: &crate::Profile) -> Result<(), Error>;

    /// Whether the run pins its components to CPUs, where that means something (the local
    /// lab's CPUs); results record it so a report can say when pinning would have helped.
    fn pinned(&self) -> Option<bool> {
        None
    }

    /// Whether cells of `placement` record their traffic on the wire (the local lab asked
    /// to: the link between nodes; a cluster asked to: where the server's traffic arrives,
    /// on one node too); such a cell's `CellPlace::capture_wire` is set and its requests
    /// carry a marker.
    fn records_wire(&self, _placement: crate::Placement) -> bool {
        false
    }

    /// Why `mesh` cannot run here, if it cannot: its binary is missing (the local lab), or
    /// it has no flavour for this platform yet. Such a scenario is reported unavailable with
    /// the reason and its cells are not run.
    fn unavailable(&self, mesh: Scenario) -> Option<UnavailableScenario> {
        let missing = mesh.binary().err()?;
        Some(UnavailableScenario {
            name: mesh.name().to_owned(),
            reason: missing.to_string(),
            install: missing.install,
        })
    }

    /// The meshes the platform itself runs, as it detected them (a cluster's Istio, say);
    /// results record them in their environment.
    fn cluster_meshes(&self) -> Vec<meshbench_results::MeshInstallation> {
        vec![]
    }

    /// Sets up what the run's cells share: identities for every workload of `topology` under
    /// `policy`, kept until the platform is dropped.
    fn prepare<'a>(
        &'a mut self,
        topology: &'a Topology,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Each machine's background: its processes' CPU with no cell running, over `window`,
    /// read as a cell's machines are (every `interval`, or the platform's shortest interval).
    /// `None` where the platform reads no machine, or could not read it now (it says why in
    /// its log): a cell is then judged against no background.
    fn background(&self, _window: Duration, _interval: Duration) -> BoxFuture<'_, Option<AtRest>> {
        Box::pin(async { None })
    }

    /// Realizes one cell's topology.
    fn realize<'a>(
        &'a self,
        cell: CellPlace<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn Site<'a> + 'a>, SiteError>>;
}

/// A realized cell: its topology running on the platform, borrowing from it for `'a`.
pub trait Site<'a> {
    /// Unique to the cell (the request marker carries it).
    fn id(&self) -> &str;

    /// Where `pod`'s app listens.
    fn app_listen(&self, pod: &Pod) -> Result<SocketAddr, SiteError>;

    /// `host:port` of `service` as pods dial it.
    fn service_host(&self, service: &str) -> Result<String, SiteError>;

    /// The TLS the server app serves itself under `mesh`, if it does.
    fn app_tls(&self, mesh: Scenario, cell: ClientServer<'_>) -> Option<ServerTlsFiles>;

    /// Starts `app` in `pod` and waits until it serves; a platform that fixes a pod's
    /// containers when it creates it (Kubernetes) may only record the app here and start it,
    /// ready, in `deploy` or `enroll`, once the mesh is known.
    fn start_app<'b>(
        &'b mut self,
        pod: &'b Pod,
        app: &'b WorkloadFile,
    ) -> BoxFuture<'b, Result<(), SiteError>>;

    /// Puts `mesh` around a client/server cell whose server app runs.
    fn deploy<'b>(
        &'b mut self,
        mesh: Scenario,
        cell: ClientServer<'b>,
    ) -> BoxFuture<'b, Result<Entry, SiteError>>;

    /// Puts `mesh` around every meshed workload of the topology.
    fn enroll(&mut self, mesh: Scenario) -> BoxFuture<'_, Result<(), SiteError>>;

    /// Runs `instrument` in `client` to its end, sampling every component every
    /// `sample_interval`; with `wire`, records the traffic toward its server and whether the
    /// marker crossed the wire in plaintext. Stops every component afterwards.
    fn measure<'b>(
        &'b mut self,
        client: &'b Pod,
        instrument: Instrument,
        sample_interval: std::time::Duration,
        wire: Option<WireRecording<'b>>,
    ) -> BoxFuture<'b, Result<Measured, SiteError>>;

    /// Removes what the cell created and keeps its outputs in the cell's directory.
    fn finish(self: Box<Self>) -> BoxFuture<'a, ()>;
}
