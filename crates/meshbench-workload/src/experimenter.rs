//! The experimenter role, E3's API: `POST /api/experimenter/experiment` with
//! `{"interactions": N, "batchSize": G, "intervalBetweenBatchesInMilliseconds": I,
//! "allowedOperations": [...]}` sends N requests to the calculator one at a time, in groups of
//! G with I ms between groups, operations in round-robin, and answers
//! `{"rttsInMilliseconds": [...], "failures": n, "mean": x, "median": x,
//! "standardDeviation": x, "workload": {...}}`.
//!
//! Unlike the original: N need not be a multiple of G (the last group is shorter); an RTT
//! runs until the response body is read; a failure is recorded by class in
//! `failuresByClass` (`http_403`, `connect_refused`, `connection_reset`, `tls_...`,
//! `timeout`) and its RTT is left out of the list; and the server has no write timeout, so
//! a long experiment is answered when it ends. `maxOperand` (default 100) sets the operand
//! range for E3's "bigger numbers" run (10^16). Divisors are drawn from 1 up, so a division
//! by zero never shows up as a failure of the mesh. A `marker` goes into every request's body
//! and `x-meshbench-marker` header, so a wire capture can prove whether it crossed in clear.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, StatusCode, Uri};
use hyper::body::Incoming;
use rand::Rng;
use serde::Serialize;

use meshbench_loadgen::LatencyRecorder;
use meshbench_results::{LoadModel, LoadReport, MeasurementWindow, ModelParameters};

use crate::calculator::Operation;
use crate::client::{millis, Caller};
use crate::fields::{self, Object};
use crate::http::{error, json, not_found, post_json_object, Reply, Role};

pub const EXPERIMENT_PATH: &str = "/api/experimenter/experiment";

/// The largest experiment one request may ask for.
const MAX_INTERACTIONS: u64 = 10_000_000;
/// E3's "bigger numbers" run draws operands up to 10^16.
const MAX_OPERAND: u64 = 10_000_000_000_000_000;

pub struct Experimenter {
    /// The calculator's URI for each operation, in [`Operation::ALL`] order.
    operation_uris: [Uri; 4],
    caller: Caller,
}

impl Experimenter {
    /// `calculator` is the calculator's base URI (`http://calculator:8080`); `timeout` bounds
    /// each call to it.
    pub fn new(calculator: &Uri, timeout: Duration) -> Result<Self, crate::Error> {
        let base = calculator.to_string();
        let base = base.trim_end_matches('/');
        let uri = |op: Operation| {
            format!("{base}{}", op.path())
                .parse::<Uri>()
                .map_err(|e| crate::Error::BadUri {
                    uri: calculator.to_string(),
                    problem: e.to_string(),
                })
        };
        Ok(Experimenter {
            operation_uris: [
                uri(Operation::Add)?,
                uri(Operation::Subtract)?,
                uri(Operation::Multiply)?,
                uri(Operation::Divide)?,
            ],
            caller: Caller::new(timeout),
        })
    }

    fn uri(&self, op: Operation) -> &Uri {
        let index = Operation::ALL
            .iter()
            .position(|o| *o == op)
            .expect("ALL lists every operation");
        &self.operation_uris[index]
    }
}

/// The experiment as requested, with defaults filled in (E3's frontend defaults).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    pub interactions: u64,
    pub batch_size: u64,
    pub interval_between_batches_in_milliseconds: u64,
    #[serde(serialize_with = "operation_names")]
    pub allowed_operations: Vec<Operation>,
    pub max_operand: u64,
    /// The first requests of the experiment, paced like the rest but not measured (E3
    /// discards the first RTT); meshbench's addition, default 0.
    pub warmup_interactions: u64,
    /// Put into every request's body and header, for wire captures (meshbench's addition).
    pub marker: Option<String>,
}

fn operation_names<S: serde::Serializer>(ops: &[Operation], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ops.iter().map(|op| op.experiment_name()))
}

