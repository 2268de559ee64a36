//! Enrolling every meshed workload of a topology, not only a client and a server: what a
//! verification needs, where several workloads in several namespaces call each other and
//! only some are in the mesh. Each mesh module does its own enrolling (a sidecar capturing a
//! pod's traffic both ways, or a node agent holding the pod's SVID with the node capturing
//! its traffic, as ztunnel does); either way every meshed service's identity is known, and
//! calls to unmeshed services pass through in plaintext, as Istio's ALLOW_ANY does.

use meshbench_lab::LabComponent;
use meshbench_topology::Pod;

use crate::{Error, LabContext, Mesh, Ports};

/// Starts `mesh` for every meshed workload of the lab's topology (the apps already run).
/// The netns backend is required: enrollment means transparent capture.
pub async fn enroll(mesh: Mesh, lab: &LabContext<'_>) -> Result<Vec<LabComponent>, Error> {
    mesh.check_enrollable()?;
    if !lab.net.captures() {
        return Err(Error::Unsupported {
            mesh: mesh.name().into(),
            what: "enrolling workloads without transparent capture (use the netns backend)",
        });
    }
    mesh.enroll(lab).await
}

/// The port a pod's app listens on: its service's target port.
pub fn app_port(lab: &LabContext<'_>, pod: &Pod) -> u16 {
    lab.net
        .topology()
        .services
        .iter()
        .find(|s| s.workload == pod.workload.name)
        .map_or(Ports::APP, |s| s.target_port)
}
