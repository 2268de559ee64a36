//! Rounds until decided: an interval for the mean of per-round values that stays valid when it
//! is looked at after every round and the run stops as soon as it excludes a threshold.
//!
//! A 95% interval recomputed after each round and acted on the first time it clears the
//! threshold is wrong far more than 5% of the time: each look is another chance. Here the 5%
//! is spent across the looks the run may take (Lan and DeMets' alpha spending, with Pocock's
//! shape, `alpha ln(1 + (e - 1) t)`, which spends evenly enough to stop early when an effect is
//! large), and each look's Student-t interval has its own share of it. By the union bound,
//! every look's interval covers the mean together with probability at least 95%, however many
//! looks the run took and whenever it stopped, so their intersection does too: that is the
//! interval reported. Looks start at the second round (a t interval needs two values) and end
//! at the most rounds the run allows, so a run of at most `K` rounds looks `K - 1` times.
//!
//! The union bound ignores that successive looks share rounds, so the error rate is below the
//! nominal one (a simulation in the tests measures it): the price of an interval with no
//! assumption about when the run stops.

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::{mean_confidence_interval as t_interval, Interval};

/// The share of `alpha` spent by information time `t` in 0..=1.
fn spent(alpha: f64, t: f64) -> f64 {
    alpha * (1.0 + (std::f64::consts::E - 1.0) * t.clamp(0.0, 1.0)).ln()
}

/// The two-sided level of the interval at a look with `rounds` values, in a run of at most
/// `max_rounds`; the overall level is `level`. `None` before the second round.
pub fn look_level(level: f64, rounds: usize, max_rounds: usize) -> Option<f64> {
    if rounds < 2 {
        return None;
    }
    let looks = max_rounds.max(rounds).saturating_sub(1) as f64;
    let look = (rounds - 1) as f64;
    let alpha = 1.0 - level;
    Some(1.0 - (spent(alpha, look / looks) - spent(alpha, (look - 1.0) / looks)))
}

/// The mean of `values` (one per round, in the order the rounds ran) with an interval at
/// `level` valid over every look the run took: the intersection of each look's interval,
/// each from the rounds up to that look. `None` with fewer than two rounds. Should the looks'
/// intervals not meet (a chance below `1 - level`), the last look's is returned.
pub fn sequential_interval(values: &[f64], level: f64, max_rounds: usize) -> Option<Interval> {
    let last = t_interval(values, look_level(level, values.len(), max_rounds)?)?;
    let (mut low, mut high) = (f64::NEG_INFINITY, f64::INFINITY);
    for rounds in 2..=values.len() {
        let look = t_interval(&values[..rounds], look_level(level, rounds, max_rounds)?)?;
        low = low.max(look.low);
        high = high.min(look.high);
    }
    if low > high {
        return Some(Interval { level, ..last });
    }
    Some(Interval {
        estimate: last.estimate,
        low,
        high,
        level,
    })
}

/// How far the values' mean is from `threshold`, and their sample standard deviation; `None`
/// where there is nothing to plan from: fewer than two values, no spread or no gap.
fn gap_and_spread(values: &[f64], threshold: f64) -> Option<(f64, f64)> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let gap = (mean - threshold).abs();
    (sd.is_finite() && gap.is_finite() && sd > 0.0 && gap > 0.0).then_some((gap, sd))
}

/// Roughly how many more rounds would decide whether the mean is above or below `threshold`,
/// if the mean and spread stayed as they are: the fewest whose look's interval excludes it,
/// within `max_rounds`; `None` where none would (the difference is too small for the spread
/// at the most rounds, or there is no spread to speak of yet).
pub fn rounds_to_decide(
    values: &[f64],
    threshold: f64,
    level: f64,
    max_rounds: usize,
) -> Option<usize> {
    let n = values.len();
    let (gap, sd) = gap_and_spread(values, threshold)?;
    (n + 1..=max_rounds).find_map(|rounds| {
        let at = look_level(level, rounds, max_rounds)?;
        let t = StudentsT::new(0.0, 1.0, (rounds - 1) as f64)
            .ok()?
            .inverse_cdf(0.5 + at / 2.0);
        (t * sd / (rounds as f64).sqrt() < gap).then_some(rounds - n)
    })
}

