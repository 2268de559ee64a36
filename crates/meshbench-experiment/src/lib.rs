//! Experiments: what to run (profiles of scenarios x load points x repetitions) and the runner
//! that runs it on the local lab, cell by cell, writing `results.json` after every cell so that
//! nothing measured is lost.

mod application;
mod error;
mod handshakes;
pub mod limits;
mod placement;
pub mod platform;
mod profile;
mod runner;
mod spec;

pub use application::{Application, NAMESPACE};
pub use error::Error;
pub use placement::Placement;
pub use platform::LIVE_SERIES;
pub use profile::Scale;
pub use profile::{
    builtin_spec, profile_names, LoadKind, LoadPlan, OutlierPolicy, PointPlan, Profile,
    UntilDecidedPlan,
};
pub use runner::{CellId, Decide, Progress, RunOptions, Runner};
pub use spec::parse_spec;
