//! Workloads: the applications the studies measured, as roles of the meshbench binary
//! (`meshbench workload <role>`). Each role is a hyper service served by [`serve`], which
//! owns the listener, optional mTLS, HTTP/1.1 + h2c detection and graceful shutdown.

mod echo;
mod serve;

pub use echo::{EchoConfig, EchoService};
pub use serve::{bind, BoundServer, ServeOptions};

use std::net::SocketAddr;

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
