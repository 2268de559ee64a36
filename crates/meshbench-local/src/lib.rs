//! The local lab as a platform: a cell's topology as network namespaces (or loopback
//! addresses), its components as child processes of this machine in cgroups of their own, the
//! meshes through their `MeshAdapter`s, the wire through tcpdump on the link between the nodes
//! (or recording relays on loopback).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_identity::ServerTlsFiles;
use meshbench_lab::{CgroupFs, LabComponent, Readiness, ResourceSampler};
use meshbench_loadgen::LoadSpec;
use meshbench_meshes::{
    deploy, enroll, BoxFuture, LabContext, MeshContext, MeshPki, ProxyArea, Scenario,
};
use meshbench_netlab::{new_lab_id, Backend, LabNetwork, WireTap};
use meshbench_results::{
    read_json, Disruption, DisruptionKind, LoadReport, MachineBackground, WireObservation,
};
use meshbench_role::RoleConfig;
use meshbench_topology::{Pod, Topology};
use meshbench_workload::{WorkloadApp, WorkloadFile};

use meshbench_experiment::platform::{
    AtRest, CellPlace, ClientServer, Entry, Instrument, Measured, Platform, Site, SiteError,
    WireRecording, LIVE_SERIES,
};
use meshbench_experiment::{Application, Error, Placement, Profile};
use meshbench_policy::Policy;

/// A failure of the lab's network, which says itself whether it is bad input (not root, a
/// missing tool).
fn platform_error(e: meshbench_netlab::Error) -> Error {
    let bad_input = meshbench_role::InputFault::is_bad_input(&e);
    Error::Platform {
        source: Box::new(e),
        bad_input,
    }
}

const STOP_GRACE: Duration = Duration::from_secs(2);
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// What only the local lab has.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Nodes and pods as network namespaces, or as loopback addresses.
    pub backend: Backend,
    /// The meshbench binary, started once per lab component.
    pub exe: PathBuf,
    /// The run's results directory: the proxy area is made beside it.
    pub out_dir: PathBuf,
    /// Pin the load generator to CPU 0 and the system under test to the other CPUs.
    pub pin: bool,
    /// Capture the inter-node link during inter-node cells and record what it saw: TLS or
    /// plaintext, and whether the request marker leaked.
    pub capture_link: bool,
}

/// This machine, with `backend`'s network.
pub struct LocalLab {
    options: LocalOptions,
    cgroups: Option<CgroupFs>,
    /// What the proxies read and write, and the run's identities (set by `prepare`).
    shared: Option<(ProxyArea, MeshPki)>,
}

