//! The engine that runs every load model.
//!
//! Workers are spread over `threads` OS threads; each thread runs a current-thread tokio
//! runtime with its workers as local tasks and one [`Recorder`], so the hot path shares
//! nothing. A worker owns one connection at a time and one request in flight.
//!
//! Open loop: request slot `s` is due at `start + s / rps`; worker `i` of `W` owns slots
//! `i, i + W, ...`, so sends are evenly spread with no bursts and no drift. Requests a busy
//! worker could not send before the window closed are counted as unsent.
//! Closed-style models (closed loop, sequential, users) send when the previous request ended;
//! a shared ticket counter implements stop-after-N and warm-up-by-count across threads.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use meshbench_time::{now_ns, tighten_timer_slack, PreciseTimer};

use crate::config::{LoadConfig, LoadModel, Warmup};
use crate::connection::{Connection, Connector};
use crate::live::{LiveSeries, LiveWriter};
use crate::plan::Plan;
use crate::recorder::{Exchange, Recorder};
use crate::{Error, Outcome};

/// What a load run measured (internal form; `to_report` converts it to the public DTO).
#[derive(Debug, Clone)]
pub struct LoadResult {
    pub config: LoadConfig,
    /// The measured window, CLOCK_MONOTONIC ns.
    pub window_start_ns: u64,
    pub window_end_ns: u64,
    /// Origin of the per-second series (end of a timed warm-up, or the run's start).
    pub series_origin_ns: u64,
    /// Open loop: requests due in the window. Other models: requests sent in the window.
    pub scheduled: u64,
    pub recorder: Recorder,
    /// CPU time of the generator process over the whole run, and the run's wall time.
    pub cpu_seconds: f64,
    pub wall_seconds: f64,
}

impl LoadResult {
    pub fn window_seconds(&self) -> f64 {
        self.window_end_ns.saturating_sub(self.window_start_ns) as f64 / 1e9
    }

    pub fn sent(&self) -> u64 {
        self.recorder.sent
    }

    pub fn unsent(&self) -> u64 {
        self.scheduled.saturating_sub(self.recorder.sent)
    }

    /// Requests that got an HTTP response (any status), per second of the window.
    pub fn achieved_rps(&self) -> f64 {
        let responses: u64 = self
            .recorder
            .outcomes
            .iter()
            .filter(|(o, _)| o.is_response())
            .map(|(_, n)| n)
            .sum();
        let seconds = self.window_seconds();
        if seconds > 0.0 {
            responses as f64 / seconds
        } else {
            0.0
        }
    }

    /// The generator itself, not the target, limited the run: sends were late although
    /// their connection was free, or the generator's threads were saturated.
    pub fn generator_limited(&self) -> bool {
        let late_own = self.recorder.late_while_idle * 100 > self.recorder.sent.max(1);
        late_own || self.generator_saturated()
    }

    /// The generator's threads were busy for more than 90% of the run: its own limit.
    pub fn generator_saturated(&self) -> bool {
        self.cpu_seconds > 0.9 * self.config.threads as f64 * self.wall_seconds
    }
}

/// Runs a load and returns what it measured. Blocks the calling thread for the whole run
/// (plus the tail of in-flight requests, at most the timeout).
pub fn run_load(config: LoadConfig) -> Result<LoadResult, Error> {
    config.validate()?;
    let threads = config.threads.min(config.workers() as usize).max(1);
    let cpu_start = process_cpu_ns();
    let series = config
        .live
        .as_ref()
        .map(|_| Arc::new(LiveSeries::default()));
    let plan = Arc::new(Plan::new(&config, series.clone()));
    let live = match (&config.live, series) {
        (Some(path), Some(series)) => {
            Some(LiveWriter::start(path, plan.window_start_ns, series).map_err(Error::Runtime)?)
        }
        _ => None,
    };
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let plan = plan.clone();
            let config = config.clone();
            std::thread::Builder::new()
                .name(format!("loadgen-{t}"))
                .spawn(move || run_thread(t as u64, threads as u64, plan, config))
                .map_err(Error::Runtime)
        })
        .collect::<Result<_, _>>()?;
    let mut recorder = Recorder::new(config.keep_samples);
    for handle in handles {
        let thread_recorder = handle
            .join()
            .map_err(|_| Error::Runtime(std::io::Error::other("a generator thread panicked")))??;
        recorder.merge(thread_recorder);
    }
    if let Some(live) = live {
        live.finish(&recorder.seconds);
    }
    let finished_ns = now_ns();
    let cpu_seconds = (process_cpu_ns() - cpu_start) as f64 / 1e9;

    let (window_start_ns, window_end_ns, scheduled) = match config.model {
        LoadModel::OpenLoop { .. } => (
            plan.window_start_ns,
            plan.end_ns.expect("the open loop is timed"),
            (0..plan.workers).map(|i| plan.scheduled_in_window(i)).sum(),
        ),
        _ => {
            let start = match config.warmup {
                Warmup::Requests(_) => recorder.first_sent_ns.unwrap_or(plan.window_start_ns),
                _ => plan.window_start_ns,
            };
            let end = plan.end_ns.or(recorder.last_done_ns).unwrap_or(finished_ns);
            (start, end, recorder.sent)
        }
    };
    Ok(LoadResult {
        wall_seconds: finished_ns.saturating_sub(plan.start_ns) as f64 / 1e9,
        series_origin_ns: plan.window_start_ns,
        config,
        window_start_ns,
        window_end_ns,
        scheduled,
        recorder,
        cpu_seconds,
    })
}

