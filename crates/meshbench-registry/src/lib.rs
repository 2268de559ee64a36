//! `meshbench image push`: an OCI image-layout archive (as `meshbench image build` writes it)
//! pushed to a registry over the distribution API, so that a cluster that pulls its images
//! (kind with a registry, k3s, EKS, GKE) runs meshbench's. No Docker: the archive is read
//! ([`layout`]), the reference parsed as Docker reads it ([`reference`]), the credentials found
//! where Docker's tools keep them ([`credentials`]) and the blobs and manifest sent
//! ([`client`]), over HTTPS unless plain HTTP is asked for.

pub mod client;
pub mod credentials;
pub mod layout;
pub mod reference;

use std::path::PathBuf;

pub use client::{push, PushOptions, Pushed};
pub use credentials::{default_docker_config, from_docker_config, Credentials};
pub use layout::{read_archive, Image};
pub use reference::ImageRef;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("image reference {reference:?}: {why}")]
    BadReference { reference: String, why: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an image archive meshbench can push: {why}")]
    BadArchive { path: PathBuf, why: String },
    #[error("the Docker config {path}: {why}")]
    DockerConfig { path: PathBuf, why: String },
    #[error("the credential helper {helper}: {why}")]
    CredentialHelper { helper: String, why: String },
    #[error("--ca-certs {path}: {why}")]
    CaCerts { path: PathBuf, why: String },
    #[error("{0}")]
    Http(String),
    #[error("the registry's protocol: {0}")]
    Protocol(String),
    #[error("{registry} refused access: {why}")]
    Unauthorized { registry: String, why: String },
    #[error("{what}: the registry answered {status}: {message}")]
    Registry {
        what: String,
        status: u16,
        message: String,
    },
}

/// A reference, archive, configuration or credential the user gave that does not hold is
/// bad input; a registry that refuses or cannot be reached is not.
impl meshbench_role::InputFault for Error {
    fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Error::BadReference { .. }
                | Error::BadArchive { .. }
                | Error::DockerConfig { .. }
                | Error::CaCerts { .. }
                | Error::Read { .. }
        )
    }
}