/// The rounds a run would have to allow (its most rounds, `--max-rounds`) to decide whether
/// the mean is above or below `threshold` by its last look, if the mean and spread stayed as
/// they are; searched from `from` up to `cap` rounds, `None` beyond. What a run that stopped
/// undecided at its most rounds would have needed: the planning figure for the next run.
pub fn rounds_planned_to_decide(
    values: &[f64],
    threshold: f64,
    level: f64,
    from: usize,
    cap: usize,
) -> Option<usize> {
    let (gap, sd) = gap_and_spread(values, threshold)?;
    // A run of at most `rounds` decides by its last look when that look's interval, at the
    // share of the error the last look gets, clears the threshold.
    let decides = |rounds: usize| -> bool {
        let Some(at) = look_level(level, rounds, rounds) else {
            return false;
        };
        StudentsT::new(0.0, 1.0, (rounds - 1) as f64)
            .is_ok_and(|t| t.inverse_cdf(0.5 + at / 2.0) * sd / (rounds as f64).sqrt() < gap)
    };
    let from = from.max(2);
    if from > cap || !decides(cap) {
        return None;
    }
    // The half-width shrinks about as 1/sqrt(rounds) while the last look's share of the error
    // shrinks slowly, so deciding is monotone in the rounds allowed: bisect.
    let (mut low, mut high) = (from, cap);
    while low < high {
        let mid = low + (high - low) / 2;
        if decides(mid) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    Some(low)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use rand_distr::{Distribution, Normal};

    use super::*;

    #[test]
    fn the_looks_spend_exactly_the_error_allowed() {
        for max_rounds in [2, 3, 5, 10, 30] {
            let spent: f64 = (2..=max_rounds)
                .map(|r| 1.0 - look_level(0.95, r, max_rounds).unwrap())
                .sum();
            assert!((spent - 0.05).abs() < 1e-12, "{max_rounds}: {spent}");
        }
        // One look: the plain 95% interval.
        assert!((look_level(0.95, 2, 2).unwrap() - 0.95).abs() < 1e-12);
        assert!(look_level(0.95, 1, 10).is_none());
    }

    #[test]
    fn the_interval_is_the_intersection_of_the_looks() {
        let values = [1.0, 3.0, 2.0, 2.5, 1.5];
        let i = sequential_interval(&values, 0.95, 10).unwrap();
        assert!((i.estimate - 2.0).abs() < 1e-12);
        for rounds in 2..=values.len() {
            let look =
                t_interval(&values[..rounds], look_level(0.95, rounds, 10).unwrap()).unwrap();
            assert!(i.low >= look.low - 1e-12 && i.high <= look.high + 1e-12);
        }
        // Wider than the plain 95% interval of the same rounds: it pays for the looks.
        let plain = t_interval(&values, 0.95).unwrap();
        assert!(i.high - i.low > plain.high - plain.low);
    }

    /// Equal scenarios: per-round differences drawn around zero. A run that looks after every
    /// round and stops at the first interval wholly above zero ("held") would be wrong about
    /// 1 time in 10 with plain 95% intervals; with these, at most 2.5% (one side of 5%).
    #[test]
    fn looking_after_every_round_keeps_false_verdicts_within_the_level() {
        let normal = Normal::new(0.0, 1.0).unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        let runs = 20_000;
        let max_rounds = 10;
        let (mut held, mut plain_held) = (0, 0);
        for _ in 0..runs {
            let values: Vec<f64> = (0..max_rounds).map(|_| normal.sample(&mut rng)).collect();
            let sequential = |n: usize| sequential_interval(&values[..n], 0.95, max_rounds);
            if (2..=max_rounds).any(|n| sequential(n).unwrap().low > 0.0) {
                held += 1;
            }
            if (2..=max_rounds).any(|n| t_interval(&values[..n], 0.95).unwrap().low > 0.0) {
                plain_held += 1;
            }
        }
        let rate = held as f64 / runs as f64;
        let plain = plain_held as f64 / runs as f64;
        eprintln!("false held in {runs} runs: {rate} spent over the looks, {plain} plain");
        assert!(rate <= 0.025, "false held {rate}");
        assert!(
            plain > 0.05,
            "plain intervals looked at every round: {plain}"
        );
    }

    #[test]
    fn a_clear_difference_is_decided_and_a_close_one_says_how_many_rounds_it_needs() {
        let clear = [5.0, 5.2, 4.9, 5.1];
        assert!(sequential_interval(&clear, 0.95, 10).unwrap().low > 0.0);
        assert!(rounds_to_decide(&clear, 0.0, 0.95, 10).is_some());
        // A mean of 0.3 with a spread of about 0.9: many more rounds, or none within 10.
        let close = [1.3, -0.7, 0.3, 1.0, -0.4];
        let more = rounds_to_decide(&close, 0.0, 0.95, 200).unwrap();
        assert!(more > 10, "{more}");
        assert_eq!(rounds_to_decide(&close, 0.0, 0.95, 10), None);
        assert_eq!(rounds_to_decide(&[1.0, 1.0], 0.0, 0.95, 10), None);
    }

    #[test]
    fn a_run_planned_for_the_rounds_it_names_decides_by_its_last_look() {
        let close = [1.3, -0.7, 0.3, 1.0, -0.4];
        let planned = rounds_planned_to_decide(&close, 0.0, 0.95, 11, 1000).unwrap();
        assert!(planned > 10, "{planned}");
        // Exactly that many: one fewer does not decide, and the run it names does.
        assert!(rounds_to_decide(&close, 0.0, 0.95, planned).is_some());
        assert!(rounds_planned_to_decide(&close, 0.0, 0.95, 11, planned - 1).is_none());
        // No spread, no difference or too few rounds: nothing to plan from.
        assert_eq!(
            rounds_planned_to_decide(&[1.0, 1.0], 0.0, 0.95, 3, 1000),
            None
        );
        assert_eq!(
            rounds_planned_to_decide(&[1.0, -1.0], 0.0, 0.95, 3, 1000),
            None
        );
        assert_eq!(rounds_planned_to_decide(&[1.0], 0.0, 0.95, 3, 1000), None);
        // A difference far below the spread needs more rounds than the cap allows.
        let tiny = [10.0, -10.0, 10.1, -10.0];
        assert_eq!(rounds_planned_to_decide(&tiny, 0.0, 0.95, 5, 100), None);
    }
}
