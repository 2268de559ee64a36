//! Helpers for meshbench's tests: finding the external tools a test needs (failing under CI,
//! skipping with a reason elsewhere) and polling for a condition with a deadline instead of
//! sleeping and hoping.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Locates `tool` on PATH. Under CI (`CI` set) a missing tool fails the test, because CI's
/// set-up installs everything; elsewhere the test is skipped with a message saying why.
/// Returns `None` when the caller should return early.
pub fn require_tool(tool: &str) -> Option<PathBuf> {
    if let Some(path) = which(tool) {
        return Some(path);
    }
    let msg = format!(
        "`{tool}` is not installed; install it (scripts/test installs every test dependency)"
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// Polls `check` every 10 ms until it returns `Some`, panicking with `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
