//! Capacity under a service-level objective: the highest constant rate at which a system
//! still meets a p99 latency and an error budget, found adaptively as Nighthawk's adaptive
//! load controller does. Each step is a measured cell at one rate:
//!
//! 1. bracket: from the start rate, double while the objective is met, halve while it is
//!    missed, until one rate meets it and a higher one misses it;
//! 2. bisect: try the geometric mean of the two (rates are a ratio scale) until they are
//!    within the precision of each other;
//! 3. where a step's p99 lands close to the objective, measure the same rate again (up to a
//!    few tries) and judge the rate by the median of its tries, so one lucky or unlucky cell
//!    does not move the bracket.
//!
//! The search is a pure function of the steps measured so far: the runner asks it for the
//! next rate, and a report replays it from the results' cells and gets the same capacity, as
//! does a resumed run.

use meshbench_results::{is_success_outcome, CapacityConfig, Cell};

/// The objective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    pub p99_ms: f64,
    /// Failed or never-sent requests as a share of those due (0.001 is 0.1%).
    pub error_rate: f64,
}

/// How the search goes; see [`SearchSettings::default`] for the defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchSettings {
    pub start_rps: f64,
    /// Never measured above this; a system that meets the objective there has a capacity of
    /// at least this much.
    pub max_rps: f64,
    /// Never measured below this.
    pub min_rps: f64,
    /// Stop when the rate that missed is within this share above the one that met.
    pub precision: f64,
    /// At most this many cells per search.
    pub max_steps: u32,
    /// A p99 within this share of the objective (either side) is close: the rate is measured
    /// again.
    pub close: f64,
    /// At most this many tries of one rate.
    pub max_tries: u32,
    /// The achieved rate must reach this share of the requested one: a system that does not
    /// keep up misses the objective whatever its latency.
    pub sustained: f64,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            start_rps: 1000.0,
            max_rps: 100_000.0,
            min_rps: 10.0,
            precision: 0.10,
            max_steps: 14,
            close: 0.20,
            max_tries: 3,
            sustained: 0.95,
        }
    }
}

/// One measured step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trial {
    pub rps: f64,
    pub p99_ms: f64,
    pub error_rate: f64,
    pub achieved_rps: f64,
}

/// A rate's verdict, from the median of its tries.
#[derive(Debug, Clone, PartialEq)]
pub struct RateVerdict {
    pub rps: f64,
    pub tries: u32,
    pub p99_ms: f64,
    pub error_rate: f64,
    pub achieved_rps: f64,
    pub meets: bool,
    /// Why it missed: `p99`, `errors`, `rate` (did not keep up).
    pub missed_on: Vec<&'static str>,
}

/// Why a search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchEnd {
    /// The bracket is within the precision.
    Converged,
    /// The objective was met at the highest rate allowed: capacity is at least that.
    AtMaximum,
    /// The objective was missed at the lowest rate allowed.
    BelowMinimum,
    /// The step budget ran out before the bracket closed.
    OutOfSteps,
}

impl SearchEnd {
    pub fn describe(self) -> &'static str {
        match self {
            SearchEnd::Converged => "converged",
            SearchEnd::AtMaximum => "met at the highest rate allowed (a lower bound)",
            SearchEnd::BelowMinimum => "missed at the lowest rate allowed",
            SearchEnd::OutOfSteps => "out of steps before the bracket closed",
        }
    }
}

/// What the search found so far: the highest rate that met the objective and the lowest
/// above it that missed. The capacity is in between.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    pub meets_at: Option<f64>,
    pub misses_at: Option<f64>,
    pub rates: Vec<RateVerdict>,
    pub steps: u32,
    pub end: Option<SearchEnd>,
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// Measure this rate; `attempt` counts from 1 for each rate.
    Measure {
        rps: f64,
        attempt: u32,
    },
    Done(SearchEnd),
}

