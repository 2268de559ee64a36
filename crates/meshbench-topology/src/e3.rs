//! E3's zero-trust application: the calculator, experimenter and security checker in
//! namespace `app`, an external checker in namespace `external`, and meshbench's addition, an
//! "impostor": an unmeshed workload running under the experimenter's service account (the
//! bypass E3 observed); and E3's policy. The runner's zero-trust-app cells (experimenter to
//! calculator), the verifier's six security cases and the tests all take E3 from here.
//!
//! Placement puts the calculator and the checker on node-2 and the others on node-1, so a
//! verification covers both inter-node paths and same-node ones, including the checker calling
//! its own service.

use crate::{Service, Topology, Workload};

pub const APP: &str = "app";
pub const EXTERNAL: &str = "external";
pub const CALCULATOR: &str = "calculator";
pub const EXPERIMENTER: &str = "experimenter";
pub const CHECKER: &str = "security-checker";
pub const EXTERNAL_CHECKER: &str = "external-checker";
pub const IMPOSTOR: &str = "impostor";
/// The port every service listens on.
pub const SERVICE_PORT: u16 = 80;

/// What a workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum App {
    Calculator,
    Experimenter,
    Checker,
}

/// A workload of E3's application.
#[derive(Debug, Clone, Copy)]
pub struct Member {
    pub workload: &'static str,
    pub namespace: &'static str,
    pub service_account: &'static str,
    pub node: &'static str,
    pub app: App,
}

pub const MEMBERS: [Member; 5] = [
    Member {
        workload: CALCULATOR,
        namespace: APP,
        service_account: CALCULATOR,
        node: "node-2",
        app: App::Calculator,
    },
    Member {
        workload: EXPERIMENTER,
        namespace: APP,
        service_account: EXPERIMENTER,
        node: "node-1",
        app: App::Experimenter,
    },
    Member {
        workload: CHECKER,
        namespace: APP,
        service_account: CHECKER,
        node: "node-2",
        app: App::Checker,
    },
    Member {
        workload: EXTERNAL_CHECKER,
        namespace: EXTERNAL,
        service_account: EXTERNAL_CHECKER,
        node: "node-1",
        app: App::Checker,
    },
    // Never enrolled: the experimenter's identity without the mesh's credentials.
    Member {
        workload: IMPOSTOR,
        namespace: APP,
        service_account: EXPERIMENTER,
        node: "node-1",
        app: App::Checker,
    },
];

pub fn member(workload: &str) -> &'static Member {
    MEMBERS
        .iter()
        .find(|m| m.workload == workload)
        .expect("probes name E3's workloads")
}

/// Every member, each behind a service of its own name forwarding to `app_port`; `meshed`
/// names the workloads the mesh enrolls.
pub fn topology(meshed: &[&str], app_port: u16) -> Topology {
    Topology {
        nodes: vec!["node-1".into(), "node-2".into()],
        workloads: MEMBERS
            .iter()
            .map(|m| Workload {
                name: m.workload.into(),
                namespace: m.namespace.into(),
                service_account: m.service_account.into(),
                node: m.node.into(),
                replicas: 1,
                meshed: meshed.contains(&m.workload),
            })
            .collect(),
        services: MEMBERS
            .iter()
            .map(|m| Service {
                name: m.workload.into(),
                namespace: m.namespace.into(),
                workload: m.workload.into(),
                port: SERVICE_PORT,
                target_port: app_port,
            })
            .collect(),
    }
}

/// E3's zero-trust rules in trust domain `td`: STRICT mTLS in the application namespace,
/// requests from other namespaces denied, and only the experimenter's service account may
/// call the calculator.
pub fn zero_trust_policy(td: &str) -> String {
    format!(
        "trust_domain: {td}\n\
         peer_authentication:\n  - {{ name: strict-app, namespace: {APP}, mode: STRICT }}\n\
         authorization:\n\
         \x20 - name: deny-other-namespaces\n    namespace: {APP}\n    action: DENY\n    rules:\n      - from: {{ not_namespaces: [{APP}] }}\n\
         \x20 - name: calculator-only-from-experimenter\n    namespace: {APP}\n    workload: {CALCULATOR}\n    action: ALLOW\n    rules:\n      - from: {{ principals: [{td}/ns/{APP}/sa/{EXPERIMENTER}] }}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topology_is_valid_and_the_policy_names_its_members() {
        topology(&[CALCULATOR, EXPERIMENTER], 8080)
            .validate()
            .unwrap();
        let policy = zero_trust_policy("cluster.local");
        assert!(
            policy.contains("cluster.local/ns/app/sa/experimenter"),
            "{policy}"
        );
        assert_eq!(member(IMPOSTOR).service_account, EXPERIMENTER);
    }
}
