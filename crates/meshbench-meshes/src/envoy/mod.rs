//! Envoy as the sidecar in each pod, the data plane of Istio's sidecar mode. In a
//! client/server cell: HTTP proxying with one worker, TLS 1.3 mTLS checking the peer's SPIFFE
//! ID both ways. Enrolled in a topology: configured as istiod configures it (inbound and
//! outbound listeners, original destination, SDS for the SVID a certificate agent renews), with
//! our policy translated to Envoy RBAC (`configs::envoy_rbac`).

mod cluster;

use std::net::SocketAddr;
use std::path::Path;

use meshbench_identity::CertAgentFile;
use meshbench_lab::{LabComponent, Readiness};
use meshbench_policy::Policy;

use crate::adapter::{ClusterMesh, Enrolling, LocalEnroll, MeshAdapter};
use crate::configs::envoy::{self as config, sidecar_args, ENVOY};
use crate::configs::envoy_rbac::rbac_filters;
use crate::configs::ProxyMode;
use crate::description::{IdentityCheck, PolicySupport};
use crate::enroll::app_port;
use crate::lab::Place;
use crate::third_party::{PairedProxy, Side, ThirdParty};
use crate::tool::Tool;
use crate::{spiffe_id, Error, LabContext, Ports};
use config::{envoy_enrolled, envoy_svid_secret, EnvoyEnrollment, MeshDestination};

pub(crate) struct Envoy;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&ThirdParty(Envoy)];

impl PairedProxy for Envoy {
    const NAME: &'static str = "envoy-sidecar";
    const TOOL: Tool = ENVOY;
    const IDENTITY: (IdentityCheck, IdentityCheck) =
        (IdentityCheck::SpiffeId, IdentityCheck::SpiffeId);
    const POLICY: PolicySupport =
        PolicySupport::Translated("Envoy RBAC filters, as istiod generates them");
    const EXTENSION: &'static str = "yaml";

    fn what(&self) -> &'static str {
        "Envoy sidecar in each pod (HTTP, one worker)"
    }

    fn enroller(&self) -> Option<&dyn LocalEnroll> {
        Some(self)
    }

    fn on_cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }

    fn config(&self, side: &Side<'_>) -> String {
        let tls = config::EnvoyTls {
            cert: &side.own.cert,
            key: &side.own.key,
            ca: side.ca,
            peer_id: &side.peer.id,
        };
        if side.inbound {
            config::envoy_inbound(side.listen, side.target, &tls, ProxyMode::Http)
        } else {
            config::envoy_outbound(side.listen, side.target, &tls, ProxyMode::Http)
        }
    }

    fn args(&self, config: &Path, dir: &Path) -> Vec<String> {
        sidecar_args(config, dir)
    }
}

impl LocalEnroll for Envoy {
    fn enroll<'a>(&'a self, lab: &'a LabContext<'a>) -> Enrolling<'a> {
        Box::pin(async move { enroll(lab, &crate::third_party::binary::<Envoy>()?).await })
    }
}

/// Every meshed pod gets Envoy configured as Istio configures its sidecar (see
/// [`configs::envoy_enrolled`]), with our policy translated to Envoy RBAC, and a certificate
/// agent beside it (istio-agent's job) that renews the pod's SVID and publishes it for Envoy.
async fn enroll(lab: &LabContext<'_>, envoy: &Path) -> Result<Vec<LabComponent>, Error> {
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
        let args = Envoy.args(&config, &log_dir);
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
