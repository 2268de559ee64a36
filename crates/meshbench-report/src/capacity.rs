//! The capacity model's findings: each search replayed from the run's cells (the same pure
//! search the runner asked for its steps, so the report cannot disagree with the run), the
//! capacity of each scenario with the bracket it lies in, every rate's verdict, and each
//! scenario against the baseline: "sustains 38% less than baseline at p99 <= 5 ms".

use meshbench_results::{CapacityConfig, Cell, RunResult};
use meshbench_stats::capacity::{
    from_config, knee, next_step, trial_of, Capacity, Next, SearchEnd,
};

use crate::analysis::BASELINE;
use crate::tables::Table;

/// One scenario's search at one placement and connection count.
#[derive(Debug, Clone)]
pub struct Search {
    pub scenario: String,
    pub placement: String,
    pub connections: u32,
    pub capacity: Capacity,
    /// `None` while the run is still searching (or was cut short).
    pub end: Option<SearchEnd>,
    /// (rate, p99 ms) of every settled rate, by rate: the latency-against-load curve.
    pub curve: Vec<(f64, f64)>,
    /// Index into `curve` of the knee, where latency turns steep.
    pub knee: Option<usize>,
}

/// Every search of a capacity run, in the configuration's scenario order; empty for other
/// runs.
pub fn searches(result: &RunResult) -> Vec<Search> {
    let Some(config) = &result.config.capacity else {
        return vec![];
    };
    let (slo, settings) = from_config(config);
    let mut keys: Vec<(String, u32)> = vec![];
    for cell in &result.cells {
        let key = (
            cell.placement.clone().unwrap_or_default(),
            cell.load_point.connections,
        );
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut out = vec![];
    for (placement, connections) in keys {
        for scenario in &result.config.scenarios {
            let cells: Vec<&Cell> = result
                .cells
                .iter()
                .filter(|c| {
                    c.scenario == scenario.name
                        && c.placement.as_deref().unwrap_or("") == placement
                        && c.load_point.connections == connections
                })
                .collect();
            if cells.is_empty() {
                continue;
            }
            let history: Vec<_> = cells.iter().map(|c| trial_of(c)).collect();
            let (next, capacity) = next_step(&slo, &settings, &history);
            let end = match next {
                Next::Done(end) => Some(end),
                Next::Measure { .. } => None,
            };
            let mut curve: Vec<(f64, f64)> =
                capacity.rates.iter().map(|r| (r.rps, r.p99_ms)).collect();
            curve.sort_by(|a, b| a.0.total_cmp(&b.0));
            out.push(Search {
                scenario: scenario.name.clone(),
                placement: placement.clone(),
                connections,
                knee: knee(&curve),
                curve,
                capacity,
                end,
            });
        }
    }
    out
}

/// "p99 <= 5 ms, at most 0.1% failed or unsent".
pub fn objective(config: &CapacityConfig) -> String {
    format!(
        "p99 <= {} ms, at most {}% failed or unsent",
        trim(config.slo_p99_ms),
        trim(config.slo_error_rate * 100.0)
    )
}

fn trim(x: f64) -> String {
    let text = format!("{x:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A scenario's capacity against the baseline's: the ratio of the rates that met the
/// objective, with the range the two brackets allow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Relative {
    /// capacity / baseline's capacity - 1.
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

pub fn relative(search: &Search, baseline: &Search) -> Option<Relative> {
    let (low, base_low) = (search.capacity.meets_at?, baseline.capacity.meets_at?);
    let high = search.capacity.misses_at.unwrap_or(low);
    let base_high = baseline.capacity.misses_at.unwrap_or(base_low);
    Some(Relative {
        estimate: low / base_low - 1.0,
        low: low / base_high - 1.0,
        high: high / base_low - 1.0,
    })
}

fn baseline_of<'a>(searches: &'a [Search], search: &Search) -> Option<&'a Search> {
    searches.iter().find(|b| {
        b.scenario == BASELINE
            && b.placement == search.placement
            && b.connections == search.connections
    })
}

/// One sentence per non-baseline search with a capacity: the figure platform teams ask for.
pub fn sentences(result: &RunResult, searches: &[Search]) -> Vec<String> {
    let Some(config) = &result.config.capacity else {
        return vec![];
    };
    let objective = format!("p99 <= {} ms", trim(config.slo_p99_ms));
    searches
        .iter()
        .filter(|s| s.scenario != BASELINE)
        .filter_map(|s| {
            let baseline = baseline_of(searches, s)?;
            let r = relative(s, baseline)?;
            let word = |x: f64| {
                if x < 0.0 {
                    format!("{:.0}% less", -x * 100.0)
                } else {
                    format!("{:.0}% more", x * 100.0)
                }
            };
            Some(format!(
                "{} sustains {} than baseline at {objective} ({} connections, {}): between {} and {}, as far as the searches' brackets tell",
                s.scenario,
                word(r.estimate),
                s.connections,
                s.placement,
                word(r.low),
                word(r.high),
            ))
        })
        .collect()
}

/// Each search's capacity, its bracket and how it ended, and against the baseline.
pub fn capacity_table(result: &RunResult, searches: &[Search]) -> Option<Table> {
    let config = result.config.capacity.as_ref()?;
    let rate = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.0}"));
    let rows = searches
        .iter()
        .map(|s| {
            let versus = match (s.scenario != BASELINE)
                .then(|| baseline_of(searches, s))
                .flatten()
                .and_then(|b| relative(s, b))
            {
                Some(r) => format!(
                    "{:+.0}% [{:+.0}%, {:+.0}%]",
                    r.estimate * 100.0,
                    r.low * 100.0,
                    r.high * 100.0
                ),
                None => "-".to_owned(),
            };
            vec![
                s.connections.to_string(),
                s.placement.clone(),
                s.scenario.clone(),
                rate(s.capacity.meets_at),
                format!(
                    "[{}, {})",
                    rate(s.capacity.meets_at),
                    rate(s.capacity.misses_at)
                ),
                s.knee
                    .map_or("-".to_owned(), |i| format!("{:.0}", s.curve[i].0)),
                s.capacity.steps.to_string(),
                s.end.map_or("unfinished", SearchEnd::describe).to_owned(),
                versus,
            ]
        })
        .collect();
    Some(Table {
        title: format!(
            "Capacity under the objective ({}): the highest constant rate that met it, and the \
             bracket the capacity lies in (met at the lower end, missed at the upper); the \
             bracket is the search's resolution within this run, not the spread between runs: \
             a data plane whose p99 swings near the objective can land outside it when the run \
             is repeated (compare two runs with `meshbench compare`); the knee is where p99 \
             turns steep (Kneedle on log p99)",
            objective(config)
        ),
        headers: [
            "connections",
            "placement",
            "scenario",
            "capacity rps",
            "bracket rps",
            "knee rps",
            "steps",
            "search",
            "against baseline [range]",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

/// Every rate each search measured, with the median of its tries and the verdict.
pub fn steps_table(searches: &[Search]) -> Option<Table> {
    let rows: Vec<Vec<String>> = searches
        .iter()
        .flat_map(|s| {
            s.capacity.rates.iter().map(move |r| {
                vec![
                    s.connections.to_string(),
                    s.placement.clone(),
                    s.scenario.clone(),
                    format!("{:.0}", r.rps),
                    r.tries.to_string(),
                    format!("{:.3}", r.p99_ms),
                    format!("{:.3}", r.error_rate * 100.0),
                    format!("{:.1}", r.achieved_rps),
                    if r.meets {
                        "met".to_owned()
                    } else {
                        format!("missed ({})", r.missed_on.join(", "))
                    },
                ]
            })
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "Capacity search, step by step (a rate measured more than once is judged by the \
                median of its tries)"
            .to_owned(),
        headers: [
            "connections",
            "placement",
            "scenario",
            "rate rps",
            "tries",
            "p99 ms",
            "errors %",
            "achieved rps",
            "verdict",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}
