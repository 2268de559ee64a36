//! Errors of experiment specification and running.

use meshbench_role::InputFault;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown profile {name:?}; known profiles: {known}")]
    UnknownProfile { name: String, known: String },
    #[error("{field}: the profile has no {name:?}; it has: {known}")]
    UnknownSelection {
        field: &'static str,
        name: String,
        known: String,
    },
    #[error("{origin}: {field}: {problem}")]
    Spec {
        origin: String,
        field: String,
        problem: String,
    },
    #[error("cannot read the experiment spec {path}: {source}")]
    ReadSpec {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot resume {path}: {problem}")]
    Resume { path: PathBuf, problem: String },
    #[error("{path} already holds a run's results; choose another --out directory")]
    OutputExists { path: PathBuf },
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("setting up the lab: {0}")]
    Mesh(meshbench_meshes::Error),
    /// A platform's own failure before any cell (its network cannot be built, say), and
    /// whether it is bad input (not root, a missing tool).
    #[error("{source}")]
    Platform {
        source: Box<dyn std::error::Error + Send + Sync>,
        bad_input: bool,
    },
    /// Not a `source`: the message carries the cause once, also where only `Display` is
    /// shown (a partial run's status reason).
    #[error("cell {cell}: {error}")]
    Cell {
        cell: String,
        error: meshbench_meshes::Error,
    },
    #[error(transparent)]
    Results(#[from] meshbench_results::Error),
    #[error("the {application} application cannot run on the {backend} backend: {why}")]
    Backend {
        application: &'static str,
        backend: &'static str,
        why: &'static str,
    },
}

impl InputFault for Error {
    fn is_bad_input(&self) -> bool {
        match self {
            Error::UnknownProfile { .. }
            | Error::Spec { .. }
            | Error::ReadSpec { .. }
            | Error::Resume { .. }
            | Error::OutputExists { .. }
            | Error::UnknownSelection { .. }
            | Error::Backend { .. } => true,
            Error::Platform { bad_input, .. } => *bad_input,
            _ => false,
        }
    }
}
