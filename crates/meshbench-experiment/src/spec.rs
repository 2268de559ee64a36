//! The experiment spec: a YAML file a user writes (or a built-in profile, written the same
//! way) and its validation into a [`Profile`]. Every error names the field, as a path such as
//! `load.points[2].rps`, and says what is wrong with its value.
//!
//! A spec is written at the scale of this machine. An optional `original:` mapping holds the
//! study's own scale: with [`Scale::Original`] its keys replace the top-level ones.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use meshbench_meshes::Scenario;

use crate::application::Application;
use crate::limits::{
    MAX_CELLS, MAX_CONNECTIONS, MAX_DURATION, MAX_REPETITIONS, MAX_REQUESTS, MAX_RPS,
    MAX_SHORT_DURATION, MAX_WARMUP,
};
use crate::placement::Placement;
use crate::profile::{
    builtin_spec, CapacityPlan, LoadKind, LoadPlan, OutlierPolicy, PointPlan, Profile, Scale,
    UntilDecidedPlan,
};
use crate::Error;
use meshbench_results::{Claim, ClaimCheck, RunConfig};
use meshbench_stats::capacity::{SearchSettings, Slo};

/// The longest server delay and the biggest response the echo role accepts.
const MAX_DELAY: Duration = Duration::from_secs(60);
const MAX_RESPONSE_BYTES: u64 = 64 << 20;
/// E3's operands: 0 to 100, and 0 to 10^16 in its "bigger numbers" run.
const DEFAULT_MAX_OPERAND: u64 = 100;
const MAX_OPERAND: u64 = 10_000_000_000_000_000;
/// The longest chain the counter role accepts.
const MAX_CHAIN: u64 = 10_000;
/// Pods per deployment: E4 ran 12; a cell's pods are created one API call each.
const MAX_REPLICAS: u32 = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecDoc {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default = "echo")]
    application: String,
    scenarios: Vec<String>,
    #[serde(default = "default_placements")]
    placements: Vec<String>,
    load: LoadDoc,
    /// A number, or rounds until the findings are decided:
    /// `{until: decided, max: 10, budget: 2h}` (see [`repetitions_of`]).
    #[serde(default = "one_repetition")]
    repetitions: Value,
    /// Required by the time-bound models (constant rate, closed loop); the sequential and
    /// users models end after their requests.
    duration: Option<String>,
    #[serde(default = "zero")]
    warmup: String,
    #[serde(default = "zero")]
    cooldown: String,
    #[serde(default = "default_timeout")]
    request_timeout: String,
    #[serde(default = "default_sample_interval")]
    sample_interval: String,
    /// Pods per called deployment (E4: 12 per counter); the counter chain only.
    #[serde(default = "one")]
    replicas: u32,
    workload: Option<WorkloadDoc>,
    #[serde(default)]
    outliers: OutliersDoc,
    /// The study's published findings, checked by the report against each run.
    #[serde(default)]
    findings: Vec<Claim>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadDoc {
    model: String,
    points: Vec<PointDoc>,
    /// The capacity model's objective.
    slo: Option<SloDoc>,
    /// The capacity model's search (defaults: `SearchSettings::default`).
    search: Option<SearchDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SloDoc {
    /// A duration: `5ms`.
    p99: String,
    /// A share of the requests due: `0.1%` (the default).
    errors: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchDoc {
    start: Option<f64>,
    max: Option<f64>,
    min: Option<f64>,
    /// `10%`.
    precision: Option<String>,
    max_steps: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PointDoc {
    rps: Option<f64>,
    connections: Option<u32>,
    /// Overrides the spec's repetitions for this point (E2 ran 8 at low loads, 7 at the top).
    repetitions: Option<u32>,
    /// Sequential: the experiment's requests; users: requests per user.
    requests: Option<u64>,
    group_size: Option<u64>,
    group_interval: Option<String>,
    users: Option<u32>,
    /// E3's operand range (100, or 10^16 for the "bigger numbers" run).
    max_operand: Option<u64>,
    /// E4: the services one request crosses.
    services: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadDoc {
    #[serde(default = "zero")]
    delay: String,
    #[serde(default = "default_response_size")]
    response_size: u64,
    #[serde(default)]
    request_size: u64,
}

impl Default for WorkloadDoc {
    fn default() -> Self {
        WorkloadDoc {
            delay: zero(),
            response_size: default_response_size(),
            request_size: 0,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutliersDoc {
    #[serde(default)]
    drop_highest_baseline_max: u32,
}

impl PointDoc {
    /// The load fields this point sets (each model has its own).
    fn load_fields(&self) -> impl Iterator<Item = &'static str> {
        [
            ("rps", self.rps.is_some()),
            ("connections", self.connections.is_some()),
            ("requests", self.requests.is_some()),
            ("group_size", self.group_size.is_some()),
            ("group_interval", self.group_interval.is_some()),
            ("users", self.users.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
    }
}

meshbench_role::serde_defaults! {
    default_placements: Vec<String> = vec![Placement::IntraNode.name().to_owned()],
    echo: String = Application::Echo.name().to_owned(),
    one: u32 = 1,
    zero: String = "0s".to_owned(),
    default_timeout: String = "5s".to_owned(),
    default_sample_interval: String = "200ms".to_owned(),
    default_response_size: u64 = 1024,
}

/// Parses and validates a spec at `scale`. `origin` names where the text came from, for errors.
pub fn parse_spec(text: &str, origin: &str, scale: Scale) -> Result<Profile, Error> {
    let bad = |field: String, problem: String| Error::Spec {
        origin: origin.to_owned(),
        field,
        problem,
    };
    crate::limits::plain_yaml(text)
        .map_err(|(line, problem)| bad(format!("line {line}"), problem))?;
    let mut doc: Value =
        serde_yaml_ng::from_str(text).map_err(|e| bad("(document)".into(), e.to_string()))?;
    let Value::Mapping(top) = &mut doc else {
        return Err(bad(
            "(document)".into(),
            "expected a mapping of fields".into(),
        ));
    };
    let original = top.remove("original");
    let overridden: Vec<String> = match (&original, scale) {
        (Some(Value::Mapping(original)), Scale::Original) => {
            let keys = merge(top, original);
            if keys.iter().any(|k| k == "original" || k == "name") {
                return Err(bad(
                    "original".into(),
                    "may not set `name` or nest `original`".into(),
                ));
            }
            keys
        }
        (Some(Value::Mapping(_)), Scale::Local) => {
            parse_spec(text, origin, Scale::Original)?;
            vec![]
        }
        (Some(_), _) => {
            return Err(bad(
                "original".into(),
                "expected a mapping of the fields that differ at the study's scale".into(),
            ))
        }
        (None, Scale::Original) => {
            return Err(bad(
                "original".into(),
                "this spec has no original scale; run it without --scale original".into(),
            ))
        }
        (None, Scale::Local) => vec![],
    };
    // A field the study's scale set is named as it is written: under `original`.
    let as_written = |path: String| {
        if overridden
            .iter()
            .any(|k| path.split(['.', '[']).next() == Some(k))
        {
            format!("original.{path}")
        } else {
            path
        }
    };
    let spec: SpecDoc = serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        bad(as_written(path), e.into_inner().to_string())
    })?;
    validate(spec, scale, text).map_err(|e| bad(as_written(e.field), e.problem))
}

/// Shallow merge: `overrides` replaces whole top-level fields. Returns the keys replaced.
fn merge(base: &mut Mapping, overrides: &Mapping) -> Vec<String> {
    let mut keys = vec![];
    for (key, value) in overrides {
        keys.push(key.as_str().unwrap_or_default().to_owned());
        base.insert(key.clone(), value.clone());
    }
    keys
}

/// A mistake in a spec: the field, as a path such as `load.points[1].rps`, and what is wrong
/// with its value.
#[derive(Debug)]
struct FieldError {
    field: String,
    problem: String,
}

impl FieldError {
    fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// The same mistake, its field under `parent`.
    fn under(self, parent: &str) -> Self {
        FieldError {
            field: format!("{parent}.{}", self.field),
            problem: self.problem,
        }
    }
}

fn validate(spec: SpecDoc, scale: Scale, text: &str) -> Result<Profile, FieldError> {
    let invalid = |field: &str, problem: String| FieldError::new(field, problem);
    if spec.name.is_empty()
        || !spec
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(invalid(
            "name",
            format!(
                "{:?} must be lowercase letters, digits and dashes (it names result directories)",
                spec.name
            ),
        ));
    }
    if spec.scenarios.is_empty() {
        return Err(invalid("scenarios", "needs at least one scenario".into()));
    }
    let mut scenarios = Vec::new();
    for (i, name) in spec.scenarios.iter().enumerate() {
        let mesh = Scenario::parse(name).ok_or_else(|| {
            invalid(
                &format!("scenarios[{i}]"),
                format!(
                    "unknown scenario {name:?}; known: {}",
                    Scenario::names().join(", ")
                ),
            )
        })?;
        if scenarios.contains(&mesh) {
            return Err(invalid(
                &format!("scenarios[{i}]"),
                format!("{name:?} is listed twice"),
            ));
        }
        scenarios.push(mesh);
    }
    let mut placements = Vec::new();
    for (i, name) in spec.placements.iter().enumerate() {
        let placement = Placement::parse(name).ok_or_else(|| {
            invalid(
                &format!("placements[{i}]"),
                format!("unknown placement {name:?}; known: intra-node, inter-node"),
            )
        })?;
        if placements.contains(&placement) {
            return Err(invalid(
                &format!("placements[{i}]"),
                format!("{name:?} is listed twice"),
            ));
        }
        placements.push(placement);
    }
    if placements.is_empty() {
        return Err(invalid("placements", "needs at least one placement".into()));
    }
    let application = Application::parse(&spec.application).ok_or_else(|| {
        invalid(
            "application",
            format!(
                "unknown application {:?}; known: {}",
                spec.application,
                Application::NAMES.join(", ")
            ),
        )
    })?;
    for (i, &mesh) in scenarios.iter().enumerate() {
        if let Some(why) = application.unsupported(mesh) {
            return Err(invalid(&format!("scenarios[{i}]"), why));
        }
    }
    let model = match spec.load.model.as_str() {
        "constant-rate" => LoadKind::ConstantRate,
        "closed-loop" => LoadKind::ClosedLoop,
        "sequential" => LoadKind::Sequential,
        "users" => LoadKind::Users,
        "capacity" => LoadKind::Capacity,
        other => {
            return Err(invalid(
                "load.model",
                format!(
                    "unknown model {other:?}; known: constant-rate, closed-loop, sequential, users, capacity"
                ),
            ))
        }
    };
    let (repetitions, until_decided) = repetitions_of(&spec.repetitions)?;
    if until_decided.is_some() && model == LoadKind::Capacity {
        return Err(invalid(
            "repetitions",
            "the capacity model's searches end on their own; give a number of searches".into(),
        ));
    }
    // With the capacity model, `repetitions` repeats the whole search: a search already
    // measures a rate again where its verdict is close.
    let capacity = capacity_plan(&spec.load, model, repetitions)?;
    if application == Application::ZeroTrustApp && model != LoadKind::Sequential {
        return Err(invalid(
            "load.model",
            format!(
                "{:?}: the zero-trust-app's experimenter sends its requests one at a time in groups; use sequential",
                spec.load.model
            ),
        ));
    }
    if spec.load.points.is_empty() {
        return Err(invalid(
            "load.points",
            "needs at least one load point".into(),
        ));
    }
    let mut load_points = Vec::new();
    for (i, doc) in spec.load.points.iter().enumerate() {
        let plan = load_point(doc, model, application)
            .map_err(|e| e.under(&format!("load.points[{i}]")))?;
        if until_decided.is_some() && doc.repetitions.is_some() {
            return Err(invalid(
                &format!("load.points[{i}].repetitions"),
                "a run of rounds until decided runs every point in every round".into(),
            ));
        }
        let repetitions = doc.repetitions.unwrap_or(repetitions);
        if !(1..=MAX_REPETITIONS).contains(&repetitions) {
            return Err(invalid(
                &format!("load.points[{i}].repetitions"),
                format!("{repetitions} is not between 1 and {MAX_REPETITIONS}"),
            ));
        }
        if load_points.iter().any(|p: &PointPlan| p.plan == plan) {
            return Err(invalid(
                &format!("load.points[{i}]"),
                "repeats an earlier load point".into(),
            ));
        }
        load_points.push(PointPlan { plan, repetitions });
    }
    let duration = match (&spec.duration, model.time_bound()) {
        (Some(text), true) => {
            let duration = bounded_duration("duration", text, MAX_DURATION)?;
            if duration.is_zero() {
                return Err(invalid("duration", "must be longer than zero".into()));
            }
            duration
        }
        (None, true) => {
            return Err(invalid(
                "duration",
                format!("the {} model needs a duration", spec.load.model),
            ))
        }
        (Some(text), false) => {
            return Err(invalid(
                "duration",
                format!(
                    "{text:?}: the {} model ends after its requests; remove the duration",
                    spec.load.model
                ),
            ))
        }
        (None, false) => Duration::ZERO,
    };
    if application != Application::Echo && spec.workload.is_some() {
        return Err(invalid(
            "workload",
            format!(
                "sets the echo server's delay and sizes; the {} application has its own requests",
                application.name()
            ),
        ));
    }
    let workload = spec.workload.unwrap_or_default();
    let warmup = bounded_duration("warmup", &spec.warmup, MAX_WARMUP)?;
    if application == Application::ZeroTrustApp && !warmup.is_zero() {
        return Err(invalid(
            "warmup",
            format!(
                "{:?}: the experimenter discards the experiment's first request, as E3 did; a warm-up time does not apply",
                spec.warmup
            ),
        ));
    }
    let sample_interval =
        bounded_duration("sample_interval", &spec.sample_interval, MAX_SHORT_DURATION)?;
    if sample_interval < Duration::from_millis(10) {
        return Err(invalid(
            "sample_interval",
            format!("{} is shorter than 10ms", spec.sample_interval),
        ));
    }
    let request_timeout =
        bounded_duration("request_timeout", &spec.request_timeout, MAX_SHORT_DURATION)?;
    if request_timeout.is_zero() {
        return Err(invalid(
            "request_timeout",
            "must be longer than zero".into(),
        ));
    }
    if spec.replicas == 0 || spec.replicas > MAX_REPLICAS {
        return Err(invalid(
            "replicas",
            format!("{} is not between 1 and {MAX_REPLICAS}", spec.replicas),
        ));
    }
    if spec.replicas > 1 && application != Application::CounterChain {
        return Err(invalid(
            "replicas",
            format!(
                "{}: only the counter chain (E4) has replicated deployments",
                spec.replicas
            ),
        ));
    }
    let server_delay = parse_duration("workload.delay", &workload.delay)?;
    if server_delay > MAX_DELAY {
        return Err(invalid(
            "workload.delay",
            format!("{} is longer than 60s", workload.delay),
        ));
    }
    if workload.request_size > MAX_RESPONSE_BYTES {
        return Err(invalid(
            "workload.request_size",
            format!("{} is more than 64 MiB", workload.request_size),
        ));
    }
    if workload.response_size > MAX_RESPONSE_BYTES {
        return Err(invalid(
            "workload.response_size",
            format!("{} is more than 64 MiB", workload.response_size),
        ));
    }
    let drop = spec.outliers.drop_highest_baseline_max;
    if drop > 0 && until_decided.is_some() {
        return Err(invalid(
            "outliers.drop_highest_baseline_max",
            "a run of rounds until decided judges every round it ran; drop no repetitions".into(),
        ));
    }
    if drop > 0 {
        if !scenarios.iter().any(|m| m.is_baseline()) {
            return Err(invalid(
                "outliers.drop_highest_baseline_max",
                "needs the baseline scenario, whose maximum latency picks the runs to drop".into(),
            ));
        }
        if let Some(point) = load_points.iter().find(|p| p.repetitions <= drop) {
            return Err(invalid(
                "outliers.drop_highest_baseline_max",
                format!(
                    "dropping {drop} of {} repetitions (at {}) leaves none",
                    point.repetitions,
                    point.point().label()
                ),
            ));
        }
    }
    validate_findings(&spec.findings)?;
    let profile = Profile {
        name: spec.name,
        description: spec.description.trim().to_owned(),
        application,
        scale,
        spec: text.to_owned(),
        scenarios,
        placements,
        model,
        load_points,
        duration,
        warmup,
        cooldown: bounded_duration("cooldown", &spec.cooldown, MAX_WARMUP)?,
        request_timeout,
        sample_interval,
        replicas: spec.replicas,
        server_delay,
        response_bytes: workload.response_size,
        request_bytes: workload.request_size,
        outliers: OutlierPolicy {
            drop_highest_baseline_max: drop,
        },
        capacity,
        until_decided,
        findings: spec.findings,
    };
    let cells = profile.cells();
    if cells > MAX_CELLS {
        return Err(invalid(
            "load.points",
            format!(
                "{cells} cells (scenarios x placements x points x repetitions) are more than {MAX_CELLS}"
            ),
        ));
    }
    Ok(profile)
}

/// A finding's check names known scenarios (a scenario the spec does not run is reported
/// "not checked", so trimming a profile's scenarios keeps its findings valid) and sensible
/// thresholds.
fn validate_findings(findings: &[Claim]) -> Result<(), FieldError> {
    for (i, claim) in findings.iter().enumerate() {
        let field = |name: &str| format!("findings[{i}].{name}");
        if claim.statement.trim().is_empty() {
            return Err(FieldError::new(
                field("statement"),
                "must say the finding in words",
            ));
        }
        for name in claim.check.scenarios() {
            if Scenario::parse(name).is_none() {
                return Err(FieldError::new(
                    field("check"),
                    format!(
                        "unknown scenario {name:?}; known: {}",
                        Scenario::names().join(", ")
                    ),
                ));
            }
        }
        match &claim.check {
            ClaimCheck::AtMost { max_percent, .. }
                if !(max_percent.is_finite() && *max_percent >= 0.0) =>
            {
                return Err(FieldError::new(
                    field("check.max_percent"),
                    format!("{max_percent} is not a percentage of at least 0"),
                ));
            }
            ClaimCheck::Ordering { order, .. } if order.len() < 2 => {
                return Err(FieldError::new(
                    field("check.order"),
                    "an ordering needs at least two scenarios",
                ));
            }
            ClaimCheck::Linear { min_r_squared, .. } if !(0.0..=1.0).contains(min_r_squared) => {
                return Err(FieldError::new(
                    field("check.min_r_squared"),
                    format!("{min_r_squared} is not between 0 and 1"),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The capacity model's objective and search, repeated `searches` times; `None` for the
/// other models, which may not set them.
fn capacity_plan(
    load: &LoadDoc,
    model: LoadKind,
    searches: u32,
) -> Result<Option<CapacityPlan>, FieldError> {
    let invalid = |field: &str, problem: String| FieldError::new(field, problem);
    if model != LoadKind::Capacity {
        for (field, set) in [
            ("load.slo", load.slo.is_some()),
            ("load.search", load.search.is_some()),
        ] {
            if set {
                return Err(invalid(
                    field,
                    format!(
                        "only the capacity model searches against an objective, not {}",
                        model.spec_name()
                    ),
                ));
            }
        }
        return Ok(None);
    }
    let slo = load.slo.as_ref().ok_or_else(|| {
        invalid(
            "load.slo",
            "the capacity model needs an objective, e.g. {p99: 5ms, errors: 0.1%}".into(),
        )
    })?;
    let p99 = bounded_duration("load.slo.p99", &slo.p99, MAX_SHORT_DURATION)?;
    if p99.is_zero() {
        return Err(invalid("load.slo.p99", "must be longer than zero".into()));
    }
    let error_rate = match &slo.errors {
        Some(text) => parse_share("load.slo.errors", text)?,
        None => 0.001,
    };
    let search = load.search.as_ref();
    let defaults = SearchSettings::default();
    let rate = |field: &str, value: Option<f64>, default: f64| match value {
        Some(v) if v.is_finite() && (1.0..=MAX_RPS).contains(&v) => Ok(v),
        Some(v) => Err(invalid(
            field,
            format!("{v} is not a rate between 1 and {MAX_RPS}"),
        )),
        None => Ok(default),
    };
    let start = rate(
        "load.search.start",
        search.and_then(|s| s.start),
        defaults.start_rps,
    )?;
    let max = rate(
        "load.search.max",
        search.and_then(|s| s.max),
        defaults.max_rps,
    )?;
    let min = rate(
        "load.search.min",
        search.and_then(|s| s.min),
        defaults.min_rps,
    )?;
    if !(min <= start && start <= max) {
        return Err(invalid(
            "load.search.start",
            format!("{start} is not between min {min} and max {max}"),
        ));
    }
    let precision = match search.and_then(|s| s.precision.as_deref()) {
        Some(text) => parse_share("load.search.precision", text)?,
        None => defaults.precision,
    };
    if !(0.001..=1.0).contains(&precision) {
        return Err(invalid(
            "load.search.precision",
            "must be between 0.1% and 100%".into(),
        ));
    }
    let max_steps = search
        .and_then(|s| s.max_steps)
        .unwrap_or(defaults.max_steps);
    if !(2..=100).contains(&max_steps) {
        return Err(invalid(
            "load.search.max_steps",
            format!("{max_steps} is not between 2 and 100"),
        ));
    }
    Ok(Some(CapacityPlan {
        slo: Slo {
            p99_ms: p99.as_secs_f64() * 1e3,
            error_rate,
        },
        search: SearchSettings {
            start_rps: start,
            max_rps: max,
            min_rps: min,
            precision,
            max_steps,
            ..defaults
        },
        searches,
    }))
}

/// A share written `0.1%`, or as a fraction (`0.001`).
fn parse_share(field: &str, text: &str) -> Result<f64, FieldError> {
    let trimmed = text.trim();
    let value = match trimmed.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map(|p| p / 100.0),
        None => trimmed.parse::<f64>(),
    };
    match value {
        Ok(v) if v.is_finite() && (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(FieldError::new(
            field.to_owned(),
            format!("{text:?} is not a share such as 0.1% (between 0% and 100%)"),
        )),
    }
}

/// One load point, checked against the model and the application; errors name the point's
/// field (relative to the point).
fn load_point(
    doc: &PointDoc,
    model: LoadKind,
    application: Application,
) -> Result<LoadPlan, FieldError> {
    let problem = |field: &str, text: String| FieldError::new(field, text);
    let model_name = model.spec_name();
    let not_for = |field: &str| problem(field, format!("does not apply to the {model_name} model"));
    let needed = |field: &str| problem(field, format!("the {model_name} model needs it"));
    let within = |field: &str, value: u64, max: u64| {
        if (1..=max).contains(&value) {
            Ok(value)
        } else {
            Err(problem(
                field,
                format!("{value} is not between 1 and {max}"),
            ))
        }
    };
    // Closed loop keeps `rps` here so the match below can say why it has no rate.
    let own_fields: &[&str] = match model {
        LoadKind::ConstantRate | LoadKind::ClosedLoop => &["rps", "connections"],
        LoadKind::Capacity => &["connections"],
        LoadKind::Sequential => &["requests", "group_size", "group_interval"],
        LoadKind::Users => &["users", "requests"],
    };
    if let Some(field) = doc.load_fields().find(|f| !own_fields.contains(f)) {
        return Err(not_for(field));
    }
    use meshbench_loadgen::LoadModel as M;
    let mut point = LoadPlan {
        model: M::ClosedLoop,
        connections: 1,
        requests: None,
        max_operand: None,
        services: None,
    };
    match model {
        LoadKind::ConstantRate | LoadKind::ClosedLoop => {
            point.model = match (model, doc.rps) {
                (LoadKind::ConstantRate, Some(rps))
                    if rps.is_finite() && rps > 0.0 && rps <= MAX_RPS =>
                {
                    M::OpenLoop { rps }
                }
                (LoadKind::ConstantRate, Some(rps)) => {
                    return Err(problem(
                        "rps",
                        format!("{rps} is not a positive rate of at most {MAX_RPS}"),
                    ))
                }
                (LoadKind::ConstantRate, None) => {
                    return Err(problem(
                        "rps",
                        "a constant-rate load point needs a rate".into(),
                    ))
                }
                (_, Some(_)) => {
                    return Err(problem(
                        "rps",
                        "a closed-loop load point has no rate (it sends as fast as it can)".into(),
                    ))
                }
                (_, None) => M::ClosedLoop,
            };
            let connections = doc.connections.ok_or_else(|| needed("connections"))?;
            point.connections = within("connections", connections.into(), MAX_CONNECTIONS)? as u32;
        }
        LoadKind::Capacity => {
            // The search sets each cell's rate; until then the point is its connections.
            point.model = M::OpenLoop { rps: 0.0 };
            let connections = doc.connections.ok_or_else(|| needed("connections"))?;
            point.connections = within("connections", connections.into(), MAX_CONNECTIONS)? as u32;
        }
        LoadKind::Sequential => {
            point.connections = 1;
            point.requests = Some(within(
                "requests",
                doc.requests.ok_or_else(|| needed("requests"))?,
                MAX_REQUESTS,
            )?);
            let group_size = within(
                "group_size",
                doc.group_size.ok_or_else(|| needed("group_size"))?,
                MAX_REQUESTS,
            )?;
            let group_interval = match &doc.group_interval {
                Some(text) => bounded_duration("group_interval", text, MAX_SHORT_DURATION)?,
                None => Duration::ZERO,
            };
            point.model = M::Sequential {
                group_size,
                group_interval,
            };
        }
        LoadKind::Users => {
            let users = doc.users.ok_or_else(|| needed("users"))?;
            point.connections = within("users", users.into(), MAX_CONNECTIONS)? as u32;
            let requests_per_user = within(
                "requests",
                doc.requests.ok_or_else(|| needed("requests"))?,
                MAX_REQUESTS,
            )?;
            point.requests = Some(requests_per_user);
            point.model = M::Users {
                users: point.connections,
                requests_per_user,
            };
        }
    }
    let max_operand = only_for(
        application,
        Application::ZeroTrustApp,
        ("max_operand", doc.max_operand),
        "only the zero-trust-app's calculator has operands",
    )?;
    if application == Application::ZeroTrustApp {
        let max = max_operand.unwrap_or(DEFAULT_MAX_OPERAND);
        if max > MAX_OPERAND {
            return Err(problem(
                "max_operand",
                format!("{max} is more than 10^16 (E3's bigger numbers)"),
            ));
        }
        point.max_operand = Some(max);
    }
    let services = only_for(
        application,
        Application::CounterChain,
        ("services", doc.services),
        "only the counter-chain application has a chain of services",
    )?;
    if application == Application::CounterChain {
        let services = services.ok_or_else(|| {
            problem(
                "services",
                "the counter chain needs the number of services a request crosses".into(),
            )
        })?;
        if services == 0 || u64::from(services) > MAX_CHAIN {
            return Err(problem(
                "services",
                format!("{services} is not between 1 and {MAX_CHAIN}"),
            ));
        }
        point.services = Some(services);
    }
    Ok(point)
}

/// A load field that only `owner`'s application takes; given for another, `refusal` says
/// why.
fn only_for<T>(
    application: Application,
    owner: Application,
    (field, value): (&str, Option<T>),
    refusal: &str,
) -> Result<Option<T>, FieldError> {
    match value {
        Some(_) if application != owner => Err(FieldError::new(field, refusal)),
        value => Ok(value),
    }
}

fn one_repetition() -> Value {
    Value::Number(1.into())
}

/// The longest time budget of a run of rounds until decided.
const MAX_BUDGET: Duration = Duration::from_secs(7 * 24 * 3600);

/// `repetitions`: a number of rounds, or `{until: decided, max: N, budget: 2h}` (the budget
/// optional), which runs up to `max` rounds and stops once every finding is decided.
fn repetitions_of(value: &Value) -> Result<(u32, Option<UntilDecidedPlan>), FieldError> {
    let invalid = |field: &str, problem: String| FieldError::new(field, problem);
    let count = |field: &str, value: &Value, least: u32| match value.as_u64() {
        Some(n) if (u64::from(least)..=u64::from(MAX_REPETITIONS)).contains(&n) => Ok(n as u32),
        _ => Err(invalid(
            field,
            format!(
                "{} is not a whole number between {least} and {MAX_REPETITIONS}",
                show_value(value)
            ),
        )),
    };
    let Value::Mapping(rule) = value else {
        return Ok((count("repetitions", value, 1)?, None));
    };
    for key in rule.keys() {
        let key = key.as_str().unwrap_or_default();
        if !["until", "max", "budget"].contains(&key) {
            return Err(invalid(
                &format!("repetitions.{key}"),
                "unknown field; expected until, max or budget".into(),
            ));
        }
    }
    match rule.get("until").and_then(Value::as_str) {
        Some("decided") => {}
        _ => {
            return Err(invalid(
                "repetitions.until",
                "expected `decided` (or give repetitions as a number)".into(),
            ))
        }
    }
    let max_rounds = match rule.get("max") {
        Some(max) => count("repetitions.max", max, 2)?,
        None => return Err(invalid(
            "repetitions.max",
            "the most rounds is required (the findings' intervals are valid over that many looks)"
                .into(),
        )),
    };
    let budget = match rule.get("budget") {
        None => None,
        Some(Value::String(text)) => {
            let budget = bounded_duration("repetitions.budget", text, MAX_BUDGET)?;
            if budget.is_zero() {
                return Err(invalid(
                    "repetitions.budget",
                    "must be longer than zero".into(),
                ));
            }
            Some(budget)
        }
        Some(other) => {
            return Err(invalid(
                "repetitions.budget",
                format!("{} is not a duration such as 2h", show_value(other)),
            ))
        }
    };
    Ok((max_rounds, Some(UntilDecidedPlan { max_rounds, budget })))
}

/// A YAML value as a user wrote it, for a message.
fn show_value(value: &Value) -> String {
    serde_yaml_ng::to_string(value)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "the value".to_owned())
}

/// A duration of at most `max`: a longer one is refused before any arithmetic meets it.
fn bounded_duration(field: &str, value: &str, max: Duration) -> Result<Duration, FieldError> {
    let duration = parse_duration(field, value)?;
    if duration > max {
        return Err(FieldError::new(
            field.to_owned(),
            format!(
                "{value:?} is longer than {}",
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(duration)
}

fn parse_duration(field: &str, value: &str) -> Result<Duration, FieldError> {
    humantime::parse_duration(value).map_err(|e| {
        FieldError::new(
            field,
            format!("{value:?} is not a duration such as 10s or 250ms: {e}"),
        )
    })
}

/// A profile is made from a spec: a built-in one, a user's file, or the one a run carries.
impl Profile {
    pub fn builtin(name: &str, scale: Scale) -> Result<Self, Error> {
        parse_spec(builtin_spec(name)?, &format!("profile {name}"), scale)
    }

    /// A user's spec file.
    pub fn from_file(path: &Path, scale: Scale) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadSpec {
            path: path.to_owned(),
            source,
        })?;
        parse_spec(&text, &path.display().to_string(), scale)
    }

    /// The profile a run was made with, from the spec and settings its results carry.
    pub fn from_run_config(config: &RunConfig) -> Result<Self, String> {
        let spec = config
            .spec
            .as_deref()
            .ok_or("the results do not carry their experiment spec (made by an older meshbench)")?;
        let scale = Scale::parse(&config.scale)
            .ok_or_else(|| format!("unknown scale {:?}", config.scale))?;
        let mut profile = parse_spec(spec, "the run's spec", scale).map_err(|e| e.to_string())?;
        let scenarios: Vec<String> = config
            .scenarios
            .iter()
            .map(|s| s.name.clone())
            .chain(config.unavailable.iter().map(|u| u.name.clone()))
            .collect();
        profile
            .select(&scenarios, &config.placements)
            .map_err(|e| e.to_string())?;
        // Results on disk are untrusted: a negative or endless time is an error, not a panic.
        let seconds = |field: &str, value: f64| {
            Duration::try_from_secs_f64(value)
                .map_err(|_| format!("config.{field}: {value} is not a length of time"))
        };
        profile.duration = seconds("duration_seconds", config.duration_seconds)?;
        profile.warmup = seconds("warmup_seconds", config.warmup_seconds)?;
        if let Some(rule) = &config.until_decided {
            let budget = match rule.budget_seconds {
                Some(b) => Some(seconds("until_decided.budget_seconds", b)?),
                None => None,
            };
            profile
                .set_until_decided(rule.max_rounds, budget)
                .map_err(|e| e.to_string())?;
        }
        Ok(profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "name: t\nscenarios: [baseline]\nload: {model: constant-rate, points: [{rps: 10, connections: 2}]}\nduration: 1s\n";

    fn error(text: &str) -> String {
        parse_spec(text, "test.yaml", Scale::Local)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_minimal_spec_gets_the_documented_defaults() {
        let p = parse_spec(MINIMAL, "t", Scale::Local).unwrap();
        assert_eq!(p.placements, vec![Placement::IntraNode]);
        assert_eq!(p.load_points[0].repetitions, 1);
        assert_eq!(p.request_timeout, Duration::from_secs(5));
        assert_eq!(p.response_bytes, 1024);
        assert_eq!(p.cells(), 1);
    }

    /// Each spec is refused with a message containing every one of its words.
    fn assert_refused(cases: &[(String, &[&str])]) {
        for (spec, words) in cases {
            let e = error(spec);
            assert!(words.iter().all(|w| e.contains(w)), "{words:?}: {e}");
        }
    }

    #[test]
    fn findings_are_kept_and_their_mistakes_name_their_field() {
        let finding = |check: &str| {
            format!(
                "{MINIMAL}findings:\n  - study: E1\n    statement: a claim\n    check: {check}\n"
            )
        };
        let ok = finding("{kind: ordering, metric: p99, order: [baseline, istio]}");
        let profile = parse_spec(&ok, "t", Scale::Local).unwrap();
        assert_eq!(profile.findings.len(), 1);
        assert_eq!(
            profile.describe("local-lab/loopback").findings,
            profile.findings
        );
        let cases: Vec<(String, &[&str])> = vec![
            (
                finding("{kind: ordering, metric: p99, order: [baseline, nosuch]}"),
                &["findings[0].check", "nosuch"],
            ),
            (
                finding("{kind: ordering, metric: p99, order: [baseline]}"),
                &["findings[0].check.order", "at least two"],
            ),
            (
                finding("{kind: guess, metric: p99}"),
                &["findings[0].check", "guess"],
            ),
            (
                finding("{kind: ordering, metric: speed, order: [baseline, istio]}"),
                &["findings[0].check", "speed"],
            ),
            (
                finding("{kind: linear, scenarios: [baseline], min_r_squared: 2}"),
                &["findings[0].check.min_r_squared", "between 0 and 1"],
            ),
            (
                finding("{kind: at-most, metric: p99, scenario: baseline, against: baseline, max_percent: -1}"),
                &["findings[0].check.max_percent", "-1"],
            ),
        ];
        assert_refused(&cases);
    }

    const E3: &str = "name: t\napplication: zero-trust-app\nscenarios: [baseline]\nload: {model: sequential, points: [{requests: 100, group_size: 10}]}\n";
    const E4: &str = "name: t\napplication: counter-chain\nscenarios: [baseline]\nload: {model: users, points: [{users: 4, requests: 3, services: 8}]}\n";

    #[test]
    fn replicas_are_the_chains_and_bounded() {
        assert_eq!(parse_spec(E4, "t", Scale::Local).unwrap().replicas, 1);
        let twelve = format!("{E4}replicas: 12\n");
        let e4 = parse_spec(&twelve, "t", Scale::Local).unwrap();
        assert_eq!(e4.replicas, 12);
        assert_eq!(
            e4.application
                .topology(crate::Placement::InterNode, e4.replicas)
                .pods()
                .len(),
            1 + 12 + 12,
            "the load generator and 12 pods of each counter"
        );
        for (text, words) in [
            (
                format!("{E4}replicas: 0\n"),
                ["replicas", "between 1 and 100"],
            ),
            (
                format!("{E4}replicas: 101\n"),
                ["replicas", "between 1 and 100"],
            ),
            (
                format!("{MINIMAL}replicas: 2\n"),
                ["replicas", "counter chain"],
            ),
        ] {
            let e = error(&text);
            for word in words {
                assert!(e.contains(word), "{e}");
            }
        }
    }

    #[test]
    fn the_studies_applications_take_their_own_load_points() {
        let e3 = parse_spec(E3, "t", Scale::Local).unwrap();
        let point = e3.load_points[0].point();
        assert_eq!(e3.application, Application::ZeroTrustApp);
        assert_eq!((point.requests, point.group_size), (Some(100), Some(10)));
        assert_eq!(point.max_operand, Some(100), "E3's default operand range");
        assert_eq!(point.group_interval_ms, Some(0.0));
        let e4 = parse_spec(E4, "t", Scale::Local).unwrap();
        let point = e4.load_points[0].point();
        assert_eq!((point.connections, point.requests), (4, Some(3)));
        assert_eq!(point.services, Some(8));
        assert_eq!(e4.duration, Duration::ZERO);
    }

    #[test]
    fn errors_name_the_field_and_the_value() {
        assert_refused(&[
            (
                MINIMAL.replace("baseline", "kuma"),
                &["scenarios[0]", "\"kuma\""],
            ),
            (
                MINIMAL.replace("rps: 10", "rps: -3"),
                &["load.points[0].rps", "-3"],
            ),
            (
                MINIMAL.replace("duration: 1s", "duration: soon"),
                &["duration", "\"soon\""],
            ),
            (format!("{MINIMAL}durration: 2s\n"), &["durration"]),
            (
                MINIMAL.replace("connections: 2", "connections: many"),
                &["load.points[0].connections"],
            ),
            (
                MINIMAL.replace("constant-rate", "closed-loop"),
                &["load.points[0].rps", "closed-loop"],
            ),
            (
                E3.replace("baseline", "baseline-mtls"),
                &["scenarios[0]", "plaintext"],
            ),
            (
                E4.replace("baseline", "haproxy-sidecar"),
                &["scenarios[0]", "enroll"],
            ),
            (
                E3.replace("sequential", "users"),
                &["load.model", "sequential"],
            ),
            (
                format!("{E3}duration: 10s\n"),
                &["duration", "ends after its requests"],
            ),
            (format!("{E3}warmup: 1s\n"), &["warmup", "first request"]),
            (
                E4.replace(", services: 8", ""),
                &["load.points[0].services"],
            ),
            (
                E4.replace("users: 4", "rps: 4"),
                &["load.points[0].rps", "users model"],
            ),
            (
                E3.replace(
                    "group_size: 10",
                    "group_size: 10, max_operand: 100000000000000000",
                ),
                &["load.points[0].max_operand"],
            ),
            (
                MINIMAL.replace("connections: 2", "connections: 2, services: 3"),
                &["load.points[0].services", "counter-chain"],
            ),
            (format!("{E4}workload: {{delay: 1ms}}\n"), &["workload"]),
            (
                MINIMAL.replace("name: t", "name: t\napplication: bookinfo"),
                &["application", "bookinfo"],
            ),
        ]);
        let e = error(&MINIMAL.replace("rps: 10", "rps: -3"));
        assert!(e.starts_with("test.yaml: "), "the file comes first: {e}");
    }

    #[test]
    fn outlier_policy_needs_a_baseline_and_enough_repetitions() {
        let e = error(&format!(
            "{MINIMAL}repetitions: 3\noutliers: {{drop_highest_baseline_max: 3}}\n"
        ));
        assert!(
            e.contains("outliers.drop_highest_baseline_max") && e.contains("leaves none"),
            "{e}"
        );
    }

    #[test]
    fn repetitions_until_decided_run_every_point_up_to_the_most_rounds() {
        let text = format!("{MINIMAL}repetitions: {{until: decided, max: 7, budget: 90m}}\n");
        let p = parse_spec(&text, "t", Scale::Local).unwrap();
        let rule = p.until_decided.unwrap();
        assert_eq!(rule.max_rounds, 7);
        assert_eq!(rule.budget, Some(Duration::from_secs(5400)));
        assert_eq!(p.load_points[0].repetitions, 7);
        let config = p.describe("local-lab/loopback").until_decided.unwrap();
        assert_eq!(config.budget_seconds, Some(5400.0));
        // Resumed from its results, the rule comes back.
        let mut results_config = p.describe("local-lab/loopback");
        results_config.until_decided = Some(meshbench_results::UntilDecided {
            max_rounds: 4,
            budget_seconds: None,
        });
        let resumed = Profile::from_run_config(&results_config).unwrap();
        assert_eq!(resumed.until_decided.unwrap().max_rounds, 4);
        assert_eq!(resumed.load_points[0].repetitions, 4);
        // A number stays a number.
        let p = parse_spec(&format!("{MINIMAL}repetitions: 3\n"), "t", Scale::Local).unwrap();
        assert!(p.until_decided.is_none());
        // Every point runs in every round.
        let per_point = "name: t\nscenarios: [baseline]\nload: {model: constant-rate, points: [{rps: 10, connections: 2, repetitions: 3}]}\nduration: 1s\nrepetitions: {until: decided, max: 5}\n";
        assert!(error(per_point).contains("load.points[0].repetitions"));
        let e = error(&format!(
            "{MINIMAL}original: {{repetitions: {{until: decided, max: 0}}}}\n"
        ));
        assert!(e.contains("original.repetitions.max"), "{e}");
    }

    #[test]
    fn the_original_scale_replaces_fields_and_names_them_in_errors() {
        let text = format!("{MINIMAL}original: {{duration: 5m, repetitions: 3}}\n");
        let local = parse_spec(&text, "t", Scale::Local).unwrap();
        let original = parse_spec(&text, "t", Scale::Original).unwrap();
        assert_eq!(local.duration, Duration::from_secs(1));
        assert_eq!(original.duration, Duration::from_secs(300));
        assert_eq!(original.load_points[0].repetitions, 3);
        // A mistake at the study's scale is found whatever the scale asked for.
        let e = error(&format!("{MINIMAL}original: {{repetitions: many}}\n"));
        assert!(e.contains("original.repetitions"), "{e}");
        let e = parse_spec(MINIMAL, "t", Scale::Original)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no original scale"), "{e}");
    }

    const CAPACITY: &str = "name: t\nscenarios: [baseline]\nload: {model: capacity, slo: {p99: 5ms, errors: 0.1%}, points: [{connections: 16}]}\nduration: 2s\n";

    #[test]
    fn a_capacity_spec_gets_its_objective_and_the_search_defaults() {
        let p = parse_spec(CAPACITY, "t", Scale::Local).unwrap();
        let plan = p.capacity.unwrap();
        assert_eq!(plan.slo.p99_ms, 5.0);
        assert!((plan.slo.error_rate - 0.001).abs() < 1e-12);
        assert_eq!(plan.search, SearchSettings::default());
        assert_eq!(p.load_points[0].plan.connections, 16);
        // Cells are at most every search's whole budget.
        assert_eq!(p.cells(), SearchSettings::default().max_steps as usize);
        let config = p.describe("local-lab/loopback");
        assert!(
            config.load_points.is_empty(),
            "the searches add their rates"
        );
        assert_eq!(config.capacity.unwrap().slo_p99_ms, 5.0);
        let tuned = CAPACITY.replace(
            "points:",
            "search: {start: 500, max: 8000, precision: 5%, max_steps: 20}, points:",
        );
        let search = parse_spec(&tuned, "t", Scale::Local)
            .unwrap()
            .capacity
            .unwrap()
            .search;
        assert_eq!(
            (
                search.start_rps,
                search.max_rps,
                search.precision,
                search.max_steps
            ),
            (500.0, 8000.0, 0.05, 20)
        );
        // Repetitions repeat the whole search, each with its own budget.
        let repeated =
            parse_spec(&format!("{CAPACITY}repetitions: 3\n"), "t", Scale::Local).unwrap();
        assert_eq!(repeated.capacity.unwrap().searches, 3);
        assert_eq!(
            repeated.cells(),
            3 * SearchSettings::default().max_steps as usize
        );
        let config = repeated.describe("local-lab/loopback");
        assert_eq!(config.capacity.unwrap().searches, 3);
    }

    #[test]
    fn capacity_mistakes_name_their_field() {
        let cases: Vec<(String, &[&str])> = vec![
            (
                CAPACITY.replace("slo: {p99: 5ms, errors: 0.1%}, ", ""),
                &["load.slo", "needs an objective"],
            ),
            (
                CAPACITY.replace("p99: 5ms", "p99: soon"),
                &["load.slo.p99", "soon"],
            ),
            (
                CAPACITY.replace("errors: 0.1%", "errors: 150%"),
                &["load.slo.errors", "150%"],
            ),
            (
                CAPACITY.replace("{connections: 16}", "{rps: 100, connections: 16}"),
                &["load.points[0].rps", "capacity"],
            ),
            (
                CAPACITY.replace("points:", "search: {start: 5, min: 10}, points:"),
                &["load.search.start", "between"],
            ),
            (
                MINIMAL.replace("points:", "slo: {p99: 5ms}, points:"),
                &["load.slo", "only the capacity model"],
            ),
        ];
        assert_refused(&cases);
    }
}
