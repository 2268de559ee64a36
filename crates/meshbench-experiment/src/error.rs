//! Errors of experiment specification and running.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown profile {name:?}; known profiles: {known}")]
    UnknownProfile { name: String, known: String },
    #[error("{path} already holds a run's results; choose another --out directory")]
    OutputExists { path: PathBuf },
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("setting up identities: {0}")]
    Identity(#[from] meshbench_identity::Error),
    #[error("cell {cell}: {source}")]
    Lab {
        cell: String,
        source: meshbench_lab::Error,
    },
    #[error("cell {cell}: the load generator's result is missing or invalid: {source}")]
    LoadResult {
        cell: String,
        source: meshbench_results::Error,
    },
    #[error(transparent)]
    Results(#[from] meshbench_results::Error),
}

impl Error {
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Error::UnknownProfile { .. } | Error::OutputExists { .. }
        )
    }
}
