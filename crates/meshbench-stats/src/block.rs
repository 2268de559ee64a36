//! Is a latency difference real when requests are not independent? Within a run, a request's
//! latency depends on the ones around it: a GC pause, a full queue, a busy core slow down
//! many neighbours at once. A test that treats every request as a sample (Mann-Whitney U, the
//! i.i.d. bootstrap) then counts one slow second as thousands of pieces of evidence, and two
//! runs of the same thing come out "different".
//!
//! The moving block bootstrap keeps that dependence: the unit is a second of the load
//! generator's per-second series, and whole blocks of consecutive seconds are resampled
//! (Kunsch 1989), so a slow spell moves as one. The block length comes from the series
//! itself (Politis and White 2004, with Patton, Politis and White's 2009 correction): long
//! where seconds stay alike for long, one where they are independent. The statistic is the
//! per-second quantile (median or p99) averaged over the seconds, each second weighted by
//! its responses. Blocks never cross from one cell into another: a cell is one repetition, a
//! separate run.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::Interval;

/// Fewer seconds than this on either side: no interval (a block bootstrap of two seconds says
/// nothing).
pub const MIN_SECONDS: usize = 3;

/// One second of a per-second series: its quantile and how many responses it had.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SecondValue {
    pub value: f64,
    pub responses: u64,
}

/// A difference of per-second statistics with its block bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockInterval {
    pub interval: Interval,
    /// The block length used (the larger of the two sides').
    pub block_seconds: usize,
    /// Seconds with responses on each side.
    pub seconds_a: usize,
    pub seconds_b: usize,
}

/// stat(b) - stat(a), where each side is one or more series (one per cell) and stat is the
/// response-weighted mean of the per-second values. Seconds without responses carry no
/// quantile and are left out. `None` when either side has fewer than [`MIN_SECONDS`].
pub fn block_bootstrap_difference(
    a: &[Vec<SecondValue>],
    b: &[Vec<SecondValue>],
    iterations: usize,
    level: f64,
    seed: u64,
) -> Option<BlockInterval> {
    let (a, b) = (Side::new(a)?, Side::new(b)?);
    let estimate = b.statistic_of_all() - a.statistic_of_all();
    let mut rng = StdRng::seed_from_u64(seed);
    let iterations = iterations.max(2);
    let draws_a: Vec<f64> = (0..iterations).map(|_| a.resample(&mut rng)).collect();
    let draws_b: Vec<f64> = (0..iterations).map(|_| b.resample(&mut rng)).collect();
    let (var_a, var_b) = (variance(&draws_a), variance(&draws_b));
    let se = (var_a + var_b).sqrt();
    // A few dozen seconds hold only a few independent blocks: the spread is known to that
    // many degrees of freedom (Welch-Satterthwaite over the blocks), so the interval uses t,
    // not the bootstrap's own percentiles, which are too narrow for so few blocks.
    let df = |side: &Side| (side.seconds as f64 / side.block as f64 - 1.0).max(1.0);
    let welch = if var_a + var_b > 0.0 {
        (var_a + var_b).powi(2) / (var_a.powi(2) / df(&a) + var_b.powi(2) / df(&b))
    } else {
        df(&a) + df(&b)
    };
    let t = StudentsT::new(0.0, 1.0, welch.max(1.0))
        .ok()?
        .inverse_cdf(0.5 + level / 2.0);
    Some(BlockInterval {
        interval: Interval {
            estimate,
            low: estimate - t * se,
            high: estimate + t * se,
            level,
        },
        block_seconds: a.block.max(b.block),
        seconds_a: a.seconds,
        seconds_b: b.seconds,
    })
}

/// One side's per-second statistic (the response-weighted mean of its per-second values,
/// over one series per cell) with the spread a block bootstrap gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockEstimate {
    pub estimate: f64,
    pub standard_error: f64,
    /// Independent blocks less one: how well the spread is known.
    pub degrees_of_freedom: f64,
    pub block_seconds: usize,
    pub seconds: usize,
}

