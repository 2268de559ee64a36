//! Descriptive statistics of one sample: everything E3 reports (mean, median, standard
//! deviation, RTT90/95/99, min/Q1/median/Q3/max, the max-vs-p99 outlier ratio) plus p99.9.
//!
//! Percentiles interpolate linearly between the closest ranks (Hyndman and Fan's type 7, the
//! default of numpy, R and spreadsheets), so our figures match what a reader recomputes from
//! the raw samples. The standard deviation is the sample one (n - 1 in the denominator).

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub std_dev: f64,
    pub min: f64,
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
    pub max: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    /// max / p99: how far the worst sample sits beyond the tail (E3's extreme-outlier ratio).
    /// `None` when p99 is zero.
    pub max_over_p99: Option<f64>,
}

impl Summary {
    /// `None` for an empty sample. NaN values are ignored: they are not measurements.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let count = sorted.len();
        let mean = sorted.iter().sum::<f64>() / count as f64;
        let std_dev = if count > 1 {
            let squares: f64 = sorted.iter().map(|v| (v - mean).powi(2)).sum();
            (squares / (count - 1) as f64).sqrt()
        } else {
            0.0
        };
        let p99 = percentile(&sorted, 99.0);
        let max = sorted[count - 1];
        Some(Summary {
            count,
            mean,
            std_dev,
            min: sorted[0],
            q1: percentile(&sorted, 25.0),
            median: percentile(&sorted, 50.0),
            q3: percentile(&sorted, 75.0),
            max,
            p90: percentile(&sorted, 90.0),
            p95: percentile(&sorted, 95.0),
            p99,
            p999: percentile(&sorted, 99.9),
            max_over_p99: (p99 != 0.0).then(|| max / p99),
        })
    }
}

/// The `p`th percentile (0..=100) of an ascending, non-empty sample, interpolating linearly
/// between closest ranks.
///
/// # Panics
/// On an empty sample.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty(), "percentile of an empty sample");
    let rank = (p.clamp(0.0, 100.0) / 100.0) * (sorted.len() - 1) as f64;
    let below = rank.floor() as usize;
    let above = rank.ceil() as usize;
    let weight = rank - below as f64;
    sorted[below] + (sorted[above] - sorted[below]) * weight
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_numpy_linear_interpolation() {
        // numpy.percentile([1, 2, 3, 4], [25, 50, 90]) == [1.75, 2.5, 3.7]
        let sorted = [1.0, 2.0, 3.0, 4.0];
        assert!((percentile(&sorted, 25.0) - 1.75).abs() < 1e-12);
        assert!((percentile(&sorted, 50.0) - 2.5).abs() < 1e-12);
        assert!((percentile(&sorted, 90.0) - 3.7).abs() < 1e-12);
        assert_eq!(percentile(&sorted, 0.0), 1.0);
        assert_eq!(percentile(&sorted, 100.0), 4.0);
    }

    #[test]
    fn summary_of_a_known_sample() {
        // 1..=100: mean 50.5, sample std dev 29.011491975882016 (numpy ddof=1).
        let values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&values).unwrap();
        assert_eq!(s.count, 100);
        assert!((s.mean - 50.5).abs() < 1e-12);
        assert!((s.std_dev - 29.011_491_975_882_016).abs() < 1e-9);
        assert_eq!((s.min, s.max), (1.0, 100.0));
        assert!((s.median - 50.5).abs() < 1e-12);
        assert!((s.q1 - 25.75).abs() < 1e-12);
        assert!((s.q3 - 75.25).abs() < 1e-12);
        assert!((s.p99 - 99.01).abs() < 1e-9);
        assert!((s.max_over_p99.unwrap() - 100.0 / 99.01).abs() < 1e-12);
    }

    #[test]
    fn an_empty_sample_has_no_summary_and_one_value_has_no_spread() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[f64::NAN]), None);
        let one = Summary::of(&[3.0]).unwrap();
        assert_eq!((one.std_dev, one.median, one.p999), (0.0, 3.0, 3.0));
    }
}
