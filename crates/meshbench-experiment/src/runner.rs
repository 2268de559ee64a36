//! The runner: turns a profile into cells and runs each on the local lab.
//!
//! A cell is one (repetition, load point, placement, scenario). Scenarios are innermost, so a
//! run goes A B C A B C ... and slow machine drift spreads over all scenarios instead of
//! biasing one. For each cell the runner builds the lab network for the placement (netns
//! namespaces or loopback addresses), starts the server app in its pod, deploys the scenario's
//! mesh around it, runs the load generator in the client pod, samples every component's CPU
//! and memory (from its cgroup where there is one) and cuts those samples to the generator's
//! measurement window. `results.json` is rewritten atomically after every cell; an
//! interrupted run keeps its finished cells and is marked partial. Whatever a cell created
//! (processes, namespaces, cgroups) is removed when it ends, however it ends.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use meshbench_identity::ClientTlsFiles;
use meshbench_lab::{
    describe_environment, BuildInfo, CgroupFs, LabComponent, Readiness, ResourceSampler,
};
use meshbench_loadgen::{Body, ClientTlsSpec, LoadSpec, RequestFile};
use meshbench_meshes::{deploy, enroll, LabContext, Mesh, MeshContext, MeshPki, Ports, ProxyArea};
use meshbench_netlab::{new_lab_id, Backend, LabNetwork, WireTap};
use meshbench_results::{
    read_json, write_json_atomic, Cell, LoadPoint, LoadReport, RunResult, RunStatus,
    UnavailableScenario, WireObservation, SCHEMA_VERSION,
};
use meshbench_role::RoleConfig;
use meshbench_workload::{ExperimentOnce, WorkloadApp, WorkloadFile};

use crate::application::{Application, COUNTER_A, COUNTER_B};
use crate::placement::Placement;
use crate::{Error, LoadKind, PointPlan, Profile};

const STOP_GRACE: Duration = Duration::from_secs(2);
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Where and how a run happens; what it runs is the [`Profile`].
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub out_dir: PathBuf,
    /// The meshbench binary, started once per lab component.
    pub exe: PathBuf,
    pub build: BuildInfo,
    pub backend: Backend,
    /// Pin the load generator to CPU 0 and the system under test to the other CPUs.
    pub pin: bool,
    /// Capture the inter-node link during inter-node cells (netns backend) and record what
    /// it saw: TLS or plaintext, and whether the request marker leaked.
    pub capture_link: bool,
}

/// Identifies a cell for progress reporting.
#[derive(Debug, Clone)]
pub struct CellId {
    pub index: usize,
    pub total: usize,
    pub scenario: Mesh,
    pub placement: Placement,
    pub load_point: LoadPoint,
    pub repetition: u32,
}

impl CellId {
    pub fn label(&self) -> String {
        format!(
            "{} {} @ {} (rep {})",
            self.scenario.name(),
            self.placement.name(),
            self.load_point.label(),
            self.repetition
        )
    }
}

/// Receives progress as cells start and finish (the CLI draws a progress bar).
pub trait Progress {
    fn cell_started(&self, cell: &CellId);
    fn cell_finished(&self, cell: &CellId, result: &Cell);
    fn scenario_unavailable(&self, scenario: &UnavailableScenario);
}

pub struct Runner {
    profile: Profile,
    options: RunOptions,
    result: RunResult,
    results_path: PathBuf,
    cgroups: Option<CgroupFs>,
}

impl Runner {
    /// Prepares the output directory; refuses one that already holds results.
    pub fn new(profile: Profile, options: RunOptions) -> Result<Self, Error> {
        let results_path = options.out_dir.join("results.json");
        if results_path.exists() {
            return Err(Error::OutputExists { path: results_path });
        }
        check_backend(&profile, options.backend)?;
        std::fs::create_dir_all(&options.out_dir).map_err(|source| Error::CreateDir {
            path: options.out_dir.clone(),
            source,
        })?;
        let platform = format!("local-lab/{}", options.backend.name());
        let result = RunResult {
            schema_version: SCHEMA_VERSION,
            kind: "meshbench.run".to_owned(),
            status: RunStatus::Running,
            status_reason: None,
            started_at: timestamp(),
            finished_at: None,
            environment: describe_environment(&options.build),
            config: profile.describe(&platform),
            cells: Vec::new(),
        };
        Ok(Runner {
            profile,
            options,
            result,
            results_path,
            cgroups: CgroupFs::detect(),
        })
    }

