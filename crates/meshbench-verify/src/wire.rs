//! Evidence on the wire for one probe: a capture where the path runs (the calling node's
//! uplink for an inter-node path, the destination pod's interface for a same-node one, the
//! node's loopback where a node agent tunnels to itself), cut down to the probe's
//! connections, and judged: a path between two enrolled workloads of an encrypting mesh must
//! be TLS only with the request's marker nowhere in clear.

use meshbench_meshes::Scenario;
use meshbench_netlab::WireReport;
use meshbench_results::{Verdict, WireEvidence};

/// What the mesh should do to a probe's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireExpectation {
    /// Both ends enrolled in an encrypting mesh.
    Encrypted,
    /// Both ends enrolled, but the mesh does not encrypt within a node (Cilium's choice):
    /// plaintext is expected and must be reported, not hidden.
    PlaintextByDesign,
    /// A pod calling itself, in a mesh whose proxy keeps that call inside the pod in
    /// plaintext (Linkerd's): nothing crosses a link; the plaintext is reported, not hidden.
    InsidePodByDesign,
    /// An end outside the mesh (or no mTLS at all): nothing to encrypt it.
    NotMeshed,
}

impl WireExpectation {
    /// The expectation for a path of `mesh` (`same_node`: both ends on one node; `same_pod`:
    /// a pod calling itself).
    pub fn of(mesh: Scenario, both_enrolled: bool, same_node: bool, same_pod: bool) -> Self {
        if !(mesh.mtls() && both_enrolled) {
            WireExpectation::NotMeshed
        } else if same_pod && !mesh.encrypts_within_pod() {
            WireExpectation::InsidePodByDesign
        } else if same_node && !mesh.encrypts_same_node() {
            WireExpectation::PlaintextByDesign
        } else {
            WireExpectation::Encrypted
        }
    }
}

/// Judges a capture. Connections to the control plane (certificate renewals) are left out.
/// `observed_allowed`: whether the probe got through; a refused one of which nothing crossed
/// (the caller's own proxy refused it) leaked nothing.
pub fn evidence(
    report: &WireReport,
    capture_point: String,
    path: &str,
    marker: &str,
    expectation: WireExpectation,
    observed_allowed: bool,
) -> WireEvidence {
    let report = report.without_port(meshbench_meshes::Ports::CA);
    let tls_connections = report.tls_connections();
    let marker_seen = report.marker_seen();
    let connections = report.flows.len() as u32;
    let encryption_expected = expectation == WireExpectation::Encrypted;
    let (verdict, note) = if !encryption_expected {
        let note = match (expectation, marker_seen) {
            (WireExpectation::PlaintextByDesign, true) => Some(
                "plaintext between two enrolled workloads: this mesh does not encrypt traffic \
                 within a node",
            ),
            (WireExpectation::InsidePodByDesign, true) => Some(
                "plaintext on the pod's loopback: this mesh's proxy hands a pod's call to \
                 itself to its own app unencrypted; it never leaves the pod",
            ),
            (_, true) => Some("plaintext: the request crossed in clear"),
            (_, false) if connections == 0 => {
                Some("no request bytes crossed here: refused before the request was sent")
            }
            (_, false) => None,
        };
        (Verdict::Pass, note.map(str::to_owned))
    } else if connections == 0 && !observed_allowed {
        (
            Verdict::Pass,
            Some(
                "refused before anything crossed here: nothing to encrypt, nothing leaked"
                    .to_owned(),
            ),
        )
    } else if connections == 0 {
        (
            Verdict::Fail,
            Some("no connection captured: encryption cannot be shown".to_owned()),
        )
    } else if marker_seen || tls_connections < connections {
        (
            Verdict::Fail,
            Some("an enrolled path carried plaintext".to_owned()),
        )
    } else {
        (
            Verdict::Pass,
            Some(
                "TLS 1.3 encrypts certificates: client certificate and server identity are \
                 established by the identity checks"
                    .to_owned(),
            ),
        )
    };
    WireEvidence {
        capture_point,
        path: path.to_owned(),
        connections,
        tls_connections,
        tls_versions: report.tls_versions(),
        cipher_suites: report.cipher_suites(),
        marker: marker.to_owned(),
        marker_seen,
        encryption_expected,
        note,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(report: &WireReport, observed_allowed: bool) -> WireEvidence {
        evidence(
            report,
            "pod interface".into(),
            "same-node",
            "marker",
            WireExpectation::Encrypted,
            observed_allowed,
        )
    }

    #[test]
    fn an_enrolled_path_with_nothing_on_the_wire_passes_only_if_the_call_was_refused() {
        let empty = WireReport::default();
        // Refused in the caller's own proxy: nothing crossed, nothing leaked.
        assert_eq!(judge(&empty, false).verdict, Verdict::Pass);
        // Answered, yet nothing seen: encryption cannot be shown.
        assert_eq!(judge(&empty, true).verdict, Verdict::Fail);
        // A refused call that crossed in clear still fails.
        let clear = WireReport {
            packets: 4,
            flows: vec![meshbench_netlab::FlowVerdict {
                client: "10.0.0.1:40000".parse().unwrap(),
                server: "10.0.0.2:8080".parse().unwrap(),
                bytes_to_server: 80,
                bytes_to_client: 0,
                tls: false,
                tls_version: None,
                cipher_suite: None,
                marker_seen: true,
            }],
        };
        assert_eq!(judge(&clear, false).verdict, Verdict::Fail);
    }
}