/// [`BlockEstimate`] of one side; `None` with fewer than [`MIN_SECONDS`] seconds.
pub fn block_bootstrap_estimate(
    series: &[Vec<SecondValue>],
    iterations: usize,
    seed: u64,
) -> Option<BlockEstimate> {
    let side = Side::new(series)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let draws: Vec<f64> = (0..iterations.max(2))
        .map(|_| side.resample(&mut rng))
        .collect();
    Some(BlockEstimate {
        estimate: side.statistic_of_all(),
        standard_error: variance(&draws).sqrt(),
        degrees_of_freedom: (side.seconds as f64 / side.block as f64 - 1.0).max(1.0),
        block_seconds: side.block,
        seconds: side.seconds,
    })
}

/// The interval at `level` of sum(coefficient x estimate) over independent sides (separate
/// cells): standard errors add in quadrature and the degrees of freedom follow
/// Welch-Satterthwaite, as in [`block_bootstrap_difference`]. `None` without terms.
pub fn combined_interval(terms: &[(f64, BlockEstimate)], level: f64) -> Option<Interval> {
    if terms.is_empty() {
        return None;
    }
    let estimate: f64 = terms.iter().map(|(c, e)| c * e.estimate).sum();
    let parts: Vec<(f64, f64)> = terms
        .iter()
        .map(|(c, e)| ((c * e.standard_error).powi(2), e.degrees_of_freedom))
        .collect();
    welch_interval(estimate, &parts, level)
}

/// `estimate` +- t x the root of the summed variances of `parts` (variance, degrees of
/// freedom), t at `level` with the degrees of freedom by Welch-Satterthwaite. `None` when the
/// half-width is not finite.
fn welch_interval(estimate: f64, parts: &[(f64, f64)], level: f64) -> Option<Interval> {
    let variance: f64 = parts.iter().map(|(v, _)| v).sum();
    let df = if variance > 0.0 {
        variance.powi(2) / parts.iter().map(|(v, df)| v * v / df).sum::<f64>()
    } else {
        parts.iter().map(|(_, df)| df).sum()
    };
    let t = StudentsT::new(0.0, 1.0, df.max(1.0))
        .ok()?
        .inverse_cdf(0.5 + level / 2.0);
    let half = t * variance.sqrt();
    half.is_finite().then_some(Interval {
        estimate,
        low: estimate - half,
        high: estimate + half,
        level,
    })
}

/// The interval at `level` of the ratio X / Y, where X = sum(a_i E_i) and Y = sum(b_i E_i)
/// over independent estimates E_i (separate runs; one may appear in both, as a shared
/// baseline does in two added latencies). By the delta method: dR/dE_i = (a_i - R b_i) / Y,
/// so the variance is the sum of those squared times each E_i's variance, with the degrees of
/// freedom by Welch-Satterthwaite as in [`combined_interval`]. `None` when the lengths differ,
/// nothing is finite, or Y's own interval reaches zero (Fieller's condition): a ratio over a
/// denominator that may be zero has no bounded interval.
pub fn ratio_interval(
    estimates: &[BlockEstimate],
    numerator: &[f64],
    denominator: &[f64],
    level: f64,
) -> Option<Interval> {
    if estimates.is_empty()
        || numerator.len() != estimates.len()
        || denominator.len() != estimates.len()
    {
        return None;
    }
    let dot = |c: &[f64]| -> f64 { c.iter().zip(estimates).map(|(c, e)| c * e.estimate).sum() };
    let (x, y) = (dot(numerator), dot(denominator));
    if y.is_nan() || y <= 0.0 || !x.is_finite() {
        return None;
    }
    // Fieller's condition: where the denominator is not clearly above zero, the ratio's
    // true interval is unbounded and the delta method's linearization would understate it
    // (a noisy baseline subtracted from both sides makes any ratio look precise).
    let denominator_parts: Vec<(f64, f64)> = estimates
        .iter()
        .zip(denominator)
        .map(|(e, b)| ((b * e.standard_error).powi(2), e.degrees_of_freedom))
        .collect();
    let denominator_interval = welch_interval(y, &denominator_parts, level)?;
    if denominator_interval.low <= 0.0 {
        return None;
    }
    let ratio = x / y;
    let parts: Vec<(f64, f64)> = estimates
        .iter()
        .zip(numerator.iter().zip(denominator))
        .map(|(e, (a, b))| {
            let derivative = (a - ratio * b) / y;
            (
                (derivative * e.standard_error).powi(2),
                e.degrees_of_freedom,
            )
        })
        .collect();
    welch_interval(ratio, &parts, level)
}