impl Slo {
    /// Whether the median of a rate's tries meets the objective.
    pub fn judge(&self, settings: &SearchSettings, rps: f64, tries: &[Trial]) -> RateVerdict {
        let median = |f: fn(&Trial) -> f64| {
            let mut values: Vec<f64> = tries.iter().map(f).collect();
            values.sort_by(f64::total_cmp);
            let n = values.len();
            if n == 0 {
                f64::NAN
            } else if n % 2 == 1 {
                values[n / 2]
            } else {
                (values[n / 2 - 1] + values[n / 2]) / 2.0
            }
        };
        let (p99_ms, error_rate, achieved_rps) = (
            median(|t| t.p99_ms),
            median(|t| t.error_rate),
            median(|t| t.achieved_rps),
        );
        let mut missed_on = vec![];
        if p99_ms.is_nan() || p99_ms > self.p99_ms {
            missed_on.push("p99");
        }
        if error_rate.is_nan() || error_rate > self.error_rate {
            missed_on.push("errors");
        }
        if achieved_rps.is_nan() || achieved_rps < settings.sustained * rps {
            missed_on.push("rate");
        }
        RateVerdict {
            rps,
            tries: tries.len() as u32,
            p99_ms,
            error_rate,
            achieved_rps,
            meets: missed_on.is_empty(),
            missed_on,
        }
    }

    /// A p99 near the objective, where one more try may change the verdict.
    fn close(&self, settings: &SearchSettings, p99_ms: f64) -> bool {
        (p99_ms / self.p99_ms - 1.0).abs() <= settings.close
    }
}

/// Replays `history` (the steps in the order they were measured) and says what comes next.
pub fn next_step(slo: &Slo, settings: &SearchSettings, history: &[Trial]) -> (Next, Capacity) {
    let mut capacity = Capacity {
        meets_at: None,
        misses_at: None,
        rates: vec![],
        steps: history.len() as u32,
        end: None,
    };
    // Rates in the order first measured, each with its tries.
    let mut rates: Vec<(f64, Vec<Trial>)> = vec![];
    for trial in history {
        match rates.iter_mut().find(|(r, _)| *r == trial.rps) {
            Some((_, tries)) => tries.push(*trial),
            None => rates.push((trial.rps, vec![*trial])),
        }
    }
    for (i, (rps, tries)) in rates.iter().enumerate() {
        let verdict = slo.judge(settings, *rps, tries);
        let last = i + 1 == rates.len();
        // The last rate may still be waiting for another try; earlier ones are settled.
        let pending = last
            && tries.len() < settings.max_tries as usize
            && slo.close(settings, tries[tries.len() - 1].p99_ms)
            && verdict.missed_on.iter().all(|m| *m == "p99");
        if pending {
            if capacity.steps >= settings.max_steps {
                capacity.end = Some(SearchEnd::OutOfSteps);
                return (Next::Done(SearchEnd::OutOfSteps), capacity);
            }
            let next = Next::Measure {
                rps: *rps,
                attempt: tries.len() as u32 + 1,
            };
            return (next, capacity);
        }
        if verdict.meets {
            if capacity.misses_at.is_none_or(|h| *rps < h) {
                capacity.meets_at = Some(capacity.meets_at.map_or(*rps, |l: f64| l.max(*rps)));
            }
        } else if capacity.meets_at.is_none_or(|l| *rps > l) {
            capacity.misses_at = Some(capacity.misses_at.map_or(*rps, |h: f64| h.min(*rps)));
        }
        capacity.rates.push(verdict);
    }
    let end = |capacity: &mut Capacity, end: SearchEnd| {
        capacity.end = Some(end);
        (Next::Done(end), capacity.clone())
    };
    let rate = match (capacity.meets_at, capacity.misses_at) {
        (None, None) => settings.start_rps,
        (Some(low), None) => {
            if low >= settings.max_rps {
                return end(&mut capacity, SearchEnd::AtMaximum);
            }
            (low * 2.0).min(settings.max_rps)
        }
        (None, Some(high)) => {
            if high <= settings.min_rps {
                return end(&mut capacity, SearchEnd::BelowMinimum);
            }
            (high / 2.0).max(settings.min_rps)
        }
        (Some(low), Some(high)) => {
            let between = (low * high).sqrt().round();
            if (high - low) / low <= settings.precision || between <= low || between >= high {
                return end(&mut capacity, SearchEnd::Converged);
            }
            between
        }
    };
    if capacity.steps >= settings.max_steps {
        return end(&mut capacity, SearchEnd::OutOfSteps);
    }
    (
        Next::Measure {
            rps: rate.round().max(1.0),
            attempt: 1,
        },
        capacity,
    )
}

