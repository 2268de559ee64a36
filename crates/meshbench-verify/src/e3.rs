//! E3's security cases on its application ([`meshbench_topology::e3`], re-exported here):
//! which workloads the mesh enrolls is what the six cases vary, and the probes are the calls
//! whose outcome the verifier compares with the policy's.

pub use meshbench_topology::e3::*;

use meshbench_meshes::{Ports, TRUST_DOMAIN};
use meshbench_topology::Topology;
use meshbench_workload::{WorkloadApp, WorkloadFile};
use std::net::SocketAddr;

/// One of E3's security cases: which workloads the mesh enrolls.
#[derive(Debug, Clone, Copy)]
pub struct SecurityCase {
    pub number: u32,
    pub title: &'static str,
    pub meshed: &'static [&'static str],
}

impl SecurityCase {
    /// Whether `mesh`'s identities are checked in this case: it speaks mTLS and enrolls every
    /// member of the application (the impostor, never enrolled, aside).
    pub fn checks_identities(&self, mesh: meshbench_meshes::Scenario) -> bool {
        mesh.mtls()
            && MEMBERS
                .iter()
                .all(|m| m.workload == IMPOSTOR || self.meshed.contains(&m.workload))
    }
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

/// The topology of `case`: every member, the ones it names enrolled.
pub fn topology(case: &SecurityCase) -> Topology {
    meshbench_topology::e3::topology(case.meshed, Ports::APP)
}

/// Bound on each call an E3 app makes to another.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The app of E3's `workload`, listening on [`Ports::APP`] of every address.
pub fn app_file(workload: &str) -> WorkloadFile {
    let m = member(workload);
    let app = match m.app {
        App::Calculator => WorkloadApp::Calculator,
        App::Experimenter => WorkloadApp::Experimenter {
            calculator: format!("http://{CALCULATOR}.{APP}.svc:{SERVICE_PORT}"),
            timeout: CALL_TIMEOUT,
            once: None,
        },
        App::Checker => WorkloadApp::SecurityChecker {
            name: m.workload.into(),
            namespace: m.namespace.into(),
            timeout: CALL_TIMEOUT,
        },
    };
    WorkloadFile::new(SocketAddr::from(([0, 0, 0, 0], Ports::APP)), app)
}

/// E3's zero-trust rules in the lab's trust domain.
pub fn zero_trust_policy() -> String {
    meshbench_topology::e3::zero_trust_policy(TRUST_DOMAIN)
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