/// The block length for the mean of `segments` (one series per cell): Politis and White's
/// automatic choice for the circular or moving block bootstrap. The autocorrelations are
/// read up to the first lag after which K_N of them in a row are negligible (within
/// 2 sqrt(log10 n / n)); twice that lag bounds a flat-top lag window that estimates the
/// spectral density at zero and its derivative, and the block length that minimises the
/// variance estimate's error follows: (2 G^2 / D)^(1/3) n^(1/3), doubled (see below). At
/// least 1, at most
/// min(3 sqrt n, n / 3) and the longest segment.
pub fn block_length(segments: &[Vec<f64>]) -> usize {
    let n: usize = segments.iter().map(Vec::len).sum();
    let longest = segments.iter().map(Vec::len).max().unwrap_or(0);
    if n < 4 {
        return 1;
    }
    let nf = n as f64;
    let centred: Vec<Vec<f64>> = segments
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mean = s.iter().sum::<f64>() / s.len() as f64;
            s.iter().map(|v| v - mean).collect()
        })
        .collect();
    let autocovariance = |lag: usize| -> f64 {
        centred
            .iter()
            .map(|s| {
                s.iter()
                    .zip(s.iter().skip(lag))
                    .map(|(x, y)| x * y)
                    .sum::<f64>()
            })
            .sum::<f64>()
            / nf
    };
    let r0 = autocovariance(0);
    if r0 <= 0.0 {
        return 1;
    }
    let max_lag = longest.saturating_sub(1);
    let correlations: Vec<f64> = (0..=max_lag).map(|k| autocovariance(k) / r0).collect();
    let threshold = 2.0 * (nf.log10() / nf).sqrt();
    let run = (nf.log10().sqrt().ceil() as usize).max(5);
    let negligible_after = (0..=max_lag)
        .find(|&m| {
            (1..=run).all(|j| {
                correlations
                    .get(m + j)
                    .is_none_or(|rho| rho.abs() < threshold)
            })
        })
        .unwrap_or(max_lag);
    let window = (2 * negligible_after).min(max_lag);
    if window == 0 {
        return 1;
    }
    let flat_top = |t: f64| {
        let t = t.abs();
        if t <= 0.5 {
            1.0
        } else if t <= 1.0 {
            2.0 * (1.0 - t)
        } else {
            0.0
        }
    };
    let (mut g, mut spectral) = (0.0, r0);
    for k in 1..=window {
        let weighted = flat_top(k as f64 / window as f64) * autocovariance(k);
        g += 2.0 * k as f64 * weighted;
        spectral += 2.0 * weighted;
    }
    let d = 4.0 / 3.0 * spectral * spectral;
    if d <= 0.0 || g == 0.0 {
        return 1;
    }
    // Twice the length that is best for estimating the variance: an interval needs the
    // variance not to be underestimated more than it needs it precise, and on simulated
    // series (the tests) twice the length halved the false alarms of strongly dependent
    // seconds without costing independent ones anything.
    let optimal = 2.0 * (2.0 * g * g / d).cbrt() * nf.cbrt();
    let cap = (3.0 * nf.sqrt()).min(nf / 3.0).min(longest as f64).max(1.0);
    (optimal.ceil().clamp(1.0, cap)) as usize
}

