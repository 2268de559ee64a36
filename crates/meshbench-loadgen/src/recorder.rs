//! What a generator thread records. Each thread owns one [`Recorder`] (no locks, no atomics on
//! the hot path); recorders merge exactly when the run ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::live::LiveSeries;
use crate::second::SecondBucket;
use crate::{LatencyRecorder, Outcome};

/// A request sent this much after its intended time counts as late.
pub(crate) const LATE_THRESHOLD_NS: u64 = 1_000_000;
const NS_PER_SECOND: u64 = 1_000_000_000;

/// One finished request, as seen by the worker that sent it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exchange {
    pub intended_ns: u64,
    pub sent_ns: u64,
    pub done_ns: u64,
    /// The worker's connection was free before the intended time: lateness is then the
    /// generator's own (scheduling, CPU), not the target's.
    pub worker_was_idle: bool,
}

/// One request, kept when samples are requested.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSample {
    /// Intended send time, from the start of the measured window.
    pub intended_offset_ns: u64,
    /// From the intended send time to the end of the response.
    pub latency_ns: u64,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Default)]
pub struct Recorder {
    pub sent: u64,
    pub late: u64,
    pub late_while_idle: u64,
    /// Requests whose timestamps were out of order (answered before sent, or sent before
    /// their intended time): recorded with a fresh clock reading instead, and reported.
    pub untrusted_timestamps: u64,
    pub outcomes: BTreeMap<Outcome, u64>,
    pub corrected: LatencyRecorder,
    pub uncorrected: LatencyRecorder,
    pub seconds: Vec<SecondBucket>,
    pub samples: Option<Vec<RequestSample>>,
    /// Earliest send and latest completion of a measured request (CLOCK_MONOTONIC ns).
    pub first_sent_ns: Option<u64>,
    pub last_done_ns: Option<u64>,
    /// Where finished seconds go while the run lasts, and the first second not handed over.
    live: Option<(Arc<LiveSeries>, usize)>,
}

impl Recorder {
    pub(crate) fn new(keep_samples: bool) -> Self {
        Recorder {
            samples: keep_samples.then(Vec::new),
            ..Recorder::default()
        }
    }

    /// The same recorder, handing each second it has moved past to `live`.
    pub(crate) fn watched(mut self, live: Option<Arc<LiveSeries>>) -> Self {
        self.live = live.map(|series| (series, 0));
        self
    }

    pub(crate) fn record(&mut self, window_start_ns: u64, mut x: Exchange, outcome: Outcome) {
        if x.done_ns < x.sent_ns || x.sent_ns < x.intended_ns {
            // A latency below zero is a clock reading that cannot be trusted (a stale
            // reading, a kernel timestamp converted across a clock step): never record it
            // silently. The send time stands (it was read when sending); a send before its
            // slot had no wait to correct for; the end is read again now, which can only
            // overstate the latency by the time since the answer came.
            self.untrusted_timestamps += 1;
            x.intended_ns = x.intended_ns.min(x.sent_ns);
            if x.done_ns < x.sent_ns {
                x.done_ns = meshbench_time::now_ns().max(x.sent_ns);
            }
        }
        let corrected_ns = x.done_ns - x.intended_ns;
        self.sent += 1;
        if x.sent_ns - x.intended_ns >= LATE_THRESHOLD_NS {
            self.late += 1;
            if x.worker_was_idle {
                self.late_while_idle += 1;
            }
        }
        self.corrected.record_ns(corrected_ns);
        self.uncorrected.record_ns(x.done_ns - x.sent_ns);
        self.first_sent_ns = Some(self.first_sent_ns.map_or(x.sent_ns, |t| t.min(x.sent_ns)));
        self.last_done_ns = Some(self.last_done_ns.map_or(x.done_ns, |t| t.max(x.done_ns)));

        let second = (x.done_ns.saturating_sub(window_start_ns) / NS_PER_SECOND) as usize;
        if self.seconds.len() <= second {
            self.seconds.resize_with(second + 1, SecondBucket::default);
        }
        if let Some((series, handed)) = &mut self.live {
            if second > *handed {
                for (s, bucket) in self.seconds.iter().enumerate().take(second).skip(*handed) {
                    series.hand_over(s, bucket);
                }
                *handed = second;
            }
        }
        let bucket = &mut self.seconds[second];
        if outcome.is_success() {
            bucket.responses += 1;
        } else {
            if outcome.is_response() {
                bucket.responses += 1;
            }
            bucket.failures += 1;
        }
        crate::histogram::record_growing(&mut bucket.latency, corrected_ns);

        if let Some(samples) = self.samples.as_mut() {
            samples.push(RequestSample {
                intended_offset_ns: x.intended_ns.saturating_sub(window_start_ns),
                latency_ns: corrected_ns,
                outcome: outcome.clone(),
            });
        }
        *self.outcomes.entry(outcome).or_default() += 1;
    }

