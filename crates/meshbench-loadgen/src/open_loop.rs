//! The constant-rate open-loop model.
//!
//! Request slot `s` (0, 1, 2, ...) is due at `start + s / rps`; connection `i` of `C` owns the
//! slots `i, i + C, i + 2C, ...`, so sends are evenly spread with no bursts and no drift.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::connection::{Connection, Connector};
use crate::{Error, LatencyRecorder, Outcome, Target};
use meshbench_time::{now_ns, tighten_timer_slack, PreciseTimer};

/// A request sent this much after its intended time counts as late.
const LATE_THRESHOLD_NS: u64 = 1_000_000;
/// Lead time between planning and the first slot, so every task is waiting when it starts.
const START_DELAY_NS: u64 = 20_000_000;

#[derive(Debug, Clone)]
pub struct OpenLoopConfig {
    pub target: Target,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub rps: f64,
    pub connections: u32,
    /// Length of the measured window (after warm-up).
    pub duration: Duration,
    pub warmup: Duration,
    /// Per-request timeout, from the actual send.
    pub timeout: Duration,
    /// Runtime threads; 1 runs everything on the calling thread.
    pub threads: usize,
}

impl OpenLoopConfig {
    fn validate(&self) -> Result<(), Error> {
        let invalid = |field, value: String, reason: &str| {
            Err(Error::InvalidConfig {
                field,
                value,
                reason: reason.to_owned(),
            })
        };
        if !(self.rps.is_finite() && self.rps > 0.0) {
            return invalid("--rps", self.rps.to_string(), "must be a positive number");
        }
        if self.connections == 0 {
            return invalid("--connections", "0".into(), "must be at least 1");
        }
        if self.duration.is_zero() {
            return invalid("--duration", "0s".into(), "must be longer than zero");
        }
        if self.timeout.is_zero() {
            return invalid("--timeout", "0s".into(), "must be longer than zero");
        }
        if self.threads == 0 {
            return invalid("--threads", "0".into(), "must be at least 1");
        }
        if self.target.tls && self.tls.is_none() {
            return Err(Error::TlsRequired {
                url: self.target.url.clone(),
            });
        }
        Ok(())
    }
}

/// What an open-loop run measured (internal form; see `to_report` for the public DTO).
#[derive(Debug, Clone)]
pub struct OpenLoopResult {
    pub config: OpenLoopConfig,
    pub window_start_ns: u64,
    pub window_end_ns: u64,
    pub scheduled: u64,
    pub sent: u64,
    pub late: u64,
    pub outcomes: BTreeMap<Outcome, u64>,
    pub corrected: LatencyRecorder,
    pub uncorrected: LatencyRecorder,
}

impl OpenLoopResult {
    pub fn window_seconds(&self) -> f64 {
        (self.window_end_ns - self.window_start_ns) as f64 / 1e9
    }

    /// Requests that got an HTTP response (any status), per second of the window.
    pub fn achieved_rps(&self) -> f64 {
        let responses: u64 = self
            .outcomes
            .iter()
            .filter(|(o, _)| o.is_http())
            .map(|(_, n)| n)
            .sum();
        responses as f64 / self.window_seconds()
    }

    pub fn unsent(&self) -> u64 {
        self.scheduled - self.sent
    }
}

/// The slot schedule shared by all connection tasks.
#[derive(Debug, Clone, Copy)]
struct Plan {
    connections: u64,
    ns_per_request: f64,
    start_ns: u64,
    window_start_ns: u64,
    end_ns: u64,
    timeout: Duration,
}

impl Plan {
    fn due_ns(&self, slot: u64) -> u64 {
        self.start_ns + (slot as f64 * self.ns_per_request) as u64
    }

    /// Slots of connection `idx` due inside the measured window.
    fn scheduled_in_window(&self, idx: u64) -> u64 {
        (idx..)
            .step_by(self.connections as usize)
            .map(|slot| self.due_ns(slot))
            .take_while(|&due| due < self.end_ns)
            .filter(|&due| due >= self.window_start_ns)
            .count() as u64
    }
}

#[derive(Default)]
struct WorkerStats {
    sent: u64,
    late: u64,
    outcomes: BTreeMap<Outcome, u64>,
    corrected: LatencyRecorder,
    uncorrected: LatencyRecorder,
}