struct Side {
    segments: Vec<Vec<SecondValue>>,
    /// (segment, first second) of every block of `block` consecutive seconds; a segment
    /// shorter than a block is one block of its own length.
    blocks: Vec<(usize, usize)>,
    block: usize,
    seconds: usize,
}

impl Side {
    fn new(series: &[Vec<SecondValue>]) -> Option<Side> {
        let segments: Vec<Vec<SecondValue>> = series
            .iter()
            .map(|s| {
                s.iter()
                    .copied()
                    .filter(|v| v.responses > 0 && v.value.is_finite())
                    .collect::<Vec<_>>()
            })
            .filter(|s| !s.is_empty())
            .collect();
        let seconds: usize = segments.iter().map(Vec::len).sum();
        if seconds < MIN_SECONDS {
            return None;
        }
        let values: Vec<Vec<f64>> = segments
            .iter()
            .map(|s| s.iter().map(|v| v.value).collect())
            .collect();
        let block = block_length(&values);
        let blocks = segments
            .iter()
            .enumerate()
            .flat_map(|(i, s)| (0..=s.len().saturating_sub(block)).map(move |start| (i, start)))
            .collect();
        Some(Side {
            segments,
            blocks,
            block,
            seconds,
        })
    }

    fn statistic_of_all(&self) -> f64 {
        weighted_mean(self.segments.iter().flatten())
    }

    /// Blocks drawn with replacement until they hold as many seconds as the side has.
    fn resample(&self, rng: &mut StdRng) -> f64 {
        let (mut sum, mut weight, mut taken) = (0.0, 0.0, 0);
        while taken < self.seconds {
            let (segment, start) = self.blocks[rng.random_range(0..self.blocks.len())];
            let seconds = &self.segments[segment];
            let end = (start + self.block).min(seconds.len());
            for second in &seconds[start..end] {
                if taken == self.seconds {
                    break;
                }
                sum += second.value * second.responses as f64;
                weight += second.responses as f64;
                taken += 1;
            }
        }
        sum / weight
    }
}

fn variance(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
}

fn weighted_mean<'a>(seconds: impl Iterator<Item = &'a SecondValue>) -> f64 {
    let (sum, weight) = seconds.fold((0.0, 0.0), |(sum, weight), s| {
        (
            sum + s.value * s.responses as f64,
            weight + s.responses as f64,
        )
    });
    sum / weight
}

#[cfg(test)]
mod tests {
    use rand_distr::{Distribution as _, Normal};

    use super::*;

    fn estimate(estimate: f64, standard_error: f64) -> BlockEstimate {
        BlockEstimate {
            estimate,
            standard_error,
            degrees_of_freedom: 20.0,
            block_seconds: 1,
            seconds: 21,
        }
    }

    #[test]
    fn a_ratio_s_interval_follows_its_parts_and_a_shared_baseline_counts_once() {
        // Exact parts: the interval is the point.
        let exact = ratio_interval(
            &[estimate(3.0, 0.0), estimate(2.0, 0.0)],
            &[1.0, 0.0],
            &[0.0, 1.0],
            0.95,
        )
        .unwrap();
        assert_eq!((exact.estimate, exact.low, exact.high), (1.5, 1.5, 1.5));
        // Added latencies over one baseline: (ours - base) / (peer - base).
        let (ours, peer, base) = (
            estimate(300.0, 5.0),
            estimate(200.0, 5.0),
            estimate(100.0, 5.0),
        );
        let added = ratio_interval(
            &[ours, peer, base],
            &[1.0, 0.0, -1.0],
            &[0.0, 1.0, -1.0],
            0.95,
        )
        .unwrap();
        assert!((added.estimate - 2.0).abs() < 1e-12);
        assert!(added.low < 2.0 && added.high > 2.0);
        // The baseline's noise moves both differences together: with it alone noisy, the
        // ratio's spread is (1 - R) / Y times its error, not the sum of two independent ones.
        let only_base = ratio_interval(
            &[
                estimate(300.0, 0.0),
                estimate(200.0, 0.0),
                estimate(100.0, 5.0),
            ],
            &[1.0, 0.0, -1.0],
            &[0.0, 1.0, -1.0],
            0.95,
        )
        .unwrap();
        let t = StudentsT::new(0.0, 1.0, 20.0).unwrap().inverse_cdf(0.975);
        assert!(
            (only_base.high - 2.0 - t * 5.0 / 100.0).abs() < 1e-9,
            "{only_base:?}"
        );
        // A peer no slower than the baseline: no ratio to speak of.
        assert!(ratio_interval(
            &[ours, base, base],
            &[1.0, 0.0, -1.0],
            &[0.0, 1.0, -1.0],
            0.95
        )
        .is_none());
        assert!(ratio_interval(&[ours], &[1.0, 0.0], &[0.0, 1.0], 0.95).is_none());
        // A peer slower than the baseline by less than the baseline's own noise: the ratio's
        // interval is unbounded (Fieller), so none is given.
        let noisy_base = estimate(100.0, 60.0);
        let slightly_slower = estimate(150.0, 5.0);
        assert!(ratio_interval(
            &[ours, slightly_slower, noisy_base],
            &[1.0, 0.0, -1.0],
            &[0.0, 1.0, -1.0],
            0.95
        )
        .is_none());
    }

