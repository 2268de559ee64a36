//! Workloads: the applications the studies measured, as roles of the meshbench binary
//! (`meshbench workload <role>`). Each role is a hyper service served by [`serve`], which
//! owns the listener, optional mTLS, HTTP/1.1 + h2c detection and graceful shutdown.

mod echo;
mod serve;

pub use echo::{EchoConfig, EchoService};
pub use serve::{bind, BoundServer, ServeOptions};

use std::net::SocketAddr;

/// The runtime a workload server runs on: `threads` workers (default: one per core), each with
/// tight timer slack so configured delays are kept to the microsecond.
pub fn runtime(threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n.max(1));
    }
    builder
        .on_thread_start(meshbench_time::tighten_timer_slack)
        .enable_all()
        .build()
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Identity(#[from] meshbench_identity::Error),
}

impl Error {
    /// Bad input (address in use, unreadable certificate) rather than a machine failure.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::Bind { .. } => true,
            Error::Identity(e) => e.is_bad_input(),
        }
    }
}
