//! Enrolling every meshed workload of a topology, not only a client and a server: what a
//! verification needs, where several workloads in several namespaces call each other and
//! only some are in the mesh. Each enrolled pod gets what the mesh would inject (a sidecar
//! capturing its traffic both ways) and knows every meshed service's identity; calls to
//! unmeshed services pass through in plaintext, as Istio's ALLOW_ANY does.

use meshbench_lab::LabComponent;

use crate::deploy::{LabContext, Ports};
use crate::{spiffe_id, Error, Mesh, SidecarTuning};

/// Meshes that can enroll an arbitrary topology today.
pub const ENROLLABLE: &[Mesh] = &[Mesh::Sidecar(SidecarTuning::DEFAULT)];

/// Starts `mesh` for every meshed workload of the lab's topology (the apps already run).
/// The netns backend is required: enrollment means transparent capture.
pub async fn enroll(mesh: Mesh, lab: &LabContext<'_>) -> Result<Vec<LabComponent>, Error> {
    if !lab.net.captures() {
        return Err(Error::Unsupported {
            mesh: mesh.name().into(),
            what: "enrolling workloads without transparent capture (use the netns backend)",
        });
    }
    match mesh {
        Mesh::None => Ok(vec![]),
        Mesh::Sidecar(SidecarTuning::DEFAULT) => enroll_sidecars(lab).await,
        other => Err(Error::Unsupported {
            mesh: other.name().into(),
            what: "enrolling a multi-workload topology (only meshbench-sidecar can yet)",
        }),
    }
}

async fn enroll_sidecars(lab: &LabContext<'_>) -> Result<Vec<LabComponent>, Error> {
    let topology = lab.net.topology();
    let mut destinations = vec![];
    for service in &topology.services {
        let Some(workload) = topology.workload(&service.workload) else {
            continue;
        };
        if workload.meshed {
            let addr = lab.net.service_addr(&service.name)?;
            let id = spiffe_id(&workload.namespace, &workload.service_account);
            destinations.push(format!("{addr}#{id}"));
        }
    }
    let capture = Ports::sidecar_capture();
    let (ca, ca_endpoint) = lab.control_plane().await?;
    let mut components = vec![ca];
    for pod in topology.pods().iter().filter(|p| p.workload.meshed) {
        let app_port = topology
            .services
            .iter()
            .find(|s| s.workload == pod.workload.name)
            .map_or(Ports::APP, |s| s.target_port);
        let mut args = lab.sidecar_args(pod, ca_endpoint);
        // E3's meshes (Istio, Linkerd) authorize each HTTP request in the sidecar and answer
        // a denial with 403; so does an enrolled workload here.
        args.extend([
            "--mode".into(),
            "l7".into(),
            "--inbound".into(),
            format!("0.0.0.0:{}=127.0.0.1:{app_port}", Ports::INBOUND),
            "--inbound-transparent".into(),
            "--transparent-outbound".into(),
            format!("127.0.0.1:{}", Ports::OUTBOUND),
        ]);
        for destination in &destinations {
            args.extend(["--destination".into(), destination.clone()]);
        }
        components.push(lab.start_our_sidecar(pod, args, &capture).await?);
    }
    Ok(components)
}