    #[test]
    fn a_combination_of_one_side_is_that_side_and_two_sides_widen_it() {
        let mut rng = StdRng::seed_from_u64(3);
        let noise = Normal::new(0.0, 1.0).unwrap();
        let side = |mean: f64, rng: &mut StdRng| -> Vec<Vec<SecondValue>> {
            vec![(0..60)
                .map(|_| SecondValue {
                    value: mean + noise.sample(rng),
                    responses: 100,
                })
                .collect()]
        };
        // Independent seconds: the 95% interval of one side covers the true mean about 95%
        // of the time.
        let covered = (0..200)
            .filter(|i| {
                let e = block_bootstrap_estimate(&side(10.0, &mut rng), 300, *i).unwrap();
                let alone = combined_interval(&[(1.0, e)], 0.95).unwrap();
                assert_eq!(alone.estimate, e.estimate);
                alone.low < 10.0 && 10.0 < alone.high
            })
            .count();
        assert!((176..=198).contains(&covered), "covered {covered} of 200");
        let (a, b) = (side(10.0, &mut rng), side(12.0, &mut rng));
        let ea = block_bootstrap_estimate(&a, 500, 1).unwrap();
        let eb = block_bootstrap_estimate(&b, 500, 1).unwrap();
        let mean = a[0].iter().map(|s| s.value).sum::<f64>() / 60.0;
        assert!((ea.estimate - mean).abs() < 1e-9, "{ea:?}");
        // 60 seconds of unit noise: the mean's standard error is near 1/sqrt(60).
        assert!((0.06..0.25).contains(&ea.standard_error), "{ea:?}");
        let alone = combined_interval(&[(1.0, ea)], 0.95).unwrap();
        let difference = combined_interval(&[(-1.0, ea), (1.0, eb)], 0.95).unwrap();
        assert!(difference.low > 0.0, "2 apart is clear: {difference:?}");
        assert!(difference.high - difference.low > alone.high - alone.low);
        assert_eq!(combined_interval(&[], 0.95), None);
        assert_eq!(block_bootstrap_estimate(&[vec![]], 10, 1), None);
    }

    fn series(values: &[f64]) -> Vec<SecondValue> {
        values
            .iter()
            .map(|&value| SecondValue {
                value,
                responses: 100,
            })
            .collect()
    }

    /// A wandering series: each second is phi times its predecessor plus noise (AR(1)), as a
    /// machine's background load makes latency wander.
    fn wandering(seconds: usize, level: f64, seed: u64, phi: f64) -> Vec<SecondValue> {
        let mut rng = StdRng::seed_from_u64(seed);
        let noise = Normal::new(0.0, 20.0).unwrap();
        let mut x = 0.0;
        let values: Vec<f64> = (0..seconds)
            .map(|_| {
                x = phi * x + noise.sample(&mut rng);
                level + x
            })
            .collect();
        series(&values)
    }

