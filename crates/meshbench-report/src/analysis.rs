//! The analysis behind every report: cells grouped by (placement, load point, scenario), the
//! declared outlier policy applied, latency distributions pooled from the cells' HDR
//! histograms, every scenario compared with the baseline at the same point, figures across
//! repetitions with intervals that stay above zero, and memory-vs-connections fits. Computed
//! once; tables and charts only read it.
//!
//! Which interval each figure carries:
//! - across repetitions (p50, p99, achieved rate): the geometric mean with a log-scale
//!   Student-t interval, or where a value is zero the mean with a percentile bootstrap;
//! - against the baseline, "significant": a moving block bootstrap over the generator's
//!   per-second series of the difference in per-second median (and p99), since requests
//!   within a run are not independent; where a side has fewer than three seconds, the i.i.d.
//!   bootstrap of the pooled median difference with Mann-Whitney U, and the report says so;
//! - Mann-Whitney U, Cliff's delta and the pooled median difference are shown as
//!   descriptions of every request, not as the test.

use std::collections::BTreeSet;

use meshbench_results::{Cell, ComponentResources, LoadPoint, RunResult};

use crate::cell::BASELINE;
use meshbench_stats::{
    block_bootstrap_difference, bootstrap_median_difference, linear_fit, mann_whitney,
    positive_interval, BlockInterval, Distribution, Interval, LinearFit, MannWhitney,
    PositiveMethod, SecondValue,
};

pub const ALPHA: f64 = 0.05;
pub(crate) const LEVEL: f64 = 0.95;
pub(crate) const BOOTSTRAP_ITERATIONS: usize = 2000;
/// Fixed, so regenerating a report gives the same intervals.
pub(crate) const BOOTSTRAP_SEED: u64 = 0x6d65_7368;
/// Roles of the mesh's own processes: what a mesh adds in memory.
pub const MESH_ROLES: [&str; 3] = ["sidecar", "node-agent", "control-plane"];

/// Where and how hard a group of cells was loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Empty for results from before placements.
    pub placement: String,
    pub load: LoadPoint,
}

impl Point {
    pub fn label(&self) -> String {
        let load = self.load.label();
        if self.placement.is_empty() {
            load
        } else {
            format!("{load}, {}", self.placement)
        }
    }
}

pub fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// One scenario at one point: the repetitions kept, and what they measured together.
#[derive(Debug)]
pub struct Group<'a> {
    pub point: Point,
    pub scenario: String,
    pub cells: Vec<&'a Cell>,
    /// Repetitions left out by the outlier policy (their cells are not in `cells`).
    pub dropped: Vec<u32>,
    /// Every kept request's latency (µs), pooled over repetitions.
    pub latency: Distribution,
    /// Across repetitions (two or more), with 95% intervals that stay above zero (see the
    /// module's header for which).
    pub p50_ms: Option<(Interval, PositiveMethod)>,
    pub p99_ms: Option<(Interval, PositiveMethod)>,
    pub achieved_rps: Option<(Interval, PositiveMethod)>,
}

impl Group<'_> {
    /// Each cell's per-second series of one quantile (`p50_us` or `p99_us`), in µs.
    pub fn seconds(
        &self,
        quantile: fn(&meshbench_results::SecondStats) -> u64,
    ) -> Vec<Vec<SecondValue>> {
        self.cells
            .iter()
            .map(|c| {
                c.load
                    .time_series
                    .iter()
                    .map(|s| SecondValue {
                        value: quantile(s) as f64,
                        responses: s.responses,
                    })
                    .collect()
            })
            .collect()
    }

    /// Whether every cell's per-second series can stand for its latency (see
    /// [`series_trusted`]).
    pub fn series_trusted(&self) -> bool {
        self.cells.iter().all(|c| series_trusted(c))
    }

    pub fn mean(&self, f: impl Fn(&Cell) -> f64) -> f64 {
        if self.cells.is_empty() {
            return 0.0;
        }
        self.cells.iter().map(|c| f(c)).sum::<f64>() / self.cells.len() as f64
    }

    /// Memory of the mesh's own processes (sidecars, agents, control plane), MiB: the sum of
    /// each one's maximum, averaged over repetitions.
    pub fn mesh_mib(&self) -> f64 {
        self.mesh_sum(|r| r.rss_mib_max)
    }

    /// CPU of the mesh's own processes (cores, mean over the window), averaged over
    /// repetitions.
    pub fn mesh_cpu(&self) -> f64 {
        self.mesh_sum(|r| r.cpu_cores_mean)
    }

    fn mesh_sum(&self, figure: impl Fn(&ComponentResources) -> f64) -> f64 {
        self.mean(|c| {
            c.resources
                .iter()
                .filter(|r| MESH_ROLES.contains(&r.role.as_str()))
                .map(&figure)
                .sum()
        })
    }
}

