//! A validated experiment ([`Profile`]) and the built-in profiles, each a YAML spec in
//! `profiles/` parsed exactly as a user's file is. Each is sized for a 2-core machine; the
//! studies' own scale is one flag away (`--scale original`).

use std::time::Duration;

use meshbench_results::{LoadModel, LoadPoint, OutlierPolicyConfig, RunConfig, WorkloadConfig};

use meshbench_meshes::Scenario;

use crate::application::Application;
use crate::placement::Placement;
use crate::Error;

/// The built-in profiles, in the order `meshbench profiles` lists them.
const BUILTIN: &[(&str, &str)] = &[
    ("quick", include_str!("../profiles/quick.yaml")),
    ("smoke", include_str!("../profiles/smoke.yaml")),
    ("meshes", include_str!("../profiles/meshes.yaml")),
    (
        "mtls-architectures",
        include_str!("../profiles/mtls-architectures.yaml"),
    ),
    (
        "throughput-decomposition",
        include_str!("../profiles/throughput-decomposition.yaml"),
    ),
    (
        "memory-vs-connections",
        include_str!("../profiles/memory-vs-connections.yaml"),
    ),
    ("sustained", include_str!("../profiles/sustained.yaml")),
    ("vendor-1kb", include_str!("../profiles/vendor-1kb.yaml")),
    (
        "zero-trust-app",
        include_str!("../profiles/zero-trust-app.yaml"),
    ),
    ("scale-chain", include_str!("../profiles/scale-chain.yaml")),
    ("capacity", include_str!("../profiles/capacity.yaml")),
];

pub fn profile_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(name, _)| *name).collect()
}

/// The YAML of a built-in profile: a starting point for a user's own spec.
pub fn builtin_spec(name: &str) -> Result<&'static str, Error> {
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
        .ok_or_else(|| Error::UnknownProfile {
            name: name.to_owned(),
            known: profile_names().join(", "),
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadKind {
    /// A constant rate over the connections, latency from the intended send time.
    ConstantRate,
    /// Every connection as fast as it can (E1's throughput decomposition).
    ClosedLoop,
    /// One request at a time, in groups with a pause between them (E3's experimenter).
    Sequential,
    /// Concurrent users, each sending its requests back to back (apache ab, E4).
    Users,
    /// Constant rates chosen by a search for the highest that meets an objective.
    Capacity,
}

/// The capacity model's objective and search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityPlan {
    pub slo: meshbench_stats::capacity::Slo,
    pub search: meshbench_stats::capacity::SearchSettings,
    /// Independent searches per scenario (the spec's `repetitions`).
    pub searches: u32,
}

impl LoadKind {
    /// The name a spec uses.
    pub fn spec_name(self) -> &'static str {
        match self {
            LoadKind::ConstantRate => "constant-rate",
            LoadKind::ClosedLoop => "closed-loop",
            LoadKind::Sequential => "sequential",
            LoadKind::Users => "users",
            LoadKind::Capacity => "capacity",
        }
    }

    /// Whether a cell runs for a duration (else it ends after its requests).
    pub fn time_bound(self) -> bool {
        matches!(
            self,
            LoadKind::ConstantRate | LoadKind::ClosedLoop | LoadKind::Capacity
        )
    }
}

/// One load point as the load generator runs it: its model in the engine's own type
/// (`meshbench_loadgen::LoadModel`, carried unchanged from the spec into the cell's
/// `LoadSpec`) and what the cell needs beside it. Results describe it as a
/// [`LoadPoint`] ([`LoadPlan::describe`]), which is never read back as a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadPlan {
    pub model: meshbench_loadgen::LoadModel,
    /// Connections of the open and closed loops; the users of the users model; 1 for the
    /// sequential model.
    pub connections: u32,
    /// Sequential model: the experiment's requests. Users model: requests per user.
    pub requests: Option<u64>,
    /// E3's application: the largest operand.
    pub max_operand: Option<u64>,
    /// E4's counter chain: the services one request crosses.
    pub services: Option<u32>,
}

impl LoadPlan {
    /// The point as results record it.
    pub fn describe(&self) -> LoadPoint {
        use meshbench_loadgen::LoadModel as M;
        let mut point = LoadPoint {
            connections: self.connections,
            requests: self.requests,
            max_operand: self.max_operand,
            services: self.services,
            ..LoadPoint::default()
        };
        match &self.model {
            M::OpenLoop { rps } => point.rps = *rps,
            M::ClosedLoop | M::Users { .. } => {}
            M::Sequential {
                group_size,
                group_interval,
            } => {
                point.group_size = Some(*group_size);
                point.group_interval_ms = Some(group_interval.as_secs_f64() * 1e3);
            }
        }
        point
    }
}

