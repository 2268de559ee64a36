//! The job queue: runs and verifications, one at a time (the lab is one machine), on a worker
//! thread with its own runtime, as `meshbench run` has. Each job's state is kept for the
//! pages and the API, and every change is published to watchers (the SSE streams) as a
//! [`JobEvent`]: status with cells done and ETA, each second of the running cell (tailed from
//! the load generator's live series), each finished cell, the lab's events, and the end.
//!
//! Cancelling a running job is Ctrl-C for it: a run keeps its finished cells and is marked
//! partial, its reports written; a queued job just leaves the queue.
//!
//! The worker outlives its jobs: a job that panics is marked failed with the panic's message
//! (a run keeps its finished cells, marked partial) and the next job starts. A job's directory
//! is made when it is queued, exclusively (`mkdir`, never an existing path), so its id is its
//! own. And nothing measures beside an E3 experiment: [`Jobs::measure_alone`] holds the lab for
//! one, and the worker waits for it before it starts the next job.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use meshbench_experiment::{CellId, Profile, Progress, RunOptions, Runner, LIVE_SERIES};
use meshbench_lab::BuildInfo;
use meshbench_local::{LocalLab, LocalOptions};
use meshbench_meshes::Scenario;
use meshbench_netlab::Backend;
use meshbench_results::{Background, Cell, RunResult, RunStatus, SecondStats, UnavailableScenario};
use serde::Serialize;
use tokio::sync::{broadcast, Notify};

use crate::events::LabEvents;

/// Jobs waiting at most; one more is refused.
pub const QUEUE_LIMIT: usize = 16;
/// Events a job keeps for a page opened later (older ones are dropped).
const EVENT_LOG_LIMIT: usize = 500;
/// Seconds of the running cell a job keeps.
const LIVE_LIMIT: usize = 3_600;
/// Published events a slow watcher may fall behind by before it misses some.
const WATCH_BACKLOG: usize = 4_096;
/// How often the running cell's live series is read.
const TAIL_EVERY: Duration = Duration::from_millis(250);
/// Finished jobs remembered (their results stay on disk regardless).
const FINISHED_LIMIT: usize = 200;

pub struct WorkerOptions {
    pub results_dir: PathBuf,
    pub exe: PathBuf,
    pub build: BuildInfo,
    pub lab_events: LabEvents,
    /// The cluster a run with `RunTarget::Kubernetes` goes to.
    pub kube: Option<crate::ClusterOptions>,
}

/// Where a run's cells happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunTarget {
    Lab(Backend),
    Kubernetes,
}

impl RunTarget {
    pub fn name(self) -> &'static str {
        match self {
            RunTarget::Lab(backend) => backend.name(),
            RunTarget::Kubernetes => "kubernetes",
        }
    }
}

/// What a job does.
#[derive(Debug, Clone)]
pub enum JobRequest {
    Run {
        profile: Box<Profile>,
        target: RunTarget,
        pin: bool,
    },
    Verify {
        meshes: Vec<Scenario>,
    },
    /// A job that panics: the worker's own test.
    #[cfg(test)]
    Panic(String),
}

