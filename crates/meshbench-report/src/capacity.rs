//! The capacity model's findings: each search replayed from the run's cells (the same pure
//! search the runner asked for its steps, so the report cannot disagree with the run), the
//! capacity of each scenario with the bracket it lies in, every rate's verdict, and each
//! scenario against the baseline: "sustains 38% less than baseline at p99 <= 5 ms".
//!
//! A scenario searched more than once (a spec's `repetitions`) has the median of its
//! searches' capacities, and a range from the lowest rate any search met to the highest any
//! missed: one search's bracket is its resolution within the run, the searches' spread is
//! what a repeated run can land on.

use meshbench_results::{CapacityConfig, Cell, RunResult};
use meshbench_stats::capacity::{
    from_config, knee, next_step, trial_of, Capacity, Next, SearchEnd,
};

use crate::cell::BASELINE;
use crate::table::Table;

/// One scenario's search at one placement and connection count.
#[derive(Debug, Clone)]
pub struct Search {
    pub scenario: String,
    /// Which of the scenario's independent searches (from 1).
    pub search: u32,
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
    let repeated = result
        .cells
        .iter()
        .filter_map(|c| c.search)
        .max()
        .unwrap_or(1)
        .max(config.searches);
    for (placement, connections) in keys {
        for (scenario, search) in result
            .config
            .scenarios
            .iter()
            .flat_map(|s| (1..=repeated).map(move |n| (s, n)))
        {
            let cells: Vec<&Cell> = result
                .cells
                .iter()
                .filter(|c| {
                    c.scenario == scenario.name
                        && c.placement.as_deref().unwrap_or("") == placement
                        && c.load_point.connections == connections
                        && c.search.unwrap_or(1) == search
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
                search,
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

/// A scenario's capacity over its searches at one placement and connection count.
#[derive(Debug, Clone)]
pub struct Combined<'s> {
    pub scenario: &'s str,
    pub placement: &'s str,
    pub connections: u32,
    pub searches: Vec<&'s Search>,
}

impl Combined<'_> {
    /// The median of the searches' capacities; `None` when a search met the objective at no
    /// rate.
    pub fn capacity(&self) -> Option<f64> {
        let mut met: Vec<f64> = self
            .searches
            .iter()
            .map(|s| s.capacity.meets_at)
            .collect::<Option<_>>()?;
        met.sort_by(f64::total_cmp);
        let n = met.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(met[n / 2]),
            _ => Some((met[n / 2 - 1] + met[n / 2]) / 2.0),
        }
    }

    /// From the lowest rate any search met to the highest any missed (`None` when a search
    /// met the objective at its maximum: the capacity is at least that).
    pub fn range(&self) -> Option<(f64, Option<f64>)> {
        let mut low = f64::INFINITY;
        let mut high = Some(0.0_f64);
        for s in &self.searches {
            low = low.min(s.capacity.meets_at?);
            high = match (high, s.capacity.misses_at) {
                (Some(h), Some(m)) => Some(h.max(m)),
                _ => None,
            };
        }
        low.is_finite().then_some((low, high))
    }

    /// Each search's bracket, "[met, missed)", joined.
    pub fn brackets(&self) -> String {
        let rate = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.0}"));
        self.searches
            .iter()
            .map(|s| {
                format!(
                    "[{}, {})",
                    rate(s.capacity.meets_at),
                    rate(s.capacity.misses_at)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The searches grouped by (placement, connections, scenario), in their order.
pub fn combined(searches: &[Search]) -> Vec<Combined<'_>> {
    let mut out: Vec<Combined> = vec![];
    for s in searches {
        match out.iter_mut().find(|c| {
            c.scenario == s.scenario && c.placement == s.placement && c.connections == s.connections
        }) {
            Some(c) => c.searches.push(s),
            None => out.push(Combined {
                scenario: &s.scenario,
                placement: &s.placement,
                connections: s.connections,
                searches: vec![s],
            }),
        }
    }
    out
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

pub fn relative(scenario: &Combined, baseline: &Combined) -> Option<Relative> {
    let (capacity, base_capacity) = (scenario.capacity()?, baseline.capacity()?);
    let (low, high) = scenario.range()?;
    let (base_low, base_high) = baseline.range()?;
    // A search met at its maximum gives a capacity of at least that: the range is open there,
    // and the ratio's bound is taken at the rate it met.
    let high = high.unwrap_or(capacity.max(low));
    let base_high = base_high.unwrap_or(base_capacity.max(base_low));
    Some(Relative {
        estimate: capacity / base_capacity - 1.0,
        low: low / base_high - 1.0,
        high: high / base_low - 1.0,
    })
}

fn baseline_of<'a, 's>(all: &'a [Combined<'s>], of: &Combined) -> Option<&'a Combined<'s>> {
    all.iter().find(|b| {
        b.scenario == BASELINE && b.placement == of.placement && b.connections == of.connections
    })
}

/// One sentence per non-baseline search with a capacity: the figure platform teams ask for.
pub fn sentences(result: &RunResult, searches: &[Search]) -> Vec<String> {
    let Some(config) = &result.config.capacity else {
        return vec![];
    };
    let objective = format!("p99 <= {} ms", trim(config.slo_p99_ms));
    let all = combined(searches);
    all.iter()
        .filter(|s| s.scenario != BASELINE)
        .filter_map(|s| {
            let baseline = baseline_of(&all, s)?;
            let r = relative(s, baseline)?;
            let over = match s.searches.len().max(baseline.searches.len()) {
                1 => "as far as the searches' brackets tell".to_owned(),
                n => format!("over {n} searches each, from their lowest rate met to their highest missed"),
            };
            let word = |x: f64| {
                if x < 0.0 {
                    format!("{:.0}% less", -x * 100.0)
                } else {
                    format!("{:.0}% more", x * 100.0)
                }
            };
            Some(format!(
                "{} sustains {} than baseline at {objective} ({} connections, {}): between {} and {}, {over}",
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
    let all = combined(searches);
    let several = all.iter().any(|c| c.searches.len() > 1);
    let rows = all
        .iter()
        .map(|s| {
            let versus = match (s.scenario != BASELINE)
                .then(|| baseline_of(&all, s))
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
            let each = |f: &dyn Fn(&Search) -> String| {
                s.searches
                    .iter()
                    .map(|x| f(x))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let range = s.range();
            let mut row = vec![
                s.connections.to_string(),
                s.placement.to_owned(),
                s.scenario.to_owned(),
                rate(s.capacity()),
                format!(
                    "[{}, {})",
                    rate(range.map(|r| r.0)),
                    rate(range.and_then(|r| r.1))
                ),
            ];
            if several {
                row.push(s.brackets());
            }
            row.extend([
                each(&|x| {
                    x.knee
                        .map_or("-".to_owned(), |i| format!("{:.0}", x.curve[i].0))
                }),
                each(&|x| x.capacity.steps.to_string()),
                each(&|x| x.end.map_or("unfinished", SearchEnd::describe).to_owned()),
                versus,
            ]);
            row
        })
        .collect();
    let mut headers: Vec<String> = [
        "connections",
        "placement",
        "scenario",
        "capacity rps",
        "bracket rps",
    ]
    .map(String::from)
    .to_vec();
    if several {
        headers[3] = "capacity rps (median of searches)".to_owned();
        headers[4] = "range rps (lowest met, highest missed)".to_owned();
        headers.push("each search's bracket".to_owned());
    }
    headers.extend(["knee rps", "steps", "search", "against baseline [range]"].map(String::from));
    let spread = if several {
        "with repeated searches, the capacity is their median and its range runs from the \
         lowest rate any search met to the highest any missed, which is what a repeated run \
         can land on"
    } else {
        "the bracket is the search's resolution within this run, not the spread between runs: \
         a data plane whose p99 swings near the objective can land outside it when the run is \
         repeated (repeat the search with `repetitions`)"
    };
    Some(Table {
        title: "Capacity under the objective".to_owned(),
        note: format!(
            "Objective: {}. The highest constant rate that met it, and the bracket the capacity \
             lies in (met at the lower end, missed at the upper); {spread}; the knee is where \
             p99 turns steep (Kneedle on log p99).",
            objective(config)
        ),
        headers,
        rows,
    })
}

/// Every rate each search measured, with the median of its tries and the verdict.
pub fn steps_table(searches: &[Search]) -> Option<Table> {
    let several = searches.iter().any(|s| s.search > 1);
    let rows: Vec<Vec<String>> = searches
        .iter()
        .flat_map(|s| {
            let scenario = match several {
                true => format!("{} (search {})", s.scenario, s.search),
                false => s.scenario.clone(),
            };
            s.capacity.rates.iter().map(move |r| {
                vec![
                    s.connections.to_string(),
                    s.placement.clone(),
                    scenario.clone(),
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
        title: "Capacity search, step by step".to_owned(),
        note: "A rate measured more than once is judged by the median of its tries.".to_owned(),
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
