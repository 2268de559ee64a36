//! Is one distribution different from another, by how much, and how sure are we? A
//! Mann-Whitney U test (no assumption of normality, which latencies never meet), Cliff's delta
//! as the effect size, and a bootstrap confidence interval for the difference of medians.
//! All work on [`Distribution`]s, so whole HDR histograms are compared without expanding
//! them into samples.

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Beta, Distribution as _};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};

use crate::Distribution;

/// The result of comparing `b` with `a` (a first: the reference, e.g. the baseline).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MannWhitney {
    pub n_a: u64,
    pub n_b: u64,
    /// U of `b`: how many (a, b) pairs have b > a, ties counting a half.
    pub u_b: f64,
    pub z: f64,
    /// Two-sided, normal approximation with tie and continuity corrections.
    pub p_value: f64,
    /// Cliff's delta: P(b > a) - P(b < a), from -1 to 1; positive when b tends to be larger.
    pub cliffs_delta: f64,
}

impl MannWhitney {
    pub fn significant(&self, alpha: f64) -> bool {
        self.p_value < alpha
    }

    /// Romano et al.'s thresholds for |delta|: the usual reading of Cliff's delta.
    pub fn magnitude(&self) -> &'static str {
        match self.cliffs_delta.abs() {
            d if d < 0.147 => "negligible",
            d if d < 0.33 => "small",
            d if d < 0.474 => "medium",
            _ => "large",
        }
    }
}

/// `None` when either side is empty.
pub fn mann_whitney(a: &Distribution, b: &Distribution) -> Option<MannWhitney> {
    let (n_a, n_b) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return None;
    }
    // Walk both sorted value lists together; a run of equal values shares the mean rank.
    let (pa, pb) = (a.points(), b.points());
    let (mut i, mut j) = (0, 0);
    let mut rank_before = 0.0;
    let (mut rank_sum_b, mut ties) = (0.0, 0.0);
    while i < pa.len() || j < pb.len() {
        let value = match (pa.get(i), pb.get(j)) {
            (Some(x), Some(y)) => x.0.min(y.0),
            (Some(x), None) => x.0,
            (None, Some(y)) => y.0,
            (None, None) => unreachable!(),
        };
        let mut count_a = 0.0;
        if pa.get(i).is_some_and(|x| x.0 == value) {
            count_a = pa[i].1 as f64;
            i += 1;
        }
        let mut count_b = 0.0;
        if pb.get(j).is_some_and(|y| y.0 == value) {
            count_b = pb[j].1 as f64;
            j += 1;
        }
        let t = count_a + count_b;
        let mean_rank = rank_before + (t + 1.0) / 2.0;
        rank_sum_b += count_b * mean_rank;
        ties += t * t * t - t;
        rank_before += t;
    }
    let u_b = rank_sum_b - n_b * (n_b + 1.0) / 2.0;
    let n = n_a + n_b;
    let mean = n_a * n_b / 2.0;
    let variance = n_a * n_b / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)));
    let (z, p_value) = if variance > 0.0 {
        let distance = ((u_b - mean).abs() - 0.5).max(0.0);
        let z = distance / variance.sqrt() * (u_b - mean).signum();
        let normal = Normal::standard();
        let p: f64 = 2.0 * normal.sf(z.abs());
        (z, p.min(1.0))
    } else {
        (0.0, 1.0)
    };
    Some(MannWhitney {
        n_a: a.len(),
        n_b: b.len(),
        u_b,
        z,
        p_value,
        cliffs_delta: 2.0 * u_b / (n_a * n_b) - 1.0,
    })
}

/// A point estimate with a confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    /// e.g. 0.95.
    pub level: f64,
}

