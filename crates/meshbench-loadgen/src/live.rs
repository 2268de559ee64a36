//! The per-second series while a load runs, for whoever watches it (`meshbench serve` streams
//! it). Each generator thread hands a second of its own over once it has recorded a request
//! of a later one (a lock once per second per thread, never per request); a writer thread
//! appends each settled second to a file as one JSON line of [`SecondStats`].
//!
//! Live lines are a preview: a request that completes after its thread handed its second over
//! is missing from the line (never from the report, whose series comes from the merged
//! recorders when the run ends). Once the run ends, the writer appends every second it had not
//! written yet from the final, exact series.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshbench_results::SecondStats;

use crate::second::SecondBucket;

/// How often the writer looks for settled seconds.
const WRITE_EVERY: Duration = Duration::from_millis(200);
/// A second is settled this long after it ended: threads hand seconds over lazily.
const SETTLE_NS: u64 = 500_000_000;
const NS_PER_SECOND: u64 = 1_000_000_000;

#[derive(Debug, Default)]
pub(crate) struct LiveSeries {
    handed_over: Mutex<BTreeMap<usize, SecondBucket>>,
}

impl LiveSeries {
    pub(crate) fn hand_over(&self, second: usize, bucket: &SecondBucket) {
        // A poisoned lock only means another thread panicked while adding: its partial
        // second is still a preview.
        let mut seconds = self
            .handed_over
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let mine = seconds.entry(second).or_default();
        mine.responses += bucket.responses;
        mine.failures += bucket.failures;
        let _ = mine.latency.add(&bucket.latency);
    }

    fn take_before(&self, second: usize) -> Vec<(usize, SecondBucket)> {
        let mut seconds = self
            .handed_over
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let later = seconds.split_off(&second);
        std::mem::replace(&mut *seconds, later)
            .into_iter()
            .collect()
    }
}

pub(crate) fn stats(second: usize, bucket: &SecondBucket) -> SecondStats {
    SecondStats {
        second: second as u32,
        responses: bucket.responses,
        failures: bucket.failures,
        p50_us: bucket.latency.value_at_quantile(0.5),
        p99_us: bucket.latency.value_at_quantile(0.99),
    }
}

/// Appends settled seconds to the live file until told to stop.
pub(crate) struct LiveWriter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(std::fs::File, usize)>>,
}

impl LiveWriter {
    /// Creates (truncates) `path` and writes what the threads hand to `series`; seconds
    /// count from `origin_ns` (CLOCK_MONOTONIC).
    pub(crate) fn start(
        path: &PathBuf,
        origin_ns: u64,
        series: Arc<LiveSeries>,
    ) -> std::io::Result<LiveWriter> {
        let mut file = std::fs::File::create(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (watched, stopped) = (series.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("loadgen-live".into())
            .spawn(move || {
                let mut next = 0usize;
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(WRITE_EVERY);
                    let now = meshbench_time::now_ns();
                    let settled =
                        (now.saturating_sub(origin_ns + SETTLE_NS) / NS_PER_SECOND) as usize;
                    for (second, bucket) in watched.take_before(settled) {
                        if second >= next {
                            // A watcher that cannot be written to only loses its preview.
                            let _ = writeln_json(&mut file, &stats(second, &bucket));
                            next = second + 1;
                        }
                    }
                }
                (file, next)
            })?;
        Ok(LiveWriter {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the writer and appends the seconds it had not written, from the final series.
    pub(crate) fn finish(mut self, seconds: &[SecondBucket]) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(Ok((mut file, next))) = self.thread.take().map(|t| t.join()) {
            for (second, bucket) in seconds.iter().enumerate().skip(next) {
                let _ = writeln_json(&mut file, &stats(second, bucket));
            }
            let _ = file.flush();
        }
    }
}

impl Drop for LiveWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn writeln_json(file: &mut std::fs::File, line: &SecondStats) -> std::io::Result<()> {
    let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
    text.push('\n');
    // One write per line, so a reader never sees half a line it cannot also finish.
    file.write_all(text.as_bytes())
}
