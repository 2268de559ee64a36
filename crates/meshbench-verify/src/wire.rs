//! Evidence on the wire for one probe: a capture where the path runs (the calling node's
//! uplink for an inter-node path, the destination pod's interface for a same-node one), cut
//! down to the probe's connections, and judged: a path between two enrolled workloads of an
//! encrypting mesh must be TLS only with the request's marker nowhere in clear.

use meshbench_netlab::{LabNetwork, WireReport};
use meshbench_results::{Verdict, WireEvidence};

use crate::e3::Probe;
use crate::Error;

/// Where to capture a probe's path: (namespace, interface, description, `inter-node` or
/// `same-node`).
pub fn capture_point(
    net: &LabNetwork,
    probe: &Probe,
) -> Result<(String, String, String, &'static str), Error> {
    let topology = net.topology();
    let pod = |workload: &str| {
        topology
            .first_pod(workload)
            .ok_or_else(|| Error::Probe(format!("no pod for {workload}")))
    };
    let (from, to) = (pod(probe.from)?, pod(probe.to)?);
    if from.workload.node == to.workload.node {
        let (netns, interface) = net.pod_port(&to.name)?;
        let description = format!("{}'s pod interface ({interface})", to.name);
        Ok((netns, interface, description, "same-node"))
    } else {
        let (netns, interface) = net.uplink_of(&from.workload.node)?;
        let description = format!("inter-node link ({} {interface})", from.workload.node);
        Ok((netns, interface.to_owned(), description, "inter-node"))
    }
}

/// Judges a capture. Connections to the control plane (certificate renewals) are left out.
pub fn evidence(
    report: &WireReport,
    capture_point: String,
    path: &str,
    marker: &str,
    encryption_expected: bool,
) -> WireEvidence {
    let report = report.without_port(meshbench_meshes::Ports::CA);
    let tls_connections = report.tls_connections();
    let marker_seen = report.marker_seen();
    let connections = report.flows.len() as u32;
    let (verdict, note) = if !encryption_expected {
        (
            Verdict::Pass,
            marker_seen.then(|| "plaintext: the request crossed in clear".to_owned()),
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
