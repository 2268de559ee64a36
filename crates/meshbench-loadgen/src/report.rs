//! Conversion of an internal result into the public `LoadReport` DTO.

use meshbench_results::{LoadModel, LoadReport, MeasurementWindow, SCHEMA_VERSION};

use crate::OpenLoopResult;

impl OpenLoopResult {
    pub fn to_report(&self) -> LoadReport {
        LoadReport {
            schema_version: SCHEMA_VERSION,
            kind: "meshbench.load".to_owned(),
            target: self.config.target.url.clone(),
            model: LoadModel::OpenLoopConstantRate,
            connections: self.config.connections,
            requested_rps: Some(self.config.rps),
            achieved_rps: self.achieved_rps(),
            window: MeasurementWindow {
                start_monotonic_ns: self.window_start_ns,
                end_monotonic_ns: self.window_end_ns,
                seconds: self.window_seconds(),
                warmup_seconds: self.config.warmup.as_secs_f64(),
            },
            scheduled: self.scheduled,
            sent: self.sent,
            unsent: self.unsent(),
            late: self.late,
            outcomes: self
                .outcomes
                .iter()
                .map(|(outcome, n)| (outcome.to_string(), *n))
                .collect(),
            latency: self.corrected.summary(),
            latency_uncorrected: self.uncorrected.summary(),
            histogram: self.corrected.encode(),
        }
    }
}