impl Workload {
    pub fn parse(object: &Object) -> Result<Workload, String> {
        let interactions = fields::whole(object, "interactions", Some(100), 1, MAX_INTERACTIONS)?;
        let batch_size = fields::whole(object, "batchSize", Some(10), 1, MAX_INTERACTIONS)?;
        let interval = fields::whole(
            object,
            "intervalBetweenBatchesInMilliseconds",
            Some(0),
            0,
            3_600_000,
        )?;
        let names = if object.contains_key("allowedOperations") {
            fields::strings(object, "allowedOperations")?
        } else {
            Operation::ALL
                .iter()
                .map(|op| op.experiment_name())
                .collect()
        };
        if names.is_empty() {
            return Err(
                "allowedOperations: empty (allow at least one of sum, subtraction, \
                        multiplication, division)"
                    .to_owned(),
            );
        }
        let mut allowed_operations = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let op = Operation::from_experiment_name(name).ok_or_else(|| {
                format!(
                    "allowedOperations[{i}]: unknown operation {name:?} (expected sum, \
                     subtraction, multiplication or division)"
                )
            })?;
            allowed_operations.push(op);
        }
        let max_operand = fields::whole(object, "maxOperand", Some(100), 0, MAX_OPERAND)?;
        if max_operand == 0 && allowed_operations.contains(&Operation::Divide) {
            return Err("maxOperand: must be at least 1 when division is allowed".to_owned());
        }
        let warmup_interactions =
            fields::whole(object, "warmupInteractions", Some(0), 0, interactions - 1)?;
        let marker = fields::string(object, "marker")?.map(str::to_owned);
        if marker
            .as_deref()
            .is_some_and(|m| http::HeaderValue::from_str(m).is_err())
        {
            return Err("marker: must be printable ASCII".to_owned());
        }
        Ok(Workload {
            marker,
            interactions,
            batch_size,
            interval_between_batches_in_milliseconds: interval,
            allowed_operations,
            max_operand,
            warmup_interactions,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExperimentResult {
    /// One RTT per successful request, in the order sent.
    pub rtts_in_milliseconds: Vec<f64>,
    pub failures: u64,
    /// Failures by outcome class; their counts add up to `failures`.
    pub failures_by_class: BTreeMap<String, u64>,
    /// Over the successful RTTs; `null` when there were none.
    pub mean: Option<f64>,
    pub median: Option<f64>,
    pub standard_deviation: Option<f64>,
    pub workload: Workload,
    pub elapsed_milliseconds: f64,
    /// CLOCK_MONOTONIC nanoseconds from the first measured request's send to the last one's
    /// end, for cutting resource samples to it; not part of E3's answer.
    #[serde(skip)]
    pub measured_window_ns: (u64, u64),
}

impl Experimenter {
    pub async fn run(&self, workload: &Workload) -> ExperimentResult {
        let started = Instant::now();
        let mut rtts = Vec::with_capacity(workload.interactions.min(1 << 20) as usize);
        let mut failures_by_class = BTreeMap::new();
        let interval = Duration::from_millis(workload.interval_between_batches_in_milliseconds);
        let mut window_start_ns = meshbench_time::now_ns();
        for i in 0..workload.interactions {
            if i > 0 && i % workload.batch_size == 0 && !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
            if i == workload.warmup_interactions {
                window_start_ns = meshbench_time::now_ns();
            }
            let op = workload.allowed_operations
                [(i % workload.allowed_operations.len() as u64) as usize];
            let (first, second) = {
                let mut rng = rand::rng();
                let divisor_floor = u64::from(op == Operation::Divide);
                (
                    rng.random_range(0..=workload.max_operand),
                    rng.random_range(divisor_floor..=workload.max_operand),
                )
            };
            let mut body = serde_json::json!({ "firstNumber": first, "secondNumber": second });
            if let Some(marker) = &workload.marker {
                body["marker"] = serde_json::Value::String(marker.clone());
            }
            let call = self
                .caller
                .post_json_marked(self.uri(op), &body, workload.marker.as_deref())
                .await;
            if i < workload.warmup_interactions {
                continue;
            }
            if call.is_success() {
                rtts.push(millis(call.elapsed));
            } else {
                *failures_by_class
                    .entry(call.outcome.to_string())
                    .or_insert(0) += 1;
            }
        }
        let summary = meshbench_stats::Summary::of(&rtts);
        ExperimentResult {
            failures: failures_by_class.values().sum(),
            failures_by_class,
            mean: summary.as_ref().map(|s| s.mean),
            median: summary.as_ref().map(|s| s.median),
            standard_deviation: summary.as_ref().map(|s| s.std_dev),
            rtts_in_milliseconds: rtts,
            workload: workload.clone(),
            elapsed_milliseconds: millis(started.elapsed()),
            measured_window_ns: (window_start_ns, meshbench_time::now_ns()),
        }
    }
}

impl ExperimentResult {
    /// The experiment as a load report of meshbench's schema (sequential model, one
    /// connection), so a run's cell reads the same whoever made the requests. Latency covers
    /// the successful requests only: E3's experimenter keeps no RTT for a failure, only its
    /// class. With no schedule there is nothing to correct, so both latencies are the RTT.
    pub fn load_report(&self, target: &str) -> LoadReport {
        let mut latency = LatencyRecorder::default();
        for rtt in &self.rtts_in_milliseconds {
            latency.record_ns((rtt * 1e6).round() as u64);
        }
        let successes = self.rtts_in_milliseconds.len() as u64;
        let mut outcomes = self.failures_by_class.clone();
        if successes > 0 {
            outcomes.insert("http_200".to_owned(), successes);
        }
        let sent = successes + self.failures;
        let responses: u64 = outcomes
            .iter()
            .filter(|(class, _)| class.starts_with("http_"))
            .map(|(_, n)| n)
            .sum();
        let (start, end) = self.measured_window_ns;
        let seconds = end.saturating_sub(start) as f64 / 1e9;
        let workload = &self.workload;
        LoadReport {
            schema_version: meshbench_results::SCHEMA_VERSION,
            kind: "meshbench.load".to_owned(),
            target: target.to_owned(),
            model: LoadModel::Sequential,
            connections: 1,
            requested_rps: None,
            achieved_rps: if seconds > 0.0 {
                responses as f64 / seconds
            } else {
                0.0
            },
            window: MeasurementWindow {
                start_monotonic_ns: start,
                end_monotonic_ns: end,
                seconds,
                warmup_seconds: 0.0,
                realtime_offset_ns: Some(meshbench_time::realtime_offset_ns()),
            },
            scheduled: sent,
            sent,
            unsent: 0,
            late: 0,
            outcomes,
            latency: latency.summary(),
            latency_uncorrected: latency.summary(),
            histogram: latency.encode(),
            histogram_uncorrected: Some(latency.encode()),
            protocol: Some("http/1.1".to_owned()),
            parameters: Some(ModelParameters {
                group_size: Some(workload.batch_size),
                group_interval_ms: Some(workload.interval_between_batches_in_milliseconds as f64),
                users: None,
                requests_per_user: None,
            }),
            generator: None,
            time_series: vec![],
            samples: None,
        }
    }
}

impl Role for Experimenter {
    const NAME: &'static str = "experimenter";

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        if req.uri().path() != EXPERIMENT_PATH {
            return not_found(&req);
        }
        let object = match post_json_object(req, EXPERIMENT_PATH).await {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let workload = match Workload::parse(&object) {
            Ok(workload) => workload,
            Err(message) => return error(StatusCode::BAD_REQUEST, message),
        };
        tracing::info!(
            interactions = workload.interactions,
            batch_size = workload.batch_size,
            "experiment started"
        );
        let result = self.run(&workload).await;
        tracing::info!(
            successes = result.rtts_in_milliseconds.len(),
            failures = result.failures,
            elapsed_ms = result.elapsed_milliseconds,
            "experiment finished"
        );
        json(StatusCode::OK, &result)
    }
}
