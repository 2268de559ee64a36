//! meshbench's own sidecar (`proxy sidecar`) in each pod, capture by iptables, a CA service
//! renewing SVIDs. Its tuning selects E1's throughput-decomposition configurations; the
//! default (L4, mTLS, metrics) is the one that enrolls whole topologies, in L7 so that
//! denials are answered with 403 as Istio's and Linkerd's sidecars do.

mod plan;

use std::net::SocketAddr;
use std::path::PathBuf;

use meshbench_dataplane::{InboundListener, MeshedDestination, Mode, SidecarFile, SidecarOutbound};
use meshbench_lab::LabComponent;

use crate::adapter::{Deploying, Enrolling, LocalEnroll, LocalMesh, MeshAdapter};
use crate::cluster::CONFIG_DIR_IN_POD;
use crate::description::{Description, Enrollment, IdentityCheck, PolicySupport};
use crate::enroll::app_port;
use crate::pki::PkiLayout;
use crate::{
    AddedContainer, ClusterCell, ClusterMesh, ClusterSite, Deployment, Error, LabContext,
    MeshContext, PodAdditions, Ports,
};
use meshbench_role::RoleConfig;
use meshbench_topology::Pod;
use plan::{
    captured_inbound, captured_outbound, enrolled_sidecar, meshed_destinations, sidecar_file,
};

/// What our sidecar does beyond moving bytes: E1 switched these off one by one to find where a
/// sidecar's cost comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidecarTuning {
    /// Parse HTTP and authorize per request (L7), or splice bytes (L4).
    pub l7: bool,
    pub mtls: bool,
    pub metrics: bool,
}

impl SidecarTuning {
    /// What `meshbench-sidecar` means: L4, mTLS, metrics (as ztunnel or Linkerd's TCP proxy).
    pub const DEFAULT: SidecarTuning = SidecarTuning::new(false, true, true);

    const fn new(l7: bool, mtls: bool, metrics: bool) -> Self {
        SidecarTuning { l7, mtls, metrics }
    }

    fn describe(self) -> String {
        format!(
            "{}, {}, {}",
            if self.l7 {
                "L7 (HTTP parsed, per-request authorization, pooled upstreams)"
            } else {
                "L4 (bytes spliced, identity-only authorization)"
            },
            if self.mtls {
                "TLS 1.3 mTLS STRICT, identity-based ALLOW"
            } else {
                "plaintext between sidecars, no policy"
            },
            if self.metrics {
                "metrics on"
            } else {
                "no metrics"
            }
        )
    }
}

/// One tuning of our sidecar as a scenario.
pub(crate) struct OurSidecar {
    name: &'static str,
    tuning: SidecarTuning,
}

/// E1's five configurations are `-l7` (mTLS), `-l7-plaintext`, `-l7-plaintext-no-metrics`,
/// `-l4-plaintext` (TCP) and `-l4-plaintext-no-metrics` (TCP, no metrics).
pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[
    &OurSidecar::tuned("meshbench-sidecar", SidecarTuning::DEFAULT),
    &OurSidecar::tuned(
        "meshbench-sidecar-no-metrics",
        SidecarTuning::new(false, true, false),
    ),
    &OurSidecar::tuned(
        "meshbench-sidecar-l4-plaintext",
        SidecarTuning::new(false, false, true),
    ),
    &OurSidecar::tuned(
        "meshbench-sidecar-l4-plaintext-no-metrics",
        SidecarTuning::new(false, false, false),
    ),
    &OurSidecar::tuned("meshbench-sidecar-l7", SidecarTuning::new(true, true, true)),
    &OurSidecar::tuned(
        "meshbench-sidecar-l7-no-metrics",
        SidecarTuning::new(true, true, false),
    ),
    &OurSidecar::tuned(
        "meshbench-sidecar-l7-plaintext",
        SidecarTuning::new(true, false, true),
    ),
    &OurSidecar::tuned(
        "meshbench-sidecar-l7-plaintext-no-metrics",
        SidecarTuning::new(true, false, false),
    ),
];

impl OurSidecar {
    const fn tuned(name: &'static str, tuning: SidecarTuning) -> Self {
        OurSidecar { name, tuning }
    }

    fn is_default(&self) -> bool {
        self.tuning == SidecarTuning::DEFAULT
    }
}

impl MeshAdapter for OurSidecar {
    fn describe(&self) -> Description {
        let summary = format!(
            "meshbench sidecar in each pod, iptables capture, {}, CA service",
            self.tuning.describe()
        );
        let mut description = Description::new(self.name, summary, Enrollment::SidecarPerPod);
        if self.is_default() {
            description = description.aliases(&["sidecar"]);
        }
        if self.tuning.mtls {
            description = description
                .mtls((IdentityCheck::SpiffeId, IdentityCheck::SpiffeId))
                .policy(PolicySupport::Native);
        }
        description
    }

