//! Benchmarks: meshbench's components measured side by side with their peers, in one run, on
//! the same target, with CPU pinning, reported as ratios against the project's targets.
//! Performance is measured here, never asserted in a unit test.

mod coverage;
mod dataplane;
mod floor;
mod loadgen;
mod pacing;
mod process;
mod table;

pub use coverage::{cross_coverage, render_coverage_markdown, Coverage, CoverageRow};
pub use dataplane::{bench_dataplane, DataplaneBenchOptions, Plane};
pub use loadgen::{bench_loadgen, LoadgenBenchOptions, LoadgenPeer};
pub use table::render_markdown;

/// The third-party tools the benchmarks run beside ours (binary, what runs it, how to get it):
/// what `meshbench doctor` looks for.
pub fn peers() -> [(&'static str, &'static str, &'static str); 5] {
    [
        ("fortio", "bench loadgen", loadgen::FORTIO_INSTALL),
        ("oha", "bench loadgen", loadgen::OHA_INSTALL),
        ("wrk", "bench loadgen", loadgen::WRK_INSTALL),
        (
            "ztunnel",
            "bench dataplane's ztunnel-loop",
            dataplane::ZTUNNEL_INSTALL,
        ),
        (
            "linkerd2-proxy",
            "bench dataplane's linkerd2-proxy",
            dataplane::LINKERD_INSTALL,
        ),
    ]
}

/// Where a peer of [`peers`] is: on PATH, or (linkerd2-proxy) where its build script caches
/// it.
pub fn locate_peer(binary: &str) -> Option<PathBuf> {
    match binary {
        "linkerd2-proxy" => dataplane::find_linkerd2_proxy(),
        _ => meshbench_netlab::which(binary),
    }
}

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run {tool}: {source}")]
    Spawn {
        tool: String,
        source: std::io::Error,
    },
    #[error("{tool} failed ({status}): {stderr}")]
    Failed {
        tool: String,
        status: String,
        stderr: String,
    },
    #[error("cannot read {tool}'s output: {reason}")]
    Output { tool: String, reason: String },
    #[error("peer {tool} is not installed; {install}")]
    MissingPeer { tool: String, install: String },
    #[error("cannot pin to CPU {cpu}: {source} (this machine has {cores} cores)")]
    Pin {
        cpu: usize,
        cores: usize,
        source: std::io::Error,
    },
    #[error("the target server did not start: {0}")]
    Target(String),
    #[error("a plane's network namespace: {0}")]
    Netns(meshbench_netlab::Error),
    #[error("cannot capture the requests on the wire: {0}")]
    Capture(#[from] meshbench_netlab::Error),
    #[error("cannot use {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}
