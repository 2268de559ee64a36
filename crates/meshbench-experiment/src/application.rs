//! The application a cell runs, and the topology and policy it gives per placement.
//!
//! - `echo` (E1, E2, E5): a load generator calls an echo server.
//! - `zero-trust-app` (E3): the experimenter calls the calculator one request at a time, in
//!   groups, as E3's application measured itself; the experimenter is the instrument.
//! - `counter-chain` (E4): the load generator's concurrent users call counter A, and each
//!   request bounces between counters A and B until it has crossed the requested number of
//!   services; every counter is enrolled in the mesh, so every hop goes through it.

use meshbench_meshes::{enrollable, Enrollment, Ports, Scenario};
use meshbench_results::{ScenarioConfig, SoftwareVersion};
use meshbench_topology::{e3, Service, Topology, Workload};

use crate::placement::Placement;

pub const NAMESPACE: &str = "default";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Application {
    #[default]
    Echo,
    ZeroTrustApp,
    CounterChain,
}

impl Application {
    pub const NAMES: [&'static str; 3] = ["echo", "zero-trust-app", "counter-chain"];

    pub fn name(self) -> &'static str {
        match self {
            Application::Echo => "echo",
            Application::ZeroTrustApp => "zero-trust-app",
            Application::CounterChain => "counter-chain",
        }
    }

    pub fn parse(name: &str) -> Option<Application> {
        [
            Application::Echo,
            Application::ZeroTrustApp,
            Application::CounterChain,
        ]
        .into_iter()
        .find(|a| a.name() == name)
    }

