//! E3's application and security cases as a lab topology: the calculator, experimenter and
//! security checker in namespace `app`, an external checker in namespace `external`, and
//! meshbench's addition, an "impostor": an unmeshed workload running under the
//! experimenter's service account (the bypass E3 observed). Which of them the mesh enrolls
//! is what the six cases vary.
//!
//! Placement puts the calculator and the checker on node-2 and the others on node-1, so the
//! probes cover both inter-node paths (captured on the link) and same-node ones (captured on
//! the destination pod's interface), including the checker calling its own service.

use meshbench_lab::{Service, Topology, Workload};
use meshbench_meshes::{Ports, TRUST_DOMAIN};

pub const APP: &str = "app";
pub const EXTERNAL: &str = "external";
pub const CALCULATOR: &str = "calculator";
pub const EXPERIMENTER: &str = "experimenter";
pub const CHECKER: &str = "security-checker";
pub const EXTERNAL_CHECKER: &str = "external-checker";
pub const IMPOSTOR: &str = "impostor";
/// The port every service listens on (apps listen on [`Ports::APP`]).
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

/// One of E3's security cases: which workloads the mesh enrolls.
#[derive(Debug, Clone, Copy)]
pub struct SecurityCase {
    pub number: u32,
    pub title: &'static str,
    pub meshed: &'static [&'static str],
}

pub const CASES: [SecurityCase; 6] = [
    SecurityCase {
        number: 1,
        title: "nothing meshed",
        meshed: &[],
    },
    SecurityCase {
        number: 2,
        title: "everything meshed, the external checker too",
        meshed: &[CALCULATOR, EXPERIMENTER, CHECKER, EXTERNAL_CHECKER],
    },
    SecurityCase {
        number: 3,
        title: "calculator not meshed",
        meshed: &[EXPERIMENTER, CHECKER, EXTERNAL_CHECKER],
    },
    SecurityCase {
        number: 4,
        title: "security checker and experimenter not meshed",
        meshed: &[CALCULATOR, EXTERNAL_CHECKER],
    },
    SecurityCase {
        number: 5,
        title: "only the external checker meshed",
        meshed: &[EXTERNAL_CHECKER],
    },
    SecurityCase {
        number: 6,
        title: "everything meshed except the external checker",
        meshed: &[CALCULATOR, EXPERIMENTER, CHECKER],
    },
];

/// A request E3 tried: `from` calls service `to`.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub from: &'static str,
    pub to: &'static str,
    pub method: &'static str,
    pub path: &'static str,
}

/// E3's five requests, plus the impostor's.
pub const PROBES: [Probe; 6] = [
    Probe {
        from: EXPERIMENTER,
        to: CALCULATOR,
        method: "POST",
        path: "/add",
    },
    Probe {
        from: CHECKER,
        to: CALCULATOR,
        method: "POST",
        path: "/add",
    },
    Probe {
        from: CHECKER,
        to: CHECKER,
        method: "GET",
        path: "/",
    },
    Probe {
        from: EXTERNAL_CHECKER,
        to: CALCULATOR,
        method: "POST",
        path: "/add",
    },
    Probe {
        from: EXTERNAL_CHECKER,
        to: CHECKER,
        method: "GET",
        path: "/",
    },
    Probe {
        from: IMPOSTOR,
        to: CALCULATOR,
        method: "POST",
        path: "/add",
    },
];

/// The topology of `case`: every member, each behind a service of its own name.
pub fn topology(case: &SecurityCase) -> Topology {
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
                meshed: case.meshed.contains(&m.workload),
            })
            .collect(),
        services: MEMBERS
            .iter()
            .map(|m| Service {
                name: m.workload.into(),
                namespace: m.namespace.into(),
                workload: m.workload.into(),
                port: SERVICE_PORT,
                target_port: Ports::APP,
            })
            .collect(),
    }
}

/// E3's zero-trust rules: STRICT mTLS in the application namespace, requests from other
/// namespaces denied, and only the experimenter's service account may call the calculator.
pub fn zero_trust_policy() -> String {
    let td = TRUST_DOMAIN;
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
    fn every_case_gives_a_valid_topology_and_the_policy_parses() {
        for case in &CASES {
            topology(case).validate().unwrap();
        }
        meshbench_policy::Policy::from_yaml(&zero_trust_policy()).unwrap();
    }
}