impl LocalLab {
    /// The local lab; its results directory made absolute, since components read their
    /// configs from the proxy area, where a relative path would resolve against the config's
    /// directory.
    pub fn new(mut options: LocalOptions) -> Result<Self, Error> {
        options.out_dir =
            std::path::absolute(&options.out_dir).map_err(|source| Error::CreateDir {
                path: options.out_dir.clone(),
                source,
            })?;
        Ok(LocalLab {
            options,
            cgroups: CgroupFs::detect(),
            shared: None,
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
}

impl Platform for LocalLab {
    fn name(&self) -> String {
        format!("local-lab/{}", self.options.backend.name())
    }

    fn pinned(&self) -> Option<bool> {
        Some(self.options.pin)
    }

    /// Only the link between nodes is recorded: within a node there is no link.
    fn records_wire(&self, placement: Placement) -> bool {
        self.options.capture_link && placement == Placement::InterNode
    }

    fn check(&self, profile: &Profile) -> Result<(), Error> {
        let application = profile.application;
        if profile.replicas > 1 {
            return Err(Error::Backend {
                application: application.name(),
                backend: self.options.backend.name(),
                why: "replicas above 1 need a service that balances between its pods, and the local lab's services reach one pod each; run it with --backend kubernetes",
            });
        }
        if application == Application::CounterChain && self.options.backend != Backend::Netns {
            return Err(Error::Backend {
                application: application.name(),
                backend: self.options.backend.name(),
                why: "every counter is enrolled in the mesh by transparent capture, which needs network namespaces",
            });
        }
        if self.options.backend == Backend::Netns {
            meshbench_netlab::NetnsLab::check_permitted().map_err(platform_error)?;
        }
        Ok(())
    }

    /// The machine with nothing of the lab running, read by the same sampler as a cell (its
    /// thread in this process, as during a cell).
    fn background(&self, window: Duration, interval: Duration) -> BoxFuture<'_, Option<AtRest>> {
        Box::pin(async move {
            let sampler = ResourceSampler::start(vec![], interval);
            tokio::time::sleep(window).await;
            let sampled = tokio::task::spawn_blocking(move || sampler.finish())
                .await
                .ok()?;
            let cores = sampled
                .machine
                .process_cores(u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX));
            if cores.is_empty() {
                tracing::warn!("the machine's background could not be read from /proc/stat");
                return None;
            }
            Some(AtRest {
                interval,
                machines: vec![MachineBackground {
                    source: "/proc/stat".to_owned(),
                    node: None,
                    same_machine_nodes: vec![],
                    cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
                    cores,
                }],
            })
        })
    }

    fn prepare<'a>(
        &'a mut self,
        topology: &'a Topology,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let shared = MeshPki::for_run(&self.options.out_dir, topology, policy);
            self.shared = Some(shared.map_err(Error::Mesh)?);
            Ok(())
        })
    }

    fn realize<'a>(
        &'a self,
        cell: CellPlace<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn Site<'a> + 'a>, SiteError>> {
        Box::pin(async move {
            let Some((area, pki)) = &self.shared else {
                return Err(SiteError::Unsupported {
                    mesh: cell.label.into(),
                    what: "a cell before the platform is prepared",
                });
            };
            let cell_area = area.private_dir(format!(
                "cells/{}",
                cell.dir.file_name().unwrap_or_default().to_string_lossy()
            ))?;
            let lab_id = new_lab_id();
            // Declared before the network so that it is dropped after: once the components
            // are killed, the lab's cgroups are removed.
            let cgroups = LabCgroups {
                fs: self.cgroups.clone(),
                lab: lab_id.clone(),
            };
            let net = LabNetwork::create_off_runtime(self.options.backend, &lab_id, cell.topology)
                .await?;
            let (generator_cpus, sut_cpus) = self.cpus();
            // Without a link to capture (loopback), relays stand in for it.
            let wire_tap = (cell.capture_wire && !net.captures()).then(WireTap::new);
            Ok(Box::new(LocalSite {
                lab: self,
                area,
                pki,
                _cgroups: cgroups,
                net,
                cell_dir: cell.dir.to_owned(),
                cell_area,
                components: vec![],
                wire_tap,
                generator_cpus,
                sut_cpus,
            }) as Box<dyn Site<'a> + 'a>)
        })
    }
}

/// A cell on the local lab.
struct LocalSite<'a> {
    lab: &'a LocalLab,
    area: &'a ProxyArea,
    pki: &'a MeshPki,
    _cgroups: LabCgroups,
    net: LabNetwork,
    cell_dir: PathBuf,
    /// The cell's directory in the proxy area.
    cell_area: PathBuf,
    /// Started so far, in order; stopped in reverse.
    components: Vec<LabComponent>,
    wire_tap: Option<WireTap>,
    generator_cpus: Option<String>,
    sut_cpus: Option<String>,
}