fn process_cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn run_thread(
    thread: u64,
    threads: u64,
    plan: Arc<Plan>,
    config: LoadConfig,
) -> Result<Recorder, Error> {
    tighten_timer_slack();
    if crate::direct::supports(&config) {
        return crate::direct::run_thread(thread, threads, plan, &config);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let local = tokio::task::LocalSet::new();
    let recorder = Rc::new(RefCell::new(
        Recorder::new(plan.keep_samples).watched(plan.live.clone()),
    ));
    local.block_on(&runtime, async {
        let connector = Rc::new(Connector::new(
            config.target.clone(),
            config.tls.clone(),
            config.protocol,
            config.request.clone(),
        )?);
        let workers: Vec<_> = (thread..plan.workers)
            .step_by(threads as usize)
            .map(|idx| {
                tokio::task::spawn_local(worker(
                    idx,
                    plan.clone(),
                    connector.clone(),
                    recorder.clone(),
                ))
            })
            .collect();
        for w in workers {
            w.await
                .map_err(|e| Error::Runtime(std::io::Error::other(e)))??;
        }
        Ok::<(), Error>(())
    })?;
    let recorder = Rc::try_unwrap(recorder)
        .map_err(|_| Error::Runtime(std::io::Error::other("recorder still shared")))?;
    Ok(recorder.into_inner())
}

async fn worker(
    idx: u64,
    plan: Arc<Plan>,
    connector: Rc<Connector>,
    recorder: Rc<RefCell<Recorder>>,
) -> Result<(), Error> {
    let mut timer = PreciseTimer::punctual().map_err(Error::Runtime)?;
    // One timeout timer per worker, armed lazily: a request only records its own deadline, and
    // the timer is re-armed when it fires early for the request in flight. Arming a tokio
    // timer per request would cost a timer-wheel update, and often a reactor wake-up, each.
    let mut timeout = TimeoutTimer::new(plan.timeout);
    let mut connection: Option<Connection> = None;
    let mut free_since = plan.start_ns;
    let mut sent = 0u64;
    while let Some((intended, measured)) = plan.next(idx, sent, free_since, now_ns()) {
        timer.sleep_until(intended).await.map_err(Error::Runtime)?;
        let sent_ns = now_ns();
        let request = exchange(
            &connector,
            &mut connection,
            plan.max_requests_per_connection,
        );
        let outcome = match timeout.run(request).await {
            Some(outcome) => outcome,
            None => {
                // The connection's state is unknown after a timeout: never reuse it.
                connection = None;
                Outcome::Timeout
            }
        };
        let done_ns = now_ns();
        if measured {
            let exchange = Exchange {
                intended_ns: intended,
                sent_ns,
                done_ns,
                worker_was_idle: free_since <= intended,
            };
            recorder
                .borrow_mut()
                .record(plan.window_start_ns, exchange, outcome);
        }
        free_since = done_ns;
        sent += 1;
    }
    Ok(())
}

/// A per-request timeout that touches tokio's timer once per timeout period instead of once
/// per request.
struct TimeoutTimer {
    limit: Duration,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl TimeoutTimer {
    fn new(limit: Duration) -> Self {
        TimeoutTimer {
            limit,
            sleep: Box::pin(tokio::time::sleep(limit)),
        }
    }

    /// Runs `work` for at most the limit; `None` when it timed out.
    async fn run<T>(&mut self, work: impl std::future::Future<Output = T>) -> Option<T> {
        let deadline = tokio::time::Instant::now() + self.limit;
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                done = &mut work => return Some(done),
                () = &mut self.sleep => {
                    if tokio::time::Instant::now() >= deadline {
                        return None;
                    }
                    // An earlier request's deadline: this request's is later.
                    self.sleep.as_mut().reset(deadline);
                }
            }
        }
    }
}

/// One request on the worker's connection, (re)connecting first when needed. A failure, the
/// end of keep-alive or the per-connection limit drops the connection.
async fn exchange(
    connector: &Connector,
    connection: &mut Option<Connection>,
    limit: Option<u64>,
) -> Outcome {
    if let Some(conn) = connection.as_mut() {
        if !conn.is_reusable().await {
            *connection = None;
        }
    }
    if connection.is_none() {
        // Boxed: the connect future (TLS, HTTP/2 handshakes) is kilobytes, and every request's
        // future would otherwise carry and move it.
        match Box::pin(connector.connect()).await {
            Ok(conn) => *connection = Some(conn),
            Err(e) => return Outcome::classify(e.as_ref()),
        }
    }
    let conn = connection.as_mut().expect("connected above");
    match conn.exchange(connector).await {
        Ok(outcome) => {
            if !connector.keeps_connection_after(conn.requests, limit) {
                *connection = None;
            }
            outcome
        }
        Err(e) => {
            *connection = None;
            Outcome::classify(e.as_ref())
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Protocol, RequestSpec};
    use crate::Target;

    /// Every request's future is moved into the timeout wrapper; the cold parts (connecting,
    /// TLS and HTTP/2 handshakes, gRPC) are boxed so that the move stays a few hundred bytes.
    /// They once made it 8.8 KB, and copying it was 5% of the generator's CPU closed loop.
    #[test]
    fn a_request_future_stays_under_a_kilobyte() {
        for protocol in [
            Protocol::Http1 { keep_alive: true },
            Protocol::Http2,
            Protocol::Grpc,
        ] {
            let target = Target::parse("http://127.0.0.1:1/").unwrap();
            let connector = Connector::new(target, None, protocol, RequestSpec::default()).unwrap();
            let mut connection = None;
            let request = exchange(&connector, &mut connection, None);
            let size = std::mem::size_of_val(&request);
            assert!(size < 1024, "{protocol:?}: {size} bytes");
        }
    }
}