impl JobRequest {
    fn kind(&self) -> &'static str {
        match self {
            JobRequest::Run { .. } => "run",
            JobRequest::Verify { .. } => "verify",
            #[cfg(test)]
            JobRequest::Panic(_) => "run",
        }
    }

    /// The start of the job's directory name.
    fn name(&self) -> String {
        match self {
            JobRequest::Run { profile, .. } => profile.name.clone(),
            JobRequest::Verify { .. } => "verify".to_owned(),
            #[cfg(test)]
            JobRequest::Panic(_) => "panic".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Queued,
    Running,
    Complete,
    Partial,
    Failed,
    Cancelled,
}

impl JobStatus {
    pub fn finished(self) -> bool {
        !matches!(self, JobStatus::Queued | JobStatus::Running)
    }

    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Complete => "complete",
            JobStatus::Partial => "partial",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

/// One second of the running cell, as the live view shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveSecond {
    pub cell: String,
    pub second: u32,
    /// Responses in that second.
    pub achieved_rps: u64,
    pub failures: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl LiveSecond {
    fn of(cell: &str, s: &SecondStats) -> LiveSecond {
        LiveSecond {
            cell: cell.to_owned(),
            second: s.second,
            achieved_rps: s.responses,
            failures: s.failures,
            p50_ms: s.p50_us as f64 / 1e3,
            p99_ms: s.p99_us as f64 / 1e3,
        }
    }
}

/// A line of a job's event log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogLine {
    /// Seconds since the job started.
    pub at: f64,
    /// `info`, `warn` or `cell`.
    pub level: String,
    pub text: String,
}

/// A job as the API answers it.
#[derive(Debug, Clone, Serialize)]
pub struct JobSnapshot {
    pub id: String,
    /// `run` or `verify`.
    pub kind: &'static str,
    pub status: JobStatus,
    /// Cells (a run) or cases (a verification) finished, of all.
    pub done: usize,
    pub total: usize,
    pub eta_seconds: Option<f64>,
    /// The cell (or mesh) being measured.
    pub current: Option<String>,
    /// Why it failed, or was partial.
    pub reason: Option<String>,
    /// The running cell's seconds so far.
    pub live: Vec<LiveSecond>,
    pub log: Vec<LogLine>,
}

/// What watchers receive, tagged by `type`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JobEvent {
    Status {
        status: JobStatus,
        done: usize,
        total: usize,
        eta_seconds: Option<f64>,
        current: Option<String>,
    },
    Second(LiveSecond),
    Log(LogLine),
    Done {
        status: JobStatus,
        reason: Option<String>,
    },
}

impl JobEvent {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            JobEvent::Status { .. } => "status",
            JobEvent::Second(_) => "second",
            JobEvent::Log(_) => "log",
            JobEvent::Done { .. } => "done",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("the queue is full ({QUEUE_LIMIT} jobs wait); try again when one has run")]
    QueueFull,
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the job's directory under the results directory: {0}")]
    Directory(std::io::Error),
}

/// Why the lab cannot be had alone now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Busy {
    #[error(
        "a run is measuring on this machine; an experiment now would disturb it (try when it ends)"
    )]
    JobMeasuring,
    #[error("another experiment is running")]
    ExperimentRunning,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    NotFound,
    AlreadyFinished,
    /// It was waiting; it will not run.
    Dequeued,
    /// It is stopping; it ends partial, with its finished cells.
    Stopping,
}

struct Job {
    request: JobRequest,
    snapshot: JobSnapshot,
    cancel: Arc<Notify>,
    started: Option<Instant>,
}

#[derive(Default)]
struct Inner {
    jobs: HashMap<String, Job>,
    /// Every job id in submission order.
    order: Vec<String>,
    queue: VecDeque<String>,
    shutting_down: bool,
    /// An E3 experiment holds the lab: no job starts until it ends.
    alone: bool,
}

struct Shared {
    inner: Mutex<Inner>,
    wake: Condvar,
    events: broadcast::Sender<(String, JobEvent)>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    results_dir: PathBuf,
}

/// The queue; cloning shares it.
#[derive(Clone)]
pub struct Jobs {
    shared: Arc<Shared>,
}