impl Interval {
    pub fn excludes_zero(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// Percentile bootstrap of median(b) - median(a), resampling each side from its own
/// distribution. The median of n draws from a distribution F is F's inverse at the k-th
/// order statistic of n uniforms, which is Beta(k, n + 1 - k): so each resample costs one
/// Beta draw per side instead of n draws, and whole histograms are bootstrapped exactly.
/// (k = ceil(n/2): the lower median, the same for any n large enough to matter.) Seeded, so
/// a report regenerates identically.
pub fn bootstrap_median_difference(
    a: &Distribution,
    b: &Distribution,
    iterations: usize,
    level: f64,
    seed: u64,
) -> Option<Interval> {
    let estimate = b.quantile(0.5)? - a.quantile(0.5)?;
    let order_statistic = |d: &Distribution| {
        let n = d.len() as f64;
        let k = (n / 2.0).ceil();
        Beta::new(k, n + 1.0 - k).expect("k and n + 1 - k are positive")
    };
    let (beta_a, beta_b) = (order_statistic(a), order_statistic(b));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut differences: Vec<f64> = (0..iterations.max(1))
        .map(|_| {
            let median_a = a.quantile(beta_a.sample(&mut rng)).unwrap_or(0.0);
            let median_b = b.quantile(beta_b.sample(&mut rng)).unwrap_or(0.0);
            median_b - median_a
        })
        .collect();
    differences.sort_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    let sorted = Distribution::from_samples(&differences);
    Some(Interval {
        estimate,
        low: sorted.quantile(tail)?,
        high: sorted.quantile(1.0 - tail)?,
        level,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(range: std::ops::Range<u32>, scale: f64) -> Distribution {
        Distribution::from_samples(&range.map(|v| v as f64 * scale).collect::<Vec<_>>())
    }

    #[test]
    fn u_matches_a_hand_count_and_scipy() {
        // Pairs with b > a, ties halved: 2.5 + 3.5 + 4.5 + 3 x 5 = 25.5. scipy 1.x,
        // mannwhitneyu([3,4,5,6,7,8], [1,2,3,4,5], method="asymptotic",
        // use_continuity=True): statistic 25.5, p = 0.066015.
        let a = Distribution::from_samples(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let b = Distribution::from_samples(&[3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let t = mann_whitney(&a, &b).unwrap();
        assert_eq!(t.u_b, 25.5);
        assert!((t.p_value - 0.066015).abs() < 1e-5, "{t:?}");
        assert!((t.cliffs_delta - (2.0 * 25.5 / 30.0 - 1.0)).abs() < 1e-12);
        assert!(t.z > 0.0);
    }

    #[test]
    fn identical_distributions_are_not_different_and_shifted_ones_are() {
        let a = samples(0..2000, 1.0);
        let same = mann_whitney(&a, &a).unwrap();
        assert!(
            same.p_value > 0.9 && same.cliffs_delta.abs() < 1e-9,
            "{same:?}"
        );
        let shifted = samples(200..2200, 1.0);
        let t = mann_whitney(&a, &shifted).unwrap();
        assert!(t.significant(0.05) && t.cliffs_delta > 0.0, "{t:?}");
        assert_eq!(t.magnitude(), "small");
        assert_eq!(mann_whitney(&a, &Distribution::default()), None);
    }

    #[test]
    fn weighted_points_give_the_same_test_as_the_samples_they_stand_for() {
        let expanded = Distribution::from_samples(&[1.0, 1.0, 1.0, 4.0, 4.0, 9.0]);
        let weighted = Distribution::from_weighted([(9.0, 1), (1.0, 3), (4.0, 2)]);
        let other = Distribution::from_samples(&[2.0, 4.0, 8.0]);
        assert_eq!(
            mann_whitney(&expanded, &other),
            mann_whitney(&weighted, &other)
        );
    }

    #[test]
    fn bootstrap_interval_covers_the_shift_and_is_reproducible() {
        let a = samples(0..5000, 1.0);
        let b = samples(100..5100, 1.0);
        let ci = bootstrap_median_difference(&a, &b, 2000, 0.95, 7).unwrap();
        assert_eq!(ci.estimate, 100.0);
        assert!(
            ci.low < 100.0 && ci.high > 100.0 && ci.excludes_zero(),
            "{ci:?}"
        );
        assert_eq!(bootstrap_median_difference(&a, &b, 2000, 0.95, 7), Some(ci));
        let none = bootstrap_median_difference(&a, &a, 2000, 0.95, 7).unwrap();
        assert!(!none.excludes_zero(), "{none:?}");
    }
}