    /// Continues an interrupted run in `options.out_dir`: the profile is rebuilt from the spec
    /// the results carry (with the run's scale, selection, duration and warm-up), finished
    /// cells are kept and skipped, and new cells are appended to the same document.
    pub fn resume(options: RunOptions) -> Result<Self, Error> {
        let results_path = options.out_dir.join("results.json");
        let mut result: RunResult = read_json(&results_path).map_err(|e| Error::Resume {
            path: results_path.clone(),
            problem: e.to_string(),
        })?;
        if result.status == RunStatus::Complete {
            return Err(Error::Resume {
                path: results_path,
                problem: "the run is complete; there is nothing to resume".into(),
            });
        }
        let profile =
            Profile::from_run_config(&result.config).map_err(|problem| Error::Resume {
                path: results_path.clone(),
                problem,
            })?;
        check_backend(&profile, options.backend)?;
        result.status = RunStatus::Running;
        result.status_reason = None;
        result.finished_at = None;
        // Re-checked now: a tool installed since may make a scenario available.
        result.config.unavailable.clear();
        // A fresh CA for the new cells; the old one signed nothing that is still running.
        let pki = options.out_dir.join("pki");
        if pki.exists() {
            std::fs::remove_dir_all(&pki).map_err(|source| Error::CreateDir {
                path: pki.clone(),
                source,
            })?;
        }
        Ok(Runner {
            profile,
            options,
            result,
            results_path,
            cgroups: CgroupFs::detect(),
        })
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Cells already in the results (non-zero when resuming).
    pub fn finished_cells(&self) -> usize {
        self.result.cells.len()
    }

    pub fn results_path(&self) -> &Path {
        &self.results_path
    }

    /// Runs every cell until done or until `cancel` resolves. Returns the final document,
    /// which is also on disk; on a cell error the document on disk is marked partial first.
    pub async fn run(
        mut self,
        progress: &dyn Progress,
        cancel: impl Future<Output = ()>,
    ) -> Result<RunResult, Error> {
        write_json_atomic(&self.results_path, &self.result)?;
        tokio::pin!(cancel);
        // `None`: cancelled. Dropping the cell future kills its lab processes and tears its
        // network down.
        let finished = tokio::select! {
            outcome = self.run_cells(progress) => Some(outcome),
            () = &mut cancel => None,
        };
        self.result.finished_at = Some(timestamp());
        let failure = match finished {
            Some(Ok(())) => {
                self.result.status = RunStatus::Complete;
                None
            }
            Some(Err(e)) => {
                self.result.status = RunStatus::Partial;
                self.result.status_reason = Some(e.to_string());
                Some(e)
            }
            None => {
                self.result.status = RunStatus::Partial;
                self.result.status_reason = Some("interrupted".to_owned());
                None
            }
        };
        write_json_atomic(&self.results_path, &self.result)?;
        match failure {
            Some(e) => Err(e),
            None => Ok(self.result),
        }
    }

    async fn run_cells(&mut self, progress: &dyn Progress) -> Result<(), Error> {
        let profile = self.profile.clone();
        // Meshes this machine cannot run are reported, never silently dropped.
        let mut scenarios = Vec::new();
        for &mesh in &profile.scenarios {
            match mesh.binary() {
                Ok(_) => scenarios.push(mesh),
                Err(missing) => {
                    let entry = UnavailableScenario {
                        name: mesh.name().to_owned(),
                        reason: missing.to_string(),
                        install: missing.install.clone(),
                    };
                    progress.scenario_unavailable(&entry);
                    self.result.config.unavailable.push(entry);
                }
            }
        }
        write_json_atomic(&self.results_path, &self.result)?;
        let application = profile.application;
        // What the proxies read and write, where the proxy user can reach it whatever the
        // results directory's permissions; removed when the run ends.
        let area = ProxyArea::create(&self.options.out_dir).map_err(Error::Mesh)?;
        let pki = MeshPki::create(
            &area,
            &application.topology(Placement::InterNode),
            &application.policy_yaml(),
        )
        .map_err(Error::Mesh)?;
        let total = profile.cells() / profile.scenarios.len().max(1) * scenarios.len();
        let mut index = 0;
        for repetition in 1..=profile.max_repetitions() {
            let points = profile
                .load_points
                .iter()
                .filter(|p| p.repetitions >= repetition);
            for &PointPlan {
                point: load_point, ..
            } in points
            {
                for &placement in &profile.placements {
                    for &scenario in &scenarios {
                        index += 1;
                        let finished = self.result.cells.iter().any(|c| {
                            c.scenario == scenario.name()
                                && c.placement.as_deref() == Some(placement.name())
                                && c.load_point == load_point
                                && c.repetition == repetition
                        });
                        if finished {
                            continue;
                        }
                        let id = CellId {
                            index,
                            total,
                            scenario,
                            placement,
                            load_point,
                            repetition,
                        };
                        progress.cell_started(&id);
                        let cell = self.run_cell(&id, &area, &pki).await?;
                        progress.cell_finished(&id, &cell);
                        self.result.cells.push(cell);
                        write_json_atomic(&self.results_path, &self.result)?;
                        if !profile.cooldown.is_zero() && index < total {
                            tokio::time::sleep(profile.cooldown).await;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn run_cell(&self, id: &CellId, area: &ProxyArea, pki: &MeshPki) -> Result<Cell, Error> {
        let label = id.label();
        let cell_err = |error: meshbench_meshes::Error| Error::Cell {
            cell: label.clone(),
            error,
        };
        let started_at = timestamp();
        let cell_dir = self.options.out_dir.join("cells").join(format!(
            "{:03}-{}-{}-{}rps-{}c-rep{}",
            id.index,
            id.scenario.name(),
            id.placement.name(),
            id.load_point.rps,
            id.load_point.connections,
            id.repetition
        ));
        std::fs::create_dir_all(&cell_dir).map_err(|source| Error::CreateDir {
            path: cell_dir.clone(),
            source,
        })?;
        let cell_area = area
            .private_dir(format!(
                "cells/{}",
                cell_dir.file_name().unwrap_or_default().to_string_lossy()
            ))
            .map_err(cell_err)?;
        let application = self.profile.application;
        let topology = application.topology(id.placement);
        let lab_id = new_lab_id();
        // Declared first so it is dropped last: after the components are killed, the lab's
        // cgroups are removed.
        let _cgroups = LabCgroups {
            fs: self.cgroups.clone(),
            lab: lab_id.clone(),
        };
        let net = LabNetwork::create_off_runtime(self.options.backend, &lab_id, &topology)
            .await
            .map_err(|e| cell_err(e.into()))?;
        let client_pod = topology
            .first_pod(application.client())
            .expect("static topology");
        let server_pod = topology
            .first_pod(application.server())
            .expect("static topology");
        let (generator_cpus, sut_cpus) = self.cpus();
        // Without a link to capture (loopback), relays stand in for it.
        let wire_tap = (self.captures_wire(id) && !net.captures()).then(WireTap::new);
        let ctx = MeshContext {
            lab: LabContext {
                net: &net,
                pki,
                exe: &self.options.exe,
                work_dir: &cell_dir,
                area,
                cell_area: &cell_area,
                cgroups: self.cgroups.as_ref(),
                sut_cpus,
                wire: wire_tap.as_ref(),
            },
            client_pod: &client_pod,
            server_pod: &server_pod,
            service: application.service(),
        };
        let outcome = self
            .measure(id, &ctx, &cell_dir, generator_cpus)
            .await
            .map_err(cell_err);
        drop(ctx);
        if let Err(e) = net.teardown_off_runtime().await {
            tracing::warn!(error = %e, "lab teardown incomplete; run `meshbench lab clean`");
        }
        // The proxies have stopped and written their final metrics.
        if let Err(e) = meshbench_meshes::collect_outputs(&cell_area, &cell_dir) {
            tracing::warn!(error = %e, "the proxies' outputs were not all copied into the results");
        }
        let _ = std::fs::remove_dir_all(&cell_area);
        let (load, resources, wire) = outcome?;
        let handshakes = crate::handshakes::read_handshakes(&cell_dir);
        Ok(Cell {
            scenario: id.scenario.name().to_owned(),
            placement: Some(id.placement.name().to_owned()),
            load_point: id.load_point,
            repetition: id.repetition,
            started_at,
            load,
            resources,
            wire,
            handshakes,
        })
    }

    /// The CPUs of the load generator and of the system under test, when pinning.
    fn cpus(&self) -> (Option<String>, Option<String>) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if !self.options.pin || cores < 2 {
            return (None, None);
        }
        (Some("0".into()), Some(format!("1-{}", cores - 1)))
    }

    async fn measure(
        &self,
        id: &CellId,
        ctx: &MeshContext<'_>,
        cell_dir: &Path,
        generator_cpus: Option<String>,
    ) -> Result<
        (
            LoadReport,
            Vec<meshbench_results::ComponentResources>,
            Option<WireObservation>,
        ),
        meshbench_meshes::Error,
    > {
        let profile = &self.profile;
        let application = profile.application;
        let mut components = self.start_apps(id, ctx).await?;
        let (url, client_tls) = match application {
            Application::Echo | Application::ZeroTrustApp => {
                let deployment = deploy(id.scenario, ctx).await?;
                components.extend(deployment.components);
                (deployment.url, deployment.client_tls)
            }
            Application::CounterChain => {
                components.extend(enroll(id.scenario, &ctx.lab).await?);
                let host = ctx.net.service_host(COUNTER_A)?;
                (format!("http://{host}/count"), None)
            }
        };
        let capturing = self.captures_wire(id);
        let marker = format!("meshbench-marker-{}", ctx.net.id());
        let marker_if_captured = capturing.then_some(marker.as_str());
        let load_json = cell_dir.join("load.json");
        let client_args = match application {
            Application::ZeroTrustApp => {
                let file = self.experimenter_file(
                    id,
                    &url,
                    marker_if_captured,
                    cell_dir,
                    load_json.clone(),
                );
                WorkloadFile::command_line(&ctx.write("experimenter.yaml", &file.to_yaml())?)
            }
            Application::Echo | Application::CounterChain => {
                let spec =
                    self.load_spec(id, url, marker_if_captured, client_tls, load_json.clone());
                LoadSpec::command_line(&ctx.write("load.yaml", &spec.to_yaml())?)
            }
        };
        let capture = if capturing && ctx.net.captures() {
            let node = &ctx.client_pod.workload.node;
            let (netns, interface) = ctx.net.uplink_of(node)?;
            let pcap = cell_dir.join("uplink.pcap");
            let capture = meshbench_netlab::WireCapture::start(&netns, interface, &pcap)?;
            Some((capture, format!("{node}/{interface}"), pcap))
        } else {
            None
        };
        let launch = ctx.app_launch(ctx.client_pod, generator_cpus)?;
        let client = LabComponent::start(
            &ctx.client_pod.name,
            "load-generator",
            &launch,
            &self.options.exe,
            &client_args,
            Readiness::Started,
            READY_TIMEOUT,
        )
        .await?;
        let targets = std::iter::once(&client)
            .chain(&components)
            .filter_map(|c| c.sample_target())
            .collect();
        let sampler = ResourceSampler::start(targets, profile.sample_interval);
        // The client's cgroup goes with the cell's `LabCgroups` guard.
        let finished = client.process.wait_success().await;
        let series = sampler.finish();
        for component in components.into_iter().rev() {
            component.stop(STOP_GRACE).await;
        }
        finished?;
        let wire = match (capture, ctx.wire) {
            (Some((capture, link, pcap)), _) => {
                let report = capture.finish(marker.as_bytes())?;
                Some(observation(
                    &report,
                    link,
                    Some(&pcap),
                    &self.options.out_dir,
                    marker,
                ))
            }
            (None, Some(tap)) => Some(observation(
                &tap.finish(marker.as_bytes()),
                "recording relays between the nodes (loopback)".into(),
                None,
                &self.options.out_dir,
                marker,
            )),
            (None, None) => None,
        };
        let load: LoadReport = read_json(&load_json).map_err(|e| meshbench_meshes::Error::Io {
            path: load_json.clone(),
            source: std::io::Error::other(format!(
                "the load generator's result is missing or invalid: {e}"
            )),
        })?;
        let resources = series
            .iter()
            .map(|s| s.summarize(load.window.start_monotonic_ns, load.window.end_monotonic_ns))
            .collect();
        Ok((load, resources, wire))
    }

    /// Whether a cell records the link between nodes (`--capture-link`, inter-node cells). The
    /// chain's hops do not carry the marker, so it is not captured: a capture that cannot see
    /// the marker would prove nothing about it.
    fn captures_wire(&self, id: &CellId) -> bool {
        self.options.capture_link
            && id.placement == Placement::InterNode
            && self.profile.application != Application::CounterChain
    }

    /// Starts the application's server side: the echo server, the calculator, or both
    /// counters (each forwarding to the other's service).
    async fn start_apps(
        &self,
        id: &CellId,
        ctx: &MeshContext<'_>,
    ) -> Result<Vec<LabComponent>, meshbench_meshes::Error> {
        let profile = &self.profile;
        let listen =
            |pod: &meshbench_topology::Pod| -> Result<SocketAddr, meshbench_meshes::Error> {
                Ok(SocketAddr::new(ctx.net.pod_bind_ip(&pod.name)?, Ports::APP))
            };
        let mut apps = vec![];
        match profile.application {
            Application::Echo => {
                let mut file = WorkloadFile::new(
                    ctx.server_app_listen()?,
                    WorkloadApp::fixed_echo(profile.server_delay, profile.response_bytes),
                );
                file.tls = ctx.server_app_tls(id.scenario);
                apps.push((ctx.server_pod.clone(), file));
            }
            Application::ZeroTrustApp => {
                let file = WorkloadFile::new(ctx.server_app_listen()?, WorkloadApp::Calculator);
                apps.push((ctx.server_pod.clone(), file));
            }
            Application::CounterChain => {
                let topology = ctx.net.topology();
                for (this, next) in [(COUNTER_A, COUNTER_B), (COUNTER_B, COUNTER_A)] {
                    let pod = topology.first_pod(this).expect("static topology");
                    let app = WorkloadApp::Counter {
                        name: this.to_owned(),
                        next: Some(format!("http://{}", ctx.net.service_host(next)?)),
                        timeout: profile.request_timeout,
                    };
                    apps.push((pod.clone(), WorkloadFile::new(listen(&pod)?, app)));
                }
            }
        }
        let mut components = vec![];
        for (pod, file) in apps {
            let args = WorkloadFile::command_line(
                &ctx.write(&format!("{}-app.yaml", pod.name), &file.to_yaml())?,
            );
            let launch = ctx.app_launch(&pod, ctx.sut_cpus.clone())?;
            components.push(
                LabComponent::start(
                    &pod.name,
                    "app",
                    &launch,
                    &self.options.exe,
                    &args,
                    Readiness::ReadyLine,
                    READY_TIMEOUT,
                )
                .await?,
            );
        }
        Ok(components)
    }

    /// `meshbench load` for the cell's model and point.
    fn load_spec(
        &self,
        id: &CellId,
        url: String,
        marker: Option<&str>,
        tls: Option<ClientTlsFiles>,
        json: PathBuf,
    ) -> LoadSpec {
        let profile = &self.profile;
        let point = id.load_point;
        let mut spec = LoadSpec::new(url, profile.model.load_model(&point));
        if profile.model == LoadKind::Sequential {
            spec.requests = Some(point.requests.unwrap_or(1));
        }
        if profile.model.time_bound() {
            spec.connections = point.connections;
            spec.duration = Some(profile.duration);
        }
        if let Some(services) = point.services {
            spec.request = RequestFile {
                method: "POST".into(),
                headers: vec!["content-type: application/json".into()],
                body: Body::Text(format!(r#"{{"count": 0, "max_count": {services}}}"#)),
            };
        } else if profile.request_bytes > 0 {
            spec.request.method = "POST".into();
            spec.request.body = Body::PayloadSize(profile.request_bytes);
        }
        if !profile.warmup.is_zero() {
            spec.warmup = Some(profile.warmup);
        }
        if let Some(marker) = marker {
            spec.request
                .headers
                .push(format!("x-meshbench-marker: {marker}"));
        }
        spec.timeout = profile.request_timeout;
        spec.tls = tls.map(|files| ClientTlsSpec {
            cert: files.cert,
            key: files.key,
            ca: files.ca,
            expect_server_id: files.expect_server_id.map(|id| id.to_string()),
        });
        spec.output.json = Some(json);
        spec.output.quiet = true;
        spec
    }

    /// E3's experimenter running one experiment against the calculator at `url`: the
    /// point's requests in its groups, all four operations, the point's operands, and the
    /// first request discarded as E3 did.
    fn experimenter_file(
        &self,
        id: &CellId,
        url: &str,
        marker: Option<&str>,
        cell_dir: &Path,
        json: PathBuf,
    ) -> WorkloadFile {
        let point = id.load_point;
        let mut experiment = serde_json::json!({
            "interactions": point.requests.unwrap_or(1),
            "batchSize": point.group_size.unwrap_or(1),
            "intervalBetweenBatchesInMilliseconds":
                point.group_interval_ms.unwrap_or(0.0).round() as u64,
            "allowedOperations": ["sum", "subtraction", "multiplication", "division"],
            "maxOperand": point.max_operand.unwrap_or(100),
            "warmupInteractions": u64::from(point.requests.unwrap_or(1) > 1),
        });
        if let Some(marker) = marker {
            experiment["marker"] = serde_json::Value::String(marker.to_owned());
        }
        let experiment = experiment.as_object().cloned().unwrap_or_default();
        // The experimenter serves nothing when it runs once; its address is not used.
        let unused = SocketAddr::from(([127, 0, 0, 1], 0));
        WorkloadFile::new(
            unused,
            WorkloadApp::Experimenter {
                calculator: url.to_owned(),
                timeout: self.profile.request_timeout,
                once: Some(ExperimentOnce {
                    experiment,
                    json,
                    result: Some(cell_dir.join("experiment.json")),
                }),
            },
        )
    }
}

/// Refuses a backend the profile's application cannot run on, before anything is written.
fn check_backend(profile: &Profile, backend: Backend) -> Result<(), Error> {
    if profile.application == Application::CounterChain && backend != Backend::Netns {
        return Err(Error::Backend {
            application: profile.application.name(),
            backend: backend.name(),
            why: "every counter is enrolled in the mesh by transparent capture, which needs network namespaces",
        });
    }
    if backend == Backend::Netns {
        meshbench_netlab::NetnsLab::check_permitted()?;
    }
    Ok(())
}

fn observation(
    report: &meshbench_netlab::WireReport,
    link: String,
    pcap: Option<&Path>,
    out_dir: &Path,
    marker: String,
) -> WireObservation {
    WireObservation {
        link,
        pcap: pcap.map_or_else(String::new, |pcap| {
            pcap.strip_prefix(out_dir)
                .unwrap_or(pcap)
                .display()
                .to_string()
        }),
        packets: report.packets,
        connections: report.flows.len() as u32,
        tls_connections: report.tls_connections(),
        marker,
        marker_seen: report.marker_seen(),
        tls_versions: report.tls_versions(),
        cipher_suites: report.cipher_suites(),
    }
}

/// Removes a cell's cgroups (killing anything left in them) when the cell ends, however.
struct LabCgroups {
    fs: Option<CgroupFs>,
    lab: String,
}

impl Drop for LabCgroups {
    fn drop(&mut self) {
        let Some(fs) = &self.fs else { return };
        for dir in fs.lab_dirs().into_iter().filter(|d| d.ends_with(&self.lab)) {
            if let Err(e) = meshbench_lab::destroy_lab_dir(&dir) {
                tracing::warn!(error = %e, "lab cgroups left behind; run `meshbench lab clean`");
            }
        }
    }
}

fn timestamp() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