impl Jobs {
    /// Starts the worker thread.
    pub fn start(options: WorkerOptions) -> Jobs {
        let jobs = Jobs {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner::default()),
                wake: Condvar::new(),
                events: broadcast::channel(WATCH_BACKLOG).0,
                worker: Mutex::new(None),
                results_dir: options.results_dir.clone(),
            }),
        };
        let worker = jobs.clone();
        let handle = std::thread::Builder::new()
            .name("meshbench-jobs".into())
            .spawn(move || worker.work(options))
            .expect("spawning the job worker thread");
        *jobs.shared.worker.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        jobs
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock left plain data behind; keep serving it.
        self.shared.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a job; answers its id (its directory under the results directory).
    pub fn submit(&self, request: JobRequest) -> Result<String, SubmitError> {
        let mut inner = self.lock();
        if inner.shutting_down {
            return Err(SubmitError::ShuttingDown);
        }
        if inner.queue.len() >= QUEUE_LIMIT {
            return Err(SubmitError::QueueFull);
        }
        let id = self
            .fresh_dir(&inner, &request.name())
            .map_err(SubmitError::Directory)?;
        let total = match &request {
            JobRequest::Run { profile, .. } => profile.cells(),
            JobRequest::Verify { meshes } => meshes.len() * meshbench_verify::CASES.len(),
            #[cfg(test)]
            JobRequest::Panic(_) => 1,
        };
        let snapshot = JobSnapshot {
            id: id.clone(),
            kind: request.kind(),
            status: JobStatus::Queued,
            done: 0,
            total,
            eta_seconds: None,
            current: None,
            reason: None,
            live: vec![],
            log: vec![],
        };
        inner.jobs.insert(
            id.clone(),
            Job {
                request,
                snapshot,
                cancel: Arc::new(Notify::new()),
                started: None,
            },
        );
        inner.order.push(id.clone());
        inner.queue.push_back(id.clone());
        forget_old(&mut inner);
        drop(inner);
        self.shared.wake.notify_all();
        Ok(id)
    }

    /// `<name>-<UTC time>`, made unique against the results directory and other jobs, and its
    /// directory made: `mkdir` refuses any existing path (a link included), so a job never
    /// writes into a directory it did not make.
    fn fresh_dir(&self, inner: &Inner, name: &str) -> std::io::Result<String> {
        let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .replace(':', "");
        let base: String = format!("{name}-{stamp}")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .take(100)
            .collect();
        std::fs::create_dir_all(&self.shared.results_dir)?;
        let mut id = base.clone();
        for n in 2..1000 {
            if !inner.jobs.contains_key(&id) {
                match std::fs::create_dir(self.shared.results_dir.join(&id)) {
                    Ok(()) => return Ok(id),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            id = format!("{base}-{n}");
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{base}: every name up to -999 is taken"),
        ))
    }

    pub fn cancel(&self, id: &str) -> CancelOutcome {
        let mut inner = self.lock();
        let Some(job) = inner.jobs.get_mut(id) else {
            return CancelOutcome::NotFound;
        };
        match job.snapshot.status {
            JobStatus::Queued => {
                job.snapshot.status = JobStatus::Cancelled;
                job.snapshot.reason = Some("cancelled before it started".to_owned());
                inner.queue.retain(|q| q != id);
                drop(inner);
                // Its directory was made when it was queued and has nothing in it.
                let _ = std::fs::remove_dir(self.shared.results_dir.join(id));
                self.publish(
                    id,
                    JobEvent::Done {
                        status: JobStatus::Cancelled,
                        reason: Some("cancelled before it started".to_owned()),
                    },
                );
                CancelOutcome::Dequeued
            }
            JobStatus::Running => {
                // A stored permit: the run sees it even if it is between two awaits.
                job.cancel.notify_one();
                drop(inner);
                self.log(
                    id,
                    "warn",
                    "cancel requested: stopping after the lab is torn down",
                );
                CancelOutcome::Stopping
            }
            _ => CancelOutcome::AlreadyFinished,
        }
    }

    pub fn snapshot(&self, id: &str) -> Option<JobSnapshot> {
        self.lock().jobs.get(id).map(|j| j.snapshot.clone())
    }

    /// Every job remembered, newest first.
    pub fn list(&self) -> Vec<JobSnapshot> {
        let inner = self.lock();
        inner
            .order
            .iter()
            .rev()
            .filter_map(|id| inner.jobs.get(id))
            .map(|j| j.snapshot.clone())
            .collect()
    }

    /// The lab, alone, for as long as the guard lives: refused while a job measures or another
    /// holds it, and no queued job starts until the guard is dropped. One lock decides both,
    /// so a job cannot start between the check and the experiment.
    pub fn measure_alone(&self) -> Result<AloneGuard, Busy> {
        let mut inner = self.lock();
        if inner.alone {
            return Err(Busy::ExperimentRunning);
        }
        if inner
            .jobs
            .values()
            .any(|j| j.snapshot.status == JobStatus::Running)
        {
            return Err(Busy::JobMeasuring);
        }
        inner.alone = true;
        Ok(AloneGuard(self.clone()))
    }

    /// The `done` event of job `id`, if it has ended: what a watcher that fell behind is told
    /// (it may have missed the one published).
    pub fn ended(&self, id: &str) -> Option<JobEvent> {
        self.snapshot(id)
            .filter(|j| j.status.finished())
            .map(|j| JobEvent::Done {
                status: j.status,
                reason: j.reason,
            })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<(String, JobEvent)> {
        self.shared.events.subscribe()
    }

    /// Cancels everything and waits for the worker to finish the running job.
    pub fn shut_down(&self) {
        let ids: Vec<String> = {
            let mut inner = self.lock();
            inner.shutting_down = true;
            inner.order.clone()
        };
        for id in ids {
            self.cancel(&id);
        }
        self.shared.wake.notify_all();
        let worker = self
            .shared
            .worker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(worker) = worker {
            let _ = worker.join();
        }
    }

    fn publish(&self, id: &str, event: JobEvent) {
        // Nobody watching is fine.
        let _ = self.shared.events.send((id.to_owned(), event));
    }

    fn update(&self, id: &str, change: impl FnOnce(&mut JobSnapshot)) {
        let event = {
            let mut inner = self.lock();
            let Some(job) = inner.jobs.get_mut(id) else {
                return;
            };
            change(&mut job.snapshot);
            let s = &job.snapshot;
            JobEvent::Status {
                status: s.status,
                done: s.done,
                total: s.total,
                eta_seconds: s.eta_seconds,
                current: s.current.clone(),
            }
        };
        self.publish(id, event);
    }

    fn log(&self, id: &str, level: &str, text: &str) {
        let line = {
            let mut inner = self.lock();
            let Some(job) = inner.jobs.get_mut(id) else {
                return;
            };
            let line = LogLine {
                at: job.started.map_or(0.0, |s| s.elapsed().as_secs_f64()),
                level: level.to_owned(),
                text: text.to_owned(),
            };
            let log = &mut job.snapshot.log;
            if log.len() >= EVENT_LOG_LIMIT {
                log.remove(0);
            }
            log.push(line.clone());
            line
        };
        self.publish(id, JobEvent::Log(line));
    }

    fn second(&self, id: &str, second: LiveSecond) {
        {
            let mut inner = self.lock();
            let Some(job) = inner.jobs.get_mut(id) else {
                return;
            };
            let live = &mut job.snapshot.live;
            if live.len() >= LIVE_LIMIT {
                live.remove(0);
            }
            live.push(second.clone());
        }
        self.publish(id, JobEvent::Second(second));
    }

    fn finish(&self, id: &str, status: JobStatus, reason: Option<String>) {
        self.update(id, |s| {
            s.status = status;
            s.reason = reason.clone();
            s.current = None;
            s.eta_seconds = None;
        });
        self.publish(id, JobEvent::Done { status, reason });
    }

    /// The next job to run, or `None` when shutting down; waits while an experiment holds the
    /// lab.
    fn next(&self) -> Option<(String, JobRequest, Arc<Notify>)> {
        let mut inner = self.lock();
        loop {
            if inner.shutting_down {
                return None;
            }
            if inner.alone {
                inner = self
                    .shared
                    .wake
                    .wait(inner)
                    .unwrap_or_else(|p| p.into_inner());
                continue;
            }
            if let Some(id) = inner.queue.pop_front() {
                let job = inner.jobs.get_mut(&id).expect("queued jobs are known");
                job.snapshot.status = JobStatus::Running;
                job.started = Some(Instant::now());
                return Some((id, job.request.clone(), job.cancel.clone()));
            }
            inner = self
                .shared
                .wake
                .wait(inner)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn work(&self, options: WorkerOptions) {
        while let Some((id, request, cancel)) = self.next() {
            self.update(&id, |_| {});
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    self.finish(&id, JobStatus::Failed, Some(format!("no runtime: {e}")));
                    continue;
                }
            };
            let is_run = matches!(request, JobRequest::Run { .. });
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                runtime.block_on(async {
                    let lab = self.forward_lab_events(&id, &options.lab_events);
                    let outcome = self.execute(&id, request, &options, &cancel).await;
                    lab.abort();
                    outcome
                })
            }));
            // The lab's processes are gone with the runtime's tasks.
            drop(runtime);
            let (status, reason) = match outcome {
                Ok(outcome) => outcome,
                Err(panic) => {
                    let message = panic_message(&*panic);
                    tracing::error!(job = %id, "the job panicked: {message}");
                    if is_run {
                        keep_partial(&options.results_dir.join(&id), &message);
                    }
                    (
                        JobStatus::Failed,
                        Some(format!("the job panicked: {message}")),
                    )
                }
            };
            self.finish(&id, status, reason);
        }
    }

    async fn execute(
        &self,
        id: &str,
        request: JobRequest,
        options: &WorkerOptions,
        cancel: &Notify,
    ) -> (JobStatus, Option<String>) {
        match request {
            JobRequest::Run {
                profile,
                target,
                pin,
            } => self.run(id, *profile, target, pin, options, cancel).await,
            JobRequest::Verify { meshes } => self.verify(id, meshes, options, cancel).await,
            #[cfg(test)]
            JobRequest::Panic(message) => panic!("{message}"),
        }
    }

    fn forward_lab_events(&self, id: &str, events: &LabEvents) -> tokio::task::JoinHandle<()> {
        let mut receiver = events.subscribe();
        let (jobs, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move {
            loop {
                match receiver.recv().await {
                    Ok(event) => jobs.log(&id, event.level, &event.text),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        jobs.log(&id, "warn", &format!("{n} lab events were dropped"));
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        })
    }

    async fn run(
        &self,
        id: &str,
        profile: Profile,
        target: RunTarget,
        pin: bool,
        options: &WorkerOptions,
        cancel: &Notify,
    ) -> (JobStatus, Option<String>) {
        let out_dir = options.results_dir.join(id);
        let run_options = RunOptions {
            out_dir: out_dir.clone(),
            build: options.build.clone(),
        };
        let estimate = profile.estimated_duration();
        let cells = profile.cells();
        let runner = match target {
            RunTarget::Lab(backend) => LocalLab::new(LocalOptions {
                backend,
                exe: options.exe.clone(),
                out_dir: out_dir.clone(),
                pin,
                capture_link: false,
            })
            .and_then(|lab| Runner::on(Box::new(lab), profile, run_options)),
            RunTarget::Kubernetes => match self.connect(id, &out_dir, options).await {
                Ok(platform) => Runner::on(platform, profile, run_options),
                Err(e) => return (JobStatus::Failed, Some(e)),
            },
        };
        let runner = match runner {
            // A spec of rounds until decided stops as the CLI's run does.
            Ok(runner) => runner.deciding_with(Box::new(meshbench_report::undecided_findings)),
            Err(e) => return (JobStatus::Failed, Some(e.to_string())),
        };
        self.update(id, |s| {
            s.total = cells;
            s.eta_seconds = Some(estimate.as_secs_f64());
        });
        self.log(
            id,
            "info",
            &format!(
                "running {cells} cells on the {} backend, about {}",
                target.name(),
                humantime::format_duration(Duration::from_secs(estimate.as_secs()))
            ),
        );
        let progress = JobProgress {
            jobs: self.clone(),
            id: id.to_owned(),
            out_dir: out_dir.clone(),
            tail: Mutex::new(None),
            started: Instant::now(),
            cell_estimate: estimate.as_secs_f64() / cells.max(1) as f64,
            finished: Mutex::new(0),
        };
        let outcome = runner.run(&progress, cancel.notified()).await;
        progress.stop_tail();
        // As `meshbench run` does: reports from whatever is on disk, finished or not.
        let written = read_results(&out_dir);
        if let Ok(result) = &written {
            if let Err(e) = meshbench_report::write_reports(&out_dir, result) {
                self.log(id, "warn", &format!("reports not written: {e}"));
            }
        }
        match (outcome, written) {
            (Ok(result), _) if result.status == RunStatus::Complete => (JobStatus::Complete, None),
            (Ok(result), _) => (JobStatus::Partial, result.status_reason),
            (Err(e), Ok(_)) => (JobStatus::Partial, Some(e.to_string())),
            (Err(e), Err(_)) => (JobStatus::Failed, Some(e.to_string())),
        }
    }

    /// The cluster serve was given, for run `id`: every object it creates is labelled with
    /// the run, its identities kept in the run's directory, its progress lines in the log.
    async fn connect(
        &self,
        id: &str,
        out_dir: &Path,
        options: &WorkerOptions,
    ) -> Result<Box<dyn meshbench_experiment::platform::Platform>, String> {
        let Some(kube) = &options.kube else {
            return Err(
                "backend kubernetes: serve was started without a cluster (--kubeconfig)".into(),
            );
        };
        #[cfg(not(feature = "kubernetes"))]
        {
            let _ = (id, out_dir);
            match *kube {}
        }
        #[cfg(feature = "kubernetes")]
        {
            std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
            let (jobs, job) = (self.clone(), id.to_owned());
            let kube = meshbench_kube::KubeOptions {
                work_dir: out_dir.to_owned(),
                progress: Some(Arc::new(move |line: &str| jobs.log(&job, "info", line))),
                ..kube.clone()
            };
            let platform =
                meshbench_kube::KubePlatform::connect(&kube, &meshbench_netlab::new_lab_id())
                    .await
                    .map_err(|e| e.to_string())?;
            Ok(Box::new(platform))
        }
    }

    async fn verify(
        &self,
        id: &str,
        meshes: Vec<Scenario>,
        options: &WorkerOptions,
        cancel: &Notify,
    ) -> (JobStatus, Option<String>) {
        let out_dir = options.results_dir.join(id);
        if let Err(e) = std::fs::create_dir_all(&out_dir) {
            return (
                JobStatus::Failed,
                Some(format!("{}: {e}", out_dir.display())),
            );
        }
        let verify_options = meshbench_verify::VerifyOptions {
            meshes,
            out_dir: out_dir.clone(),
            exe: options.exe.clone(),
            build: options.build.clone(),
            policy: meshbench_verify::zero_trust_policy(),
        };
        let progress = |line: &str| {
            self.log(id, "info", line);
            self.update(id, |s| s.done = (s.done + 1).min(s.total));
        };
        let report = tokio::select! {
            report = meshbench_verify::verify(&verify_options, &progress) => report,
            () = cancel.notified() => {
                return (JobStatus::Cancelled, Some("cancelled; the lab was torn down".to_owned()));
            }
        };
        let report = match report {
            Ok(report) => report,
            Err(e) => return (JobStatus::Failed, Some(e.to_string())),
        };
        let written = meshbench_results::write_json_atomic(&out_dir.join("verify.json"), &report)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                meshbench_report::write_verify_reports(&out_dir, &report).map_err(|e| e.to_string())
            });
        match written {
            Err(e) => (JobStatus::Failed, Some(e)),
            Ok(()) if report.passed => (JobStatus::Complete, Some("every verdict passed".into())),
            Ok(()) => (JobStatus::Complete, Some("some verdicts failed".into())),
        }
    }
}