/// A scenario against the baseline at the same point.
#[derive(Debug)]
pub struct Comparison {
    pub point: Point,
    pub scenario: String,
    /// Every request as a sample: a description, since requests are not independent.
    pub test: MannWhitney,
    /// median(scenario) - median(baseline) of every request pooled, ms, with its i.i.d.
    /// bootstrap interval.
    pub median_difference_ms: Interval,
    /// Difference of the per-second median and p99 (ms), averaged over seconds, with block
    /// bootstrap intervals; `None` where a side has fewer than three seconds or a series
    /// that cannot be trusted.
    pub per_second_median_ms: Option<BlockInterval>,
    pub per_second_p99_ms: Option<BlockInterval>,
    /// Both sides' per-second series agree with their histograms ([`series_trusted`]).
    pub series_trusted: bool,
}

/// What "significant" rested on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The block bootstrap interval of the per-second median difference, at 95%.
    Blocks { block_seconds: usize },
    /// Too few seconds for blocks: Mann-Whitney U and the i.i.d. interval, both at 5%,
    /// which take every request as independent and so call small differences significant.
    Independent,
    /// As `Independent`, because a side's per-second series disagrees with its histogram
    /// (results of generators that clamped it at 2 ms).
    SeriesUntrusted,
}

impl Basis {
    pub fn describe(self) -> String {
        match self {
            Basis::Blocks { block_seconds } => {
                format!("block bootstrap, {block_seconds}-s blocks")
            }
            Basis::Independent => "i.i.d.: too few seconds for blocks".to_owned(),
            Basis::SeriesUntrusted => {
                "i.i.d.: the per-second series disagrees with the histogram".to_owned()
            }
        }
    }
}

impl Comparison {
    /// Whether the difference is real, and on what that rests.
    pub fn significance(&self) -> (bool, Basis) {
        match &self.per_second_median_ms {
            Some(blocks) => (
                blocks.interval.excludes_zero(),
                Basis::Blocks {
                    block_seconds: blocks.block_seconds,
                },
            ),
            None => (
                self.test.significant(ALPHA) && self.median_difference_ms.excludes_zero(),
                if self.series_trusted {
                    Basis::Independent
                } else {
                    Basis::SeriesUntrusted
                },
            ),
        }
    }

    pub fn significant(&self) -> bool {
        self.significance().0
    }
}

/// Memory of the mesh against open connections, for one scenario and placement.
#[derive(Debug)]
pub struct ConnectionFit {
    pub scenario: String,
    pub placement: String,
    /// (connections, MiB).
    pub points: Vec<(f64, f64)>,
    pub fit: LinearFit,
}

#[derive(Debug)]
pub struct Analysis<'a> {
    /// The run analysed: its cells' backgrounds judge their noise.
    pub run: &'a RunResult,
    pub groups: Vec<Group<'a>>,
    pub comparisons: Vec<Comparison>,
    pub fits: Vec<ConnectionFit>,
    /// Cells whose latency histogram could not be read (kept out of distributions).
    pub unreadable: Vec<String>,
    /// The capacity model's searches, replayed from the cells (empty for other models).
    pub searches: Vec<crate::capacity::Search>,
    /// The capacity model's p99 objective, ms.
    pub slo_p99_ms: Option<f64>,
}

