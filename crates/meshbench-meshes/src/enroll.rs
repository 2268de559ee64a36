//! What enrolling a whole topology needs beyond a client and a server: where several workloads
//! in several namespaces call each other and only some are in the mesh. Each mesh module does
//! its own enrolling (a sidecar capturing a pod's traffic both ways, or a node agent holding
//! the pod's SVID with the node capturing its traffic, as ztunnel does); either way every
//! meshed service's identity is known, and calls to unmeshed services pass through in
//! plaintext, as Istio's ALLOW_ANY does.

use meshbench_topology::Pod;

use crate::lab::LabContext;
use crate::ports::Ports;

/// The port a pod's app listens on: its service's target port.
pub fn app_port(lab: &LabContext<'_>, pod: &Pod) -> u16 {
    lab.net
        .topology()
        .services
        .iter()
        .find(|s| s.workload == pod.workload.name)
        .map_or(Ports::APP, |s| s.target_port)
}