fn read_results(dir: &Path) -> Result<RunResult, meshbench_results::Error> {
    meshbench_results::read_json(&dir.join("results.json"))
}

/// What a panic said, if it said it as text.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".to_owned())
}

/// After a run's job panicked: the cells it wrote stay, marked partial with the reason, and
/// its reports are written from them.
fn keep_partial(dir: &Path, reason: &str) {
    let Ok(mut result) = read_results(dir) else {
        return;
    };
    if result.status == RunStatus::Running {
        result.status = RunStatus::Partial;
        result.status_reason = Some(format!("the job panicked: {reason}"));
        if meshbench_results::write_json_atomic(&dir.join("results.json"), &result).is_err() {
            return;
        }
    }
    let _ = meshbench_report::write_reports(dir, &result);
}

/// The lab held for one experiment; dropping it lets the queue go on.
pub struct AloneGuard(Jobs);

impl Drop for AloneGuard {
    fn drop(&mut self) {
        self.0.lock().alone = false;
        self.0.shared.wake.notify_all();
    }
}

/// Drops the oldest finished jobs beyond [`FINISHED_LIMIT`].
fn forget_old(inner: &mut Inner) {
    let finished: Vec<String> = inner
        .order
        .iter()
        .filter(|id| {
            inner
                .jobs
                .get(*id)
                .is_some_and(|j| j.snapshot.status.finished())
        })
        .cloned()
        .collect();
    if finished.len() > FINISHED_LIMIT {
        for id in &finished[..finished.len() - FINISHED_LIMIT] {
            inner.jobs.remove(id);
        }
        let jobs = &inner.jobs;
        inner.order.retain(|id| jobs.contains_key(id));
    }
}

