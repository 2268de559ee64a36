//! Enrolling every meshed workload of a topology, not only a client and a server: what a
//! verification needs, where several workloads in several namespaces call each other and
//! only some are in the mesh. Each enrolled pod gets what the mesh would inject (a sidecar
//! capturing its traffic both ways) or, for a node-agent mesh, its node's agent holds the
//! pod's SVID and the node captures the pod's traffic both ways (as ztunnel does); either
//! way every meshed service's identity is known, and calls to unmeshed services pass
//! through in plaintext, as Istio's ALLOW_ANY does.

use std::net::SocketAddr;
use std::path::Path;

use meshbench_dataplane::{
    InboundListener, MeshedDestination, Mode, NodeAgentFile, RemoteWorkload, ServiceEndpoint,
    TransparentListener, TransparentListeners,
};
use meshbench_identity::CertAgentFile;
use meshbench_lab::{LabComponent, Pod, Readiness};
use meshbench_netlab::NodeCapture;
use meshbench_policy::Policy;

use crate::configs::{
    envoy_enrolled, envoy_svid_secret, rbac_filters, EnvoyEnrollment, MeshDestination,
};
use crate::deploy::{LabContext, Place, Ports};
use crate::{spiffe_id, Error, Mesh, SidecarTuning};

/// Meshes that can enroll an arbitrary topology today.
pub const ENROLLABLE: &[Mesh] = &[
    Mesh::Sidecar(SidecarTuning::DEFAULT),
    Mesh::Envoy,
    Mesh::NodeAgent {
        same_node_encryption: true,
    },
    Mesh::NodeAgent {
        same_node_encryption: false,
    },
];

/// Data planes the lab offers that cannot enforce identity rules at all: a verification
/// reports them as not verified, which fails it, with the reason.
pub const UNENFORCEABLE: &[Mesh] = &[Mesh::Haproxy, Mesh::Nginx];

/// Whether `mesh` can enroll a topology, and if not, why.
pub fn check_enrollable(mesh: Mesh) -> Result<(), Error> {
    if mesh == Mesh::None || ENROLLABLE.contains(&mesh) {
        return Ok(());
    }
    Err(Error::Unsupported {
        mesh: mesh.name().into(),
        what: if UNENFORCEABLE.contains(&mesh) {
            "identity-based authorization (HAProxy 2.6 and nginx read a client certificate's \
             subject and chain, never its SPIFFE ID, so E3's rules cannot be enforced)"
        } else {
            "enrolling a multi-workload topology (meshbench-sidecar, envoy-sidecar and the \
             node agents can)"
        },
    })
}

/// Starts `mesh` for every meshed workload of the lab's topology (the apps already run).
/// The netns backend is required: enrollment means transparent capture.
pub async fn enroll(mesh: Mesh, lab: &LabContext<'_>) -> Result<Vec<LabComponent>, Error> {
    check_enrollable(mesh)?;
    if !lab.net.captures() {
        return Err(Error::Unsupported {
            mesh: mesh.name().into(),
            what: "enrolling workloads without transparent capture (use the netns backend)",
        });
    }
    match mesh {
        Mesh::NodeAgent {
            same_node_encryption,
        } => enroll_node_agents(lab, same_node_encryption).await,
        Mesh::Envoy => enroll_envoys(lab, &mesh.binary()?.expect("Envoy has a binary")).await,
        Mesh::Sidecar(_) => enroll_sidecars(lab).await,
        Mesh::None => Ok(vec![]),
        other => unreachable!("check_enrollable refuses {}", other.name()),
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
            destinations.push(MeshedDestination {
                address: addr,
                id: Some(id),
            });
        }
    }
    let capture = Ports::sidecar_capture();
    let (ca, ca_endpoint) = lab.control_plane().await?;
    let mut components = vec![ca];
    for pod in topology.pods().iter().filter(|p| p.workload.meshed) {
        let app_port = app_port(lab, pod);
        let mut file = lab.sidecar_file(pod, ca_endpoint);
        // E3's meshes (Istio, Linkerd) authorize each HTTP request in the sidecar and answer
        // a denial with 403; so does an enrolled workload here.
        file.mode = Mode::L7;
        file.inbound = Some(InboundListener {
            listen: SocketAddr::from(([0, 0, 0, 0], Ports::INBOUND)),
            app: SocketAddr::from(([127, 0, 0, 1], app_port)),
            transparent: true,
        });
        file.transparent_outbound = Some(TransparentListener {
            listen: SocketAddr::from(([127, 0, 0, 1], Ports::OUTBOUND)),
            destinations: destinations.clone(),
        });
        components.push(lab.start_our_sidecar(pod, file, &capture).await?);
    }
    Ok(components)
}

/// The port a pod's app listens on: its service's target port.
fn app_port(lab: &LabContext<'_>, pod: &Pod) -> u16 {
    lab.net
        .topology()
        .services
        .iter()
        .find(|s| s.workload == pod.workload.name)
        .map_or(Ports::APP, |s| s.target_port)
}

