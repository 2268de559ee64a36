//! The Kubernetes backend: the same experiment spec, topology, load models and results as the
//! local lab, on a real cluster through its API (kube-rs, never kubectl).
//!
//! - [`objects`]: what meshbench applies (server-side, field manager `meshbench`) and the
//!   labels that find a run's or a cell's objects again;
//! - [`pods`]: a pod's life through a watch, and why it cannot start;
//! - [`stats`]: per-container CPU and memory from the kubelets' summary API;
//! - [`KubePlatform`]: the platform seam's Kubernetes side (`Platform`), and `site`, a cell
//!   on the cluster (`Site`) with what its mesh adds to the pods (`ClusterMesh`);
//! - [`disruptions`]: what happened to a cell's pods, its kubelets and the API server while
//!   it ran;
//! - [`outage`]: when a kubelet or the API server stopped answering, from the requests' failures;
//! - [`clean`]: removes every object meshbench labelled, for `meshbench lab clean`;
//! - [`access`]: the permissions meshbench needs (`docs/rbac.yaml`), checked before a run;
//! - [`installed`]: the meshes a cluster already runs (Istio, Linkerd, Cilium, Consul):
//!   detecting them and applying (or dry-running) their resources.

pub mod access;
mod background;
mod clean;
mod cluster;
mod credentials;
pub mod disruptions;
mod error;
pub mod exec;
pub mod installed;
pub mod objects;
pub mod outage;
mod platform;
pub mod pods;
mod site;
pub mod stats;

pub use clean::clean;
pub use cluster::{connect, KubeOptions, KubePlatform, ProgressLine};
pub use credentials::BOOTSTRAP_SVID_TTL;
pub use error::Error;
pub use site::{node_agent_pod, node_link_capture, KubeSite, CAPTURE_WAIT, POD_INTERFACE};
