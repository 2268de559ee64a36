//! The schedule every generator thread shares: when each open-loop slot is due, the tickets
//! closed-style models draw, and where the measured window starts and ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use meshbench_time::now_ns;

use crate::config::{LoadConfig, LoadModel, Stop, Warmup};
use crate::live::LiveSeries;

/// Lead time between planning and the first request, so every worker is waiting when it starts.
const START_DELAY_NS: u64 = 20_000_000;

/// The schedule shared by all threads.
#[derive(Debug)]
pub(crate) struct Plan {
    model: LoadModel,
    pub(crate) workers: u64,
    ns_per_request: f64,
    pub(crate) start_ns: u64,
    /// End of a timed warm-up (or the start).
    pub(crate) window_start_ns: u64,
    /// End of a timed run.
    pub(crate) end_ns: Option<u64>,
    /// Closed-style models: requests are numbered by tickets across all workers.
    tickets: AtomicU64,
    warmup_tickets: u64,
    ticket_limit: Option<u64>,
    pub(crate) timeout: Duration,
    pub(crate) max_requests_per_connection: Option<u64>,
    pub(crate) keep_samples: bool,
    /// Where threads hand finished seconds over while the run lasts (`LoadConfig::live`).
    pub(crate) live: Option<Arc<LiveSeries>>,
}

impl Plan {
    pub(crate) fn new(config: &LoadConfig, live: Option<Arc<LiveSeries>>) -> Self {
        let start_ns = now_ns() + START_DELAY_NS;
        let ns = |d: Duration| d.as_nanos() as u64;
        let (warmup_ns, warmup_tickets, run_ns, ticket_limit, ns_per_request) = match config.model {
            // The open loop is always timed: counts become times at the requested rate.
            LoadModel::OpenLoop { rps } => {
                let per = 1e9 / rps;
                let warmup = match config.warmup {
                    Warmup::None => 0,
                    Warmup::Time(d) => ns(d),
                    Warmup::Requests(n) => (n as f64 * per) as u64,
                };
                let run = match config.stop {
                    Stop::After(d) => ns(d),
                    Stop::Requests(n) => (n as f64 * per).ceil() as u64,
                };
                (warmup, 0, Some(run), None, per)
            }
            _ => {
                let (warmup_ns, warmup_tickets) = match config.warmup {
                    Warmup::None => (0, 0),
                    Warmup::Time(d) => (ns(d), 0),
                    Warmup::Requests(n) => (0, n),
                };
                let (run, limit) = match (config.stop, &config.model) {
                    (Stop::After(d), _) => (Some(ns(d)), None),
                    (Stop::Requests(n), _) => (None, Some(warmup_tickets + n)),
                };
                (warmup_ns, warmup_tickets, run, limit, 0.0)
            }
        };
        let window_start_ns = start_ns + warmup_ns;
        Plan {
            model: config.model.clone(),
            workers: u64::from(config.workers()),
            ns_per_request,
            start_ns,
            window_start_ns,
            end_ns: run_ns.map(|r| window_start_ns + r),
            tickets: AtomicU64::new(0),
            warmup_tickets,
            ticket_limit,
            timeout: config.timeout,
            max_requests_per_connection: config.max_requests_per_connection,
            keep_samples: config.keep_samples,
            live,
        }
    }

    pub(crate) fn is_open_loop(&self) -> bool {
        matches!(self.model, LoadModel::OpenLoop { .. })
    }

    /// Open loop: when the worker that sent its `sent`th request (0-based) has its next slot.
    pub(crate) fn slot_after_ns(&self, idx: u64, sent: u64) -> u64 {
        self.due_ns(idx + (sent + 1) * self.workers)
    }

    pub(crate) fn due_ns(&self, slot: u64) -> u64 {
        self.start_ns + (slot as f64 * self.ns_per_request) as u64
    }

    /// Open loop: slots of worker `idx` due inside the measured window.
    pub(crate) fn scheduled_in_window(&self, idx: u64) -> u64 {
        let end = self.end_ns.expect("the open loop is timed");
        (idx..)
            .step_by(self.workers as usize)
            .map(|slot| self.due_ns(slot))
            .take_while(|&due| due < end)
            .filter(|&due| due >= self.window_start_ns)
            .count() as u64
    }

    /// The next request of a worker that has sent `sent` so far and became free at
    /// `free_since`, asked at `now`: its intended send time and whether it is measured, or
    /// `None` to stop.
    pub(crate) fn next(
        &self,
        idx: u64,
        sent: u64,
        free_since: u64,
        now: u64,
    ) -> Option<(u64, bool)> {
        // Every model starts at the planned start, when all workers are ready.
        let now = now.max(self.start_ns);
        if self.end_ns.is_some_and(|end| now >= end) {
            return None;
        }
        if let LoadModel::OpenLoop { .. } = self.model {
            let due = self.due_ns(idx + sent * self.workers);
            let end = self.end_ns.expect("the open loop is timed");
            return (due < end).then_some((due, due >= self.window_start_ns));
        }
        let intended = match self.model {
            LoadModel::Users {
                requests_per_user, ..
            } if sent >= requests_per_user => return None,
            LoadModel::Sequential {
                group_size,
                group_interval,
            } if sent > 0 && sent.is_multiple_of(group_size) => {
                free_since + group_interval.as_nanos() as u64
            }
            _ => now,
        };
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        if self.ticket_limit.is_some_and(|limit| ticket >= limit) {
            return None;
        }
        let measured = ticket >= self.warmup_tickets && intended >= self.window_start_ns;
        Some((intended, measured))
    }
}