/// The objective and the search as results record them.
pub fn from_config(config: &CapacityConfig) -> (Slo, SearchSettings) {
    (
        Slo {
            p99_ms: config.slo_p99_ms,
            error_rate: config.slo_error_rate,
        },
        SearchSettings {
            start_rps: config.start_rps,
            max_rps: config.max_rps,
            min_rps: config.min_rps,
            precision: config.precision,
            max_steps: config.max_steps,
            close: config.close,
            max_tries: config.max_tries,
            sustained: config.sustained,
        },
    )
}

/// The results' record of both, for `searches` independent searches per scenario.
pub fn to_config(slo: &Slo, settings: &SearchSettings, searches: u32) -> CapacityConfig {
    CapacityConfig {
        slo_p99_ms: slo.p99_ms,
        slo_error_rate: slo.error_rate,
        start_rps: settings.start_rps,
        max_rps: settings.max_rps,
        min_rps: settings.min_rps,
        precision: settings.precision,
        max_steps: settings.max_steps,
        close: settings.close,
        max_tries: settings.max_tries,
        sustained: settings.sustained,
        searches,
    }
}

/// A cell as a step of a search: its rate, p99, the requests that failed or were never sent
/// (the generator could not send them: the target fell behind) over those due, and the rate
/// achieved.
pub fn trial_of(cell: &Cell) -> Trial {
    let load = &cell.load;
    let failed: u64 = load
        .outcomes
        .iter()
        .filter(|(outcome, _)| !is_success_outcome(outcome))
        .map(|(_, n)| n)
        .sum();
    let due = load.scheduled.max(load.sent).max(1);
    Trial {
        rps: cell.load_point.rps,
        p99_ms: load.latency.p99_us as f64 / 1e3,
        error_rate: (failed + load.unsent) as f64 / due as f64,
        achieved_rps: load.achieved_rps,
    }
}

