//! The node agent's configuration file (YAML): the workloads on its node with their SVIDs, the
//! directory of every destination it may tunnel to and of the services in front of workloads
//! (what ztunnel learns from the control plane), and how apps' connections reach it: explicit
//! outbound listeners, or the node's capture (`transparent`). Relative paths are resolved
//! against the file's directory.
//!
//! ```yaml
//! node: node-a
//! ca: pki/ca.pem
//! hbone: 127.0.0.1:15008
//! same_node_encryption: true
//! workloads:
//!   - { namespace: app, name: client, service_account: client,
//!       cert: pki/app.client.pem, key: pki/app.client.key, address: 127.0.0.1:9000 }
//! destinations:
//!   - { namespace: app, name: server, service_account: server,
//!       address: 127.0.0.1:8080, node_agent: 127.0.0.1:25008 }
//! outbound:
//!   - { listen: 127.0.0.1:15001, source: app/client, destination: 127.0.0.1:8080 }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meshbench_role::RoleConfig;
use serde::{Deserialize, Serialize};

/// Istio ambient's HBONE port.
pub const DEFAULT_HBONE_PORT: u16 = 15008;

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAgentFile {
    pub node: String,
    /// Trust bundle for peers.
    pub ca: PathBuf,
    /// Where the agent accepts HBONE tunnels from other agents.
    #[serde(default = "default_hbone")]
    pub hbone: SocketAddr,
    /// Whether traffic between two workloads of this node is encrypted too (ztunnel: yes;
    /// Cilium: no).
    #[serde(default = "yes")]
    pub same_node_encryption: bool,
    /// Policy file; without one, PERMISSIVE and allow-all.
    pub policy: Option<PathBuf>,
    /// Renew the workloads' SVIDs through this CA service.
    pub ca_endpoint: Option<SocketAddr>,
    pub rotate_at: Option<f64>,
    /// Workloads on this node, whose SVIDs the agent holds.
    pub workloads: Vec<LocalWorkload>,
    /// Workloads on other nodes.
    #[serde(default)]
    pub destinations: Vec<RemoteWorkload>,
    #[serde(default)]
    pub outbound: Vec<OutboundListener>,
    /// Service addresses apps dial and the workload address behind each (kube-proxy's DNAT,
    /// which the node's capture comes before); a service listed with several endpoints has
    /// its connections spread over them in turn.
    #[serde(default)]
    pub services: Vec<ServiceEndpoint>,
    /// Listeners for connections the node captures (ztunnel's 15001 and 15006).
    pub transparent: Option<TransparentListeners>,
    /// Runtime worker threads (default: one per core; `--threads` overrides).
    pub threads: Option<usize>,
    /// Write the final metrics here (Prometheus text) on shutdown (`--metrics-file`
    /// overrides).
    pub metrics_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceEndpoint {
    pub address: SocketAddr,
    pub endpoint: SocketAddr,
}

/// Where the node's capture sends connections: `outbound` gets every connection a local
/// workload opens (the source is known by its address, the destination by
/// `SO_ORIGINAL_DST`); `inbound` gets plaintext connections to local workloads from anything
/// outside the mesh, which the policy then judges as unauthenticated peers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransparentListeners {
    pub outbound: SocketAddr,
    pub inbound: SocketAddr,
}

meshbench_role::serde_defaults! {
    default_hbone: SocketAddr = SocketAddr::from(([127, 0, 0, 1], DEFAULT_HBONE_PORT)),
    yes: bool = true,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalWorkload {
    pub namespace: String,
    pub name: String,
    pub service_account: String,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Where the workload's app listens.
    pub address: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteWorkload {
    pub namespace: String,
    pub name: String,
    pub service_account: String,
    /// Where the workload's app listens, as its own node sees it.
    pub address: SocketAddr,
    /// The HBONE address of the agent on the workload's node.
    pub node_agent: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundListener {
    pub listen: SocketAddr,
    /// The local workload sending, as `namespace/name`.
    pub source: String,
    /// The destination workload's address.
    pub destination: SocketAddr,
}

impl NodeAgentFile {
    /// An agent of `node` trusting `ca`, taking HBONE at `hbone`, with no workload yet and
    /// every other field at its default (same-node encryption on, no policy, no renewal).
    pub fn new(node: &str, ca: PathBuf, hbone: SocketAddr) -> Self {
        NodeAgentFile {
            node: node.to_owned(),
            ca,
            hbone,
            same_node_encryption: true,
            policy: None,
            ca_endpoint: None,
            rotate_at: None,
            workloads: vec![],
            destinations: vec![],
            outbound: vec![],
            services: vec![],
            transparent: None,
            threads: None,
            metrics_file: None,
        }
    }
}

impl RoleConfig for NodeAgentFile {
    const COMMAND: &'static [&'static str] = &["proxy", "node-agent"];

    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| meshbench_role::resolve(p, base);
        resolve(&mut self.ca);
        if let Some(policy) = &mut self.policy {
            resolve(policy);
        }
        for w in &mut self.workloads {
            resolve(&mut w.cert);
            resolve(&mut w.key);
        }
        if let Some(file) = &mut self.metrics_file {
            resolve(file);
        }
    }
}
