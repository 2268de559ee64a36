//! The meshes meshbench runs, one module per mesh behind [`MeshAdapter`]: a [`Description`]
//! plus the parts it has (see `adapter` for the seam and its invariants, `registry` for the
//! list, `mesh` for the handle the rest of meshbench holds). Each mesh knows what it needs: which components to start where (sidecars in the pods, agents on the
//! nodes, a control plane), how they are configured, how traffic reaches them (iptables
//! capture on the netns backend, explicit proxy ports on loopback), what the client needs to
//! reach the server, and what its security amounts to (mTLS, identity checks, policy). A mesh
//! whose binary is missing is reported unavailable with the command that installs it.

mod adapter;
mod area;
mod cluster;
pub mod configs;
mod description;
mod enroll;
mod gateway;
mod installed;
mod lab;
mod pairs;
mod pki;
mod ports;
mod registry;
mod scenario;
mod third_party;
mod tool;

// One module per mesh, each registered in `registry`.
mod app_mtls;
mod baseline;
mod cilium;
mod consul;
mod envoy;
mod haproxy;
mod istio;
mod linkerd;
mod nginx;
mod node_agent;
mod sidecar;

pub use adapter::{
    BoxFuture, ClusterMesh, LocalEnroll, LocalMesh, MeshAdapter, OutboundRefusal, OwnCa,
};
pub use area::{clean_stale_areas, collect_outputs, ProxyArea, AREAS_ROOT, PRIVATE_SUFFIX};
pub use cluster::{
    identity_files, AddedContainer, ClusterCell, ClusterEntry, ClusterSite, NodeAgentPod,
    PlacedPod, PodAdditions, PodSvid, CONFIG_DIR_IN_POD, POD_PKI_DIR,
};
pub use description::{Description, EnforcedPolicy, Enrollment, IdentityCheck, PolicySupport};
pub use enroll::app_port;
pub use gateway::start_gateway;
pub use installed::{
    translate_unplaced, ComponentClass, ConfigMapRef, Documented, Found, FoundConfigMap, FoundPod,
    IdentityProtocol, IdentityService, Installation, InstalledMesh, InstalledSite, LabelSelector,
    MeshEnrollment, Signature, Translation, WORKLOAD_LABEL,
};
pub use lab::{Deployment, LabContext, MeshContext, PROXY_METRICS_DIR_SUFFIX, PROXY_METRICS_FILE};
pub use pki::{spiffe_id, svid_file_stem, MeshPki, WorkloadSvid, TRUST_DOMAIN};
pub use ports::Ports;
pub use scenario::{deploy, enroll, enrollable, unenforceable, Scenario};
pub use sidecar::SidecarTuning;
pub use tool::{Tool, Unavailable};

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
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{mesh}: {what} is not supported")]
    Unsupported { mesh: String, what: &'static str },
    /// A topology or policy the mesh cannot express, and why.
    #[error("{mesh} cannot run this: {why}")]
    Inexpressible { mesh: String, why: String },
    #[error("{component}: no {what} in its ready line")]
    ReadyLine {
        component: String,
        what: &'static str,
    },
    /// A platform's own failure (the Kubernetes API, a pod that could not start).
    #[error(transparent)]
    Platform(Box<dyn std::error::Error + Send + Sync>),
}
