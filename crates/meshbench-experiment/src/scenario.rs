//! A cell's scenario (which mesh) and placement (client and server on one node or two), and
//! the topology they give: a load-generator pod, an echo-server pod and the `echo` service.

use meshbench_lab::Topology;
use meshbench_meshes::{spiffe_id, Mesh};
use meshbench_results::ScenarioConfig;

pub const NAMESPACE: &str = "default";
pub const CLIENT: &str = "load-generator";
pub const SERVER: &str = "echo-server";
pub const SERVICE: &str = "echo";

/// E1's placement dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    IntraNode,
    InterNode,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::IntraNode => "intra-node",
            Placement::InterNode => "inter-node",
        }
    }

    pub fn parse(name: &str) -> Option<Placement> {
        [Placement::IntraNode, Placement::InterNode]
            .into_iter()
            .find(|p| p.name() == name)
    }

    pub fn topology(self) -> Topology {
        let server_node = match self {
            Placement::IntraNode => "node-1",
            Placement::InterNode => "node-2",
        };
        Topology::client_server(
            NAMESPACE,
            (CLIENT, SERVER),
            server_node,
            SERVICE,
            meshbench_meshes::Ports::APP,
        )
    }
}

pub fn describe(mesh: Mesh) -> ScenarioConfig {
    ScenarioConfig {
        name: mesh.name().to_owned(),
        description: mesh.description(),
        mtls: mesh.mtls(),
        client_identity: mesh.mtls().then(|| spiffe_id(NAMESPACE, CLIENT)),
        server_identity: mesh.mtls().then(|| spiffe_id(NAMESPACE, SERVER)),
    }
}

/// The experiment's zero-trust policy: STRICT mTLS in the namespace, and only the load
/// generator's identity may call the echo server.
pub fn policy_yaml() -> String {
    let td = meshbench_meshes::TRUST_DOMAIN;
    format!(
        "trust_domain: {td}\n\
         peer_authentication:\n  - {{ name: strict, namespace: {NAMESPACE}, mode: STRICT }}\n\
         authorization:\n  - name: echo-only-from-load-generator\n    namespace: {NAMESPACE}\n    workload: {SERVER}\n    action: ALLOW\n    rules:\n      - from: {{ principals: [{td}/ns/{NAMESPACE}/sa/{CLIENT}] }}\n"
    )
}
