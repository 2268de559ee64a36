//! meshbench's load generator.
//!
//! The open-loop model sends requests at a constant rate spread evenly over C keep-alive
//! connections. Every request has an intended send time fixed in advance; its latency is
//! measured from that time (coordinated-omission corrected, as wrk2 does) and also from the
//! moment it was actually sent. When a connection is still busy at the next intended time the
//! request goes out late and its wait counts as latency; requests that could not be sent
//! before the end are counted as unsent rather than silently dropped.
//!
//! [`run_open_loop`] owns its tokio runtime so that the generator's threading (and timer
//! precision) is a property of the library, not of whoever calls it.

mod connection;
mod error;
mod histogram;
mod open_loop;
mod outcome;
mod report;
mod target;

pub use error::Error;
pub use histogram::LatencyRecorder;
pub use open_loop::{run_open_loop, OpenLoopConfig, OpenLoopResult};
pub use outcome::Outcome;
pub use target::Target;
