//! A cell's instrument on a cluster: the load generator (its load split over `--generators`
//! pods, their reports merged exactly) or E3's experimenter running its one experiment, each
//! in pods of the client's workload with what the mesh adds to that workload, run to their
//! end while the kubelets' summaries of every container of the cell are read; the results
//! come back in the pods' logs. Each node the cell ran on is read whole too (its root cgroup,
//! through the same summaries), so that CPU no component was charged for shows per node; the
//! nodes that share one kernel (a test cluster on one machine) are read once, as one machine.
//! What happens to the cell's pods, its kubelets and the API server while the instrument runs
//! is watched ([`crate::disruptions`]) and kept in the cell.
//! Where a node agent must capture the instrument's pods, which
//! have addresses only once they run, they wait at a start gate until their node's agent is
//! in place.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures::future::try_join_all;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use meshbench_experiment::platform::{Measured, WireRecording};
use meshbench_loadgen::{LoadModel, LoadSpec};
use meshbench_meshes::{PodAdditions, CONFIG_DIR_IN_POD};
use meshbench_results::SampleSeries;
use meshbench_results::{ComponentResources, LoadReport, MachineCpu, WireObservation};
use meshbench_role::RoleConfig;
use meshbench_topology::Pod as TopologyPod;
use meshbench_workload::{WorkloadApp, WorkloadFile};

use super::{credentials_of, on_cluster, CreatedPod, KubeSite, START_GATE};
use crate::disruptions::{CellEvents, CellWatch};
use crate::objects::{PodShape, APP_CONTAINER};
use crate::outage::Outages;
use crate::pods::{self, Until};
use crate::stats::{
    node_facts, per_machine, NodeFacts, Readings, SummarySampler, Target, MIN_SAMPLE_INTERVAL,
};
use crate::Error;

/// How long the instrument may overrun its own duration before the cell is failed.
const INSTRUMENT_GRACE: Duration = Duration::from_secs(120);
/// How long a kubelet or the API server may stay out of reach while the instrument runs: a
/// restart takes seconds; beyond this, the cell's readings have a hole it cannot be trusted
/// with, or its pods no way to report that they finished.
const OUTAGE_LIMIT: Duration = Duration::from_secs(30);
/// How long the instrument waits for the service to answer before measuring: the service's
/// routes reach the nodes a moment after its pods are ready (kube-proxy programs them on its
/// next sync), and a generator started at once timed every request out.
const TARGET_WAIT: Duration = Duration::from_secs(60);
/// How long E3's experiment may take: it ends after a number of requests, not a duration.
const EXPERIMENT_BUDGET: Duration = Duration::from_secs(600);

/// One of the instrument's pods: its topology pod and its command and config files.
struct InstrumentPod {
    pod: TopologyPod,
    config: (Vec<String>, BTreeMap<String, String>),
}

/// The instrument's pods, finished: each with its log, and what the kubelets said meanwhile.
struct Finished {
    pods: Vec<(CreatedPod, String)>,
    readings: Readings,
    /// The cell's wire, when it was recorded.
    wire: Option<WireObservation>,
    /// Each node read: its CPUs and its kernel's boot id, from its Node object.
    nodes: Vec<NodeFacts>,
    /// What happened to the cell's pods, its kubelets and the API server meanwhile.
    events: CellEvents,
    /// The containers followed, which name the components in `events`.
    targets: Vec<Target>,
}

