//! Zero-trust verification (`meshbench verify`): does a mesh actually protect? For each mesh
//! the local lab offers, E3's application runs in each of E3's six security cases; every
//! request E3 tried gets an expectation derived from the declared policy, an observed outcome
//! and a verdict, plus evidence from a capture of its path on the wire. Where everything is
//! enrolled, the destination's proxy is also handshaken with bad identities.

#[cfg(feature = "kubernetes")]
mod cluster;
mod e3;
mod expect;
mod flow;
mod identity;
mod local;
mod probe;
mod wire;

#[cfg(feature = "kubernetes")]
pub use cluster::{verify_on_cluster, ClusterVerifyOptions};
pub use e3::{zero_trust_policy, CASES, PROBES};
pub use expect::{expect, Expectation};
pub use identity::{exchange, ExchangeReport, Guard};
pub use local::{verify, VerifyOptions};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Network(#[from] meshbench_netlab::Error),
    #[error(transparent)]
    Mesh(#[from] meshbench_meshes::Error),
    #[error(transparent)]
    Lab(#[from] meshbench_lab::Error),
    #[error(transparent)]
    Identity(#[from] meshbench_identity::Error),
    #[error(transparent)]
    Policy(#[from] meshbench_policy::Error),
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("probe: {0}")]
    Probe(String),
    /// The mesh cannot be verified on this platform, and why.
    #[error("{0}")]
    NotHere(String),
    #[cfg(feature = "kubernetes")]
    #[error(transparent)]
    Cluster(#[from] meshbench_kube::Error),
    #[error(transparent)]
    Platform(#[from] meshbench_experiment::Error),
}

/// Bad input as the layer below saw it; a probe or a mesh failing is the machine's.
impl meshbench_role::InputFault for Error {
    fn is_bad_input(&self) -> bool {
        match self {
            Error::Network(e) => meshbench_role::InputFault::is_bad_input(e),
            Error::Lab(e) => e.is_bad_input(),
            Error::Identity(e) => e.is_bad_input(),
            // A user the cluster does not give meshbench's permissions, among others.
            #[cfg(feature = "kubernetes")]
            Error::Cluster(e) => meshbench_role::InputFault::is_bad_input(e),
            _ => false,
        }
    }
}

impl Error {
    /// The mesh cannot run here (a missing binary) or cannot be verified yet: reported for
    /// that mesh rather than ending the run.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::NotHere(_)
                | Error::Mesh(
                    meshbench_meshes::Error::Unavailable(_)
                        | meshbench_meshes::Error::Unsupported { .. }
                        | meshbench_meshes::Error::Inexpressible { .. }
                )
        )
    }
}
