//! Envoy as the sidecar on a cluster, as Istio injects it: an init container writes the
//! capture rules, a certificate agent (istio-agent's job) renews the pod's SVID through the
//! CA service and publishes it into the pod's scratch directory, and Envoy, configured as
//! istiod configures it (inbound and outbound listeners, original destination, SDS from the
//! published files, our policy as RBAC), runs beside the app as the proxy user. A cell and
//! an enrolled topology get the same Envoy; a cell's client knows only its server's service.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meshbench_identity::CertAgentFile;
use meshbench_role::RoleConfig;
use meshbench_topology::Pod;

use super::Envoy;
use crate::cluster::{check_command, CONFIG_DIR_IN_POD};
use crate::configs::envoy::{
    envoy_args, envoy_enrolled, envoy_svid_secret, EnvoyEnrollment, MeshDestination,
};
use crate::configs::envoy_rbac::rbac_filters;
use crate::{
    spiffe_id, AddedContainer, ClusterCell, ClusterMesh, ClusterSite, Error, PodAdditions, Ports,
};

/// Where the pod's scratch directory is mounted in the agent's and Envoy's containers.
const SCRATCH: &str = "/var/run/meshbench";
/// Envoy's program in the image (`meshbench image build --with-envoy`).
const ENVOY_IN_IMAGE: &str = "/usr/local/bin/envoy";

impl ClusterMesh for Envoy {
    fn pod(&self, cell: &ClusterCell<'_>, pod: &Pod) -> Result<PodAdditions, Error> {
        let server = &cell.server.workload;
        let service = cell
            .site
            .services
            .get(cell.service)
            .ok_or_else(|| Error::Unsupported {
                mesh: <Envoy as crate::third_party::PairedProxy>::NAME.into(),
                what: "a cell whose service has no address",
            })?;
        let destinations = vec![MeshDestination {
            name: cell.service.to_owned(),
            address: *service,
            spiffe_id: spiffe_id(&server.namespace, &server.service_account),
        }];
        Ok(envoy_additions(&cell.site, pod, destinations))
    }

    fn can_enroll(&self) -> bool {
        true
    }

    fn enroll_pod(&self, site: &ClusterSite<'_>, pod: &Pod) -> Result<PodAdditions, Error> {
        if !pod.workload.meshed {
            return Ok(PodAdditions::default());
        }
        let destinations = site
            .topology
            .services
            .iter()
            .filter_map(|s| {
                let w = site.topology.workload(&s.workload).filter(|w| w.meshed)?;
                Some(MeshDestination {
                    name: s.name.clone(),
                    address: *site.services.get(&s.name)?,
                    spiffe_id: spiffe_id(&w.namespace, &w.service_account),
                })
            })
            .collect();
        Ok(envoy_additions(site, pod, destinations))
    }

    fn needs_ca(&self) -> bool {
        true
    }
}

fn in_config_dir(name: &str) -> PathBuf {
    Path::new(CONFIG_DIR_IN_POD).join(name)
}

/// The capture init container, the certificate agent and Envoy for `pod`.
fn envoy_additions(
    site: &ClusterSite<'_>,
    pod: &Pod,
    destinations: Vec<MeshDestination>,
) -> PodAdditions {
    let w = &pod.workload;
    let svid = ClusterCell::svid(pod);
    let svid_dir = Path::new(SCRATCH).join("svid");
    let agent = CertAgentFile {
        cert: svid.cert,
        key: svid.key,
        ca: ClusterCell::ca(),
        ca_endpoint: site.ca_endpoint,
        rotate_at: meshbench_identity::DEFAULT_ROTATE_FRACTION,
        dir: svid_dir.clone(),
    };
    let agent_config = in_config_dir("cert-agent.yaml");
    let sds = in_config_dir("envoy-sds.yaml");
    // Envoy resolves paths against its working directory, not its config's: absolute ones.
    let ca = in_config_dir(&ClusterCell::ca().display().to_string());
    let enrollment = EnvoyEnrollment {
        sds_file: &sds,
        node_id: &pod.name,
        ca: &ca,
        app: SocketAddr::from(([127, 0, 0, 1], site.app_port(pod))),
        inbound: SocketAddr::from(([0, 0, 0, 0], Ports::INBOUND)),
        outbound: SocketAddr::from(([127, 0, 0, 1], Ports::OUTBOUND)),
        mode: site.policy.peer_authentication(&w.namespace, &w.name),
        rbac: rbac_filters(site.policy.file(), &w.namespace, &w.name),
        destinations,
    };
    let envoy_config = in_config_dir("envoy.yaml");
    let mut additions = crate::cluster::capture_additions(Ports::sidecar_capture());
    additions.containers = vec![
        AddedContainer {
            name: "meshbench-cert-agent",
            program: None,
            args: CertAgentFile::command_line(&agent_config),
            files: [("cert-agent.yaml".to_owned(), agent.to_yaml())].into(),
            run_as_user: Some(meshbench_netlab::PROXY_UID),
            capabilities: vec![],
            role: "cert-agent",
            ready_port: None,
            // Envoy starts once the SVID is published.
            ready_command: Some(check_command::<CertAgentFile>(&agent_config)),
            scratch: Some(SCRATCH),
        },
        AddedContainer {
            name: "envoy",
            program: Some(ENVOY_IN_IMAGE),
            args: envoy_args(&envoy_config),
            files: [
                ("envoy.yaml".to_owned(), envoy_enrolled(&enrollment)),
                ("envoy-sds.yaml".to_owned(), envoy_svid_secret(&svid_dir)),
            ]
            .into(),
            run_as_user: Some(meshbench_netlab::PROXY_UID),
            capabilities: vec![],
            role: "sidecar",
            ready_port: Some(Ports::INBOUND),
            ready_command: None,
            scratch: Some(SCRATCH),
        },
    ];
    additions.identity = true;
    additions
}