impl KubeSite<'_> {
    /// `spec` from the client's workload, over the platform's number of generator pods.
    pub(super) async fn run_generator(
        &mut self,
        client: &TopologyPod,
        mut spec: LoadSpec,
        sample_interval: Duration,
        wire: Option<WireRecording<'_>>,
    ) -> Result<Measured, Error> {
        spec.output = meshbench_loadgen::LoadOutput {
            stdout_json: true,
            quiet: true,
            ..Default::default()
        };
        spec.wait_for_target = Some(TARGET_WAIT);
        if self.instrument_waits_for_agents() {
            spec.start_gate = Some(START_GATE.into());
        }
        let budget = spec.duration.unwrap_or_default() + spec.warmup.unwrap_or_default();
        let split = split_load(&spec, self.platform.generators)?;
        let pods = split
            .iter()
            .enumerate()
            .map(|(i, part)| {
                // One generator keeps the client pod's name; several are numbered.
                let mut pod = client.clone();
                if split.len() > 1 {
                    pod.name = format!("{}-g{}", client.name, i + 1);
                }
                InstrumentPod {
                    pod,
                    config: (
                        LoadSpec::command_line(&Path::new(CONFIG_DIR_IN_POD).join("load.yaml")),
                        BTreeMap::from([("load.yaml".to_owned(), part.to_yaml())]),
                    ),
                }
            })
            .collect();
        let finished = self
            .run_instrument(
                client,
                "load-generator",
                pods,
                budget,
                sample_interval,
                wire,
            )
            .await?;
        let several = finished.pods.len() > 1;
        let mut reports = vec![];
        for (i, (pod, log)) in finished.pods.iter().enumerate() {
            let stem = match several {
                false => "load-generator".to_owned(),
                true => format!("load-generator-g{}", i + 1),
            };
            let _ = std::fs::write(self.cell_dir.join(format!("{stem}.log")), log);
            let report = report_in_log(log).ok_or_else(|| Error::Result {
                pod: pod.name.clone(),
                problem: "no line of it is a meshbench load report".into(),
            })?;
            if several {
                let path = self.cell_dir.join(format!("load-g{}.json", i + 1));
                let _ = meshbench_results::write_json_atomic(&path, &report);
            }
            reports.push(report);
        }
        let first = &finished.pods[0].0;
        let load = meshbench_loadgen::merge_reports(&reports).map_err(|e| Error::Result {
            pod: first.name.clone(),
            problem: e.to_string(),
        })?;
        self.measured(&finished, load, first)
    }

    /// E3's experimenter running `file`'s one experiment in the client's pod; it prints its
    /// load report and E3's own answer in its log.
    pub(super) async fn run_experimenter(
        &mut self,
        client: &TopologyPod,
        mut file: WorkloadFile,
        sample_interval: Duration,
        wire: Option<WireRecording<'_>>,
    ) -> Result<Measured, Error> {
        let gate = self.instrument_waits_for_agents();
        let WorkloadApp::Experimenter {
            once: Some(once), ..
        } = &mut file.app
        else {
            return Err(Error::Unsupported {
                what: "an experimenter that serves".into(),
                why: "the instrument runs one experiment and ends".into(),
            });
        };
        once.json = meshbench_workload::STDOUT.into();
        once.result = Some(meshbench_workload::STDOUT.into());
        once.wait_for_calculator = Some(TARGET_WAIT);
        once.start_gate = gate.then(|| START_GATE.into());
        let pods = vec![InstrumentPod {
            pod: client.clone(),
            config: (
                WorkloadFile::command_line(&Path::new(CONFIG_DIR_IN_POD).join("app.yaml")),
                BTreeMap::from([("app.yaml".to_owned(), file.to_yaml())]),
            ),
        }];
        let finished = self
            .run_instrument(
                client,
                "experimenter",
                pods,
                EXPERIMENT_BUDGET,
                sample_interval,
                wire,
            )
            .await?;
        let (pod, log) = &finished.pods[0];
        let _ = std::fs::write(self.cell_dir.join("experimenter.log"), log);
        let load = report_in_log(log).ok_or_else(|| Error::Result {
            pod: pod.name.clone(),
            problem: "no line of it is a meshbench load report".into(),
        })?;
        // E3's answer: every RTT and the failures by class, as the study kept them.
        if let Some(answer) = log
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v.get("rttsInMilliseconds").is_some())
        {
            let _ = meshbench_results::write_json_atomic(
                &self.cell_dir.join("experiment.json"),
                &answer,
            );
        }
        self.measured(&finished, load, pod)
    }

    /// Whether the instrument must wait for node agents that capture it by its address.
    /// What the instrument measured, with every component's resources cut to its window; its
    /// report is kept in the cell's directory as `load.json`.
    fn measured(
        &self,
        finished: &Finished,
        load: LoadReport,
        instrument: &CreatedPod,
    ) -> Result<Measured, Error> {
        let (resources, machines) = in_window(finished, &load, instrument)?;
        let disruptions = finished
            .events
            .disruptions(&finished.targets, Some(&load.window));
        let _ = meshbench_results::write_json_atomic(&self.cell_dir.join("load.json"), &load);
        Ok(Measured {
            load,
            resources,
            wire: finished.wire.clone(),
            machines,
            disruptions,
        })
    }

    fn instrument_waits_for_agents(&self) -> bool {
        self.enrolled.as_ref().is_some_and(|e| e.agents_pending)
    }

    /// What the cell's mesh adds to a pod of the client's workload.
    fn instrument_additions(&self, client: &TopologyPod) -> Result<PodAdditions, Error> {
        let Some(enrolled) = &self.enrolled else {
            return Ok(PodAdditions::default());
        };
        if let Some(installed) = &self.installed {
            return Ok(installed.enrollment.additions(&client.workload.name));
        }
        let Some(cluster) = enrolled.mesh.cluster() else {
            return Ok(PodAdditions::default());
        };
        Ok(match &enrolled.pair {
            Some(pair) => cluster.pod(
                &self.cluster_cell(&pair.client, &pair.server, &pair.service),
                client,
            )?,
            None if client.workload.meshed => cluster.enroll_pod(&self.cluster_site(), client)?,
            None => PodAdditions::default(),
        })
    }

    /// Creates the instrument's pods (as `role`, with what the mesh adds to the client's
    /// workload), starts the node agents that wait for them, and runs them to their end
    /// (`budget` plus a grace) while every container of the cell is sampled and, with
    /// `wire`, its traffic recorded from before the instrument's first request.
    async fn run_instrument(
        &mut self,
        client: &TopologyPod,
        role: &str,
        pods: Vec<InstrumentPod>,
        budget: Duration,
        sample_interval: Duration,
        wire: Option<WireRecording<'_>>,
    ) -> Result<Finished, Error> {
        let limit = budget + INSTRUMENT_GRACE;
        let gated = self.instrument_waits_for_agents();
        let mut capture = None;
        if let Some(wire) = wire.as_ref().filter(|_| !gated) {
            let place = self.wire_place(client, wire)?;
            capture = Some(self.start_capture(place, wire.marker, limit).await?);
        }
        let additions = self.instrument_additions(client)?;
        let credentials = self.credentials(&credentials_of(client, &additions))?;
        // Where the instrument is not one end of the placement (E4's chain measures counters),
        // it runs on a node of its own if the cluster has one.
        let own_node = match &self.enrolled {
            Some(enrolled) if enrolled.pair.is_none() => self.spare_node(),
            _ => None,
        };
        let mut created = vec![];
        for InstrumentPod { mut pod, config } in pods {
            if let Some(node) = &own_node {
                pod.workload.node = node.clone();
            }
            created.push(
                self.create_pod(
                    &pod,
                    role,
                    config,
                    PodShape::runs_to_end(),
                    &additions,
                    credentials.clone(),
                )
                .await?,
            );
        }
        if let Some(enrolled) = self.enrolled.as_ref().filter(|e| e.agents_pending) {
            let mesh = enrolled.mesh;
            let pair = enrolled
                .pair
                .as_ref()
                .map(|p| (p.client.workload.name.clone(), p.server.name.clone()));
            self.wait_running(&created).await?;
            let cluster = on_cluster(mesh)?;
            match pair {
                Some((client_workload, server)) => {
                    self.start_node_agents(cluster, &|pod| {
                        pod.workload.name == client_workload || pod.name == server
                    })
                    .await?
                }
                None => {
                    self.start_node_agents(cluster, &|pod| pod.workload.meshed)
                        .await?
                }
            }
            // Our node agents' link can be recorded only once they run, and the instrument
            // sends nothing before its gate opens.
            if let Some(wire) = &wire {
                let place = self.wire_place(client, wire)?;
                capture = Some(self.start_capture(place, wire.marker, limit).await?);
            }
            self.open_gates(&created).await?;
        }
        let targets: Vec<Target> = self
            .pods
            .iter()
            .flat_map(|p| {
                p.containers.iter().map(|c| Target {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    container: c.container.clone(),
                    node: p.node.clone(),
                    component: c.component.clone(),
                    role: c.role.clone(),
                })
            })
            .chain(
                self.installed
                    .iter()
                    .flat_map(|i| i.targets.iter().cloned()),
            )
            .collect();
        let interval = sample_interval.max(MIN_SAMPLE_INTERVAL);
        let outages = Outages::default();
        let cell = crate::objects::selector(self.platform.run_id(), Some(&self.id));
        let watch = CellWatch::start(&self.client(), &self.namespaces(), &cell, outages.clone());
        let sampler =
            SummarySampler::start(self.reader(), targets.clone(), interval, outages.clone());
        let instruments = try_join_all(created.iter().map(|p| {
            let api = Api::<Pod>::namespaced(self.client(), &p.namespace);
            async move { pods::wait(&api, &p.name, Until::Succeeded, limit).await }
        }));
        // A kubelet or the API server gone for longer than a restart takes ends the cell
        // now, with what is gone, rather than after the instrument's grace.
        let finished = tokio::select! {
            finished = instruments => finished,
            lost = outages.lost_for(OUTAGE_LIMIT) => Err(lost),
        };
        let readings = sampler.finish().await;
        // Before the cell's clean-up deletes its pods, which are not disruptions.
        let events = watch.finish();
        if let Err(e) = &finished {
            // The cell fails; what happened meanwhile is the likely why, so it is told.
            for d in events.disruptions(&targets, None) {
                tracing::warn!(disruption = %d.describe(), error = %e, "during the failed cell");
            }
        }
        // Stopped whether the instrument succeeded or not; its failure is the one told.
        let wire = match capture {
            Some(capture) => {
                // The instrument's pods were made after the capture began: their addresses
                // are the cell's too.
                let instruments: Vec<std::net::IpAddr> = finished
                    .iter()
                    .flatten()
                    .filter_map(|pod| pod.status.as_ref()?.pod_ip.as_ref()?.parse().ok())
                    .collect();
                Some(self.finish_capture(capture, &instruments).await)
            }
            None => None,
        };
        finished?;
        let wire = wire.transpose()?;
        let mut logs = vec![];
        for pod in created {
            // Retried here within a deadline, not by the client for minutes.
            let api = Api::<Pod>::namespaced(self.reader(), &pod.namespace);
            let log = pods::log_when_reachable(&api, &pod.name, APP_CONTAINER).await?;
            logs.push((pod, log));
        }
        let mut nodes = vec![];
        let api = Api::<Node>::all(self.client());
        for (name, _) in &readings.nodes {
            // A node that cannot be read is left out of the machines, not guessed at.
            match api.get(name).await {
                Ok(node) => nodes.extend(node_facts(&node)),
                Err(e) => tracing::debug!(node = %name, error = %e, "node unreadable"),
            }
        }
        Ok(Finished {
            pods: logs,
            readings,
            wire,
            nodes,
            events,
            targets,
        })
    }
}
/// `spec` split over `generators` pods: each sends its share of the rate over its share of
/// the connections (time-bound models only: the others end after a number of requests that
/// one instrument counts).
fn split_load(spec: &LoadSpec, generators: u32) -> Result<Vec<LoadSpec>, Error> {
    if generators <= 1 {
        return Ok(vec![spec.clone()]);
    }
    let unsupported = |why: String| Error::Unsupported {
        what: format!("--generators {generators}"),
        why,
    };
    if spec.connections < generators {
        return Err(unsupported(format!(
            "the load point has {} connection(s), fewer than the generators",
            spec.connections
        )));
    }
    let model = |share: u32| match &spec.model {
        LoadModel::OpenLoop { rps } => Ok(LoadModel::OpenLoop {
            rps: rps * f64::from(share) / f64::from(spec.connections),
        }),
        LoadModel::ClosedLoop => Ok(LoadModel::ClosedLoop),
        other => Err(unsupported(format!(
            "the {} model ends after a number of requests, which one generator counts",
            other.name()
        ))),
    };
    // Connections as evenly as they go; the rate follows the connections, so every
    // connection keeps the rate it has with one generator.
    (0..generators)
        .map(|i| {
            let share =
                spec.connections / generators + u32::from(i < spec.connections % generators);
            Ok(LoadSpec {
                model: model(share)?,
                connections: share,
                ..spec.clone()
            })
        })
        .collect()
}