    fn local(&self) -> Option<&dyn LocalMesh> {
        Some(self)
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl LocalMesh for OurSidecar {
    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        Box::pin(deploy(ctx, self.tuning))
    }

    /// Only the default tuning enrolls whole topologies.
    fn enroller(&self) -> Option<&dyn LocalEnroll> {
        self.is_default().then_some(self as &dyn LocalEnroll)
    }
}

impl LocalEnroll for OurSidecar {
    fn enroll<'a>(&'a self, lab: &'a LabContext<'a>) -> Enrolling<'a> {
        Box::pin(enroll(lab))
    }
}

/// Istio's shape: an init container writes the capture rules into the pod's namespace, the
/// sidecar runs beside the app as the proxy user with the pod's SVID, renewed through the CA
/// service. As in the lab's cells, the server's sidecar takes what comes in and the client's
/// what goes out; any other pod's sidecar does both.
impl ClusterMesh for OurSidecar {
    fn pod(&self, cell: &ClusterCell<'_>, pod: &Pod) -> Result<PodAdditions, Error> {
        let svid = cluster_svid;
        let mut file = tuned(
            sidecar_file(pod, &cluster_pki(&svid), cell.site.ca_endpoint),
            self.tuning,
        );
        if pod.name != cell.client.name {
            file.inbound = Some(captured_inbound(cell.site.app_port(pod)));
        }
        if pod.name != cell.server.name {
            file.transparent_outbound = Some(captured_outbound(cluster_destinations(&cell.site)?));
        }
        Ok(sidecar_additions(file))
    }

    /// As in the lab: every meshed pod captured both ways, in L7 so that a denial is a 403.
    fn can_enroll(&self) -> bool {
        self.is_default()
    }

    fn enroll_pod(&self, site: &ClusterSite<'_>, pod: &Pod) -> Result<PodAdditions, Error> {
        if !pod.workload.meshed {
            return Ok(PodAdditions::default());
        }
        Ok(sidecar_additions(enrolled_on_cluster(site, pod)?))
    }

    fn needs_ca(&self) -> bool {
        self.tuning.mtls
    }
}

/// A pod's SVID under its config directory on a cluster.
fn cluster_svid(pod: &Pod) -> (PathBuf, PathBuf) {
    let svid = ClusterCell::svid(pod);
    (svid.cert, svid.key)
}

/// A cluster's credentials as our sidecar reads them: the pod's `pki/` directory.
fn cluster_pki<'a>(svid: &'a dyn Fn(&Pod) -> (PathBuf, PathBuf)) -> PkiLayout<'a> {
    PkiLayout {
        ca: ClusterCell::ca(),
        policy: ClusterCell::policy(),
        svid,
    }
}

/// The meshed services at the cluster's addresses.
fn cluster_destinations(site: &ClusterSite<'_>) -> Result<Vec<MeshedDestination>, Error> {
    meshed_destinations(site.topology, |name| {
        site.services
            .get(name)
            .copied()
            .ok_or_else(|| Error::Unsupported {
                mesh: "meshbench-sidecar".into(),
                what: "a meshed service without an address on the cluster",
            })
    })
}

/// An enrolled pod's sidecar on a cluster, before it is launched.
fn enrolled_on_cluster(site: &ClusterSite<'_>, pod: &Pod) -> Result<SidecarFile, Error> {
    Ok(enrolled_sidecar(
        pod,
        &cluster_pki(&cluster_svid),
        site.ca_endpoint,
        site.app_port(pod),
        cluster_destinations(site)?,
    ))
}

/// Our sidecar as a container beside the pod's app, with the init container that writes its
/// capture rules.
fn sidecar_additions(mut file: SidecarFile) -> PodAdditions {
    // Started once it serves metrics, which it does after binding every listener.
    file.admin = file
        .metrics
        .then(|| SocketAddr::from(([0, 0, 0, 0], Ports::ADMIN)));
    let mut capture = Ports::sidecar_capture();
    capture.inbound_ports_excluded.push(Ports::ADMIN);
    let config = format!("{CONFIG_DIR_IN_POD}/sidecar.yaml");
    PodAdditions {
        init: crate::cluster::capture_additions(capture).init,
        containers: vec![AddedContainer {
            name: "meshbench-proxy",
            program: None,
            args: SidecarFile::command_line(std::path::Path::new(&config)),
            files: [("sidecar.yaml".to_owned(), file.to_yaml())].into(),
            run_as_user: Some(meshbench_netlab::PROXY_UID),
            capabilities: vec![],
            role: "sidecar",
            ready_port: file.admin.map(|a| a.port()),
            ready_command: None,
            scratch: None,
        }],
        identity: true,
        ..PodAdditions::default()
    }
}

