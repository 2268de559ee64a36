//! Istio as a cluster runs it, in both of its data-plane modes: `istio` (an Envoy sidecar per
//! pod, injected by istiod's webhook) and `istio-ambient` (ztunnel per node, a waypoint where
//! L7 rules need one). meshbench installs neither: it detects istiod (and ztunnel), enrolls
//! the run's pods by label, and writes the policy as PeerAuthentication and
//! AuthorizationPolicy (`policy`), whose semantics ours follow, so the translation is direct
//! except where ambient splits L4 from L7.
//!
//! Istio's proxy image is a Bazel build and ztunnel is in no registry, so neither runs here:
//! both scenarios are cluster-only, and what can be checked without them (the resources
//! against Istio's CRDs, istiod's validation and injection) is.

mod policy;

use meshbench_policy::Policy;
use meshbench_topology::Topology;

use crate::adapter::{Deploying, Enrollment, MeshAdapter, PolicySupport};
use crate::cluster::ClusterMesh;
use crate::configs::IdentityCheck;
use crate::installed::{
    image_tag, present, ComponentClass, Documented, Found, FoundPod, Installation, InstalledMesh,
    InstalledSite, Signature, Translation,
};
use crate::{EnforcedPolicy, Error, MeshContext};

/// Why neither mode runs on the local lab.
pub(crate) const CLUSTER_ONLY: &str =
    "it runs only on a cluster where the mesh is installed (meshbench run --backend \
     kubernetes); its data plane cannot be obtained here (Istio's proxy is a Bazel build, \
     ztunnel and linkerd2-proxy are in no registry)";

const SIGNATURE_CRDS: &[&str] = &[
    "peerauthentications.security.istio.io",
    "authorizationpolicies.security.istio.io",
];
const ISTIOD: &str = "app=istiod";
const ZTUNNEL: &str = "app=ztunnel";
const CNI: &str = "k8s-app=istio-cni-node";
const WAYPOINT_CRD: &str = "gateways.gateway.networking.k8s.io";
const AMBIENT_CRDS: &[&str] = &[SIGNATURE_CRDS[0], SIGNATURE_CRDS[1], WAYPOINT_CRD];

pub(crate) struct IstioSidecar;
pub(crate) struct IstioAmbient;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&IstioSidecar, &IstioAmbient];

/// The answer of a cluster-only mesh asked to deploy on the local lab (never asked: it is
/// unavailable there).
pub(crate) fn no_local_deploy(mesh: &'static str) -> Deploying<'static> {
    Box::pin(async move {
        Err(Error::Unsupported {
            mesh: mesh.into(),
            what: "the local lab",
        })
    })
}

impl MeshAdapter for IstioSidecar {
    fn name(&self) -> &'static str {
        "istio"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["istio-sidecar"]
    }

    fn description(&self) -> String {
        "Istio, sidecar mode, as installed on the cluster: istiod injects an Envoy sidecar into \
         each enrolled pod; TLS 1.3 mTLS (Istio's); peer identity: SPIFFE ID; our policy as \
         PeerAuthentication and AuthorizationPolicy"
            .into()
    }

    fn local_lab(&self) -> Result<(), &'static str> {
        Err(CLUSTER_ONLY)
    }

    fn enrollment(&self) -> Enrollment {
        Enrollment::SidecarPerPod
    }

    fn mtls(&self) -> bool {
        true
    }

    fn identity(&self) -> Option<(IdentityCheck, IdentityCheck)> {
        Some((IdentityCheck::SpiffeId, IdentityCheck::SpiffeId))
    }

    fn policy(&self) -> PolicySupport {
        PolicySupport::Translated("Istio PeerAuthentication and AuthorizationPolicy")
    }

    fn enforced_policy(
        &self,
        policy: &Policy,
        topology: &Topology,
    ) -> Result<EnforcedPolicy, Error> {
        Ok(policy::enforced(policy, topology, false))
    }

    fn deploy<'a>(&'a self, _ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        no_local_deploy(self.name())
    }

    fn on_cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl ClusterMesh for IstioSidecar {
    fn installed(&self) -> Option<&dyn InstalledMesh> {
        Some(self)
    }
}

impl InstalledMesh for IstioSidecar {
    fn signature(&self) -> Signature {
        Signature {
            crds: SIGNATURE_CRDS,
            control_plane: &[ISTIOD],
            node_agents: &[ZTUNNEL, CNI],
            config_maps: &[],
        }
    }

    fn interpret(&self, found: &Found) -> Installation {
        let mut installation = istiod(found);
        installation.mode = Some(if has_ztunnel(found) {
            "sidecar (ambient also installed)".into()
        } else {
            "sidecar".into()
        });
        installation
    }

    fn translate(&self, site: &InstalledSite<'_>) -> Result<Translation, Error> {
        policy::translate(site, false)
    }

    fn component(&self, pod: &FoundPod, container: &str) -> Option<ComponentClass> {
        component(pod, container)
    }

    fn documented(&self) -> Documented {
        Documented {
            encrypts_same_node: true,
            wire: "TLS 1.3 between the sidecars (Istio's mTLS), same node or not",
            notes: &[
                "Istio's sidecar hides some denials as connection resets (E3): a request its \
                 RBAC filter denies on a TCP (L4) path is a closed connection, not a 403",
                "a workload with PERMISSIVE peer authentication takes plaintext from outside \
                 the mesh, and an unauthenticated caller matches no principal rule",
            ],
        }
    }
}