/// The load report the generator printed as one line of JSON, after anything it logged.
fn report_in_log(log: &str) -> Option<LoadReport> {
    log.lines()
        .rev()
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str::<LoadReport>(l).ok())
}

/// Every container's resources over the load window. The window is the instrument's
/// monotonic clock mapped to the wall clock (its `realtime_offset_ns`); the kubelets'
/// readings are stamped with this machine's wall clock, which the nodes of this project's
/// cluster share (see ARCHITECTURE.md on aligning the nodes' clocks).
/// The components' resources and the nodes' CPU, cut to the load's window.
fn in_window(
    finished: &Finished,
    load: &LoadReport,
    instrument: &CreatedPod,
) -> Result<(Vec<ComponentResources>, Vec<MachineCpu>), Error> {
    let offset = load
        .window
        .realtime_offset_ns
        .ok_or_else(|| Error::Result {
            pod: instrument.name.clone(),
            problem:
                "its window has no wall-clock offset, so the nodes' readings cannot be cut to it"
                    .into(),
        })?;
    let on_wall_clock = |t: u64| (t as i64 + offset).max(0) as u64;
    let (start, end) = (
        on_wall_clock(load.window.start_monotonic_ns),
        on_wall_clock(load.window.end_monotonic_ns),
    );
    let resources = finished
        .readings
        .containers
        .iter()
        .map(|(target, s)| {
            let mut r = s.summarize(start, end);
            r.node = Some(target.node.clone());
            r
        })
        .collect();
    let machines = machines(&finished.nodes, &finished.readings.nodes, (start, end));
    Ok((resources, machines))
}