    /// The calling workload (whose pod runs the instrument) and the called one.
    pub fn client(self) -> &'static str {
        match self {
            Application::Echo | Application::CounterChain => "load-generator",
            Application::ZeroTrustApp => e3::EXPERIMENTER,
        }
    }

    /// The namespace of the application's workloads (E3's own for its application).
    pub fn namespace(self) -> &'static str {
        match self {
            Application::ZeroTrustApp => e3::APP,
            Application::Echo | Application::CounterChain => NAMESPACE,
        }
    }

    pub fn server(self) -> &'static str {
        match self {
            Application::Echo => "echo-server",
            Application::ZeroTrustApp => e3::CALCULATOR,
            Application::CounterChain => COUNTER_A,
        }
    }

    /// The service the client calls.
    pub fn service(self) -> &'static str {
        match self {
            Application::Echo => "echo",
            Application::ZeroTrustApp => e3::CALCULATOR,
            Application::CounterChain => COUNTER_A,
        }
    }

    /// The server app's role, as `meshbench workload <role>`.
    pub fn server_role(self) -> &'static str {
        match self {
            Application::Echo => "echo",
            Application::ZeroTrustApp => "calculator",
            Application::CounterChain => "counter",
        }
    }

    /// Why `mesh` cannot carry this application, if it cannot.
    pub fn unsupported(self, mesh: Scenario) -> Option<String> {
        match self {
            Application::Echo => None,
            Application::ZeroTrustApp | Application::CounterChain
                if mesh.enrollment() == Enrollment::InApp =>
            {
                Some(format!(
                    "{} is app-level TLS, and the {} application's services call each other in plaintext",
                    mesh.name(),
                    self.name()
                ))
            }
            Application::ZeroTrustApp => None,
            // A mesh that enrolls a topology only on a cluster (ours there, or one the cluster
            // runs itself: Istio ambient, Linkerd, which enroll a whole namespace) runs the
            // chain there; the local lab lists it unavailable as for any application.
            Application::CounterChain => (!mesh.is_baseline()
                && !mesh.can_enroll()
                && !mesh.enrolls_on_cluster()
                && mesh.installed().is_none())
            .then(|| {
                format!(
                    "the counter chain needs every counter enrolled in the mesh, and {} cannot enroll a multi-workload topology yet (enrollable: {})",
                    mesh.name(),
                    enrollable().iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
                )
            }),
        }
    }

    /// The cell's pods and services. Inter-node puts the called workload on the second
    /// node; in the chain counter B goes there, so every hop of the chain crosses nodes.
    /// The chain's counters get `replicas` pods each (E4 ran 12); the other applications one.
    pub fn topology(self, placement: Placement, replicas: u32) -> Topology {
        let far = match placement {
            Placement::IntraNode => "node-1",
            Placement::InterNode => "node-2",
        };
        match self {
            Application::Echo | Application::ZeroTrustApp => Topology::client_server(
                self.namespace(),
                (self.client(), self.server()),
                far,
                self.service(),
                Ports::APP,
            ),
            Application::CounterChain => {
                let workload = |name: &str, node: &str, replicas: u32| Workload {
                    name: name.into(),
                    namespace: NAMESPACE.into(),
                    service_account: name.into(),
                    node: node.into(),
                    replicas,
                    meshed: true,
                };
                let service = |name: &str| Service {
                    name: name.into(),
                    namespace: NAMESPACE.into(),
                    workload: name.into(),
                    port: 80,
                    target_port: Ports::APP,
                };
                Topology {
                    nodes: vec!["node-1".into(), "node-2".into()],
                    workloads: vec![
                        workload(self.client(), "node-1", 1),
                        workload(COUNTER_A, "node-1", replicas.max(1)),
                        workload(COUNTER_B, far, replicas.max(1)),
                    ],
                    services: vec![service(COUNTER_A), service(COUNTER_B)],
                }
            }
        }
    }

    /// The experiment's zero-trust policy, parsed (a built-in policy that did not parse would
    /// be meshbench's bug, said as an error rather than a panic).
    pub fn policy(self) -> Result<meshbench_policy::Policy, crate::Error> {
        meshbench_policy::Policy::from_yaml(&self.policy_yaml())
            .map_err(|e| crate::Error::Mesh(e.into()))
    }

    /// The experiment's zero-trust policy: E3's own for its application; otherwise STRICT mTLS
    /// in the namespace, and each called workload accepts only the identities that call it.
    pub fn policy_yaml(self) -> String {
        let td = meshbench_meshes::TRUST_DOMAIN;
        if self == Application::ZeroTrustApp {
            return e3::zero_trust_policy(td);
        }
        let mut rules = vec![(self.server(), vec![self.client()])];
        if self == Application::CounterChain {
            rules = vec![
                (COUNTER_A, vec![self.client(), COUNTER_B]),
                (COUNTER_B, vec![COUNTER_A]),
            ];
        }
        let mut yaml = format!(
            "trust_domain: {td}\npeer_authentication:\n  - {{ name: strict, namespace: {NAMESPACE}, mode: STRICT }}\nauthorization:\n"
        );
        for (workload, callers) in rules {
            let principals: Vec<String> = callers
                .iter()
                .map(|c| format!("{td}/ns/{NAMESPACE}/sa/{c}"))
                .collect();
            yaml.push_str(&format!(
                "  - name: {workload}-callers\n    namespace: {NAMESPACE}\n    workload: {workload}\n    action: ALLOW\n    rules:\n      - from: {{ principals: [{}] }}\n",
                principals.join(", ")
            ));
        }
        yaml
    }

    pub fn describe(self, mesh: Scenario) -> ScenarioConfig {
        ScenarioConfig {
            name: mesh.name().to_owned(),
            description: mesh.description().to_owned(),
            mtls: mesh.mtls(),
            client_identity: mesh
                .mtls()
                .then(|| mesh.workload_identity(self.namespace(), self.client())),
            server_identity: mesh
                .mtls()
                .then(|| mesh.workload_identity(self.namespace(), self.server())),
            software: mesh
                .software_versions()
                .into_iter()
                .map(|(name, version)| SoftwareVersion {
                    name: name.into(),
                    version,
                })
                .collect(),
        }
    }
}

pub const COUNTER_A: &str = "counter-a";
pub const COUNTER_B: &str = "counter-b";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_runs_on_meshes_a_cluster_installs_and_not_on_app_level_tls() {
        let chain = Application::CounterChain;
        for name in ["istio-ambient", "linkerd", "meshbench-sidecar", "baseline"] {
            let mesh = Scenario::parse(name).unwrap();
            assert_eq!(chain.unsupported(mesh), None, "{name}");
        }
        let app_tls = Scenario::parse("baseline-mtls").unwrap();
        assert!(chain.unsupported(app_tls).is_some());
    }

    #[test]
    fn every_topology_is_valid_and_policies_parse() {
        for name in Application::NAMES {
            let app = Application::parse(name).unwrap();
            for placement in [Placement::IntraNode, Placement::InterNode] {
                app.topology(placement, 1).validate().unwrap();
            }
            meshbench_policy::Policy::from_yaml(&app.policy_yaml()).unwrap();
        }
    }

    #[test]
    fn the_chain_crosses_nodes_on_every_hop_when_inter_node() {
        let t = Application::CounterChain.topology(Placement::InterNode, 1);
        let node = |w: &str| t.workload(w).unwrap().node.clone();
        assert_ne!(node(COUNTER_A), node(COUNTER_B));
    }
}
