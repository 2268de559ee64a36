//! Across runs: a mean with its confidence interval (Student's t), and a least-squares line
//! with R^2 (E1's memory against connections).

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::Interval;

/// Mean of `values` with a two-sided interval at `level`; `None` with fewer than two values.
pub fn mean_confidence_interval(values: &[f64], level: f64) -> Option<Interval> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
        .expect("n - 1 degrees of freedom are positive")
        .inverse_cdf(0.5 + level / 2.0);
    let half = t * (variance / n as f64).sqrt();
    Some(Interval {
        estimate: mean,
        low: mean - half,
        high: mean + half,
        level,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearFit {
    pub slope: f64,
    pub intercept: f64,
    pub r_squared: f64,
    pub n: usize,
}

impl LinearFit {
    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

/// Ordinary least squares of y on x; `None` with fewer than two points or no spread in x.
pub fn linear_fit(points: &[(f64, f64)]) -> Option<LinearFit> {
    let n = points.len();
    if n < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n as f64;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n as f64;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - mean_y).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let r_squared = if syy == 0.0 {
        1.0
    } else {
        sxy * sxy / (sxx * syy)
    };
    Some(LinearFit {
        slope,
        intercept: mean_y - slope * mean_x,
        r_squared,
        n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_interval_uses_students_t() {
        // mean 3, sd 1.5811, n 5: t(0.975, 4) = 2.7764 -> half-width 1.9632.
        let ci = mean_confidence_interval(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.95).unwrap();
        assert_eq!(ci.estimate, 3.0);
        assert!((ci.high - 3.0 - 1.9632).abs() < 1e-3, "{ci:?}");
        assert_eq!(mean_confidence_interval(&[1.0], 0.95), None);
    }

    #[test]
    fn a_line_is_fitted_exactly_and_noise_lowers_r_squared() {
        let exact: Vec<(f64, f64)> = (0..5).map(|x| (x as f64, 2.0 * x as f64 + 1.0)).collect();
        let fit = linear_fit(&exact).unwrap();
        assert!((fit.slope - 2.0).abs() < 1e-12 && (fit.intercept - 1.0).abs() < 1e-12);
        assert!((fit.r_squared - 1.0).abs() < 1e-12);
        assert_eq!(fit.at(10.0), 21.0);
        let noisy = [(0.0, 1.0), (1.0, 3.5), (2.0, 4.0), (3.0, 7.5)];
        assert!(linear_fit(&noisy).unwrap().r_squared < 0.99);
        assert_eq!(linear_fit(&[(1.0, 1.0), (1.0, 2.0)]), None);
    }
}