/// A load point and how many times it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PointPlan {
    pub plan: LoadPlan,
    pub repetitions: u32,
}

impl PointPlan {
    /// The point as results record it.
    pub fn point(&self) -> LoadPoint {
        self.plan.describe()
    }
}

/// Rounds until decided: after each round from the second, the runner asks whether every
/// finding is decided, and stops when it is, when `max_rounds` ran, or before a round that
/// would overrun `budget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UntilDecidedPlan {
    pub max_rounds: u32,
    pub budget: Option<Duration>,
}

/// E2's policy: per load point, drop the repetitions whose baseline had the highest maximum
/// latency. Dropped cells stay in the results; only the analysis leaves them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutlierPolicy {
    pub drop_highest_baseline_max: u32,
}

#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub scale: Scale,
    pub application: Application,
    /// The spec's text, kept with the results so a run describes itself.
    pub spec: String,
    pub scenarios: Vec<Scenario>,
    pub placements: Vec<Placement>,
    pub model: LoadKind,
    pub load_points: Vec<PointPlan>,
    /// Zero for the models that end after their requests.
    pub duration: Duration,
    pub warmup: Duration,
    /// A pause after every cell, so one cell's aftermath does not bias the next.
    pub cooldown: Duration,
    pub request_timeout: Duration,
    pub sample_interval: Duration,
    /// Pods per called deployment (the counter chain's counters; 1 elsewhere).
    pub replicas: u32,
    pub server_delay: Duration,
    pub response_bytes: u64,
    /// A POST body of this size with every request (E5's 1 KB payload); 0 for GET.
    pub request_bytes: u64,
    pub outliers: OutlierPolicy,
    /// The capacity model's objective and search.
    pub capacity: Option<CapacityPlan>,
    /// Rounds until every finding is decided; every point's repetitions are then the most
    /// rounds.
    pub until_decided: Option<UntilDecidedPlan>,
    /// The study's published findings, which the report checks against the run.
    pub findings: Vec<meshbench_results::Claim>,
}

impl Profile {
    /// `--until-decided`: rounds until every finding is decided, at most `max_rounds`, within
    /// `budget`. Every point then runs in every round.
    pub fn set_until_decided(
        &mut self,
        max_rounds: u32,
        budget: Option<Duration>,
    ) -> Result<(), Error> {
        if self.capacity.is_some() {
            return Err(command_line(
                "--until-decided",
                "the capacity model's searches end on their own".to_owned(),
            ));
        }
        if self.outliers.drop_highest_baseline_max > 0 {
            return Err(command_line(
                "--until-decided",
                "the spec drops repetitions as outliers; a run until decided judges every round"
                    .to_owned(),
            ));
        }
        if !(2..=crate::limits::MAX_REPETITIONS).contains(&max_rounds) {
            return Err(command_line(
                "--max-rounds",
                format!(
                    "{max_rounds} is not between 2 and {}",
                    crate::limits::MAX_REPETITIONS
                ),
            ));
        }
        if budget.is_some_and(|b| b.is_zero()) {
            return Err(command_line(
                "--budget",
                "must be longer than zero".to_owned(),
            ));
        }
        for point in &mut self.load_points {
            point.repetitions = max_rounds;
        }
        self.until_decided = Some(UntilDecidedPlan { max_rounds, budget });
        Ok(())
    }

    /// `--duration`: only the time-bound models have one.
    pub fn set_duration(&mut self, duration: Duration) -> Result<(), Error> {
        if !self.model.time_bound() {
            return Err(command_line(
                "--duration",
                format!(
                    "the {} model ends after its requests; change them in the spec instead",
                    self.model.spec_name()
                ),
            ));
        }
        if duration.is_zero() || duration > crate::limits::MAX_DURATION {
            return Err(command_line(
                "--duration",
                format!(
                    "{} is not longer than zero and at most {}",
                    humantime::format_duration(duration),
                    humantime::format_duration(crate::limits::MAX_DURATION)
                ),
            ));
        }
        self.duration = duration;
        Ok(())
    }

