//! What every handler shares: the results directory, the secrets, the job queue and E3's
//! calculator.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::Rng;

use crate::e3::Calculator;
use crate::jobs::Jobs;

pub struct AppState {
    pub results_dir: PathBuf,
    pub token: Option<String>,
    /// This process's CSRF token: in every page, required back with every form.
    pub csrf: String,
    pub jobs: Jobs,
    pub calculator: Calculator,
    /// One E3 experiment at a time: two would measure each other.
    pub e3_running: tokio::sync::Mutex<()>,
    /// Whether runs may go to a cluster (serve was given one).
    pub cluster: bool,
    /// Event streams open now (at most [`MAX_WATCHERS`]).
    pub watchers: Arc<AtomicUsize>,
}

/// Event streams served at once; one more gets 503.
pub const MAX_WATCHERS: usize = 64;

/// One open event stream, counted until it is dropped.
pub struct WatcherSlot(Arc<AtomicUsize>);

impl WatcherSlot {
    pub fn take(watchers: &Arc<AtomicUsize>) -> Option<WatcherSlot> {
        let taken = watchers.fetch_add(1, Ordering::AcqRel);
        if taken >= MAX_WATCHERS {
            watchers.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(WatcherSlot(watchers.clone()))
    }
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl AppState {
    pub fn new(
        results_dir: PathBuf,
        token: Option<String>,
        jobs: Jobs,
        calculator: Calculator,
        cluster: bool,
    ) -> Self {
        AppState {
            results_dir,
            token,
            csrf: random_token(),
            jobs,
            calculator,
            e3_running: tokio::sync::Mutex::new(()),
            cluster,
            watchers: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// 128 random bits, hex.
fn random_token() -> String {
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_are_capped_and_a_closed_one_frees_its_slot() {
        let watchers = Arc::new(AtomicUsize::new(0));
        let slots: Vec<WatcherSlot> = (0..MAX_WATCHERS)
            .map(|_| WatcherSlot::take(&watchers).unwrap())
            .collect();
        assert!(WatcherSlot::take(&watchers).is_none());
        drop(slots.into_iter().next());
        assert!(WatcherSlot::take(&watchers).is_some());
    }
}
