//! The runner: turns a profile into cells and runs each on the local lab.
//!
//! A cell is one (repetition, load point, scenario). Scenarios are innermost, so a run goes
//! A B A B ... and slow machine drift spreads over all scenarios instead of biasing one. For
//! each cell the runner starts a fresh server process, waits for it to be ready, starts the
//! load generator process, samples both processes' CPU and memory, and cuts those samples to
//! the generator's measurement window. `results.json` is rewritten atomically after every
//! cell; an interrupted run keeps its finished cells and is marked partial.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use meshbench_lab::{
    describe_environment, BuildInfo, ComponentProcess, ReadyEvent, ResourceSampler, SampleTarget,
};
use meshbench_results::{
    read_json, write_json_atomic, Cell, LoadPoint, LoadReport, RunResult, RunStatus, SCHEMA_VERSION,
};

use crate::scenario::LabPki;
use crate::{Error, Profile, Scenario};

const PLATFORM: &str = "local-lab/loopback";
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const STOP_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub profile: Profile,
    pub out_dir: PathBuf,
    /// The meshbench binary, started once per lab component.
    pub exe: PathBuf,
    pub build: BuildInfo,
}

/// Identifies a cell for progress reporting.
#[derive(Debug, Clone)]
pub struct CellId {
    pub index: usize,
    pub total: usize,
    pub scenario: Scenario,
    pub load_point: LoadPoint,
    pub repetition: u32,
}

impl CellId {
    pub fn label(&self) -> String {
        format!(
            "{} @ {} rps / {} conns (rep {})",
            self.scenario.name(),
            self.load_point.rps,
            self.load_point.connections,
            self.repetition
        )
    }
}

/// Receives progress as cells start and finish (the CLI draws a progress bar).
pub trait Progress {
    fn cell_started(&self, cell: &CellId);
    fn cell_finished(&self, cell: &CellId, result: &Cell);
}

pub struct Runner {
    options: RunOptions,
    result: RunResult,
    results_path: PathBuf,
}

impl Runner {
    /// Prepares the output directory; refuses one that already holds results.
    pub fn new(options: RunOptions) -> Result<Self, Error> {
        let results_path = options.out_dir.join("results.json");
        if results_path.exists() {
            return Err(Error::OutputExists { path: results_path });
        }
        std::fs::create_dir_all(&options.out_dir).map_err(|source| Error::CreateDir {
            path: options.out_dir.clone(),
            source,
        })?;
        let result = RunResult {
            schema_version: SCHEMA_VERSION,
            kind: "meshbench.run".to_owned(),
            status: RunStatus::Running,
            status_reason: None,
            started_at: timestamp(),
            finished_at: None,
            environment: describe_environment(&options.build),
            config: options.profile.describe(PLATFORM),
            cells: Vec::new(),
        };
        Ok(Runner {
            options,
            result,
            results_path,
        })
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
        // `None`: cancelled. Dropping the cell future kills its lab processes.
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
        let profile = self.options.profile.clone();
        let pki = if profile.scenarios.iter().any(|s| s.uses_tls()) {
            Some(LabPki::create(&self.options.out_dir.join("pki"))?)
        } else {
            None
        };
        let total = profile.cells();
        let mut index = 0;
        for repetition in 1..=profile.repetitions {
            for &load_point in &profile.load_points {
                for &scenario in &profile.scenarios {
                    index += 1;
                    let id = CellId {
                        index,
                        total,
                        scenario,
                        load_point,
                        repetition,
                    };
                    progress.cell_started(&id);
                    let cell = self.run_cell(&id, pki.as_ref()).await?;
                    progress.cell_finished(&id, &cell);
                    self.result.cells.push(cell);
                    write_json_atomic(&self.results_path, &self.result)?;
                }
            }
        }
        Ok(())
    }

