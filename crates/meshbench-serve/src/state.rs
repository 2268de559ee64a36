//! What every handler shares: the results directory, the credentials and sessions, the job
//! queue and E3's calculator.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::e3::Calculator;
use crate::jobs::Jobs;
use crate::sessions::Sessions;

pub struct AppState {
    pub results_dir: PathBuf,
    /// The credential: given by the operator or made at start.
    pub token: String,
    pub sessions: Sessions,
    /// The session cookie's name, with the port in it: two servers on one host do not log
    /// each other out.
    pub cookie_name: String,
    /// The `Host` values answered: the server's own names and `--allowed-host`'s.
    pub allowed_hosts: Vec<String>,
    pub jobs: Jobs,
    pub calculator: Calculator,
    /// Whether runs may go to a cluster (serve was given one).
    pub cluster: bool,
    /// Event streams open now, per caller (at most [`MAX_WATCHERS`] in all and
    /// [`MAX_WATCHERS_PER_CLIENT`] each).
    pub watchers: Arc<Mutex<HashMap<String, usize>>>,
}

/// Event streams served at once; one more gets 503.
pub const MAX_WATCHERS: usize = 64;
/// Event streams one caller (a session, or the bearer token's scripts) may hold; one more gets
/// 429.
pub const MAX_WATCHERS_PER_CLIENT: usize = 8;

/// Why an event stream was not opened.
#[derive(Debug, PartialEq, Eq)]
pub enum NoSlot {
    AllTaken,
    ClientFull,
}

/// One open event stream, counted until it is dropped.
pub struct WatcherSlot {
    watchers: Arc<Mutex<HashMap<String, usize>>>,
    client: String,
}

impl WatcherSlot {
    pub fn take(
        watchers: &Arc<Mutex<HashMap<String, usize>>>,
        client: &str,
    ) -> Result<WatcherSlot, NoSlot> {
        let mut open = watchers.lock().unwrap_or_else(|p| p.into_inner());
        if open.values().sum::<usize>() >= MAX_WATCHERS {
            return Err(NoSlot::AllTaken);
        }
        let mine = open.entry(client.to_owned()).or_default();
        if *mine >= MAX_WATCHERS_PER_CLIENT {
            return Err(NoSlot::ClientFull);
        }
        *mine += 1;
        Ok(WatcherSlot {
            watchers: watchers.clone(),
            client: client.to_owned(),
        })
    }
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        let mut open = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_are_capped_per_client_and_in_all_and_a_closed_one_frees_its_slot() {
        let watchers = Arc::new(Mutex::new(HashMap::new()));
        let mut mine: Vec<WatcherSlot> = (0..MAX_WATCHERS_PER_CLIENT)
            .map(|_| WatcherSlot::take(&watchers, "a").unwrap())
            .collect();
        assert_eq!(
            WatcherSlot::take(&watchers, "a").err(),
            Some(NoSlot::ClientFull)
        );
        mine.pop();
        mine.push(WatcherSlot::take(&watchers, "a").unwrap());
        let others: Vec<WatcherSlot> = (0..)
            .map_while(|i| WatcherSlot::take(&watchers, &format!("client-{}", i / 4)).ok())
            .collect();
        assert_eq!(
            others.len(),
            MAX_WATCHERS - MAX_WATCHERS_PER_CLIENT,
            "the rest of the slots"
        );
        assert_eq!(
            WatcherSlot::take(&watchers, "new").err(),
            Some(NoSlot::AllTaken)
        );
    }
}
