//! Conversion of an internal result into the public `LoadReport` DTO.

use meshbench_results::{
    GeneratorStats, LoadModel as ModelDto, LoadReport, MeasurementWindow, ModelParameters,
    RequestSample as SampleDto, SecondStats, SCHEMA_VERSION,
};

use crate::config::{LoadModel, Warmup};
use crate::LoadResult;

impl LoadResult {
    pub fn to_report(&self) -> LoadReport {
        let config = &self.config;
        let rec = &self.recorder;
        let (model, requested_rps, parameters) = match config.model {
            LoadModel::OpenLoop { rps } => (ModelDto::OpenLoopConstantRate, Some(rps), None),
            LoadModel::ClosedLoop => (ModelDto::ClosedLoop, None, None),
            LoadModel::Sequential {
                group_size,
                group_interval,
            } => (
                ModelDto::Sequential,
                None,
                Some(ModelParameters {
                    group_size: Some(group_size),
                    group_interval_ms: Some(group_interval.as_secs_f64() * 1e3),
                    users: None,
                    requests_per_user: None,
                }),
            ),
            LoadModel::Users {
                users,
                requests_per_user,
            } => (
                ModelDto::Users,
                None,
                Some(ModelParameters {
                    group_size: None,
                    group_interval_ms: None,
                    users: Some(users),
                    requests_per_user: Some(requests_per_user),
                }),
            ),
        };
        let warmup_seconds = match config.warmup {
            Warmup::Time(d) => d.as_secs_f64(),
            _ => 0.0,
        };
        LoadReport {
            schema_version: SCHEMA_VERSION,
            kind: "meshbench.load".to_owned(),
            target: config.target.url.clone(),
            model,
            connections: config.workers(),
            requested_rps,
            achieved_rps: self.achieved_rps(),
            window: MeasurementWindow {
                start_monotonic_ns: self.window_start_ns,
                end_monotonic_ns: self.window_end_ns,
                seconds: self.window_seconds(),
                warmup_seconds,
                realtime_offset_ns: Some(meshbench_time::realtime_offset_ns()),
            },
            scheduled: self.scheduled,
            sent: rec.sent,
            unsent: self.unsent(),
            late: rec.late,
            outcomes: rec
                .outcomes
                .iter()
                .map(|(outcome, n)| (outcome.to_string(), *n))
                .collect(),
            latency: rec.corrected.summary(),
            latency_uncorrected: rec.uncorrected.summary(),
            histogram: rec.corrected.encode(),
            histogram_uncorrected: Some(rec.uncorrected.encode()),
            protocol: Some(config.protocol.name(config.target.tls).to_owned()),
            parameters,
            generator: Some(GeneratorStats {
                threads: config.threads as u32,
                cpu_seconds: self.cpu_seconds,
                cpu_us_per_request: self.cpu_seconds * 1e6 / rec.sent.max(1) as f64,
                late_while_idle: rec.late_while_idle,
                limited: self.generator_limited(),
                saturated: Some(self.generator_saturated()),
                untrusted_timestamps: rec.untrusted_timestamps,
            }),
            time_series: rec
                .seconds
                .iter()
                .enumerate()
                .map(|(second, b)| SecondStats {
                    second: second as u32,
                    responses: b.responses,
                    failures: b.failures,
                    p50_us: b.latency.value_at_quantile(0.5),
                    p99_us: b.latency.value_at_quantile(0.99),
                })
                .collect(),
            samples: rec.samples.as_ref().map(|samples| {
                samples
                    .iter()
                    .map(|s| SampleDto {
                        t_us: s.intended_offset_ns / 1_000,
                        latency_us: s.latency_ns / 1_000,
                        outcome: s.outcome.to_string(),
                    })
                    .collect()
            }),
        }
    }
}