/// Runs a constant-rate open-loop load and returns what it measured. Blocks the calling
/// thread for warm-up + duration (+ the tail of in-flight requests, at most the timeout).
pub fn run_open_loop(config: OpenLoopConfig) -> Result<OpenLoopResult, Error> {
    config.validate()?;
    let runtime = if config.threads == 1 {
        tighten_timer_slack();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads)
            .on_thread_start(tighten_timer_slack)
            .enable_all()
            .build()
    }
    .map_err(Error::Runtime)?;
    runtime.block_on(drive(config))
}

async fn drive(config: OpenLoopConfig) -> Result<OpenLoopResult, Error> {
    let start_ns = now_ns() + START_DELAY_NS;
    let window_start_ns = start_ns + config.warmup.as_nanos() as u64;
    let plan = Plan {
        connections: u64::from(config.connections),
        ns_per_request: 1e9 / config.rps,
        start_ns,
        window_start_ns,
        end_ns: window_start_ns + config.duration.as_nanos() as u64,
        timeout: config.timeout,
    };
    let connector = Arc::new(Connector::new(config.target.clone(), config.tls.clone())?);
    let tasks: Vec<_> = (0..plan.connections)
        .map(|idx| tokio::spawn(connection_task(idx, plan, connector.clone())))
        .collect();

    let mut result = OpenLoopResult {
        config,
        window_start_ns: plan.window_start_ns,
        window_end_ns: plan.end_ns,
        scheduled: (0..plan.connections)
            .map(|idx| plan.scheduled_in_window(idx))
            .sum(),
        sent: 0,
        late: 0,
        outcomes: BTreeMap::new(),
        corrected: LatencyRecorder::default(),
        uncorrected: LatencyRecorder::default(),
    };
    for task in tasks {
        let stats = task
            .await
            .map_err(|e| Error::Runtime(std::io::Error::other(e)))??;
        result.sent += stats.sent;
        result.late += stats.late;
        for (outcome, n) in stats.outcomes {
            *result.outcomes.entry(outcome).or_default() += n;
        }
        result.corrected.merge(&stats.corrected);
        result.uncorrected.merge(&stats.uncorrected);
    }
    Ok(result)
}

async fn connection_task(
    idx: u64,
    plan: Plan,
    connector: Arc<Connector>,
) -> Result<WorkerStats, Error> {
    let mut timer = PreciseTimer::new().map_err(Error::Runtime)?;
    let mut stats = WorkerStats::default();
    let mut connection: Option<Connection> = None;
    for slot in (idx..).step_by(plan.connections as usize) {
        let due = plan.due_ns(slot);
        // Stop at the end of the window even if this connection is behind schedule: what it
        // could not send is reported as unsent, not sent after the window closed.
        if due >= plan.end_ns || now_ns() >= plan.end_ns {
            break;
        }
        timer.sleep_until(due).await.map_err(Error::Runtime)?;
        let sent_at = now_ns();
        let outcome =
            match tokio::time::timeout(plan.timeout, exchange(&connector, &mut connection)).await {
                Ok(outcome) => outcome,
                Err(_elapsed) => {
                    // The connection's state is unknown after a timeout: never reuse it.
                    connection = None;
                    Outcome::Timeout
                }
            };
        let done = now_ns();
        if due >= plan.window_start_ns {
            stats.sent += 1;
            if sent_at - due >= LATE_THRESHOLD_NS {
                stats.late += 1;
            }
            stats.corrected.record_ns(done - due);
            stats.uncorrected.record_ns(done - sent_at);
            *stats.outcomes.entry(outcome).or_default() += 1;
        }
    }
    Ok(stats)
}

/// One request on the task's connection, (re)connecting first when needed. Any failure drops
/// the connection so the next request starts from a fresh one.
async fn exchange(connector: &Connector, connection: &mut Option<Connection>) -> Outcome {
    if let Some(conn) = connection.as_mut() {
        if !conn.is_reusable().await {
            *connection = None;
        }
    }
    if connection.is_none() {
        match connector.connect().await {
            Ok(conn) => *connection = Some(conn),
            Err(e) => return Outcome::classify(e.as_ref()),
        }
    }
    let conn = connection.as_mut().expect("connected above");
    match conn.exchange(connector.request()).await {
        Ok(status) => Outcome::Http(status),
        Err(e) => {
            *connection = None;
            Outcome::classify(e.as_ref())
        }
    }
}
