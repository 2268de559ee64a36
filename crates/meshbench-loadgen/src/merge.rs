//! One report from several generators that split a load between them (`--generators N` on
//! a cluster): counts and outcomes added, latency distributions merged exactly from their HDR
//! histograms, so every generator's coordinated-omission-corrected latency (measured from its
//! own intended send times) stays valid in the tail percentiles of the whole.

use std::collections::BTreeMap;

use meshbench_results::{GeneratorStats, LoadReport, MeasurementWindow, SecondStats};

use crate::LatencyRecorder;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error("no report to merge")]
    Empty,
    #[error("generator {index}'s {which} histogram is missing or not meshbench's encoding")]
    Histogram { index: usize, which: &'static str },
    #[error("generator {index} ran {found}, the first {expected}: only reports of one load merge")]
    Different {
        index: usize,
        expected: String,
        found: String,
    },
    #[error("generator {index}'s window has no wall-clock offset, so windows cannot be aligned")]
    Clock { index: usize },
}

/// Merges `reports`, each from one generator of the same load split between them.
///
/// - counts (scheduled, sent, unsent, late, outcomes, connections, requested and achieved
///   rates, the generators' CPU) are sums; a generator limited makes the whole limited;
/// - latency: the merged corrected and uncorrected histograms;
/// - the window spans the generators' windows on the wall clock, expressed on the first
///   generator's monotonic clock with its offset;
/// - the per-second series adds responses and failures; its p50 and p99 per second are the
///   highest of the generators' (per-second histograms are not kept), an upper bound.
pub fn merge_reports(reports: &[LoadReport]) -> Result<LoadReport, MergeError> {
    let first = reports.first().ok_or(MergeError::Empty)?;
    let mut corrected = LatencyRecorder::default();
    let mut uncorrected = LatencyRecorder::default();
    let mut wall: Option<(i128, i128)> = None;
    let offset0 = first
        .window
        .realtime_offset_ns
        .ok_or(MergeError::Clock { index: 0 })?;
    for (index, r) in reports.iter().enumerate() {
        for (expected, found) in [
            (format!("{:?}", first.model), format!("{:?}", r.model)),
            (first.target.clone(), r.target.clone()),
        ] {
            if expected != found {
                return Err(MergeError::Different {
                    index,
                    expected,
                    found,
                });
            }
        }
        let decode =
            |h, which| LatencyRecorder::decode(h).ok_or(MergeError::Histogram { index, which });
        corrected.merge(&decode(&r.histogram, "corrected")?);
        let unc = r
            .histogram_uncorrected
            .as_ref()
            .ok_or(MergeError::Histogram {
                index,
                which: "uncorrected",
            })?;
        uncorrected.merge(&decode(unc, "uncorrected")?);
        let offset = r
            .window
            .realtime_offset_ns
            .ok_or(MergeError::Clock { index })? as i128;
        let (start, end) = (
            r.window.start_monotonic_ns as i128 + offset,
            r.window.end_monotonic_ns as i128 + offset,
        );
        wall = Some(match wall {
            None => (start, end),
            Some((s, e)) => (s.min(start), e.max(end)),
        });
    }
    let (start, end) = wall.expect("at least one report");
    let on_first_clock = |t: i128| (t - offset0 as i128).max(0) as u64;
    let sum = |f: &dyn Fn(&LoadReport) -> u64| reports.iter().map(f).sum::<u64>();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for r in reports {
        for (k, v) in &r.outcomes {
            *outcomes.entry(k.clone()).or_default() += v;
        }
    }
    let mut seconds: BTreeMap<u32, SecondStats> = BTreeMap::new();
    for s in reports.iter().flat_map(|r| &r.time_series) {
        let merged = seconds.entry(s.second).or_insert(SecondStats {
            second: s.second,
            responses: 0,
            failures: 0,
            p50_us: 0,
            p99_us: 0,
        });
        merged.responses += s.responses;
        merged.failures += s.failures;
        merged.p50_us = merged.p50_us.max(s.p50_us);
        merged.p99_us = merged.p99_us.max(s.p99_us);
    }
    let sent = sum(&|r| r.sent);
    let generators: Vec<&GeneratorStats> = reports
        .iter()
        .filter_map(|r| r.generator.as_ref())
        .collect();
    let generator = (generators.len() == reports.len()).then(|| {
        let cpu_seconds: f64 = generators.iter().map(|g| g.cpu_seconds).sum();
        GeneratorStats {
            threads: generators.iter().map(|g| g.threads).sum(),
            cpu_seconds,
            cpu_us_per_request: cpu_seconds * 1e6 / sent.max(1) as f64,
            late_while_idle: generators.iter().map(|g| g.late_while_idle).sum(),
            limited: generators.iter().any(|g| g.limited),
            // Known when every generator said it.
            saturated: generators
                .iter()
                .map(|g| g.saturated)
                .collect::<Option<Vec<bool>>>()
                .map(|all| all.contains(&true)),
            untrusted_timestamps: generators.iter().map(|g| g.untrusted_timestamps).sum(),
        }
    });
    Ok(LoadReport {
        connections: reports.iter().map(|r| r.connections).sum(),
        requested_rps: first
            .requested_rps
            .map(|_| reports.iter().filter_map(|r| r.requested_rps).sum()),
        achieved_rps: reports.iter().map(|r| r.achieved_rps).sum(),
        window: MeasurementWindow {
            start_monotonic_ns: on_first_clock(start),
            end_monotonic_ns: on_first_clock(end),
            seconds: (end - start) as f64 / 1e9,
            warmup_seconds: first.window.warmup_seconds,
            realtime_offset_ns: Some(offset0),
        },
        scheduled: sum(&|r| r.scheduled),
        sent,
        unsent: sum(&|r| r.unsent),
        late: sum(&|r| r.late),
        outcomes,
        latency: corrected.summary(),
        latency_uncorrected: uncorrected.summary(),
        histogram: corrected.encode(),
        histogram_uncorrected: Some(uncorrected.encode()),
        generator,
        time_series: seconds.into_values().collect(),
        // Every request of one generator is in its own report; the merge keeps none.
        samples: None,
        ..first.clone()
    })
}