    async fn run_cell(&self, id: &CellId, pki: Option<&LabPki>) -> Result<Cell, Error> {
        let profile = &self.options.profile;
        let label = id.label();
        let lab_err = |source| Error::Lab {
            cell: label.clone(),
            source,
        };
        let started_at = timestamp();
        let pki = if id.scenario.uses_tls() { pki } else { None };
        // Long-running components of this cell, stopped in reverse order at the end.
        let mut components: Vec<(ComponentProcess, &'static str)> = Vec::new();

        let mut server_args = vec![
            "workload".to_owned(),
            "echo".to_owned(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--delay".to_owned(),
            format!("{}us", profile.server_delay.as_micros()),
            "--response-size".to_owned(),
            profile.response_bytes.to_string(),
        ];
        let app_tls = pki.filter(|_| id.scenario == Scenario::BaselineMtls);
        if let Some(pki) = app_tls {
            server_args.extend(pki.server_args());
        }
        let (server, ready) = self.start("server", &server_args).await.map_err(lab_err)?;
        components.push((server, "app"));
        let mut target = ready.addr.unwrap_or_default();

        if let (Scenario::Sidecar, Some(pki)) = (id.scenario, pki) {
            let mut args = pki.sidecar_args(true);
            args.extend(["--inbound".to_owned(), format!("127.0.0.1:0={target}")]);
            let (sidecar, ready) = self.start("server-sidecar", &args).await.map_err(lab_err)?;
            components.push((sidecar, "sidecar"));
            let inbound = ready.addr.unwrap_or_default();
            let mut args = pki.sidecar_args(false);
            args.extend([
                "--outbound".to_owned(),
                format!("127.0.0.1:0={inbound}#{}", pki.server_id),
            ]);
            let (sidecar, ready) = self.start("client-sidecar", &args).await.map_err(lab_err)?;
            components.push((sidecar, "sidecar"));
            target = ready.outbound.first().cloned().unwrap_or_default();
        }

        let cells_dir = self.options.out_dir.join("cells");
        std::fs::create_dir_all(&cells_dir).map_err(|source| Error::CreateDir {
            path: cells_dir.clone(),
            source,
        })?;
        let load_json = cells_dir.join(format!(
            "{:03}-{}-{}rps-rep{}.load.json",
            id.index,
            id.scenario.name(),
            id.load_point.rps,
            id.repetition
        ));
        let scheme = if app_tls.is_some() { "https" } else { "http" };
        let mut client_args = vec![
            "load".to_owned(),
            "--url".to_owned(),
            format!("{scheme}://{target}/"),
            "--rps".to_owned(),
            id.load_point.rps.to_string(),
            "--connections".to_owned(),
            id.load_point.connections.to_string(),
            "--duration".to_owned(),
            humantime::format_duration(profile.duration).to_string(),
            "--warmup".to_owned(),
            humantime::format_duration(profile.warmup).to_string(),
            "--timeout".to_owned(),
            humantime::format_duration(profile.request_timeout).to_string(),
            "--json".to_owned(),
            load_json.to_string_lossy().into_owned(),
            "--quiet".to_owned(),
        ];
        if let Some(pki) = app_tls {
            client_args.extend(pki.client_args());
        }
        let client =
            ComponentProcess::spawn("client", &self.options.exe, &client_args).map_err(lab_err)?;
        let mut targets = vec![];
        if let Some(pid) = client.pid() {
            targets.push(SampleTarget::process("client", "load-generator", pid));
        }
        for (component, role) in &components {
            if let Some(pid) = component.pid() {
                targets.push(SampleTarget::process(component.name(), role, pid));
            }
        }
        let sampler = ResourceSampler::start(targets, profile.sample_interval);
        let finished = client.wait_success().await;
        let series = sampler.finish();
        for (component, _) in components.into_iter().rev() {
            component.stop(STOP_GRACE).await;
        }
        finished.map_err(lab_err)?;

        let load: LoadReport = read_json(&load_json).map_err(|source| Error::LoadResult {
            cell: label.clone(),
            source,
        })?;
        let resources = series
            .iter()
            .map(|s| s.summarize(load.window.start_monotonic_ns, load.window.end_monotonic_ns))
            .collect();
        Ok(Cell {
            scenario: id.scenario.name().to_owned(),
            load_point: id.load_point,
            repetition: id.repetition,
            started_at,
            load,
            resources,
        })
    }

    /// Starts a long-running lab component and waits for its ready line.
    async fn start(
        &self,
        name: &str,
        args: &[String],
    ) -> Result<(ComponentProcess, ReadyEvent), meshbench_lab::Error> {
        let mut process = ComponentProcess::spawn(name, &self.options.exe, args)?;
        let ready = process.wait_ready(READY_TIMEOUT).await?;
        Ok((process, ready))
    }
}

fn timestamp() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
