//! A distribution of values with counts (what an HDR histogram holds, or a list of samples),
//! and reading one out of the results' encoded HDR histograms.

use base64::Engine;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use meshbench_results::{EncodedHistogram, HISTOGRAM_ENCODING};

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("histogram encoding {0:?} is not {HISTOGRAM_ENCODING}")]
    Encoding(String),
    #[error("histogram data is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("histogram data is not an HdrHistogram V2 log entry: {0}")]
    Hdr(String),
}

/// Distinct values in increasing order, each with how often it occurred.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Distribution {
    points: Vec<(f64, u64)>,
    total: u64,
}

impl Distribution {
    pub fn from_samples(samples: &[f64]) -> Self {
        Self::from_weighted(samples.iter().map(|&v| (v, 1)))
    }

    /// Values need not be sorted or distinct; zero counts are dropped.
    pub fn from_weighted(values: impl IntoIterator<Item = (f64, u64)>) -> Self {
        let mut values: Vec<(f64, u64)> = values
            .into_iter()
            .filter(|&(v, c)| c > 0 && v.is_finite())
            .collect();
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut points: Vec<(f64, u64)> = Vec::with_capacity(values.len());
        for (value, count) in values {
            match points.last_mut() {
                Some(last) if last.0 == value => last.1 += count,
                _ => points.push((value, count)),
            }
        }
        let total = points.iter().map(|p| p.1).sum();
        Distribution { points, total }
    }

    /// The latency distribution of a load report, in microseconds. Each HDR bucket stands
    /// for its highest equivalent value, as the report's own percentiles do.
    pub fn from_hdr(encoded: &EncodedHistogram) -> Result<Self, DecodeError> {
        if encoded.encoding != HISTOGRAM_ENCODING {
            return Err(DecodeError::Encoding(encoded.encoding.clone()));
        }
        let bytes = base64::engine::general_purpose::STANDARD.decode(&encoded.data)?;
        let histogram: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| DecodeError::Hdr(format!("{e:?}")))?;
        Ok(Self::from_weighted(histogram.iter_recorded().map(|v| {
            (
                histogram.highest_equivalent(v.value_iterated_to()) as f64,
                v.count_at_value(),
            )
        })))
    }

    pub fn merge(&mut self, other: &Distribution) {
        *self = Self::from_weighted(self.points.iter().chain(&other.points).copied());
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    pub fn points(&self) -> &[(f64, u64)] {
        &self.points
    }

    pub fn mean(&self) -> Option<f64> {
        (self.total > 0).then(|| {
            self.points.iter().map(|&(v, c)| v * c as f64).sum::<f64>() / self.total as f64
        })
    }

    /// Sample standard deviation (n - 1), as [`crate::Summary`].
    pub fn std_dev(&self) -> Option<f64> {
        let mean = self.mean()?;
        (self.total > 1).then(|| {
            let squares: f64 = self
                .points
                .iter()
                .map(|&(v, c)| (v - mean).powi(2) * c as f64)
                .sum();
            (squares / (self.total - 1) as f64).sqrt()
        })
    }

    /// The smallest value with at least a fraction `q` of the distribution at or below it
    /// (the inverse of the empirical CDF); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let last = self.points.last()?;
        let rank = (q.clamp(0.0, 1.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for &(value, count) in &self.points {
            seen += count;
            if seen >= rank {
                return Some(value);
            }
        }
        Some(last.0)
    }

    /// (value, fraction at or below it) for each distinct value: the empirical CDF.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let mut seen = 0;
        self.points
            .iter()
            .map(|&(value, count)| {
                seen += count;
                (value, seen as f64 / self.total as f64)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_invert_the_empirical_cdf() {
        let d = Distribution::from_samples(&[3.0, 1.0, 2.0, 2.0]);
        assert_eq!(d.points(), &[(1.0, 1), (2.0, 2), (3.0, 1)]);
        assert_eq!(d.quantile(0.0), Some(1.0));
        assert_eq!(d.quantile(0.25), Some(1.0));
        assert_eq!(d.quantile(0.5), Some(2.0));
        assert_eq!(d.quantile(0.76), Some(3.0));
        assert_eq!(d.cdf().last(), Some(&(3.0, 1.0)));
        assert_eq!(d.mean(), Some(2.0));
        assert!((d.std_dev().unwrap() - (2.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(Distribution::default().quantile(0.5), None);
    }

    #[test]
    fn merging_adds_counts_of_equal_values() {
        let mut a = Distribution::from_samples(&[1.0, 2.0]);
        a.merge(&Distribution::from_samples(&[2.0, 5.0]));
        assert_eq!(a.points(), &[(1.0, 1), (2.0, 2), (5.0, 1)]);
        assert_eq!(a.len(), 4);
    }
}