/// The running cell's live series and the task that reads it.
type RunningTail = (Arc<Mutex<LiveTail>>, tokio::task::JoinHandle<()>);

/// The runner's progress, published as the job's.
struct JobProgress {
    jobs: Jobs,
    id: String,
    out_dir: PathBuf,
    tail: Mutex<Option<RunningTail>>,
    started: Instant,
    cell_estimate: f64,
    finished: Mutex<usize>,
}

impl JobProgress {
    fn stop_tail(&self) {
        let tail = self.tail.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((tail, task)) = tail {
            task.abort();
            // The generator appends its last seconds as it exits: read them.
            let lines = tail.lock().unwrap_or_else(|p| p.into_inner()).read_new();
            for second in lines {
                self.jobs.second(&self.id, second);
            }
        }
    }
}

impl Progress for JobProgress {
    fn scenario_unavailable(&self, scenario: &UnavailableScenario) {
        self.jobs.log(
            &self.id,
            "warn",
            &format!("skipping {}: {}", scenario.name, scenario.reason),
        );
    }

    fn cell_started(&self, cell: &CellId) {
        self.stop_tail();
        let label = cell.label();
        self.jobs.update(&self.id, |s| {
            s.total = s.done + cell.total + 1 - cell.index;
            s.current = Some(label.clone());
            s.live.clear();
        });
        self.jobs
            .log(&self.id, "info", &format!("cell {} started", label));
        let path = self
            .out_dir
            .join("cells")
            .join(cell.dir_name())
            .join(LIVE_SERIES);
        let tail = Arc::new(Mutex::new(LiveTail::new(path, label)));
        let (jobs, id, reader) = (self.jobs.clone(), self.id.clone(), tail.clone());
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(TAIL_EVERY).await;
                let lines = reader.lock().unwrap_or_else(|p| p.into_inner()).read_new();
                for second in lines {
                    jobs.second(&id, second);
                }
            }
        });
        *self.tail.lock().unwrap_or_else(|p| p.into_inner()) = Some((tail, task));
    }

    fn cell_finished(&self, cell: &CellId, result: &Cell, background: Option<&Background>) {
        self.stop_tail();
        let finished = {
            let mut n = self.finished.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        let per_cell = self.started.elapsed().as_secs_f64() / finished as f64;
        let estimate = self.cell_estimate;
        self.jobs.update(&self.id, |s| {
            s.done += 1;
            let remaining = s.total.saturating_sub(s.done) as f64;
            // Measured cells take the setup and teardown the estimate leaves out.
            s.eta_seconds = Some(remaining * per_cell.max(estimate));
        });
        self.jobs.log(
            &self.id,
            "cell",
            &meshbench_report::cell_line(cell.index, cell.total, &cell.label(), result, background),
        );
    }
}

