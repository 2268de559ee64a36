//! meshbench's load generator.
//!
//! Four load models ([`LoadModel`]): a constant-rate open loop whose latency is measured from
//! each request's intended send time (coordinated-omission corrected, as wrk2 does) and also
//! from its actual send; a closed loop; E3's sequential groups; and E4's concurrent users.
//! Requests a busy connection could not send before the end are counted as unsent, never
//! silently dropped, and every sent request ends in exactly one [`Outcome`]. Requests are
//! HTTP/1.1, HTTP/2 (h2c or h2 over TLS) or unary gRPC calls ([`Protocol`]).
//!
//! [`run_load`] owns its threads and runtimes so that the generator's threading (and timer
//! precision) is a property of the library, not of whoever calls it.

mod config;
mod connection;
mod direct;
mod engine;
mod error;
pub mod export;
mod grpc;
mod histogram;
mod http1;
mod live;
mod merge;
mod outcome;
mod plan;
mod recorder;
mod report;
mod second;
mod spec;
mod target;

pub use config::{LoadConfig, LoadModel, Protocol, RequestSpec, Stop, Warmup};
pub use engine::{run_load, LoadResult};
pub use error::Error;
pub use grpc::DEFAULT_GRPC_METHOD;
pub use histogram::LatencyRecorder;
pub use merge::{merge_reports, MergeError};
pub use outcome::Outcome;
pub use recorder::{Recorder, RequestSample};
pub use second::SecondBucket;
pub use spec::{
    Body, ClientTlsSpec, LoadOutput, LoadSpec, RequestFile, DEFAULT_CONNECTIONS, DEFAULT_DURATION,
    DEFAULT_TIMEOUT, START_GATE_LIMIT,
};
pub use target::Target;