impl<'a> Analysis<'a> {
    pub fn of(result: &'a RunResult) -> Self {
        let mut unreadable = vec![];
        let mut groups = vec![];
        for point in points(result) {
            let dropped = dropped_repetitions(result, &point);
            for scenario in &result.config.scenarios {
                let cells: Vec<&Cell> = result
                    .cells
                    .iter()
                    .filter(|c| at(c, &point) && c.scenario == scenario.name)
                    .filter(|c| !dropped.contains(&c.repetition))
                    .collect();
                if cells.is_empty() {
                    continue;
                }
                let mut latency = Distribution::default();
                for cell in &cells {
                    match Distribution::from_hdr(&cell.load.histogram) {
                        Ok(d) => latency.merge(&d),
                        Err(e) => unreadable.push(format!(
                            "{} {} rep {}: {e}",
                            cell.scenario,
                            point.label(),
                            cell.repetition
                        )),
                    }
                }
                let across = |f: &dyn Fn(&Cell) -> f64| {
                    let values: Vec<f64> = cells.iter().map(|c| f(c)).collect();
                    positive_interval(&values, LEVEL, BOOTSTRAP_SEED)
                };
                groups.push(Group {
                    point: point.clone(),
                    scenario: scenario.name.clone(),
                    p50_ms: across(&|c| c.load.latency.p50_us as f64 / 1e3),
                    p99_ms: across(&|c| c.load.latency.p99_us as f64 / 1e3),
                    achieved_rps: across(&|c| c.load.achieved_rps),
                    cells,
                    dropped: dropped.clone(),
                    latency,
                });
            }
        }
        let comparisons = compare_with_baseline(&groups);
        let fits = connection_fits(&groups);
        Analysis {
            run: result,
            groups,
            comparisons,
            fits,
            unreadable,
            searches: crate::capacity::searches(result),
            slo_p99_ms: result.config.capacity.map(|c| c.slo_p99_ms),
        }
    }

    pub fn points(&self) -> Vec<&Point> {
        let mut out: Vec<&Point> = vec![];
        for g in &self.groups {
            if !out.contains(&&g.point) {
                out.push(&g.point);
            }
        }
        out
    }

    pub fn placements(&self) -> Vec<&str> {
        let mut out: Vec<&str> = vec![];
        for g in &self.groups {
            if !out.contains(&g.point.placement.as_str()) {
                out.push(&g.point.placement);
            }
        }
        out
    }

    pub fn scenarios(&self) -> Vec<&str> {
        let mut out: Vec<&str> = vec![];
        for g in &self.groups {
            if !out.contains(&g.scenario.as_str()) {
                out.push(&g.scenario);
            }
        }
        out
    }

    pub fn at(&self, point: &Point) -> impl Iterator<Item = &Group<'a>> + '_ {
        let point = point.clone();
        self.groups.iter().filter(move |g| g.point == point)
    }

    pub fn comparison(&self, point: &Point, scenario: &str) -> Option<&Comparison> {
        self.comparisons
            .iter()
            .find(|c| c.point == *point && c.scenario == scenario)
    }
}

/// Every (placement, load point) with cells, in the configuration's order.
fn points(result: &RunResult) -> Vec<Point> {
    let placements: Vec<String> = if result.config.placements.is_empty() {
        vec![String::new()]
    } else {
        result.config.placements.clone()
    };
    let mut out = vec![];
    for placement in &placements {
        for load in &result.config.load_points {
            let point = Point {
                placement: placement.clone(),
                load: *load,
            };
            if result.cells.iter().any(|c| at(c, &point)) {
                out.push(point);
            }
        }
    }
    out
}

fn at(cell: &Cell, point: &Point) -> bool {
    cell.load_point == point.load && cell.placement.as_deref().unwrap_or("") == point.placement
}

/// E2's policy: the repetitions whose baseline cell at this point had the highest maximum
/// latency. A repetition without a baseline cell is never dropped.
fn dropped_repetitions(result: &RunResult, point: &Point) -> Vec<u32> {
    let drop = result.config.outliers.drop_highest_baseline_max as usize;
    if drop == 0 {
        return vec![];
    }
    let mut baselines: Vec<&Cell> = result
        .cells
        .iter()
        .filter(|c| at(c, point) && c.scenario == BASELINE)
        .collect();
    // Only when enough repetitions finished: a partial run drops nothing it cannot justify.
    if baselines.len() <= drop {
        return vec![];
    }
    baselines.sort_by_key(|c| std::cmp::Reverse(c.load.latency.max_us));
    let mut dropped: Vec<u32> = baselines[..drop].iter().map(|c| c.repetition).collect();
    dropped.sort_unstable();
    dropped
}

