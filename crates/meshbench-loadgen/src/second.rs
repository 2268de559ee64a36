//! One second of a run's measured window, as a thread records it: the unit the live series
//! hands over and the per-second statistics are made of.

use hdrhistogram::Histogram;

/// One second of the measured window (by completion time).
#[derive(Debug, Clone)]
pub struct SecondBucket {
    pub responses: u64,
    pub failures: u64,
    pub latency: Histogram<u64>,
}

impl Default for SecondBucket {
    fn default() -> Self {
        SecondBucket {
            responses: 0,
            failures: 0,
            // Auto-resizing: a second only costs memory for the range it saw.
            latency: Histogram::new(3).expect("3 significant digits are valid"),
        }
    }
}
