//! The experiment spec: a YAML file a user writes (or a built-in profile, written the same
//! way) and its validation into a [`Profile`]. Every error names the field, as a path such as
//! `load.points[2].rps`, and says what is wrong with its value.
//!
//! A spec is written at the scale of this machine. An optional `original:` mapping holds the
//! study's own scale: with [`Scale::Original`] its keys replace the top-level ones.

use std::time::Duration;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use meshbench_meshes::Mesh;
use meshbench_results::LoadPoint;

use crate::profile::{LoadKind, OutlierPolicy, PointPlan, Profile};
use crate::scenario::Placement;
use crate::Error;

/// The longest server delay and the biggest response the echo role accepts.
const MAX_DELAY: Duration = Duration::from_secs(60);
const MAX_RESPONSE_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    /// Sized for this machine (2 cores): the default.
    #[default]
    Local,
    /// The study's own loads, durations and repetitions.
    Original,
}

impl Scale {
    pub fn name(self) -> &'static str {
        match self {
            Scale::Local => "local",
            Scale::Original => "original",
        }
    }

    pub fn parse(name: &str) -> Option<Scale> {
        match name {
            "local" => Some(Scale::Local),
            "original" => Some(Scale::Original),
            _ => None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecDoc {
    name: String,
    #[serde(default)]
    description: String,
    scenarios: Vec<String>,
    #[serde(default = "default_placements")]
    placements: Vec<String>,
    load: LoadDoc,
    #[serde(default = "one")]
    repetitions: u32,
    duration: String,
    #[serde(default = "zero")]
    warmup: String,
    #[serde(default = "zero")]
    cooldown: String,
    #[serde(default = "default_timeout")]
    request_timeout: String,
    #[serde(default = "default_sample_interval")]
    sample_interval: String,
    #[serde(default)]
    workload: WorkloadDoc,
    #[serde(default)]
    outliers: OutliersDoc,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadDoc {
    model: String,
    points: Vec<PointDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PointDoc {
    rps: Option<f64>,
    connections: u32,
    /// Overrides the spec's repetitions for this point (E2 ran 8 at low loads, 7 at the top).
    repetitions: Option<u32>,
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

fn default_placements() -> Vec<String> {
    vec![Placement::IntraNode.name().to_owned()]
}
fn one() -> u32 {
    1
}
fn zero() -> String {
    "0s".to_owned()
}
fn default_timeout() -> String {
    "5s".to_owned()
}
fn default_sample_interval() -> String {
    "200ms".to_owned()
}
fn default_response_size() -> u64 {
    1024
}

/// Parses and validates a spec at `scale`. `origin` names where the text came from, for errors.
pub fn parse_spec(text: &str, origin: &str, scale: Scale) -> Result<Profile, Error> {
    let bad = |field: String, problem: String| Error::Spec {
        origin: origin.to_owned(),
        field,
        problem,
    };
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
    let spec: SpecDoc = serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let field = if overridden
            .iter()
            .any(|k| path.split(['.', '[']).next() == Some(k))
        {
            format!("original.{path}")
        } else {
            path
        };
        bad(field, e.into_inner().to_string())
    })?;
    validate(spec, scale, text).map_err(|(field, problem)| bad(field, problem))
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

type Invalid = (String, String);

fn validate(spec: SpecDoc, scale: Scale, text: &str) -> Result<Profile, Invalid> {
    let invalid = |field: &str, problem: String| (field.to_owned(), problem);
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
        let mesh = Mesh::parse(name).ok_or_else(|| {
            invalid(
                &format!("scenarios[{i}]"),
                format!(
                    "unknown scenario {name:?}; known: {}",
                    Mesh::NAMES.join(", ")
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
    let model = match spec.load.model.as_str() {
        "constant-rate" => LoadKind::ConstantRate,
        "closed-loop" => LoadKind::ClosedLoop,
        other => {
            return Err(invalid(
                "load.model",
                format!("unknown model {other:?}; known: constant-rate, closed-loop"),
            ))
        }
    };
    if spec.repetitions == 0 {
        return Err(invalid("repetitions", "must be at least 1".into()));
    }
    if spec.load.points.is_empty() {
        return Err(invalid(
            "load.points",
            "needs at least one load point".into(),
        ));
    }
    let mut load_points = Vec::new();
    for (i, point) in spec.load.points.iter().enumerate() {
        let field = |name: &str| format!("load.points[{i}].{name}");
        let rps = match (model, point.rps) {
            (LoadKind::ConstantRate, Some(rps)) if rps.is_finite() && rps > 0.0 => rps,
            (LoadKind::ConstantRate, Some(rps)) => {
                return Err(invalid(
                    &field("rps"),
                    format!("{rps} is not a positive rate"),
                ))
            }
            (LoadKind::ConstantRate, None) => {
                return Err(invalid(
                    &field("rps"),
                    "a constant-rate load point needs a rate".into(),
                ))
            }
            (LoadKind::ClosedLoop, Some(_)) => {
                return Err(invalid(
                    &field("rps"),
                    "a closed-loop load point has no rate (it sends as fast as it can)".into(),
                ))
            }
            (LoadKind::ClosedLoop, None) => 0.0,
        };
        if point.connections == 0 {
            return Err(invalid(&field("connections"), "must be at least 1".into()));
        }
        let repetitions = point.repetitions.unwrap_or(spec.repetitions);
        if repetitions == 0 {
            return Err(invalid(&field("repetitions"), "must be at least 1".into()));
        }
        let point = LoadPoint {
            rps,
            connections: point.connections,
        };
        if load_points.iter().any(|p: &PointPlan| p.point == point) {
            return Err(invalid(
                &field("connections"),
                "repeats an earlier load point".into(),
            ));
        }
        load_points.push(PointPlan { point, repetitions });
    }
    let duration = parse_duration("duration", &spec.duration)?;
    if duration.is_zero() {
        return Err(invalid("duration", "must be longer than zero".into()));
    }
    let sample_interval = parse_duration("sample_interval", &spec.sample_interval)?;
    if sample_interval < Duration::from_millis(10) {
        return Err(invalid(
            "sample_interval",
            format!("{} is shorter than 10ms", spec.sample_interval),
        ));
    }
    let request_timeout = parse_duration("request_timeout", &spec.request_timeout)?;
    if request_timeout.is_zero() {
        return Err(invalid(
            "request_timeout",
            "must be longer than zero".into(),
        ));
    }
    let server_delay = parse_duration("workload.delay", &spec.workload.delay)?;
    if server_delay > MAX_DELAY {
        return Err(invalid(
            "workload.delay",
            format!("{} is longer than 60s", spec.workload.delay),
        ));
    }
    if spec.workload.request_size > MAX_RESPONSE_BYTES {
        return Err(invalid(
            "workload.request_size",
            format!("{} is more than 64 MiB", spec.workload.request_size),
        ));
    }
    if spec.workload.response_size > MAX_RESPONSE_BYTES {
        return Err(invalid(
            "workload.response_size",
            format!("{} is more than 64 MiB", spec.workload.response_size),
        ));
    }
    let drop = spec.outliers.drop_highest_baseline_max;
    if drop > 0 {
        if !scenarios.contains(&Mesh::None) {
            return Err(invalid(
                "outliers.drop_highest_baseline_max",
                "needs the baseline scenario, whose maximum latency picks the runs to drop".into(),
            ));
        }
        if let Some(point) = load_points.iter().find(|p| p.repetitions <= drop) {
            return Err(invalid(
                "outliers.drop_highest_baseline_max",
                format!(
                    "dropping {drop} of {} repetitions (at {} connections) leaves none",
                    point.repetitions, point.point.connections
                ),
            ));
        }
    }
    Ok(Profile {
        name: spec.name,
        description: spec.description.trim().to_owned(),
        scale,
        spec: text.to_owned(),
        scenarios,
        placements,
        model,
        load_points,
        duration,
        warmup: parse_duration("warmup", &spec.warmup)?,
        cooldown: parse_duration("cooldown", &spec.cooldown)?,
        request_timeout,
        sample_interval,
        server_delay,
        response_bytes: spec.workload.response_size,
        request_bytes: spec.workload.request_size,
        outliers: OutlierPolicy {
            drop_highest_baseline_max: drop,
        },
    })
}

fn parse_duration(field: &str, value: &str) -> Result<Duration, Invalid> {
    humantime::parse_duration(value).map_err(|e| {
        (
            field.to_owned(),
            format!("{value:?} is not a duration such as 10s or 250ms: {e}"),
        )
    })
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

    #[test]
    fn errors_name_the_field_and_the_value() {
        let e = error(&MINIMAL.replace("baseline", "istio"));
        assert!(e.contains("scenarios[0]") && e.contains("\"istio\""), "{e}");
        let e = error(&MINIMAL.replace("rps: 10", "rps: -3"));
        assert!(e.contains("load.points[0].rps") && e.contains("-3"), "{e}");
        let e = error(&MINIMAL.replace("duration: 1s", "duration: soon"));
        assert!(e.contains("duration") && e.contains("\"soon\""), "{e}");
        let e = error(&format!("{MINIMAL}durration: 2s\n"));
        assert!(e.contains("durration"), "{e}");
        let e = error(&MINIMAL.replace("connections: 2", "connections: many"));
        assert!(e.contains("load.points[0].connections"), "{e}");
        let e = error(&MINIMAL.replace("constant-rate", "closed-loop"));
        assert!(
            e.contains("load.points[0].rps") && e.contains("closed-loop"),
            "{e}"
        );
        assert!(e.starts_with("test.yaml: "), "{e}");
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
}
