//! The runner: turns a profile into cells and runs each on a platform (the local lab unless
//! told otherwise).
//!
//! A cell is one (repetition, load point, placement, scenario). Scenarios are innermost, so a
//! run goes A B C A B C ... and slow machine drift spreads over all scenarios instead of
//! biasing one. For each cell the runner has the platform realize the placement's topology
//! (a [`Site`]), starts the server apps there from their `WorkloadFile`s, puts the scenario's
//! mesh around them, and runs the instrument (a `LoadSpec`, or E3's experimenter) in the
//! client pod while the site samples every component's CPU and memory and cuts them to the
//! instrument's measurement window. `results.json` is rewritten atomically after every cell; an
//! interrupted run keeps its finished cells and is marked partial. Whatever a cell created
//! (processes, namespaces, cgroups) is removed when it ends, however it ends.
//!
//! Before each round (a repetition of every cell) the platform reads its machines at rest, so
//! the cells' CPU outside their components can be judged against what runs there anyway. A
//! run until decided (`Profile::until_decided`) asks its [`Decide`] after each round from the
//! second whether a finding is still undecided, and stops when none is, after its most
//! rounds, or before a round that would overrun its budget; results' `stopped` says which.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use meshbench_identity::ClientTlsFiles;
use meshbench_loadgen::{Body, ClientTlsSpec, LoadModel, LoadSpec, RequestFile};
use meshbench_meshes::Scenario;
use meshbench_results::{describe_environment, BuildInfo};
use meshbench_results::{
    read_json, write_json_atomic, Background, Cell, FailedCell, LoadPoint, RoundsStop, RunConfig,
    RunResult, RunStatus, StopReason, UnavailableScenario, SCHEMA_VERSION,
};
use meshbench_topology::{Pod, Topology};
use meshbench_workload::{ExperimentOnce, WorkloadApp, WorkloadFile};

use crate::application::{Application, COUNTER_A, COUNTER_B};
use crate::placement::Placement;
use crate::platform::{
    CellPlace, ClientServer, Entry, Instrument, Measured, Platform, Site, WireRecording,
};
use crate::profile::{CapacityPlan, LoadPlan};
use crate::{Error, LoadKind, PointPlan, Profile};
use meshbench_stats::capacity::{next_step, trial_of, Next, Trial};

/// The shortest background measurement: a few readings even at a cluster's sampling
/// interval (500 ms).
pub const BACKGROUND_MIN: Duration = Duration::from_secs(2);
/// The background's length where a cell has no duration (E3's experiment and E4's users end
/// after their requests; such cells take seconds to minutes).
pub const BACKGROUND_UNTIMED: Duration = Duration::from_secs(10);

/// Where and how a run happens; what it runs is the [`Profile`].
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub out_dir: PathBuf,
    pub build: BuildInfo,
}

impl RunOptions {
    /// The same options with an absolute results directory: components read their configs
    /// from the proxy area, where a relative path would resolve against the config's
    /// directory, not the directory the run was started in.
    fn absolute(mut self) -> Result<Self, Error> {
        self.out_dir = std::path::absolute(&self.out_dir).map_err(|source| Error::CreateDir {
            path: self.out_dir.clone(),
            source,
        })?;
        Ok(self)
    }
}

/// Identifies a cell for progress reporting.
#[derive(Debug, Clone)]
pub struct CellId {
    pub index: usize,
    pub total: usize,
    pub scenario: Scenario,
    pub placement: Placement,
    /// As results record it.
    pub load_point: LoadPoint,
    /// As the load generator runs it.
    pub plan: LoadPlan,
    pub repetition: u32,
    /// In a capacity run, which of the scenario's searches this step belongs to.
    pub search: Option<u32>,
}

impl CellId {
    /// The cell's directory under the run's `cells/`.
    pub fn dir_name(&self) -> String {
        format!(
            "{:03}-{}-{}-{}rps-{}c-rep{}",
            self.index,
            self.scenario.name(),
            self.placement.name(),
            self.load_point.rps,
            self.load_point.connections,
            self.repetition
        )
    }

