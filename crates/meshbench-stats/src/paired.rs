//! A ratio of two figures measured side by side in rounds, with rounds as the unit: each
//! round gives one value of each figure (ours and the peer's, both run in that round), and the
//! interval comes from how those values vary from round to round, not from the seconds
//! within a round. Seconds of one run are not independent of each other, and what moves a
//! figure between two runs of a bench (the machine's state, where the allocator stands, which
//! core's caches are warm) stays put for a whole round: an interval built from seconds covers
//! none of it, and two runs' intervals need not even overlap. Pairing by round also removes
//! what moved both figures alike in that round.
//!
//! R = mean(x) / mean(y); by the delta method Var(R) = Var(mean(x - R y)) / mean(y)^2, with
//! the residuals' sample variance over the rounds and Student's t with n - 1 degrees of
//! freedom. Fieller's condition as in [`crate::ratio_interval`]: no interval where mean(y)'s
//! own interval reaches zero.

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::Interval;

/// Fewer rounds than this: no interval (two values have one degree of freedom, and its t is
/// 12.7).
pub const MIN_ROUNDS: usize = 3;

fn t_quantile(degrees_of_freedom: f64, level: f64) -> Option<f64> {
    let t = StudentsT::new(0.0, 1.0, degrees_of_freedom).ok()?;
    Some(t.inverse_cdf(0.5 + level / 2.0))
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

fn sample_variance(values: &[f64]) -> f64 {
    let m = mean(values);
    values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64
}

/// mean(ours) / mean(theirs) over rounds with both, and its interval at `level`. `None` with
/// fewer than [`MIN_ROUNDS`] rounds, values that are not finite, lengths that differ, or a
/// denominator not clearly above zero.
pub fn paired_ratio_interval(ours: &[f64], theirs: &[f64], level: f64) -> Option<Interval> {
    let n = ours.len();
    if n != theirs.len() || n < MIN_ROUNDS || ours.iter().chain(theirs).any(|v| !v.is_finite()) {
        return None;
    }
    let t = t_quantile((n - 1) as f64, level)?;
    let (x, y) = (mean(ours), mean(theirs));
    let y_half = t * (sample_variance(theirs) / n as f64).sqrt();
    if y <= 0.0 || y - y_half <= 0.0 {
        return None;
    }
    let ratio = x / y;
    let residuals: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .map(|(a, b)| a - ratio * b)
        .collect();
    let half = t * (sample_variance(&residuals) / n as f64).sqrt() / y;
    Some(Interval {
        estimate: ratio,
        low: ratio - half,
        high: ratio + half,
        level,
    })
}

/// How often a `level` interval of one run should hold another run's estimate of the same
/// figure, both from `rounds` rounds of the same spread: the other estimate differs from
/// this one's by sqrt(2) of one estimate's error, so P(|T| <= t / sqrt 2) with n - 1 degrees
/// of freedom (83% for large n at 95%, not 95%: the interval is for the true value, and the
/// other estimate has an error of its own).
pub fn expected_cross_coverage(rounds: usize, level: f64) -> Option<f64> {
    if rounds < 2 {
        return None;
    }
    let df = (rounds - 1) as f64;
    let t = t_quantile(df, level)?;
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let bound = t / std::f64::consts::SQRT_2;
    Some(dist.cdf(bound) - dist.cdf(-bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_ratio_is_tight_and_a_wandering_one_is_wide() {
        let theirs = [100.0, 120.0, 90.0, 110.0, 105.0];
        let steady: Vec<f64> = theirs.iter().map(|v| v * 0.5).collect();
        let i = paired_ratio_interval(&steady, &theirs, 0.95).unwrap();
        assert!((i.estimate - 0.5).abs() < 1e-12);
        assert!(i.high - i.low < 1e-9, "{i:?}");
        let wandering = [40.0, 70.0, 45.0, 65.0, 50.0];
        let i = paired_ratio_interval(&wandering, &theirs, 0.95).unwrap();
        assert!(i.low < 0.5 && i.high > 0.5 && i.high - i.low > 0.1, "{i:?}");
    }

    #[test]
    fn too_few_rounds_or_a_denominator_near_zero_has_no_interval() {
        assert!(paired_ratio_interval(&[1.0, 2.0], &[1.0, 2.0], 0.95).is_none());
        assert!(paired_ratio_interval(&[1.0, 1.0, 1.0], &[1.0, -1.0, 0.5], 0.95).is_none());
        assert!(paired_ratio_interval(&[1.0, f64::NAN, 1.0], &[1.0, 1.0, 1.0], 0.95).is_none());
    }

    #[test]
    fn cross_coverage_tends_to_83_percent_at_95() {
        let large = expected_cross_coverage(1000, 0.95).unwrap();
        assert!((large - 0.834).abs() < 0.002, "{large}");
        let ten = expected_cross_coverage(10, 0.95).unwrap();
        assert!(ten > large && ten < 0.9, "{ten}");
    }

    /// Simulated runs of a figure whose rounds vary: the intervals hold the true ratio about
    /// 95% of the time, and other runs' estimates about as often as expected.
    #[test]
    fn intervals_cover_as_often_as_they_say() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut normal = || -> f64 {
            // Box-Muller.
            let (u, v): (f64, f64) = (rng.random(), rng.random());
            (-2.0 * u.max(1e-300).ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        };
        let rounds = 8;
        let runs: Vec<Interval> = (0..2000)
            .map(|_| {
                let theirs: Vec<f64> = (0..rounds).map(|_| 100.0 + 10.0 * normal()).collect();
                let ours: Vec<f64> = theirs.iter().map(|t| 0.8 * t + 5.0 * normal()).collect();
                paired_ratio_interval(&ours, &theirs, 0.95).unwrap()
            })
            .collect();
        let truth = runs
            .iter()
            .filter(|i| i.low <= 0.8 && 0.8 <= i.high)
            .count();
        let rate = truth as f64 / runs.len() as f64;
        assert!((rate - 0.95).abs() < 0.02, "{rate}");
        let cross = runs
            .windows(2)
            .filter(|w| w[0].low <= w[1].estimate && w[1].estimate <= w[0].high)
            .count() as f64
            / (runs.len() - 1) as f64;
        let expected = expected_cross_coverage(rounds, 0.95).unwrap();
        assert!((cross - expected).abs() < 0.03, "{cross} vs {expected}");
    }
}