impl LocalSite<'_> {
    fn ctx(&self) -> LabContext<'_> {
        LabContext {
            net: &self.net,
            pki: self.pki,
            exe: &self.lab.options.exe,
            work_dir: &self.cell_dir,
            area: self.area,
            cell_area: &self.cell_area,
            cgroups: self.lab.cgroups.as_ref(),
            sut_cpus: self.sut_cpus.clone(),
            wire: self.wire_tap.as_ref(),
        }
    }

    fn mesh_ctx<'c>(&'c self, cell: ClientServer<'c>) -> MeshContext<'c> {
        MeshContext {
            lab: self.ctx(),
            client_pod: cell.client,
            server_pod: cell.server,
            service: cell.service,
        }
    }

    /// Writes the instrument's config, its results going into the cell's directory.
    fn instrument_command(&self, instrument: Instrument) -> Result<Vec<String>, SiteError> {
        let load_json = self.cell_dir.join("load.json");
        let ctx = self.ctx();
        Ok(match instrument {
            Instrument::Load(mut spec) => {
                spec.output.json = Some(load_json);
                spec.output.live = Some(self.cell_dir.join(LIVE_SERIES));
                spec.output.quiet = true;
                LoadSpec::command_line(&ctx.write("load.yaml", &spec.to_yaml())?)
            }
            Instrument::Experimenter(mut file) => {
                if let WorkloadApp::Experimenter {
                    once: Some(once), ..
                } = &mut file.app
                {
                    once.json = load_json;
                    once.result = Some(self.cell_dir.join("experiment.json"));
                }
                WorkloadFile::command_line(&ctx.write("experimenter.yaml", &file.to_yaml())?)
            }
        })
    }
}

