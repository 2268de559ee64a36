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
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let gap = (mean - threshold).abs();
    let measurable = sd.is_finite() && gap.is_finite() && sd > 0.0 && gap > 0.0;
    if !measurable {
        return None;
    }
    (n + 1..=max_rounds).find_map(|rounds| {
        let at = look_level(level, rounds, max_rounds)?;
        let t = StudentsT::new(0.0, 1.0, (rounds - 1) as f64)
            .ok()?
            .inverse_cdf(0.5 + at / 2.0);
        (t * sd / (rounds as f64).sqrt() < gap).then_some(rounds - n)
    })
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
}