    pub fn label(&self) -> String {
        let which = match self.search {
            Some(search) => format!("search {search}, try {}", self.repetition),
            None => format!("rep {}", self.repetition),
        };
        format!(
            "{} {} @ {} ({which})",
            self.scenario.name(),
            self.placement.name(),
            self.load_point.label(),
        )
    }
}

/// Receives progress as cells start and finish (the CLI draws a progress bar).
pub trait Progress {
    fn cell_started(&self, cell: &CellId);
    /// `background` is the machines' background the cell is judged against, if measured.
    fn cell_finished(&self, cell: &CellId, result: &Cell, background: Option<&Background>);
    fn scenario_unavailable(&self, scenario: &UnavailableScenario);
}

/// Judges a run's findings after a round of a run until decided. The report's findings
/// (meshbench-report) implement it, given by the CLI and the web UI, so that the runner's
/// crate does not depend on the report's.
pub trait Decide {
    /// How many of `result`'s findings more rounds could still decide (inconclusive ones).
    fn undecided(&self, result: &RunResult) -> usize;
}

impl<F: Fn(&RunResult) -> usize> Decide for F {
    fn undecided(&self, result: &RunResult) -> usize {
        self(result)
    }
}

pub struct Runner {
    profile: Profile,
    options: RunOptions,
    result: RunResult,
    results_path: PathBuf,
    platform: Box<dyn Platform>,
    /// Judges the findings between rounds of a run until decided; without it such a run goes
    /// to its most rounds or its budget.
    decider: Option<Box<dyn Decide>>,
}

impl Runner {
    fn assemble(
        platform: Box<dyn Platform>,
        profile: Profile,
        options: RunOptions,
        result: RunResult,
    ) -> Self {
        let results_path = options.out_dir.join("results.json");
        Runner {
            profile,
            options,
            result,
            results_path,
            platform,
            decider: None,
        }
    }

    /// Prepares the output directory; refuses one that already holds results. The cells run
    /// on `platform`.
    pub fn on(
        platform: Box<dyn Platform>,
        profile: Profile,
        options: RunOptions,
    ) -> Result<Self, Error> {
        let options = options.absolute()?;
        let results_path = options.out_dir.join("results.json");
        if results_path.exists() {
            return Err(Error::OutputExists { path: results_path });
        }
        platform.check(&profile)?;
        std::fs::create_dir_all(&options.out_dir).map_err(|source| Error::CreateDir {
            path: options.out_dir.clone(),
            source,
        })?;
        let mut environment = describe_environment(&options.build);
        environment.cluster_meshes = platform.cluster_meshes();
        let result = RunResult {
            schema_version: SCHEMA_VERSION,
            kind: "meshbench.run".to_owned(),
            status: RunStatus::Running,
            status_reason: None,
            started_at: timestamp(),
            finished_at: None,
            environment,
            config: RunConfig {
                pinned: platform.pinned(),
                ..profile.describe(&platform.name())
            },
            cells: Vec::new(),
            backgrounds: Vec::new(),
            stopped: None,
            failed_cells: Vec::new(),
        };
        Ok(Runner::assemble(platform, profile, options, result))
    }

    /// Continues an interrupted run in `options.out_dir`, on `platform`: the profile is
    /// rebuilt from the spec the results carry (with the run's scale, selection, duration and
    /// warm-up), finished cells are kept and skipped, and new cells are appended to the same
    /// document.
    pub fn resume_on(platform: Box<dyn Platform>, options: RunOptions) -> Result<Self, Error> {
        let options = options.absolute()?;
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
        platform.check(&profile)?;
        result.status = RunStatus::Running;
        result.status_reason = None;
        result.finished_at = None;
        result.stopped = None;
        // Re-checked now: a tool installed since may make a scenario available.
        result.config.unavailable.clear();
        result.environment.cluster_meshes = platform.cluster_meshes();
        Ok(Runner::assemble(platform, profile, options, result))
    }