async fn deploy(ctx: &MeshContext<'_>, tuning: SidecarTuning) -> Result<Deployment, Error> {
    let (ca, ca_endpoint) = ctx.control_plane().await?;
    let mut components = vec![ca];
    let (client, server) = (ctx.client_pod, ctx.server_pod);
    let server_ip = ctx.pod_ip(server)?;
    let client_ip = ctx.pod_ip(client)?;
    let capture = Ports::sidecar_capture();

    let svid = |pod: &Pod| ctx.svid_files(pod);
    let pki = ctx.pki_layout(&svid);
    let mut file = tuned(sidecar_file(server, &pki, ca_endpoint), tuning);
    file.inbound = Some(if ctx.net.captures() {
        captured_inbound(Ports::APP)
    } else {
        InboundListener {
            listen: SocketAddr::new(server_ip, Ports::INBOUND),
            app: SocketAddr::new(server_ip, Ports::APP),
            transparent: false,
        }
    });
    components.push(ctx.start_our_sidecar(server, file, &capture).await?);

    let server_id = ctx.server_svid().id;
    let mut file = tuned(sidecar_file(client, &pki, ca_endpoint), tuning);
    let url = if ctx.net.captures() {
        file.transparent_outbound = Some(captured_outbound(vec![MeshedDestination {
            address: ctx.net.service_addr(ctx.service)?,
            id: Some(server_id),
        }]));
        ctx.service_url("http")?
    } else {
        let listen = SocketAddr::new(client_ip, Ports::OUTBOUND);
        file.outbound.push(SidecarOutbound {
            listen,
            upstream: ctx.across_link(SocketAddr::new(server_ip, Ports::INBOUND))?,
            upstream_id: Some(server_id),
        });
        format!("http://{listen}/")
    };
    components.push(ctx.start_our_sidecar(client, file, &capture).await?);
    Ok(Deployment {
        components,
        url,
        client_tls: None,
    })
}

/// Applies a tuning to our sidecar. Without mTLS there is no identity to authorize, so the
/// policy goes too (a STRICT policy would refuse every plaintext peer).
fn tuned(mut file: SidecarFile, tuning: SidecarTuning) -> SidecarFile {
    if !tuning.mtls {
        file.policy = None;
        file.mtls = false;
    }
    file.metrics = tuning.metrics;
    file.mode = if tuning.l7 { Mode::L7 } else { Mode::L4 };
    file
}

/// Every meshed pod gets our sidecar capturing both ways; calls to meshed services go out
/// over mTLS to their SPIFFE IDs, the rest pass through in plaintext (Istio's ALLOW_ANY).
async fn enroll(lab: &LabContext<'_>) -> Result<Vec<LabComponent>, Error> {
    let topology = lab.net.topology();
    let destinations = meshed_destinations(topology, |name| Ok(lab.net.service_addr(name)?))?;
    let capture = Ports::sidecar_capture();
    let (ca, ca_endpoint) = lab.control_plane().await?;
    let svid = |pod: &Pod| lab.svid_files(pod);
    let pki = lab.pki_layout(&svid);
    let mut components = vec![ca];
    for pod in topology.pods().iter().filter(|p| p.workload.meshed) {
        let file = enrolled_sidecar(
            pod,
            &pki,
            ca_endpoint,
            app_port(lab, pod),
            destinations.clone(),
        );
        components.push(lab.start_our_sidecar(pod, file, &capture).await?);
    }
    Ok(components)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::same_addresses::E3AtLabAddresses;

    /// An enrolled pod's sidecar, planned from the lab's addresses and from a cluster's at the
    /// same addresses, with the same credentials' layout: the same file (before each platform
    /// adds how it launches it).
    #[test]
    fn the_lab_and_the_cluster_plan_the_same_enrolled_sidecar() {
        let e3 = E3AtLabAddresses::new();
        let site = e3.site();
        let on_lab_addresses =
            meshed_destinations(&e3.topology, |name| Ok(e3.addresses.service(name)?.addr)).unwrap();
        assert_eq!(
            on_lab_addresses.len(),
            3,
            "one destination per meshed service"
        );
        for pod in e3.topology.pods().iter().filter(|p| p.workload.meshed) {
            let lab = enrolled_sidecar(
                pod,
                &cluster_pki(&cluster_svid),
                site.ca_endpoint,
                site.app_port(pod),
                on_lab_addresses.clone(),
            );
            assert_eq!(
                lab,
                enrolled_on_cluster(&site, pod).unwrap(),
                "{}",
                pod.name
            );
        }
    }
}