impl MeshAdapter for IstioAmbient {
    fn name(&self) -> &'static str {
        "istio-ambient"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["ambient"]
    }

    fn description(&self) -> String {
        "Istio, ambient mode, as installed on the cluster: ztunnel on each node carries \
         enrolled pods' traffic over HBONE (TLS 1.3 mTLS, same node too), a waypoint (Gateway \
         API) where L7 rules need one; peer identity: SPIFFE ID; our policy as \
         PeerAuthentication and AuthorizationPolicy, L4 at ztunnel, L7 at the waypoint"
            .into()
    }

    fn local_lab(&self) -> Result<(), &'static str> {
        Err(CLUSTER_ONLY)
    }

    fn enrollment(&self) -> Enrollment {
        Enrollment::AgentPerNode
    }

    fn mtls(&self) -> bool {
        true
    }

    fn tunnels_within_node(&self) -> bool {
        true
    }

    fn identity(&self) -> Option<(IdentityCheck, IdentityCheck)> {
        Some((IdentityCheck::SpiffeId, IdentityCheck::SpiffeId))
    }

    fn policy(&self) -> PolicySupport {
        PolicySupport::Translated(
            "Istio PeerAuthentication and AuthorizationPolicy (L4 at ztunnel, L7 at a waypoint)",
        )
    }

    fn enforced_policy(
        &self,
        policy: &Policy,
        topology: &Topology,
    ) -> Result<EnforcedPolicy, Error> {
        Ok(policy::enforced(policy, topology, true))
    }

    fn deploy<'a>(&'a self, _ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        no_local_deploy(self.name())
    }

    fn on_cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl ClusterMesh for IstioAmbient {
    fn installed(&self) -> Option<&dyn InstalledMesh> {
        Some(self)
    }
}

impl InstalledMesh for IstioAmbient {
    fn signature(&self) -> Signature {
        Signature {
            crds: AMBIENT_CRDS,
            control_plane: &[ISTIOD],
            node_agents: &[ZTUNNEL, CNI],
            config_maps: &[],
        }
    }

    fn interpret(&self, found: &Found) -> Installation {
        let mut installation = istiod(found);
        installation.mode = Some("ambient".into());
        if installation.unusable.is_none() {
            if !has_ztunnel(found) {
                installation.unusable =
                    Some("Istio is installed without ambient mode (no ztunnel pods)".into());
            } else if !found.crds.contains_key(WAYPOINT_CRD) {
                installation.unusable = Some(
                    "the Gateway API CRDs are not installed (ambient's waypoints are Gateways)"
                        .into(),
                );
            }
        }
        installation
    }

    fn translate(&self, site: &InstalledSite<'_>) -> Result<Translation, Error> {
        policy::translate(site, true)
    }

    fn component(&self, pod: &FoundPod, container: &str) -> Option<ComponentClass> {
        component(pod, container)
    }

    fn documented(&self) -> Documented {
        Documented {
            encrypts_same_node: true,
            wire: "HBONE (HTTP/2 CONNECT in TLS 1.3 mTLS, port 15008) between ztunnels; \
                   same-node traffic goes through ztunnel and is encrypted too",
            notes: &[
                "L7 rules are enforced by the waypoint only: a call that reaches a pod by its \
                 address rather than its service skips it (meshbench's translation then lets \
                 only the waypoint through ztunnel)",
                "ztunnel judges traffic that passed the waypoint by the waypoint's identity",
            ],
        }
    }
}

/// What istiod's pods say of the installation.
fn istiod(found: &Found) -> Installation {
    if let Err(why) = present(found, "Istio") {
        return Installation::absent(why);
    }
    let istiod = found
        .control_plane
        .iter()
        .find(|p| p.ready)
        .or(found.control_plane.first());
    let revision = istiod
        .and_then(|p| p.labels.get("istio.io/rev"))
        .filter(|r| r.as_str() != "default")
        .cloned();
    Installation {
        version: istiod.and_then(|p| {
            p.images
                .get("discovery")
                .or(p.images.values().next())
                .and_then(|i| image_tag(i))
        }),
        mode: None,
        namespace: istiod.map(|p| p.namespace.clone()),
        revision,
        unusable: None,
    }
}

fn has_ztunnel(found: &Found) -> bool {
    found
        .node_agents
        .iter()
        .any(|p| p.labels.get("app").map(String::as_str) == Some("ztunnel"))
}

fn component(pod: &FoundPod, container: &str) -> Option<ComponentClass> {
    let label = |k: &str| pod.labels.get(k).map(String::as_str);
    if label("app") == Some("istiod") {
        Some(ComponentClass::ControlPlane)
    } else if label("app") == Some("ztunnel") || label("k8s-app") == Some("istio-cni-node") {
        Some(ComponentClass::NodeAgent)
    } else if label("gateway.istio.io/managed") == Some("istio.io-mesh-controller") {
        Some(ComponentClass::Waypoint)
    } else if container == "istio-proxy" {
        Some(ComponentClass::Sidecar)
    } else {
        None
    }
}