fn compare_with_baseline(groups: &[Group]) -> Vec<Comparison> {
    groups
        .iter()
        .filter(|g| g.scenario != BASELINE)
        .filter_map(|g| {
            let base = groups
                .iter()
                .find(|b| b.scenario == BASELINE && b.point == g.point)?;
            compare(base, g)
        })
        .collect()
}

/// `b`'s latency against `a`'s (a is the reference); `None` when either has no requests.
pub fn compare(a: &Group, b: &Group) -> Option<Comparison> {
    let test = mann_whitney(&a.latency, &b.latency)?;
    let difference = bootstrap_median_difference(
        &a.latency,
        &b.latency,
        BOOTSTRAP_ITERATIONS,
        LEVEL,
        BOOTSTRAP_SEED,
    )?;
    let ms = |us: Interval| Interval {
        estimate: us.estimate / 1e3,
        low: us.low / 1e3,
        high: us.high / 1e3,
        level: us.level,
    };
    let series_trusted = a.series_trusted() && b.series_trusted();
    let per_second = |quantile: fn(&meshbench_results::SecondStats) -> u64| {
        if !series_trusted {
            return None;
        }
        block_bootstrap_difference(
            &a.seconds(quantile),
            &b.seconds(quantile),
            BOOTSTRAP_ITERATIONS,
            LEVEL,
            BOOTSTRAP_SEED,
        )
        .map(|d| BlockInterval {
            interval: ms(d.interval),
            ..d
        })
    };
    Some(Comparison {
        point: b.point.clone(),
        scenario: b.scenario.clone(),
        test,
        median_difference_ms: ms(difference),
        per_second_median_ms: per_second(|s| s.p50_us),
        per_second_p99_ms: per_second(|s| s.p99_us),
        series_trusted,
    })
}

/// The top of a fresh auto-resizing histogram at 3 significant digits, in µs: generators
/// before the fix of the per-second recorder clamped every per-second latency to it.
const CLAMPED_SERIES_TOP_US: u64 = 2_048;

/// Whether a cell's per-second series can be used in place of its histogram. It cannot when
/// it carries the clamp of older generators (every second at or under 2 ms while the
/// histogram's p99 is above it), nor when its per-second medians, weighted by responses, are
/// not within a factor of two of the histogram's median. A cell without a series is trusted:
/// it has nothing to use.
pub fn series_trusted(cell: &Cell) -> bool {
    let series = &cell.load.time_series;
    let responses: u64 = series.iter().map(|s| s.responses).sum();
    let latency = &cell.load.latency;
    if responses == 0 || latency.p50_us == 0 {
        return true;
    }
    let series_top = series
        .iter()
        .map(|s| s.p50_us.max(s.p99_us))
        .max()
        .unwrap_or(0);
    if series_top <= CLAMPED_SERIES_TOP_US + 1 && latency.p99_us > CLAMPED_SERIES_TOP_US * 21 / 20 {
        return false;
    }
    let weighted = series
        .iter()
        .map(|s| s.p50_us as f64 * s.responses as f64)
        .sum::<f64>()
        / responses as f64;
    (0.5..=2.0).contains(&(weighted / latency.p50_us as f64))
}

/// A fit wherever one scenario ran at three or more connection counts at the same rate: the
/// shape of E1's memory-vs-connections experiment.
fn connection_fits(groups: &[Group]) -> Vec<ConnectionFit> {
    let mut keys: BTreeSet<(String, String, u64)> = BTreeSet::new();
    for g in groups {
        keys.insert((
            g.scenario.clone(),
            g.point.placement.clone(),
            g.point.load.rps.to_bits(),
        ));
    }
    let mut out = vec![];
    for (scenario, placement, rps) in keys {
        let points: Vec<(f64, f64)> = groups
            .iter()
            .filter(|g| {
                g.scenario == scenario
                    && g.point.placement == placement
                    && g.point.load.rps.to_bits() == rps
            })
            .map(|g| (f64::from(g.point.load.connections), g.mesh_mib()))
            .collect();
        let distinct: BTreeSet<u64> = points.iter().map(|p| p.0 as u64).collect();
        if distinct.len() < 3 || points.iter().all(|p| p.1 == 0.0) {
            continue;
        }
        if let Some(fit) = linear_fit(&points) {
            out.push(ConnectionFit {
                scenario,
                placement,
                points,
                fit,
            });
        }
    }
    out
}
