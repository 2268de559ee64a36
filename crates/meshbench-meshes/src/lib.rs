//! Mesh adapters for the local lab. Each adapter knows what its mesh needs in a topology of a
//! client pod, a server pod and a service in front of it: which components to start where
//! (sidecars in the pods, agents on the nodes, a control plane), how they are configured,
//! how traffic reaches them (iptables capture on the netns backend, explicit proxy ports on
//! loopback), and which URL and arguments the client uses. A mesh whose binary is missing is
//! reported unavailable with the command that installs it.

mod area;
pub mod configs;
mod deploy;
mod enroll;
mod gateway;
mod mesh;
mod pki;

pub use area::{clean_stale_areas, collect_outputs, ProxyArea, AREAS_ROOT, PRIVATE_SUFFIX};
pub use deploy::{
    deploy, Deployment, LabContext, MeshContext, Ports, PROXY_METRICS_DIR_SUFFIX,
    PROXY_METRICS_FILE,
};
pub use enroll::{check_enrollable, enroll, ENROLLABLE, UNENFORCEABLE};
pub use gateway::start_gateway;
pub use mesh::{Mesh, SidecarTuning, Unavailable};
pub use pki::{spiffe_id, MeshPki, WorkloadSvid, TRUST_DOMAIN};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Identity(#[from] meshbench_identity::Error),
    #[error(transparent)]
    Lab(#[from] meshbench_lab::Error),
    #[error(transparent)]
    Network(#[from] meshbench_netlab::Error),
    #[error("policy: {0}")]
    Policy(#[from] meshbench_policy::Error),
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    #[error("{mesh}: {what} is not supported")]
    Unsupported { mesh: String, what: &'static str },
    #[error("{component}: no {what} in its ready line")]
    ReadyLine {
        component: String,
        what: &'static str,
    },
}