/// The gap between readings around either edge of the window may be at most this share of
/// the window: the node's counter is interpolated across it, and a wider gap would let the
/// time before the load or after it decide the figure.
const EDGE_GAP_SHARE: f64 = 0.5;

/// The gap between the readings around `t_ns` (ns); `None` where no reading is on each side.
fn gap_around(samples: &[meshbench_results::Sample], t_ns: u64) -> Option<u64> {
    let before = samples.iter().rev().find(|s| s.t_ns <= t_ns)?;
    let after = samples.iter().find(|s| s.t_ns >= t_ns)?;
    Some(after.t_ns - before.t_ns)
}

/// One machine per kernel: nodes with the same boot id run on one machine, whose root cgroup
/// each of their kubelets reports, so it is read once (from the first of them) and covers the
/// others' components. A node is left out where its readings do not surround the window
/// closely enough ([`EDGE_GAP_SHARE`]): a kubelet refreshes its node's figures only at its
/// housekeeping interval (10 s by default), so on such a cluster only cells of 20 s and more
/// get their machine read.
fn machines(
    facts: &[NodeFacts],
    series: &[(String, SampleSeries)],
    (start, end): (u64, u64),
) -> Vec<MachineCpu> {
    let window = end.saturating_sub(start) as f64;
    let edge_gap = |s: &SampleSeries| -> Option<f64> {
        let gap = gap_around(&s.samples, start)?.max(gap_around(&s.samples, end)?) as f64;
        (gap <= window * EDGE_GAP_SHARE).then_some(gap / 1e9)
    };
    let read = |fact: &NodeFacts| {
        let Some((s, gap)) = series
            .iter()
            .find(|(n, _)| *n == fact.name)
            .and_then(|(_, s)| Some((s, edge_gap(s)?)))
        else {
            tracing::debug!(node = %fact.name, "node's readings too sparse around the window");
            return None;
        };
        Some(MachineCpu {
            edge_gap_seconds: Some(gap),
            ..MachineCpu::tasks_only(
                crate::stats::SOURCE,
                &fact.name,
                fact.cpus,
                s.summarize(start, end).cpu_cores_mean,
            )
        })
    };
    per_machine(facts, read, |machine, fact| {
        machine.same_machine_nodes.push(fact.name.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_nodes::{busy, fact as facts, S};

    /// A node's root cgroup, busy at `cores` from 0 to 10 s.
    fn whole(node: &str, cores: f64) -> (String, SampleSeries) {
        busy(node, cores, 10)
    }

    #[test]
    fn nodes_on_one_kernel_are_one_machine_read_once() {
        let series = [
            whole("node-1", 1.5),
            whole("node-2", 1.5),
            whole("node-3", 0.5),
        ];
        let facts = [
            facts("node-1", "boot-a"),
            facts("node-2", "boot-a"),
            facts("node-3", "boot-b"),
        ];
        let machines = machines(&facts, &series, (2 * S, 8 * S));
        assert_eq!(machines.len(), 2, "{machines:?}");
        let shared = &machines[0];
        assert_eq!(shared.node.as_deref(), Some("node-1"));
        assert_eq!(shared.same_machine_nodes, ["node-2"]);
        assert!((shared.tasks_cores.unwrap() - 1.5).abs() < 1e-9);
        assert!(shared.covers(Some("node-2")) && !shared.covers(Some("node-3")));
        // A kubelet has no split by state: nothing is made up for it.
        assert_eq!((shared.user_cores, shared.softirq_cores), (None, None));
        assert_eq!(shared.busy_cores(), None);
        assert!((machines[1].tasks_cores.unwrap() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_node_not_read_closely_around_the_window_is_left_out() {
        let node = [facts("node-1", "boot-a")];
        let mut late = whole("node-1", 1.0);
        late.1.samples.retain(|s| s.t_ns >= 3 * S);
        assert!(machines(&node, &[late], (2 * S, 8 * S)).is_empty());
        // Readings 10 s apart (a kubelet's default housekeeping) around a 6 s window.
        let mut sparse = whole("node-1", 1.0);
        sparse.1.samples.retain(|s| s.t_ns % (10 * S) == 0);
        assert!(machines(&node, &[sparse], (2 * S, 8 * S)).is_empty());
        // Every second around it: read, saying how far it interpolated.
        let read = machines(&node, &[whole("node-1", 1.0)], (2 * S, 8 * S));
        assert_eq!(read[0].edge_gap_seconds, Some(0.0));
        let read = machines(&node, &[whole("node-1", 1.0)], (2 * S + S / 2, 8 * S));
        assert_eq!(read[0].edge_gap_seconds, Some(1.0));
    }
}