    /// `--warmup`: E3's experimenter discards its first request instead.
    pub fn set_warmup(&mut self, warmup: Duration) -> Result<(), Error> {
        if self.application == Application::ZeroTrustApp && !warmup.is_zero() {
            return Err(command_line(
                "--warmup",
                "the zero-trust-app's experimenter discards its first request, as E3 did".into(),
            ));
        }
        if warmup > crate::limits::MAX_WARMUP {
            return Err(command_line(
                "--warmup",
                format!(
                    "{} is longer than {}",
                    humantime::format_duration(warmup),
                    humantime::format_duration(crate::limits::MAX_WARMUP)
                ),
            ));
        }
        self.warmup = warmup;
        Ok(())
    }

    /// Keeps only the named scenarios and placements (all when a list is empty). A name the
    /// profile does not have is an error naming it.
    pub fn select(&mut self, scenarios: &[String], placements: &[String]) -> Result<(), Error> {
        keep_named(&mut self.scenarios, scenarios, "--scenarios", |m| m.name())?;
        keep_named(&mut self.placements, placements, "--placements", |p| {
            p.name()
        })
    }

    /// Keeps only the load points at `rates` (requests per second): a run aimed at one load,
    /// the study's own, spends its rounds there. An empty list keeps every point; a rate no
    /// point has is refused, naming the rates there are.
    pub fn select_rates(&mut self, rates: &[f64]) -> Result<(), Error> {
        let rate_of = |p: &PointPlan| p.point().rps;
        if let Some(unknown) = rates
            .iter()
            .find(|r| !self.load_points.iter().any(|p| rate_of(p) == **r))
        {
            let mut known: Vec<String> = self
                .load_points
                .iter()
                .map(|p| format!("{} rps", rate_of(p)))
                .collect();
            known.dedup();
            return Err(Error::UnknownSelection {
                field: "--rates",
                name: format!("{unknown} rps"),
                known: known.join(", "),
            });
        }
        if !rates.is_empty() {
            self.load_points.retain(|p| rates.contains(&rate_of(p)));
        }
        Ok(())
    }

    /// The most repetitions of any load point: the runner's outer loop.
    pub fn max_repetitions(&self) -> u32 {
        self.load_points
            .iter()
            .map(|p| p.repetitions)
            .max()
            .unwrap_or(0)
    }

    /// Cells the run has; for the capacity model, the most it can have (every search
    /// using all its steps).
    /// Saturating: a spec's bounds ([`crate::limits`]) keep it far from `usize::MAX`, and a
    /// profile checked against them never gets there.
    pub fn cells(&self) -> usize {
        let runs: usize = match &self.capacity {
            Some(plan) => self
                .load_points
                .len()
                .saturating_mul(plan.search.max_steps as usize)
                .saturating_mul(plan.searches as usize),
            None => self
                .load_points
                .iter()
                .fold(0usize, |sum, p| sum.saturating_add(p.repetitions as usize)),
        };
        self.scenarios
            .len()
            .saturating_mul(self.placements.len())
            .saturating_mul(runs)
    }

    /// Rough wall-clock length, for the progress estimate.
    /// For the models that end after their requests, a request is guessed at a millisecond
    /// (times the services it crosses); the progress bar corrects the guess as cells finish.
    /// Saturating, as [`Profile::cells`] is.
    pub fn estimated_duration(&self) -> Duration {
        let per_cell = self
            .warmup
            .saturating_add(self.duration)
            .saturating_add(self.cooldown)
            .saturating_add(Duration::from_millis(700));
        let by_requests = self
            .load_points
            .iter()
            .map(|plan| {
                let p = plan.point();
                let requests = p
                    .requests
                    .unwrap_or(0)
                    .saturating_mul(u64::from(p.connections.max(1)));
                let hops = u64::from(p.services.unwrap_or(1));
                let pauses = p.requests.zip(p.group_size).map_or(0.0, |(n, g)| {
                    (n / g.max(1)) as f64 * p.group_interval_ms.unwrap_or(0.0) / 1e3
                });
                Duration::from_millis(requests.saturating_mul(hops))
                    .saturating_add(Duration::try_from_secs_f64(pauses).unwrap_or(Duration::MAX))
                    .saturating_mul(plan.repetitions)
            })
            .fold(Duration::ZERO, Duration::saturating_add);
        let runs_per_point = self.scenarios.len().saturating_mul(self.placements.len());
        let times = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        per_cell
            .saturating_mul(times(self.cells()))
            .saturating_add(by_requests.saturating_mul(times(runs_per_point)))
    }