    /// Has `decider` judge the findings between rounds of a run until decided.
    pub fn deciding_with(mut self, decider: Box<dyn Decide>) -> Self {
        self.decider = Some(decider);
        self
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
            match self.platform.unavailable(mesh) {
                None => scenarios.push(mesh),
                Some(entry) => {
                    progress.scenario_unavailable(&entry);
                    self.result.config.unavailable.push(entry);
                }
            }
        }
        write_json_atomic(&self.results_path, &self.result)?;
        let application = profile.application;
        self.platform
            .prepare(
                &application.topology(Placement::InterNode, profile.replicas),
                &application.policy()?,
            )
            .await?;
        let total = profile.cells() / profile.scenarios.len().max(1) * scenarios.len();
        if let Some(plan) = profile.capacity {
            return self.run_searches(progress, &scenarios, plan, total).await;
        }
        let mut index = 0;
        let began = Instant::now();
        let mut rounds_run = 0u32;
        for repetition in 1..=profile.max_repetitions() {
            if let Some(reason) = self.stop_before(repetition, began, rounds_run) {
                self.result.stopped = Some(RoundsStop {
                    rounds: repetition - 1,
                    reason,
                    seconds: began.elapsed().as_secs_f64(),
                });
                return Ok(());
            }
            let unfinished = self.round_unfinished(&scenarios, repetition);
            if unfinished {
                self.measure_background().await?;
                rounds_run += 1;
            }
            let points = profile
                .load_points
                .iter()
                .filter(|p| p.repetitions >= repetition);
            for PointPlan { plan, .. } in points {
                let load_point = plan.describe();
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
                            plan: plan.clone(),
                            repetition,
                            search: None,
                        };
                        progress.cell_started(&id);
                        let cell = self.run_cell_recorded(&id).await?;
                        progress.cell_finished(&id, &cell, self.result.backgrounds.last());
                        self.result.cells.push(cell);
                        write_json_atomic(&self.results_path, &self.result)?;
                        if !profile.cooldown.is_zero() && index < total {
                            tokio::time::sleep(profile.cooldown).await;
                        }
                    }
                }
            }
        }
        if let Some(rule) = profile.until_decided {
            self.result.stopped = Some(RoundsStop {
                rounds: rule.max_rounds,
                reason: StopReason::MostRounds,
                seconds: began.elapsed().as_secs_f64(),
            });
        }
        Ok(())
    }

    /// In a run until decided, whether to stop before round `repetition`, and why: every
    /// finding decided after the rounds so far (two at least: an interval needs two), or
    /// another round, as long as this run's rounds took on average, would overrun the budget.
    fn stop_before(&self, repetition: u32, began: Instant, rounds_run: u32) -> Option<StopReason> {
        let rule = self.profile.until_decided?;
        let finished = repetition - 1;
        if finished >= 2 {
            if let Some(decider) = &self.decider {
                if decider.undecided(&self.result) == 0 {
                    return Some(StopReason::Decided);
                }
            }
        }
        let budget = rule.budget?;
        let spent = began.elapsed();
        let per_round = spent / rounds_run.max(1);
        (rounds_run > 0 && spent + per_round > budget).then_some(StopReason::Budget)
    }

    /// The capacity model: `plan.searches` independent searches per (point, placement,
    /// scenario), each asked for its next rate from the cells it has so far (so a resumed run
    /// carries on where it stopped). The searches take turns, a step each, scenarios
    /// innermost, so drift spreads over all of them as it does in a grid. `total` is an upper
    /// bound: searches end when they converge.
    async fn run_searches(
        &mut self,
        progress: &dyn Progress,
        scenarios: &[Scenario],
        plan: CapacityPlan,
        total: usize,
    ) -> Result<(), Error> {
        let profile = self.profile.clone();
        let mut index = self.result.cells.len();
        self.measure_background().await?;
        loop {
            let mut measured = false;
            for (point, search) in profile
                .load_points
                .iter()
                .flat_map(|p| (1..=plan.searches).map(move |s| (p, s)))
            {
                for &placement in &profile.placements {
                    for &scenario in scenarios {
                        let history: Vec<Trial> = self
                            .result
                            .cells
                            .iter()
                            .filter(|c| {
                                c.scenario == scenario.name()
                                    && c.placement.as_deref() == Some(placement.name())
                                    && c.load_point.connections == point.plan.connections
                                    && c.search.unwrap_or(1) == search
                            })
                            .map(trial_of)
                            .collect();
                        let Next::Measure { rps, attempt } =
                            next_step(&plan.slo, &plan.search, &history).0
                        else {
                            continue;
                        };
                        index += 1;
                        let plan_at = LoadPlan {
                            model: meshbench_loadgen::LoadModel::OpenLoop { rps },
                            ..point.plan.clone()
                        };
                        let load_point = plan_at.describe();
                        let visited = &mut self.result.config.load_points;
                        if !visited.contains(&load_point) {
                            visited.push(load_point);
                            visited.sort_by(|a, b| {
                                (a.connections, a.rps)
                                    .partial_cmp(&(b.connections, b.rps))
                                    .unwrap_or(std::cmp::Ordering::Equal)
                            });
                        }
                        let id = CellId {
                            index,
                            total: total.max(index),
                            scenario,
                            placement,
                            load_point,
                            plan: plan_at,
                            repetition: attempt,
                            search: Some(search),
                        };
                        progress.cell_started(&id);
                        let cell = self.run_cell_recorded(&id).await?;
                        progress.cell_finished(&id, &cell, self.result.backgrounds.last());
                        self.result.cells.push(cell);
                        self.result.config.repetitions =
                            self.result.config.repetitions.max(attempt);
                        write_json_atomic(&self.results_path, &self.result)?;
                        if !profile.cooldown.is_zero() {
                            tokio::time::sleep(profile.cooldown).await;
                        }
                        measured = true;
                    }
                }
            }
            if !measured {
                return Ok(());
            }
        }
    }

    /// Whether a cell of round `repetition` remains to be run (a resumed run skips the
    /// rounds it finished, and their backgrounds with them).
    fn round_unfinished(&self, scenarios: &[Scenario], repetition: u32) -> bool {
        let profile = &self.profile;
        profile
            .load_points
            .iter()
            .filter(|p| p.repetitions >= repetition)
            .any(|point| {
                let load_point = point.plan.describe();
                profile.placements.iter().any(|placement| {
                    scenarios.iter().any(|scenario| {
                        !self.result.cells.iter().any(|c| {
                            c.scenario == scenario.name()
                                && c.placement.as_deref() == Some(placement.name())
                                && c.load_point == load_point
                                && c.repetition == repetition
                        })
                    })
                })
            })
    }

    /// Every machine's background with no cell running, over a cell's length (at least
    /// [`BACKGROUND_MIN`]; [`BACKGROUND_UNTIMED`] for models that end after their
    /// requests), kept in the results for the cells that follow. A platform that cannot read
    /// its machines now leaves them judged against none.
    async fn measure_background(&mut self) -> Result<(), Error> {
        let profile = &self.profile;
        let window = if profile.model.time_bound() {
            (profile.duration + profile.warmup).max(BACKGROUND_MIN)
        } else {
            BACKGROUND_UNTIMED
        };
        let started_at = timestamp();
        let Some(at_rest) = self
            .platform
            .background(window, profile.sample_interval)
            .await
        else {
            return Ok(());
        };
        self.result.backgrounds.push(Background {
            started_at,
            before_cell: u32::try_from(self.result.cells.len()).unwrap_or(u32::MAX),
            interval_seconds: at_rest.interval.as_secs_f64(),
            machines: at_rest.machines,
        });
        write_json_atomic(&self.results_path, &self.result)?;
        Ok(())
    }

    /// [`Self::run_cell`], with a cell that fails kept in the results' `failed_cells` (and
    /// on disk) before its error ends the run.
    async fn run_cell_recorded(&mut self, id: &CellId) -> Result<Cell, Error> {
        let started_at = timestamp();
        let outcome = self.run_cell(id).await;
        if let Err(e @ Error::Cell { .. }) = &outcome {
            self.result.failed_cells.push(FailedCell {
                scenario: id.scenario.name().to_owned(),
                placement: Some(id.placement.name().to_owned()),
                load_point: id.load_point,
                repetition: id.repetition,
                search: id.search,
                started_at,
                failed_at: timestamp(),
                error: e.to_string(),
            });
            write_json_atomic(&self.results_path, &self.result)?;
        }
        outcome
    }

    async fn run_cell(&self, id: &CellId) -> Result<Cell, Error> {
        let label = id.label();
        let cell_err = |error: meshbench_meshes::Error| Error::Cell {
            cell: label.clone(),
            error,
        };
        let started_at = timestamp();
        let cell_dir = self.options.out_dir.join("cells").join(id.dir_name());
        std::fs::create_dir_all(&cell_dir).map_err(|source| Error::CreateDir {
            path: cell_dir.clone(),
            source,
        })?;
        let topology = self
            .profile
            .application
            .topology(id.placement, self.profile.replicas);
        let place = CellPlace {
            label: &label,
            topology: &topology,
            dir: &cell_dir,
            capture_wire: self.captures_wire(id),
        };
        // Dropped unfinished (an error, Ctrl-C), the site still removes what it created.
        let mut site = self.platform.realize(place).await.map_err(cell_err)?;
        let measured = self.measure(id, site.as_mut(), &topology).await;
        site.finish().await;
        let measured = measured.map_err(cell_err)?;
        let handshakes = crate::handshakes::read_handshakes(&cell_dir);
        Ok(Cell {
            scenario: id.scenario.name().to_owned(),
            placement: Some(id.placement.name().to_owned()),
            load_point: id.load_point,
            repetition: id.repetition,
            search: id.search,
            started_at,
            load: measured.load,
            resources: measured.resources,
            wire: measured.wire,
            handshakes,
            machines: measured.machines,
            disruptions: measured.disruptions,
        })
    }

    /// The cell on its site: the application's server side, the scenario's mesh around it,
    /// then the instrument in the client pod.
    async fn measure(
        &self,
        id: &CellId,
        site: &mut dyn Site<'_>,
        topology: &Topology,
    ) -> Result<Measured, meshbench_meshes::Error> {
        let profile = &self.profile;
        let application = profile.application;
        let pod = |workload: &str| topology.first_pod(workload).expect("static topology");
        let (client, server) = (pod(application.client()), pod(application.server()));
        let cell = ClientServer {
            client: &client,
            server: &server,
            service: application.service(),
        };
        for (pod, app) in self.apps(id, &*site, topology, cell)? {
            site.start_app(&pod, &app).await?;
        }
        let entry = match application {
            Application::Echo | Application::ZeroTrustApp => site.deploy(id.scenario, cell).await?,
            Application::CounterChain => {
                site.enroll(id.scenario).await?;
                Entry {
                    url: format!("http://{}/count", site.service_host(COUNTER_A)?),
                    client_tls: None,
                }
            }
        };
        let marker = format!("meshbench-marker-{}", site.id());
        let marker = self.captures_wire(id).then_some(marker.as_str());
        let instrument = match application {
            Application::ZeroTrustApp => {
                Instrument::Experimenter(Box::new(self.experimenter_file(id, &entry.url, marker)))
            }
            Application::Echo | Application::CounterChain => Instrument::Load(Box::new(
                self.load_spec(id, entry.url, marker, entry.client_tls),
            )),
        };
        let wire = marker.map(|marker| WireRecording {
            marker,
            server: cell.server,
        });
        site.measure(&client, instrument, profile.sample_interval, wire)
            .await
    }

    /// Whether a cell records its traffic (`--capture-link`, the placements the platform
    /// records). The chain's hops do not carry the marker, so it is not captured: a capture
    /// that cannot see the marker would prove nothing about it.
    fn captures_wire(&self, id: &CellId) -> bool {
        self.platform.records_wire(id.placement)
            && self.profile.application != Application::CounterChain
    }

    /// The application's server side and its configs: the echo server, the calculator, or
    /// both counters (each forwarding to the other's service).
    fn apps(
        &self,
        id: &CellId,
        site: &dyn Site<'_>,
        topology: &Topology,
        cell: ClientServer<'_>,
    ) -> Result<Vec<(Pod, WorkloadFile)>, meshbench_meshes::Error> {
        let profile = &self.profile;
        let server = || -> Result<_, meshbench_meshes::Error> {
            Ok((cell.server.clone(), site.app_listen(cell.server)?))
        };
        Ok(match profile.application {
            Application::Echo => {
                let (pod, listen) = server()?;
                let app = WorkloadApp::fixed_echo(profile.server_delay, profile.response_bytes);
                let mut file = WorkloadFile::new(listen, app);
                file.tls = site.app_tls(id.scenario, cell);
                vec![(pod, file)]
            }
            Application::ZeroTrustApp => {
                let (pod, listen) = server()?;
                vec![(pod, WorkloadFile::new(listen, WorkloadApp::Calculator))]
            }
            Application::CounterChain => {
                let mut apps = vec![];
                for (this, next) in [(COUNTER_A, COUNTER_B), (COUNTER_B, COUNTER_A)] {
                    for pod in topology
                        .pods()
                        .into_iter()
                        .filter(|p| p.workload.name == this)
                    {
                        let app = WorkloadApp::Counter {
                            name: this.to_owned(),
                            next: Some(format!("http://{}", site.service_host(next)?)),
                            timeout: profile.request_timeout,
                        };
                        let listen = site.app_listen(&pod)?;
                        apps.push((pod, WorkloadFile::new(listen, app)));
                    }
                }
                apps
            }
        })
    }

    /// `meshbench load` for the cell's model and point.
    fn load_spec(
        &self,
        id: &CellId,
        url: String,
        marker: Option<&str>,
        tls: Option<ClientTlsFiles>,
    ) -> LoadSpec {
        let profile = &self.profile;
        let point = &id.plan;
        let mut spec = LoadSpec::new(url, point.model.clone());
        if profile.model == LoadKind::Sequential {
            spec.requests = point.requests;
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
        spec
    }

    /// E3's experimenter running one experiment against the calculator at `url`: the
    /// point's requests in its groups, all four operations, the point's operands, and the
    /// first request discarded as E3 did.
    fn experimenter_file(&self, id: &CellId, url: &str, marker: Option<&str>) -> WorkloadFile {
        let point = &id.plan;
        let (group_size, interval) = match &point.model {
            LoadModel::Sequential {
                group_size,
                group_interval,
            } => (*group_size, *group_interval),
            _ => (1, std::time::Duration::ZERO),
        };
        let mut experiment = serde_json::json!({
            "interactions": point.requests.unwrap_or(1),
            "batchSize": group_size,
            "intervalBetweenBatchesInMilliseconds": (interval.as_secs_f64() * 1e3).round() as u64,
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
                // Where its results go is the platform's to say.
                once: Some(ExperimentOnce {
                    experiment,
                    json: PathBuf::from("load.json"),
                    result: Some(PathBuf::from("experiment.json")),
                    start_gate: None,
                    wait_for_calculator: None,
                }),
            },
        )
    }
}

fn timestamp() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
