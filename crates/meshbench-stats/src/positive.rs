//! Intervals across repetitions for quantities that cannot be negative: latency quantiles,
//! rates, CPU. A Student-t interval of the mean is symmetric, so with three repetitions and
//! one slow one its lower end falls below zero, a latency that cannot happen. On the log
//! scale the interval is symmetric around the geometric mean and maps back to positive
//! bounds, and it widens upwards, where latency spreads. Where a value is zero (a cell without
//! a single response) there is no logarithm; a percentile bootstrap of the mean, which never
//! leaves the range of the values, stands in.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::{Distribution, Interval};

const BOOTSTRAP_ITERATIONS: usize = 2000;

/// How an interval of [`positive_interval`] was made; reports name it next to the figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositiveMethod {
    /// Geometric mean, Student-t interval of the logarithms mapped back.
    LogScaleT,
    /// Arithmetic mean, percentile bootstrap over the repetitions (some value was zero).
    BootstrapMean,
}

impl PositiveMethod {
    pub fn describe(self) -> &'static str {
        match self {
            PositiveMethod::LogScaleT => "geometric mean, log-scale t interval",
            PositiveMethod::BootstrapMean => "mean, percentile bootstrap (a value was zero)",
        }
    }
}

/// An interval at `level` that never reaches below zero. `None` with fewer than two values,
/// or when a value is negative or not a number (not such a quantity).
pub fn positive_interval(
    values: &[f64],
    level: f64,
    seed: u64,
) -> Option<(Interval, PositiveMethod)> {
    if values.len() < 2 || values.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return None;
    }
    if values.iter().all(|v| *v > 0.0) {
        return Some((log_scale_t(values, level), PositiveMethod::LogScaleT));
    }
    Some((
        bootstrap_mean(values, level, seed)?,
        PositiveMethod::BootstrapMean,
    ))
}

fn log_scale_t(values: &[f64], level: f64) -> Interval {
    let n = values.len() as f64;
    let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
    let mean = logs.iter().sum::<f64>() / n;
    let variance = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let t = StudentsT::new(0.0, 1.0, n - 1.0)
        .expect("n - 1 degrees of freedom are positive")
        .inverse_cdf(0.5 + level / 2.0);
    let half = t * (variance / n).sqrt();
    Interval {
        estimate: mean.exp(),
        low: (mean - half).exp(),
        high: (mean + half).exp(),
        level,
    }
}

fn bootstrap_mean(values: &[f64], level: f64, seed: u64) -> Option<Interval> {
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n as f64;
    let mut rng = StdRng::seed_from_u64(seed);
    let means: Vec<f64> = (0..BOOTSTRAP_ITERATIONS)
        .map(|_| (0..n).map(|_| values[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    let sorted = Distribution::from_samples(&means);
    let tail = (1.0 - level) / 2.0;
    Some(Interval {
        estimate: mean,
        low: sorted.quantile(tail)?,
        high: sorted.quantile(1.0 - tail)?,
        level,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::mean_confidence_interval;

    #[test]
    fn three_repetitions_with_a_slow_one_stay_above_zero_where_student_t_does_not() {
        let p99_ms = [0.9, 1.0, 4.0];
        let t = mean_confidence_interval(&p99_ms, 0.95).unwrap();
        assert!(t.low < 0.0, "the case this module exists for: {t:?}");
        let (interval, method) = positive_interval(&p99_ms, 0.95, 1).unwrap();
        assert_eq!(method, PositiveMethod::LogScaleT);
        // exp(mean(ln)) = cbrt(0.9 * 1.0 * 4.0) = 1.5326...
        assert!(
            (interval.estimate - 3.6_f64.cbrt()).abs() < 1e-9,
            "{interval:?}"
        );
        assert!(interval.low > 0.0 && interval.low < 0.9 && interval.high > 4.0);
    }

    #[test]
    fn a_zero_value_falls_back_to_a_bootstrap_within_the_values() {
        let (interval, method) = positive_interval(&[0.0, 10.0, 12.0], 0.95, 7).unwrap();
        assert_eq!(method, PositiveMethod::BootstrapMean);
        assert!((interval.estimate - 22.0 / 3.0).abs() < 1e-9);
        assert!(interval.low >= 0.0 && interval.high <= 12.0, "{interval:?}");
        assert_eq!(
            positive_interval(&[0.0, 10.0, 12.0], 0.95, 7).unwrap().0,
            interval
        );
    }

    #[test]
    fn too_few_or_negative_values_have_no_interval() {
        assert_eq!(positive_interval(&[1.0], 0.95, 1), None);
        assert_eq!(positive_interval(&[1.0, -1.0], 0.95, 1), None);
        assert_eq!(positive_interval(&[1.0, f64::NAN], 0.95, 1), None);
    }

    proptest! {
        #[test]
        fn no_interval_of_non_negative_values_reaches_below_zero(
            values in prop::collection::vec(prop_oneof![Just(0.0), 0.0..1e6_f64], 2..12),
            seed in any::<u64>(),
        ) {
            let (interval, _) = positive_interval(&values, 0.95, seed).unwrap();
            prop_assert!(interval.low >= 0.0, "{interval:?}");
            prop_assert!(interval.low <= interval.estimate && interval.estimate <= interval.high,
                "{interval:?}");
        }
    }
}