    pub fn describe(&self, platform: &str) -> RunConfig {
        RunConfig {
            profile: self.name.clone(),
            description: self.description.clone(),
            scale: self.scale.name().to_owned(),
            platform: platform.to_owned(),
            scenarios: self
                .scenarios
                .iter()
                .map(|&s| self.application.describe(s))
                .collect(),
            placements: self
                .placements
                .iter()
                .map(|p| p.name().to_owned())
                .collect(),
            unavailable: Vec::new(),
            model: match self.model {
                LoadKind::ConstantRate => LoadModel::OpenLoopConstantRate,
                LoadKind::ClosedLoop => LoadModel::ClosedLoop,
                LoadKind::Sequential => LoadModel::Sequential,
                LoadKind::Users => LoadModel::Users,
                LoadKind::Capacity => LoadModel::OpenLoopConstantRate,
            },
            application: self.application.name().to_owned(),
            // The capacity model's points are the rates its searches visit, added as they go.
            load_points: match self.capacity {
                Some(_) => vec![],
                None => self.load_points.iter().map(PointPlan::point).collect(),
            },
            repetitions: self.max_repetitions(),
            repetitions_per_point: match self.capacity {
                Some(_) => vec![],
                None => self.load_points.iter().map(|p| p.repetitions).collect(),
            },
            duration_seconds: self.duration.as_secs_f64(),
            warmup_seconds: self.warmup.as_secs_f64(),
            cooldown_seconds: self.cooldown.as_secs_f64(),
            request_timeout_seconds: self.request_timeout.as_secs_f64(),
            sample_interval_ms: self.sample_interval.as_millis() as u64,
            workload: WorkloadConfig {
                role: self.application.server_role().to_owned(),
                delay_ms: self.server_delay.as_secs_f64() * 1e3,
                response_bytes: self.response_bytes,
                request_bytes: self.request_bytes,
                protocol: "http/1.1".to_owned(),
            },
            outliers: OutlierPolicyConfig {
                drop_highest_baseline_max: self.outliers.drop_highest_baseline_max,
            },
            spec: Some(self.spec.clone()),
            pinned: None,
            capacity: self.capacity.map(|plan| {
                meshbench_stats::capacity::to_config(&plan.slo, &plan.search, plan.searches)
            }),
            until_decided: self
                .until_decided
                .map(|plan| meshbench_results::UntilDecided {
                    max_rounds: plan.max_rounds,
                    budget_seconds: plan.budget.map(|b| b.as_secs_f64()),
                }),
            findings: self.findings.clone(),
        }
    }
}

fn command_line(field: &str, problem: String) -> Error {
    Error::Spec {
        origin: "command line".to_owned(),
        field: field.to_owned(),
        problem,
    }
}

/// Keeps the items whose name is in `wanted` (all of them when `wanted` is empty).
fn keep_named<T>(
    items: &mut Vec<T>,
    wanted: &[String],
    field: &'static str,
    name_of: impl Fn(&T) -> &'static str,
) -> Result<(), Error> {
    if let Some(unknown) = wanted
        .iter()
        .find(|w| !items.iter().any(|i| name_of(i) == w.as_str()))
    {
        return Err(Error::UnknownSelection {
            field,
            name: unknown.clone(),
            known: items.iter().map(&name_of).collect::<Vec<_>>().join(", "),
        });
    }
    if !wanted.is_empty() {
        items.retain(|i| wanted.iter().any(|w| w == name_of(i)));
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use meshbench_role::InputFault;

    use super::*;

    #[test]
    fn every_builtin_profile_is_a_valid_spec_at_both_scales() {
        for name in profile_names() {
            let local = Profile::builtin(name, Scale::Local).unwrap();
            assert_eq!(local.name, name, "a profile's file names it");
            assert!(
                !local.description.is_empty(),
                "{name} says what it reproduces"
            );
            if builtin_spec(name).unwrap().contains("\noriginal:") {
                let original = Profile::builtin(name, Scale::Original).unwrap();
                assert!(original.cells() >= local.cells(), "{name}");
            }
        }
    }

    #[test]
    fn a_run_can_keep_only_the_load_points_at_some_rates() {
        let mut profile = Profile::builtin("mtls-architectures", Scale::Local).unwrap();
        let all = profile.load_points.len();
        profile.select_rates(&[]).unwrap();
        assert_eq!(profile.load_points.len(), all, "no rates keep every point");
        profile.select_rates(&[400.0]).unwrap();
        let rates: Vec<f64> = profile.load_points.iter().map(|p| p.point().rps).collect();
        assert_eq!(rates, [400.0]);
        let err = profile.select_rates(&[3200.0]).unwrap_err();
        assert!(err.is_bad_input());
        assert_eq!(
            err.to_string(),
            "--rates: the profile has no \"3200 rps\"; it has: 400 rps"
        );
    }
}
