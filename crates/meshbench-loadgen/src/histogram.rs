//! Latency recording: HDR histograms in microseconds (1 µs to 1 h, 3 significant digits), one
//! per worker, merged exactly at the end.

use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use meshbench_results::{EncodedHistogram, LatencySummary, HISTOGRAM_ENCODING};

const MAX_US: u64 = 3_600_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// Records a latency into an auto-resizing histogram (a per-second bucket, which costs memory
/// only for the range it saw), growing it up to the same hour as [`LatencyRecorder`].
/// `saturating_record` would not grow it: it clamps to the current top, which for a fresh
/// histogram is about 2 ms.
pub(crate) fn record_growing(histogram: &mut Histogram<u64>, latency_ns: u64) {
    let us = (latency_ns / 1_000).clamp(1, MAX_US);
    if histogram.record(us).is_err() {
        // Growing fails only where usize cannot index the counts (32-bit targets): keep
        // the sample at the top rather than lose it.
        histogram.saturating_record(us);
    }
}

#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    histogram: Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        LatencyRecorder {
            histogram: Histogram::new_with_bounds(1, MAX_US, SIGNIFICANT_DIGITS)
                .expect("static histogram bounds are valid"),
        }
    }
}

impl LatencyRecorder {
    pub fn record_ns(&mut self, latency_ns: u64) {
        // Sub-microsecond values are recorded as 1 µs (the floor of the histogram) and longer
        // than an hour as an hour: saturate rather than lose the sample.
        let us = (latency_ns / 1_000).clamp(1, MAX_US);
        self.histogram.saturating_record(us);
    }

    pub fn merge(&mut self, other: &LatencyRecorder) {
        self.histogram
            .add(&other.histogram)
            .expect("histograms with identical bounds always merge");
    }

    pub fn histogram(&self) -> &Histogram<u64> {
        &self.histogram
    }

    pub fn summary(&self) -> LatencySummary {
        let h = &self.histogram;
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: h.len(),
            min_us: h.min(),
            mean_us: h.mean(),
            stddev_us: h.stdev(),
            p50_us: h.value_at_quantile(0.50),
            p75_us: h.value_at_quantile(0.75),
            p90_us: h.value_at_quantile(0.90),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p99_9_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }

    /// The distribution of a report, if it is one this recorder wrote.
    pub fn decode(encoded: &EncodedHistogram) -> Option<LatencyRecorder> {
        use hdrhistogram::serialization::Deserializer;
        if encoded.encoding != HISTOGRAM_ENCODING || encoded.unit != "us" {
            return None;
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&encoded.data)
            .ok()?;
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .ok()?;
        let mut recorder = LatencyRecorder::default();
        recorder.histogram.add(&decoded).ok()?;
        Some(recorder)
    }

    pub fn encode(&self) -> EncodedHistogram {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.histogram, &mut bytes)
            .expect("serializing into memory cannot fail");
        EncodedHistogram {
            encoding: HISTOGRAM_ENCODING.to_owned(),
            unit: "us".to_owned(),
            significant_digits: SIGNIFICANT_DIGITS,
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_worker_histograms_equals_recording_everything_in_one() {
        let mut all = LatencyRecorder::default();
        let mut workers = vec![LatencyRecorder::default(); 4];
        for i in 0..10_000u64 {
            let ns = (i * 7919 % 50_000 + 1) * 1_000;
            all.record_ns(ns);
            workers[(i % 4) as usize].record_ns(ns);
        }
        let mut merged = LatencyRecorder::default();
        for w in &workers {
            merged.merge(w);
        }
        assert_eq!(merged.histogram(), all.histogram());
        assert_eq!(merged.summary(), all.summary());
    }

    #[test]
    fn encoded_histogram_decodes_to_the_same_distribution() {
        use hdrhistogram::serialization::Deserializer;
        let mut rec = LatencyRecorder::default();
        for us in [120, 150, 151, 900, 200_000] {
            rec.record_ns(us * 1_000);
        }
        let encoded = rec.encode();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.data)
            .unwrap();
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .unwrap();
        assert_eq!(&decoded, rec.histogram());
    }
}