    pub(crate) fn merge(&mut self, other: Recorder) {
        self.sent += other.sent;
        self.late += other.late;
        self.late_while_idle += other.late_while_idle;
        self.untrusted_timestamps += other.untrusted_timestamps;
        for (outcome, n) in other.outcomes {
            *self.outcomes.entry(outcome).or_default() += n;
        }
        self.corrected.merge(&other.corrected);
        self.uncorrected.merge(&other.uncorrected);
        if self.seconds.len() < other.seconds.len() {
            self.seconds
                .resize_with(other.seconds.len(), SecondBucket::default);
        }
        for (mine, theirs) in self.seconds.iter_mut().zip(other.seconds) {
            mine.responses += theirs.responses;
            mine.failures += theirs.failures;
            mine.latency
                .add(&theirs.latency)
                .expect("auto-resizing histograms always merge");
        }
        match (self.samples.as_mut(), other.samples) {
            (Some(mine), Some(theirs)) => mine.extend(theirs),
            (None, theirs) => self.samples = theirs,
            _ => {}
        }
        self.first_sent_ns = min_opt(self.first_sent_ns, other.first_sent_ns);
        self.last_done_ns = max_opt(self.last_done_ns, other.last_done_ns);
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.max(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(intended_ms: u64, latency_ms: u64) -> Exchange {
        Exchange {
            intended_ns: intended_ms * 1_000_000,
            sent_ns: intended_ms * 1_000_000,
            done_ns: (intended_ms + latency_ms) * 1_000_000,
            worker_was_idle: true,
        }
    }

    #[test]
    fn merged_thread_recorders_equal_one_recorder_that_saw_everything() {
        let mut all = Recorder::new(true);
        let mut threads = [Recorder::new(true), Recorder::new(true)];
        for i in 0..3_000u64 {
            let x = exchange(i, 1 + i % 37);
            let outcome = if i % 10 == 0 {
                Outcome::Http(503)
            } else {
                Outcome::Http(200)
            };
            all.record(0, x, outcome.clone());
            threads[(i % 2) as usize].record(0, x, outcome);
        }
        let [mut merged, other] = threads;
        merged.merge(other);
        assert_eq!(merged.sent, all.sent);
        assert_eq!(merged.outcomes, all.outcomes);
        assert_eq!(merged.corrected.histogram(), all.corrected.histogram());
        assert_eq!(merged.seconds.len(), all.seconds.len());
        for (m, a) in merged.seconds.iter().zip(&all.seconds) {
            assert_eq!((m.responses, m.failures), (a.responses, a.failures));
            assert_eq!(m.latency, a.latency);
        }
        assert_eq!(merged.samples.unwrap().len(), 3_000);
        assert_eq!(merged.first_sent_ns, all.first_sent_ns);
        assert_eq!(merged.last_done_ns, all.last_done_ns);
    }

    #[test]
    fn a_second_holds_latencies_beyond_its_first_range() {
        // A per-second histogram starts small and grows: a 200 ms server must read 200 ms in
        // every second, as it does in the whole run's histogram (it once read 2 ms, the
        // starting range's top, because the record saturated instead of growing).
        let mut recorder = Recorder::new(false);
        for i in 0..2_000u64 {
            recorder.record(0, exchange(i, 200 + i % 3), Outcome::Http(200));
        }
        let whole_p99 = recorder.corrected.summary().p99_us;
        assert!((200_000..=203_000).contains(&whole_p99), "{whole_p99}");
        for second in &recorder.seconds[..2] {
            let p50 = second.latency.value_at_quantile(0.5);
            let p99 = second.latency.value_at_quantile(0.99);
            assert!((199_000..=203_000).contains(&p50), "p50 {p50} us");
            assert!((199_000..=203_000).contains(&p99), "p99 {p99} us");
        }
    }

    #[test]
    fn out_of_order_timestamps_are_counted_and_recorded_from_a_fresh_reading() {
        let mut recorder = Recorder::new(true);
        let now = meshbench_time::now_ns();
        // Answered "before" it was sent (a stale clock reading), and sent before its slot.
        let stale = Exchange {
            intended_ns: now - 2_000_000,
            sent_ns: now - 1_000_000,
            done_ns: now - 3_000_000,
            worker_was_idle: true,
        };
        let early = Exchange {
            intended_ns: now + 5_000_000,
            sent_ns: now,
            done_ns: now + 1_000_000,
            worker_was_idle: true,
        };
        recorder.record(0, stale, Outcome::Http(200));
        recorder.record(0, early, Outcome::Http(200));
        recorder.record(0, exchange(1, 2), Outcome::Http(200));
        assert_eq!(recorder.untrusted_timestamps, 2);
        assert_eq!(recorder.sent, 3);
        let samples = recorder.samples.unwrap();
        // The stale one ends no earlier than a fresh reading: from its slot, over 2 ms.
        assert!(samples[0].latency_ns >= 2_000_000, "{:?}", samples[0]);
        // The early one is timed from its send: there was no wait to correct for.
        assert_eq!(samples[1].latency_ns, 1_000_000);
        assert_eq!(samples[2].latency_ns, 2_000_000);
    }
}