impl<'a> Site<'a> for LocalSite<'a> {
    fn id(&self) -> &str {
        self.net.id()
    }

    fn app_listen(&self, pod: &Pod) -> Result<SocketAddr, SiteError> {
        let port = meshbench_meshes::app_port(&self.ctx(), pod);
        Ok(SocketAddr::new(self.net.pod_bind_ip(&pod.name)?, port))
    }

    fn service_host(&self, service: &str) -> Result<String, SiteError> {
        Ok(self.net.service_host(service)?)
    }

    fn app_tls(&self, mesh: Scenario, cell: ClientServer<'_>) -> Option<ServerTlsFiles> {
        mesh.app_tls(&self.mesh_ctx(cell))
    }

    fn start_app<'b>(
        &'b mut self,
        pod: &'b Pod,
        app: &'b WorkloadFile,
    ) -> BoxFuture<'b, Result<(), SiteError>> {
        Box::pin(async move {
            let ctx = self.ctx();
            let config = ctx.write(&format!("{}-app.yaml", pod.name), &app.to_yaml())?;
            let launch = ctx.app_launch(pod, self.sut_cpus.clone())?;
            let component = LabComponent::start(
                &pod.name,
                "app",
                &launch,
                &self.lab.options.exe,
                &WorkloadFile::command_line(&config),
                Readiness::ReadyLine,
                READY_TIMEOUT,
            )
            .await?;
            self.components.push(component);
            Ok(())
        })
    }

    fn deploy<'b>(
        &'b mut self,
        mesh: Scenario,
        cell: ClientServer<'b>,
    ) -> BoxFuture<'b, Result<Entry, SiteError>> {
        Box::pin(async move {
            let deployment = deploy(mesh, &self.mesh_ctx(cell)).await?;
            self.components.extend(deployment.components);
            Ok(Entry {
                url: deployment.url,
                client_tls: deployment.client_tls,
            })
        })
    }

    fn enroll(&mut self, mesh: Scenario) -> BoxFuture<'_, Result<(), SiteError>> {
        Box::pin(async move {
            let components = enroll(mesh, &self.ctx()).await?;
            self.components.extend(components);
            Ok(())
        })
    }

    fn measure<'b>(
        &'b mut self,
        client: &'b Pod,
        instrument: Instrument,
        sample_interval: Duration,
        wire: Option<WireRecording<'b>>,
    ) -> BoxFuture<'b, Result<Measured, SiteError>> {
        let marker = wire.map(|w| w.marker);
        Box::pin(async move {
            let command = self.instrument_command(instrument)?;
            let capture = match marker {
                Some(_) if self.net.captures() => {
                    let node = &client.workload.node;
                    let (netns, interface) = self.net.uplink_of(node)?;
                    let pcap = self.cell_dir.join("uplink.pcap");
                    let capture = meshbench_netlab::WireCapture::start(&netns, interface, &pcap)?;
                    Some((capture, format!("{node}/{interface}"), pcap))
                }
                _ => None,
            };
            let launch = self.ctx().app_launch(client, self.generator_cpus.clone())?;
            let generator = LabComponent::start(
                &client.name,
                "load-generator",
                &launch,
                &self.lab.options.exe,
                &command,
                Readiness::Started,
                READY_TIMEOUT,
            )
            .await?;
            let targets = std::iter::once(&generator)
                .chain(&self.components)
                .filter_map(|c| c.sample_target())
                .collect();
            let sampler = ResourceSampler::start(targets, sample_interval);
            // The generator's cgroup goes with the cell's `LabCgroups` guard.
            let finished = generator.process.wait_success().await;
            let sampled = sampler.finish();
            // Before they are stopped: which components ended on their own meanwhile.
            let mut ended = vec![];
            for component in &mut self.components {
                if let Some(end) = component.process.ended().await {
                    ended.push((component.name.clone(), component.role.clone(), end));
                }
            }
            for component in self.components.drain(..).rev() {
                component.stop(STOP_GRACE).await;
            }
            finished?;
            let out_dir = &self.lab.options.out_dir;
            let wire = match (capture, marker, &self.wire_tap) {
                (Some((capture, link, pcap)), Some(marker), _) => {
                    let report = capture.finish(marker.as_bytes())?;
                    Some(observation(&report, link, Some(&pcap), out_dir, marker))
                }
                (None, Some(marker), Some(tap)) => Some(observation(
                    &tap.finish(marker.as_bytes()),
                    "recording relays between the nodes (loopback)".into(),
                    None,
                    out_dir,
                    marker,
                )),
                _ => None,
            };
            let load_json = self.cell_dir.join("load.json");
            let load: LoadReport = read_json(&load_json).map_err(|e| SiteError::Io {
                path: load_json.clone(),
                source: std::io::Error::other(format!(
                    "the load generator's result is missing or invalid: {e}"
                )),
            })?;
            let (start, end) = (load.window.start_monotonic_ns, load.window.end_monotonic_ns);
            let resources = sampled
                .components
                .iter()
                .map(|s| s.summarize(start, end))
                .collect();
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            let disruptions = ended
                .into_iter()
                .map(|(component, role, end)| {
                    Disruption::at(
                        component,
                        role,
                        DisruptionKind::Exited,
                        end.at,
                        Some(&load.window),
                        end.status,
                    )
                    .with_detail(end.stderr)
                })
                .collect();
            Ok(Measured {
                load,
                resources,
                wire,
                machines: sampled
                    .machine
                    .summarize(start, end, cpus)
                    .into_iter()
                    .collect(),
                disruptions,
            })
        })
    }

    fn finish(self: Box<Self>) -> BoxFuture<'a, ()> {
        let LocalSite {
            net,
            cell_dir,
            cell_area,
            components,
            _cgroups,
            ..
        } = *self;
        Box::pin(async move {
            for component in components.into_iter().rev() {
                component.stop(STOP_GRACE).await;
            }
            if let Err(e) = net.teardown_off_runtime().await {
                tracing::warn!(error = %e, "lab teardown incomplete; run `meshbench lab clean`");
            }
            // The proxies have stopped and written their final metrics.
            if let Err(e) = meshbench_meshes::collect_outputs(&cell_area, &cell_dir) {
                tracing::warn!(error = %e, "the proxies' outputs were not all copied into the results");
            }
            let _ = std::fs::remove_dir_all(&cell_area);
            drop(_cgroups);
        })
    }
}

fn observation(
    report: &meshbench_netlab::WireReport,
    link: String,
    pcap: Option<&Path>,
    out_dir: &Path,
    marker: &str,
) -> WireObservation {
    let pcap = pcap.map_or_else(String::new, |pcap| {
        pcap.strip_prefix(out_dir)
            .unwrap_or(pcap)
            .display()
            .to_string()
    });
    report.observation(link, pcap, marker)
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
