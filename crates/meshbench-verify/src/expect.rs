//! Expected outcomes, derived from the declared policy and from which workloads the mesh
//! enrolls, never from a hand-written table: an enrolled destination's proxy is where the
//! policy is enforced, and it knows the caller's identity only when the caller is enrolled
//! too (its proxy presents the caller's SVID); an unenrolled destination enforces nothing.

use std::net::IpAddr;

use meshbench_identity::SpiffeId;
use meshbench_policy::{Peer, Policy, Request};

use crate::e3::{member, Probe};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub allowed: bool,
    pub reason: String,
}

/// The policy a mesh enforces in a case (whose enrolled workloads it depends on), its notes
/// added to `notes` once each: the expectations follow it, and what it changed is said.
pub fn enforced_in_case(
    enforced: meshbench_meshes::EnforcedPolicy,
    notes: &mut Vec<String>,
) -> Policy {
    for note in enforced.notes {
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    enforced.policy
}

/// What `probe` should get when `mesh` enrolls the workloads in `meshed`: refused by the
/// caller's own proxy where the mesh does that (see `Scenario::refuses_outbound`),
/// otherwise as `policy` (the policy the mesh enforces) decides at the destination.
pub fn expect_through(
    mesh: meshbench_meshes::Scenario,
    policy: &Policy,
    probe: &Probe,
    meshed: &[&str],
    source_ip: Option<IpAddr>,
) -> Expectation {
    if meshed.contains(&probe.from) {
        let own_service = probe.from == probe.to;
        if let Some(why) = mesh.refuses_outbound(meshed.contains(&probe.to), own_service) {
            return Expectation {
                allowed: false,
                reason: why.to_owned(),
            };
        }
    }
    expect(policy, probe, meshed, source_ip)
}

/// What `probe` should get when the workloads in `meshed` are enrolled, under `policy`.
/// `source_ip` is the caller pod's address (for policies on networks).
pub fn expect(
    policy: &Policy,
    probe: &Probe,
    meshed: &[&str],
    source_ip: Option<IpAddr>,
) -> Expectation {
    let (from, to) = (member(probe.from), member(probe.to));
    if !meshed.contains(&to.workload) {
        return Expectation {
            allowed: true,
            reason: format!("{} is not enrolled: nothing enforces policy", to.workload),
        };
    }
    let peer = if meshed.contains(&from.workload) {
        let id = SpiffeId::for_workload(
            &policy.file().trust_domain,
            from.namespace,
            from.service_account,
        )
        .expect("E3's names make valid SPIFFE IDs");
        Peer::Authenticated { id, source_ip }
    } else {
        Peer::Plaintext { source_ip }
    };
    let connection = policy.admits_connection(to.namespace, to.workload, &peer);
    if !connection.allowed {
        return Expectation {
            allowed: false,
            reason: connection.reason,
        };
    }
    let decision = policy.authorize(&Request {
        namespace: to.namespace,
        workload: to.workload,
        port: meshbench_meshes::Ports::APP,
        peer: &peer,
        http: Some((probe.method, probe.path)),
    });
    Expectation {
        allowed: decision.allowed,
        reason: decision.reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e3::{zero_trust_policy, CASES, PROBES};

    /// E3's zero-trust expectation, as the study states it: meshed -> meshed in the same
    /// namespace allowed (the calculator only from the experimenter), meshed -> unmeshed
    /// allowed, unmeshed -> meshed denied, another namespace -> meshed denied.
    fn e3_rule(probe: &Probe, meshed: &[&str]) -> bool {
        let (from, to) = (member(probe.from), member(probe.to));
        let (from_meshed, to_meshed) = (
            meshed.contains(&from.workload),
            meshed.contains(&to.workload),
        );
        if !to_meshed {
            return true;
        }
        if !from_meshed || from.namespace != to.namespace {
            return false;
        }
        to.workload != "calculator" || from.service_account == "experimenter"
    }

    #[test]
    fn the_policy_gives_e3s_zero_trust_expectation_in_every_case() {
        let policy = Policy::from_yaml(&zero_trust_policy()).unwrap();
        for case in &CASES {
            for probe in &PROBES {
                let got = expect(&policy, probe, case.meshed, None);
                assert_eq!(
                    got.allowed,
                    e3_rule(probe, case.meshed),
                    "case {} {} -> {}: {}",
                    case.number,
                    probe.from,
                    probe.to,
                    got.reason
                );
            }
        }
    }

    #[test]
    fn the_impostor_with_the_experimenters_account_is_denied_by_a_strict_calculator() {
        let policy = Policy::from_yaml(&zero_trust_policy()).unwrap();
        let impostor = PROBES.iter().find(|p| p.from == "impostor").unwrap();
        let got = expect(&policy, impostor, CASES[1].meshed, None);
        assert!(!got.allowed, "{}", got.reason);
    }
}