/// The knee of a latency-against-load curve (points in increasing load): where latency
/// turns from flat to steep, by the Kneedle method (Satopaa et al. 2011) on the logarithm of
/// latency (past the knee it grows by orders of magnitude, which would otherwise push the
/// knee to the last point but one): both axes scaled to [0, 1], the point farthest below the
/// line from the first point to the last. `None` with fewer than three points, a latency
/// that is not positive, or a curve that does not rise.
pub fn knee(points: &[(f64, f64)]) -> Option<usize> {
    if points.len() < 3 || points.iter().any(|p| p.1.is_nan() || p.1 <= 0.0) {
        return None;
    }
    let points: Vec<(f64, f64)> = points.iter().map(|p| (p.0, p.1.ln())).collect();
    let (x0, x1) = (points[0].0, points[points.len() - 1].0);
    let (y_min, y_max) = points
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.1))
        });
    if x1 <= x0 || y_max <= y_min {
        return None;
    }
    let scaled = |p: &(f64, f64)| ((p.0 - x0) / (x1 - x0), (p.1 - y_min) / (y_max - y_min));
    let (best, gap) = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (x, y) = scaled(p);
            (i, x - y)
        })
        .fold((0, f64::NEG_INFINITY), |best, candidate| {
            if candidate.1 > best.1 {
                candidate
            } else {
                best
            }
        });
    (gap > 0.0).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system whose p99 is flat until `capacity` rps and then climbs steeply.
    fn system(capacity: f64) -> impl Fn(f64, u32) -> Trial {
        move |rps, _attempt| {
            let p99_ms = if rps <= capacity {
                1.0 + rps / capacity
            } else {
                2.0 + 50.0 * (rps / capacity - 1.0)
            };
            Trial {
                rps,
                p99_ms,
                error_rate: 0.0,
                achieved_rps: rps.min(capacity * 1.02),
            }
        }
    }

    fn search(
        slo: &Slo,
        settings: &SearchSettings,
        measure: impl Fn(f64, u32) -> Trial,
    ) -> Capacity {
        let mut history = vec![];
        loop {
            match next_step(slo, settings, &history) {
                (Next::Measure { rps, attempt }, _) => history.push(measure(rps, attempt)),
                (Next::Done(_), capacity) => return capacity,
            }
        }
    }

    const SLO: Slo = Slo {
        p99_ms: 5.0,
        error_rate: 0.001,
    };

    #[test]
    fn brackets_then_bisects_to_the_precision() {
        // p99 reaches 5 ms at capacity x 1.06: the objective's rate is 3180.
        let settings = SearchSettings::default();
        let found = search(&SLO, &settings, system(3000.0));
        assert_eq!(found.end, Some(SearchEnd::Converged));
        let (low, high) = (found.meets_at.unwrap(), found.misses_at.unwrap());
        assert!(low <= 3180.0 && high > 3180.0, "{found:?}");
        assert!((high - low) / low <= settings.precision, "{found:?}");
        // Bracketing went 1000, 2000, 4000; the rest bisected.
        let rates: Vec<f64> = found.rates.iter().map(|r| r.rps).collect();
        assert_eq!(&rates[..3], &[1000.0, 2000.0, 4000.0]);
        assert!(found.steps <= settings.max_steps);
    }

    #[test]
    fn halves_down_from_a_start_that_misses_and_stops_at_the_limits() {
        let found = search(&SLO, &SearchSettings::default(), system(300.0));
        assert_eq!(&found.rates[0].rps, &1000.0);
        assert!(!found.rates[0].meets);
        assert!(found.meets_at.unwrap() < 330.0 && found.misses_at.unwrap() > 318.0);

        let settings = SearchSettings {
            max_rps: 5000.0,
            ..SearchSettings::default()
        };
        let found = search(&SLO, &settings, system(1e9));
        assert_eq!(found.end, Some(SearchEnd::AtMaximum));
        assert_eq!(found.meets_at, Some(5000.0));
        let found = search(&SLO, &SearchSettings::default(), system(1.0));
        assert_eq!(found.end, Some(SearchEnd::BelowMinimum));
        assert_eq!(found.meets_at, None);
    }

    #[test]
    fn a_close_step_is_measured_again_and_judged_by_its_median() {
        // The rate 2000 lands at 4.8 ms, then 5.6, then 4.9: close each time, so three
        // tries, and the median (4.9) meets the objective.
        let p99s = [4.8, 5.6, 4.9];
        let measure = |rps: f64, attempt: u32| Trial {
            rps,
            p99_ms: if rps == 2000.0 {
                p99s[attempt as usize - 1]
            } else if rps < 2000.0 {
                1.0
            } else {
                50.0
            },
            error_rate: 0.0,
            achieved_rps: rps,
        };
        let found = search(&SLO, &SearchSettings::default(), measure);
        let at_2000 = found.rates.iter().find(|r| r.rps == 2000.0).unwrap();
        assert_eq!(
            (at_2000.tries, at_2000.p99_ms, at_2000.meets),
            (3, 4.9, true)
        );
        assert!(found.meets_at.unwrap() >= 2000.0);
    }

    #[test]
    fn errors_and_a_rate_not_kept_up_miss_whatever_the_latency() {
        let settings = SearchSettings::default();
        let errors = SLO.judge(
            &settings,
            100.0,
            &[Trial {
                rps: 100.0,
                p99_ms: 1.0,
                error_rate: 0.01,
                achieved_rps: 100.0,
            }],
        );
        assert_eq!(errors.missed_on, vec!["errors"]);
        let behind = SLO.judge(
            &settings,
            100.0,
            &[Trial {
                rps: 100.0,
                p99_ms: 1.0,
                error_rate: 0.0,
                achieved_rps: 80.0,
            }],
        );
        assert_eq!(behind.missed_on, vec!["rate"]);
    }

    #[test]
    fn replaying_a_history_gives_the_same_answer() {
        let settings = SearchSettings::default();
        let measure = system(2500.0);
        let mut history = vec![];
        while let (Next::Measure { rps, attempt }, _) = next_step(&SLO, &settings, &history) {
            history.push(measure(rps, attempt));
        }
        let once = next_step(&SLO, &settings, &history);
        assert_eq!(next_step(&SLO, &settings, &history), once);
    }

    #[test]
    fn the_knee_is_where_latency_turns_steep() {
        let curve = [
            (500.0, 1.0),
            (1000.0, 1.1),
            (2000.0, 1.3),
            (3000.0, 1.8),
            (3500.0, 6.0),
            (4000.0, 40.0),
        ];
        assert_eq!(knee(&curve), Some(3));
        assert_eq!(knee(&curve[..2]), None);
        assert_eq!(knee(&[(1.0, 1.0), (2.0, 1.0), (3.0, 1.0)]), None);
    }
}
