//! Workloads: the applications the studies measured, as roles of the meshbench binary
//! (`meshbench workload <role>`). Each role implements [`Role`]; [`RoleService`] adds the
//! health endpoint and request logging, and [`serve`] owns the listener, optional mTLS,
//! HTTP/1.1 + h2c detection and graceful shutdown. Roles that call other services share one
//! [`Caller`], which classifies every failure.

mod analyzer;
mod app;
mod calculator;
mod checker;
mod client;
mod counter;
mod echo;
mod experimenter;
mod fields;
mod file;
mod grpc_echo;
mod http;
mod mix;
mod serve;

pub use analyzer::{rtts_of, Analysis, Analyzer, ANALYZE_PATH};
pub use app::{App, Shutdown};
pub use calculator::{Calculator, Operation};
pub use checker::{CheckReport, CheckTarget, SecurityChecker, CHECK_PATH};
pub use client::{Call, Caller, MARKER_HEADER};
pub use counter::{CountReply, Counter, Hop, COUNT_PATH};
pub use echo::{Echo, EchoConfig};
pub use experimenter::{ExperimentResult, Experimenter, Workload, EXPERIMENT_PATH};
pub use file::{echo_config, grpc_echo_config, ExperimentOnce, WorkloadApp, WorkloadFile, STDOUT};
pub use grpc_echo::{grpc_echo_service, ping_request, proto, GrpcEcho, GrpcEchoConfig};
pub use http::{Reply, Role, RoleService, HEALTH_PATH};
pub use mix::{parse_delay, parse_size, parse_status, Mix, MixError};
pub use serve::{bind, BoundServer, ConnectionLimits, ServeOptions};

use meshbench_role::InputFault;

/// A runtime whose `threads` workers (default: one per core) run spawned tasks in the
/// background, each with tight timer slack so configured delays are kept to the microsecond:
/// for servers embedded in another program (tests, the lab's in-process parts).
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

/// The runtime of a role's own process (workload server, proxy, CA), which `block_on` drives
/// for the process's life: as [`runtime`], except that one thread means tokio's
/// current-thread scheduler. The process's own thread then runs every task, with no worker to
/// hand off to and no LIFO slot: a task another one wakes runs after those already ready, so
/// an HTTP/2 connection woken by many streams in one turn writes all their frames at once
/// instead of once per stream.
pub fn role_runtime(threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    if threads != Some(1) {
        return runtime(threads);
    }
    meshbench_time::tighten_timer_slack();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Bind(#[from] meshbench_net::BindError),
    #[error("{uri:?} is not a usable base URI: {problem}")]
    BadUri { uri: String, problem: String },
    #[error(transparent)]
    Identity(#[from] meshbench_identity::Error),
}

impl InputFault for Error {
    /// Bad input (address in use, unreadable certificate) rather than a machine failure.
    fn is_bad_input(&self) -> bool {
        match self {
            Error::Bind(_) | Error::BadUri { .. } => true,
            Error::Identity(e) => e.is_bad_input(),
        }
    }
}