    #[test]
    fn a_constant_shift_is_found_and_reproducible() {
        let a = vec![wandering(60, 500.0, 1, 0.9)];
        let b: Vec<Vec<SecondValue>> = a
            .iter()
            .map(|s| {
                s.iter()
                    .map(|v| SecondValue {
                        value: v.value + 200.0,
                        ..*v
                    })
                    .collect()
            })
            .collect();
        let d = block_bootstrap_difference(&a, &b, 2000, 0.95, 3).unwrap();
        assert!((d.interval.estimate - 200.0).abs() < 1e-9, "{d:?}");
        assert!(d.interval.excludes_zero(), "{d:?}");
        assert!(
            d.block_seconds > 1,
            "seconds that wander together go in blocks: {d:?}"
        );
        assert_eq!((d.seconds_a, d.seconds_b), (60, 60));
        assert_eq!(block_bootstrap_difference(&a, &b, 2000, 0.95, 3), Some(d));
    }

    /// How often a 95% interval calls two runs of the same wandering process different, out
    /// of 200 pairs of `seconds`-long runs, with our blocks and with every second on its own.
    fn false_alarms(phi: f64, seconds: usize) -> (usize, usize) {
        let (mut with_blocks, mut independent) = (0, 0);
        for trial in 0..200 {
            let a = vec![wandering(seconds, 500.0, 2 * trial, phi)];
            let b = vec![wandering(seconds, 500.0, 2 * trial + 1, phi)];
            let d = block_bootstrap_difference(&a, &b, 400, 0.95, trial).unwrap();
            with_blocks += usize::from(d.interval.excludes_zero());
            let single = |s: &Vec<SecondValue>| s.iter().map(|v| vec![*v]).collect::<Vec<_>>();
            let i = block_bootstrap_difference(&single(&a[0]), &single(&b[0]), 400, 0.95, trial)
                .unwrap();
            independent += usize::from(i.interval.excludes_zero());
        }
        (with_blocks, independent)
    }

    #[test]
    fn the_same_process_twice_is_rarely_called_different() {
        // Seconds that wander together (AR(1), phi 0.7), one minute per run: counted as
        // independent, 86 of 200 pairs came out "different" when this was written; with the
        // blocks, 28 (the nominal rate is 10 of 200).
        let (with_blocks, independent) = false_alarms(0.7, 60);
        assert!(
            with_blocks <= 40,
            "blocks {with_blocks}, independent {independent}"
        );
        assert!(
            independent >= 2 * with_blocks,
            "blocks {with_blocks}, independent {independent}"
        );
        // Independent seconds: the blocks cost nothing (12 and 11 of 200 when written).
        let (with_blocks, _) = false_alarms(0.0, 60);
        assert!(with_blocks <= 20, "blocks {with_blocks}");
    }

    #[test]
    fn blocks_stay_inside_their_cell_and_empty_seconds_do_not_count() {
        let mut a = series(&[100.0, 100.0]);
        a.push(SecondValue {
            value: 9e9,
            responses: 0,
        });
        let too_short =
            block_bootstrap_difference(&[a.clone()], &[series(&[1.0, 2.0, 3.0])], 100, 0.95, 1);
        assert_eq!(too_short, None, "two seconds with responses are too few");
        // A block never outgrows a cell: the trend inside each would ask for long blocks.
        let trending: Vec<Vec<f64>> = (0..4)
            .map(|cell| (0..5).map(|s| f64::from(cell * 10 + s)).collect())
            .collect();
        assert!(block_length(&trending) <= 5, "{}", block_length(&trending));
        // Independent seconds need no blocks.
        let mut rng = StdRng::seed_from_u64(5);
        let noise: Vec<f64> = (0..120).map(|_| rng.random_range(0.0..1.0)).collect();
        assert!(block_length(&[noise]) <= 2);
    }
}