async fn enroll_node_agents(
    lab: &LabContext<'_>,
    same_node_encryption: bool,
) -> Result<Vec<LabComponent>, Error> {
    let net = lab.net;
    let topology = net.topology();
    let meshed: Vec<Pod> = topology
        .pods()
        .into_iter()
        .filter(|p| p.workload.meshed)
        .collect();
    let app_addr = |pod: &Pod| -> Result<SocketAddr, Error> {
        Ok(SocketAddr::new(lab.pod_ip(pod)?, app_port(lab, pod)))
    };
    let services = net
        .plan()
        .services
        .iter()
        .map(|s| ServiceEndpoint {
            address: s.addr,
            endpoint: s.endpoint,
        })
        .collect::<Vec<_>>();
    let (ca, ca_endpoint) = lab.control_plane().await?;
    let mut components = vec![ca];
    for node in &topology.nodes {
        let (local, remote): (Vec<&Pod>, Vec<&Pod>) =
            meshed.iter().partition(|p| &p.workload.node == node);
        if local.is_empty() {
            continue;
        }
        let workloads = local
            .iter()
            .map(|p| Ok(lab.agent_local_workload(p, app_addr(p)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        let destinations = remote
            .iter()
            .map(|p| {
                Ok(RemoteWorkload {
                    namespace: p.workload.namespace.clone(),
                    name: p.workload.name.clone(),
                    service_account: p.workload.service_account.clone(),
                    address: app_addr(p)?,
                    node_agent: SocketAddr::new(net.node_ip(&p.workload.node)?, Ports::HBONE),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let any = |port| SocketAddr::from(([0, 0, 0, 0], port));
        let mut file = NodeAgentFile::new(
            node,
            lab.pki.ca.clone(),
            SocketAddr::new(net.node_bind_ip(node)?, Ports::HBONE),
        );
        file.same_node_encryption = same_node_encryption;
        file.policy = Some(lab.pki.policy.clone());
        file.ca_endpoint = Some(ca_endpoint);
        file.workloads = workloads;
        file.destinations = destinations;
        file.services = services.clone();
        // Bound to every address: a connection REDIRECTed from the uplink arrives at the
        // uplink's address, one from a pod at the bridge's.
        file.transparent = Some(TransparentListeners {
            outbound: any(Ports::OUTBOUND),
            inbound: any(Ports::INBOUND),
        });
        components.push(lab.start_node_agent(file).await?);
        let mut capture = NodeCapture {
            sources: vec![],
            destinations: vec![],
            outbound_port: Ports::OUTBOUND,
            inbound_port: Ports::INBOUND,
        };
        for pod in &local {
            let app = app_addr(pod)?;
            capture.sources.push(lab.pod_ip(pod)?);
            capture.destinations.push(app);
            capture.destinations.extend(
                services
                    .iter()
                    .filter(|s| s.endpoint == app)
                    .map(|s| s.address),
            );
        }
        net.capture_on_node(node, &capture)?;
    }
    Ok(components)
}

/// Every meshed pod gets Envoy configured as Istio configures its sidecar (see
/// [`configs::envoy_enrolled`]), with our policy translated to Envoy RBAC, and a certificate
/// agent beside it (istio-agent's job) that renews the pod's SVID and publishes it for Envoy.
async fn enroll_envoys(lab: &LabContext<'_>, envoy: &Path) -> Result<Vec<LabComponent>, Error> {
    let topology = lab.net.topology();
    let policy = Policy::load(&lab.pki.policy)?;
    let mut destinations = vec![];
    for service in &topology.services {
        if let Some(workload) = topology.workload(&service.workload).filter(|w| w.meshed) {
            destinations.push(MeshDestination {
                name: service.name.clone(),
                address: lab.net.service_addr(&service.name)?,
                spiffe_id: spiffe_id(&workload.namespace, &workload.service_account),
            });
        }
    }
    let (ca, ca_endpoint) = lab.control_plane().await?;
    let mut components = vec![ca];
    for pod in topology.pods().iter().filter(|p| p.workload.meshed) {
        let w = &pod.workload;
        let svid = lab.pki.svid(&w.namespace, &w.service_account);
        // The published SVID includes the key: never copied into the results.
        let svid_dir =
            lab.proxy_dir(&format!("{}-envoy-svid{}", pod.name, crate::PRIVATE_SUFFIX))?;
        let agent_file = CertAgentFile {
            cert: svid.cert.clone(),
            key: svid.key.clone(),
            ca: lab.pki.ca.clone(),
            ca_endpoint,
            rotate_at: meshbench_identity::DEFAULT_ROTATE_FRACTION,
            dir: svid_dir.clone(),
        };
        components.push(
            lab.start_role(
                &format!("{}-cert-agent", pod.name),
                "sidecar",
                Place::Pod(&pod.name),
                true,
                &agent_file,
            )
            .await?,
        );
        let sds_file = lab.write(
            &format!("{}-envoy-sds.yaml", pod.name),
            &envoy_svid_secret(&svid_dir),
        )?;
        let enrollment = EnvoyEnrollment {
            sds_file: &sds_file,
            node_id: &pod.name,
            ca: &lab.pki.ca,
            app: SocketAddr::from(([127, 0, 0, 1], app_port(lab, pod))),
            inbound: SocketAddr::from(([0, 0, 0, 0], Ports::INBOUND)),
            outbound: SocketAddr::from(([127, 0, 0, 1], Ports::OUTBOUND)),
            mode: policy.peer_authentication(&w.namespace, &w.name),
            rbac: rbac_filters(policy.file(), &w.namespace, &w.name),
            destinations: destinations.clone(),
        };
        let name = format!("{}-envoy", pod.name);
        let log_dir = lab.proxy_dir(&name)?;
        let config = lab.write(&format!("{name}.yaml"), &envoy_enrolled(&enrollment))?;
        let args = vec![
            "-c".into(),
            config.display().to_string(),
            "--concurrency".into(),
            "1".into(),
            "--disable-hot-restart".into(),
            "--log-level".into(),
            "warn".into(),
            "--log-path".into(),
            log_dir.join("envoy.log").display().to_string(),
        ];
        components.push(
            lab.start(
                &name,
                "sidecar",
                Place::Pod(&pod.name),
                true,
                envoy,
                args,
                Readiness::Listening(Ports::OUTBOUND),
            )
            .await?,
        );
        lab.pod_capture(pod, &Ports::sidecar_capture())?;
    }
    Ok(components)
}