/// Reads the lines the load generator appended since the last read.
struct LiveTail {
    path: PathBuf,
    cell: String,
    offset: u64,
    partial: String,
}

/// The most a read takes at once (a second's line is under 100 bytes).
const TAIL_READ_LIMIT: u64 = 1 << 20;

impl LiveTail {
    fn new(path: PathBuf, cell: String) -> Self {
        LiveTail {
            path,
            cell,
            offset: 0,
            partial: String::new(),
        }
    }

    fn read_new(&mut self) -> Vec<LiveSecond> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return vec![];
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return vec![];
        }
        let mut text = String::new();
        let Ok(read) = file.take(TAIL_READ_LIMIT).read_to_string(&mut text) else {
            return vec![];
        };
        self.offset += read as u64;
        self.partial.push_str(&text);
        let Some(end) = self.partial.rfind('\n') else {
            return vec![];
        };
        let complete: String = self.partial.drain(..=end).collect();
        complete
            .lines()
            .filter_map(|line| serde_json::from_str::<SecondStats>(line).ok())
            .map(|s| LiveSecond::of(&self.cell, &s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(results_dir: PathBuf) -> Jobs {
        Jobs::start(WorkerOptions {
            results_dir,
            exe: PathBuf::from("/nonexistent/meshbench"),
            build: BuildInfo {
                version: "test".into(),
                git_commit: "test".into(),
                profile: "test".into(),
            },
            lab_events: LabEvents::new(),
            kube: None,
        })
    }

    /// Events of job `id` until its `done`, within a minute.
    fn until_done(events: &mut broadcast::Receiver<(String, JobEvent)>, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            match events.try_recv() {
                Ok((job, JobEvent::Done { .. })) if job == id => return,
                Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(broadcast::error::TryRecvError::Empty) => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(broadcast::error::TryRecvError::Closed) => break,
            }
        }
        panic!("job {id} did not end within a minute");
    }

    #[test]
    fn a_job_that_panics_fails_with_its_message_and_the_worker_runs_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = worker(dir.path().to_owned());
        let mut events = jobs.subscribe();
        let first = jobs.submit(JobRequest::Panic("boom".into())).unwrap();
        let second = jobs.submit(JobRequest::Panic("again".into())).unwrap();
        assert_ne!(first, second);
        until_done(&mut events, &second);
        for (id, message) in [(&first, "boom"), (&second, "again")] {
            let job = jobs.snapshot(id).unwrap();
            assert_eq!(job.status, JobStatus::Failed);
            assert_eq!(
                job.reason.as_deref(),
                Some(format!("the job panicked: {message}").as_str())
            );
        }
        // Its directory was made for it, exclusively: an existing one is never reused.
        assert!(dir.path().join(&first).is_dir());
        // A watcher that fell behind past the end is told the end.
        assert!(matches!(
            jobs.ended(&second),
            Some(JobEvent::Done {
                status: JobStatus::Failed,
                ..
            })
        ));
        jobs.shut_down();
    }

    #[test]
    fn a_queued_job_waits_while_an_experiment_holds_the_lab() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = worker(dir.path().to_owned());
        let mut events = jobs.subscribe();
        let alone = jobs.measure_alone().unwrap();
        assert_eq!(
            jobs.measure_alone().err(),
            Some(Busy::ExperimentRunning),
            "one experiment at a time"
        );
        let id = jobs.submit(JobRequest::Panic("ran".into())).unwrap();
        assert!(jobs.ended(&id).is_none(), "a queued job has not ended");
        // The worker was woken by the submission and went back to waiting.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(jobs.snapshot(&id).unwrap().status, JobStatus::Queued);
        drop(alone);
        until_done(&mut events, &id);
        assert_eq!(jobs.snapshot(&id).unwrap().status, JobStatus::Failed);
        jobs.shut_down();
    }

    #[test]
    fn the_tail_reads_whole_lines_only_and_each_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LIVE_SERIES);
        let mut tail = LiveTail::new(path.clone(), "cell".into());
        assert!(tail.read_new().is_empty(), "no file yet");
        std::fs::write(
            &path,
            "{\"second\":0,\"responses\":100,\"failures\":1,\"p50_us\":250,\"p99_us\":900}\n{\"second\":1,",
        )
        .unwrap();
        let first = tail.read_new();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].achieved_rps, 100);
        assert_eq!(first[0].p99_ms, 0.9);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("\"responses\":90,\"failures\":0,\"p50_us\":300,\"p99_us\":1000}\n");
        std::fs::write(&path, text).unwrap();
        let second = tail.read_new();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].second, 1);
        assert!(tail.read_new().is_empty());
    }
}
