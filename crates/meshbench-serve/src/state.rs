//! What every handler shares: the results directory, the secrets, the job queue and E3's
//! calculator.

use std::path::PathBuf;

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
        }
    }
}

/// 128 random bits, hex.
fn random_token() -> String {
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
