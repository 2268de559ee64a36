//! Our sidecar's configuration, planned once from where a platform put the pods: the same
//! file for a pod whether the local lab starts it as a process or a cluster runs it as a
//! container. What differs by platform is only how it is launched (a metrics file on the lab,
//! an admin port a cluster's readiness checks).

use std::net::SocketAddr;

use meshbench_dataplane::{
    IdentityFiles, InboundListener, MeshedDestination, Mode, SidecarFile, TransparentListener,
};
use meshbench_topology::{Pod, Topology};

use crate::pki::{spiffe_id, PkiLayout};
use crate::ports::Ports;
use crate::Error;

/// Our sidecar for `pod`: one thread, its SVID renewed through `ca_endpoint`, the run's
/// policy; no listener yet.
pub(crate) fn sidecar_file(pod: &Pod, pki: &PkiLayout<'_>, ca_endpoint: SocketAddr) -> SidecarFile {
    let w = &pod.workload;
    let (cert, key) = (pki.svid)(pod);
    let mut file = SidecarFile::new(&w.namespace, &w.name);
    file.threads = Some(1);
    file.identity = Some(IdentityFiles {
        cert,
        key,
        ca: pki.ca.clone(),
        ca_endpoint: Some(ca_endpoint),
        rotate_at: meshbench_identity::DEFAULT_ROTATE_FRACTION,
    });
    file.policy = Some(pki.policy.clone());
    file
}

/// What the pod's capture sends in: to the app on `app_port`, over the pod's loopback.
pub(crate) fn captured_inbound(app_port: u16) -> InboundListener {
    InboundListener {
        listen: SocketAddr::from(([0, 0, 0, 0], Ports::INBOUND)),
        app: SocketAddr::from(([127, 0, 0, 1], app_port)),
        transparent: true,
    }
}

/// What the pod's capture sends out: mTLS to `destinations`, the rest in plaintext.
pub(crate) fn captured_outbound(destinations: Vec<MeshedDestination>) -> TransparentListener {
    TransparentListener {
        listen: SocketAddr::from(([127, 0, 0, 1], Ports::OUTBOUND)),
        destinations,
    }
}

/// The services whose workloads are meshed, at the addresses `address` gives, each with its
/// workload's SPIFFE ID.
pub(crate) fn meshed_destinations(
    topology: &Topology,
    address: impl Fn(&str) -> Result<SocketAddr, Error>,
) -> Result<Vec<MeshedDestination>, Error> {
    let mut destinations = vec![];
    for service in &topology.services {
        let Some(workload) = topology.workload(&service.workload).filter(|w| w.meshed) else {
            continue;
        };
        destinations.push(MeshedDestination {
            address: address(&service.name)?,
            id: Some(spiffe_id(&workload.namespace, &workload.service_account)),
        });
    }
    Ok(destinations)
}

/// An enrolled pod's sidecar: captured both ways, calls to meshed services over mTLS to
/// their SPIFFE IDs, and in L7, because E3's meshes (Istio, Linkerd) authorize each HTTP
/// request in the sidecar and answer a denial with 403.
pub(crate) fn enrolled_sidecar(
    pod: &Pod,
    pki: &PkiLayout<'_>,
    ca_endpoint: SocketAddr,
    app_port: u16,
    destinations: Vec<MeshedDestination>,
) -> SidecarFile {
    let mut file = sidecar_file(pod, pki, ca_endpoint);
    file.mode = Mode::L7;
    file.inbound = Some(captured_inbound(app_port));
    file.transparent_outbound = Some(captured_outbound(destinations));
    file
}
