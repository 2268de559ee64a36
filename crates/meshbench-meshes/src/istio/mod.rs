//! Istio as a cluster runs it, in both of its data-plane modes: `istio` (an Envoy sidecar per
//! pod, injected by istiod's webhook) and `istio-ambient` (ztunnel per node, a waypoint where
//! L7 rules need one). meshbench installs neither: it detects istiod (and ztunnel), enrolls
//! the run's pods by label, and writes the policy as PeerAuthentication and
//! AuthorizationPolicy (`policy`), whose semantics ours follow, so the translation is direct
//! except where ambient splits L4 from L7.
//!
//! Both scenarios are cluster-only. On the test cluster (`scripts/istio-lab`) istiod, istio-cni
//! and ztunnel are built from source, and the sidecars and waypoints are pilot-agent running
//! upstream Envoy: istiod is then installed without the filters only Istio's own Envoy has, and
//! `mesh detect` says so from istiod's settings (`istiod_without`).

mod policy;

use crate::adapter::{ClusterMesh, MeshAdapter};
use crate::description::{Description, Enrollment, IdentityCheck, PolicySupport};
use crate::installed::{
    present, ComponentClass, Documented, Found, FoundPod, IdentityProtocol, IdentityService,
    Installation, InstalledMesh, InstalledSite, LabelSelector, Signature, Translation,
};
use crate::Error;

const SIGNATURE_CRDS: &[&str] = &[
    "peerauthentications.security.istio.io",
    "authorizationpolicies.security.istio.io",
];
const ISTIOD: LabelSelector = LabelSelector(&[("app", "istiod")]);
const ZTUNNEL: LabelSelector = LabelSelector(&[("app", "ztunnel")]);
/// ztunnel's container in its pods.
const ZTUNNEL_CONTAINER: &str = "istio-proxy";
/// Where istio-init redirects a sidecar pod's inbound connections (the injection template's
/// `-z`, Istio's default).
const SIDECAR_INBOUND_PORT: u16 = 15006;
/// istiod's container in its pods (Istio's chart names it so).
const ISTIOD_CONTAINER: &str = "discovery";
const CNI: LabelSelector = LabelSelector(&[("k8s-app", "istio-cni-node")]);
/// The default revision's injector (Istio's chart names it so).
const INJECTOR: &str = "istio-sidecar-injector";
const WAYPOINT_CRD: &str = "gateways.gateway.networking.k8s.io";
const AMBIENT_CRDS: &[&str] = &[SIGNATURE_CRDS[0], SIGNATURE_CRDS[1], WAYPOINT_CRD];

/// Istio in one of its data-plane modes: an Envoy sidecar per pod, or ambient (ztunnel per
/// node, a waypoint where L7 rules need one).
pub(crate) struct Istio {
    ambient: bool,
}

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] =
    &[&Istio { ambient: false }, &Istio { ambient: true }];

impl MeshAdapter for Istio {
    fn describe(&self) -> Description {
        let spiffe = (IdentityCheck::SpiffeId, IdentityCheck::SpiffeId);
        if !self.ambient {
            return Description::new(
                "istio",
                "Istio, sidecar mode, as installed on the cluster: istiod injects its sidecar \
                 (istio-proxy: pilot-agent and the Envoy of the proxy image the installation \
                 names) into each enrolled pod; TLS 1.3 mTLS (Istio's); peer identity: SPIFFE \
                 ID; our policy as PeerAuthentication and AuthorizationPolicy",
                Enrollment::SidecarPerPod,
            )
            .aliases(&["istio-sidecar"])
            .mtls(spiffe)
            .policy(PolicySupport::Translated(
                "Istio PeerAuthentication and AuthorizationPolicy",
            ));
        }
        Description {
            tunnels_within_node: true,
            ..Description::new(
                "istio-ambient",
                "Istio, ambient mode, as installed on the cluster: ztunnel on each node carries \
                 enrolled pods' traffic over HBONE (TLS 1.3 mTLS, same node too), a waypoint \
                 (Gateway API) where L7 rules need one; peer identity: SPIFFE ID; our policy as \
                 PeerAuthentication and AuthorizationPolicy, L4 at ztunnel, L7 at the waypoint",
                Enrollment::AgentPerNode,
            )
            .aliases(&["ambient"])
            .mtls(spiffe)
            .policy(PolicySupport::Translated(
                "Istio PeerAuthentication and AuthorizationPolicy (L4 at ztunnel, L7 at a \
                 waypoint)",
            ))
        }
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl InstalledMesh for Istio {
    fn signature(&self) -> Signature {
        Signature {
            crds: if self.ambient {
                AMBIENT_CRDS
            } else {
                SIGNATURE_CRDS
            },
            control_plane: &[ISTIOD],
            node_agents: &[ZTUNNEL, CNI],
            config_maps: &[],
            injector_webhooks: &[INJECTOR],
        }
    }

    fn interpret(&self, found: &Found) -> Installation {
        let mut installation = istiod(found);
        let mode = match (self.ambient, has_ztunnel(found)) {
            (true, true) => format!("ambient ({})", ambient_versions(found)),
            (true, false) => "ambient".into(),
            (false, true) => "sidecar (ambient also installed)".into(),
            (false, false) => "sidecar".into(),
        };
        let without = istiod_without(found);
        let mode = match without.is_empty() {
            true => mode,
            false => format!("{mode}; istiod without {}", without.join(", ")),
        };
        installation.mode = Some(match installation.mode.take() {
            Some(external) => format!("{mode}; {external}"),
            None => mode,
        });
        if self.ambient && installation.unusable.is_none() {
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
        policy::translate(site, self.ambient)
    }

    fn component(&self, pod: &FoundPod, container: &str) -> Option<ComponentClass> {
        component(pod, container, self.ambient)
    }

    /// ambient's HBONE under in-pod redirection; a sidecar's inbound listener, where
    /// istio-init redirects every connection to the pod (its call to itself too, from its own
    /// outbound listener, in TLS).
    fn inbound_port_in_pod(&self) -> Option<u16> {
        Some(match self.ambient {
            true => crate::Ports::HBONE,
            false => SIDECAR_INBOUND_PORT,
        })
    }

    /// The sidecar's pilot-agent: the kubelet's probes of the app, rewritten by the injector
    /// (15020), and of the proxy's readiness (15021).
    fn probe_ports(&self) -> &'static [u16] {
        match self.ambient {
            true => &[],
            false => &[15020, 15021],
        }
    }

    /// Istio's CA as its proxies are configured: ztunnel's pods say where it is (`CA_ADDRESS`,
    /// `ALT_CA_HOSTNAME`, the cluster ID) in ambient mode; a sidecar's pilot-agent is told by
    /// its injection template, which points it at istiod's service in istiod's namespace with
    /// istiod's cluster ID. istiod's defaults where they say nothing; the root istiod
    /// publishes to every namespace.
    fn identity_service(&self, found: &Found) -> Option<IdentityService> {
        let (env, default_host, hbone_port_in_pod) = if self.ambient {
            let ztunnel = ZTUNNEL.pick(&found.node_agents)?;
            (
                ztunnel.env_of(ZTUNNEL_CONTAINER),
                "istiod.istio-system.svc".to_owned(),
                Some(crate::Ports::HBONE),
            )
        } else {
            let istiod = ISTIOD.pick(&found.control_plane)?;
            (
                istiod.env_of(ISTIOD_CONTAINER),
                format!("istiod.{}.svc", istiod.namespace),
                None,
            )
        };
        let get = |key: &str| env.and_then(|e| e.get(key)).filter(|v| !v.is_empty());
        let address = get("CA_ADDRESS")
            .map(|a| {
                a.trim_start_matches("https://")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .unwrap_or_else(|| format!("{default_host}:15012"));
        let host = address
            .rsplit_once(':')
            .map_or(address.as_str(), |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        Some(IdentityService {
            protocol: IdentityProtocol::Istio,
            server_name: get("ALT_CA_HOSTNAME").cloned().unwrap_or(host),
            address,
            token_audience: "istio-ca".into(),
            cluster_id: get("ISTIO_META_CLUSTER_ID")
                .or(get("CLUSTER_ID"))
                .cloned()
                .unwrap_or_else(|| "Kubernetes".into()),
            root_config_map: ("istio-ca-root-cert".into(), "root-cert.pem".into()),
            root_namespace: None,
            hbone_port_in_pod,
        })
    }

    fn documented(&self) -> Documented {
        if self.ambient {
            return Documented {
                wire: "HBONE (HTTP/2 CONNECT in TLS 1.3 mTLS, port 15008) between ztunnels; \
                       same-node traffic goes through ztunnel and is encrypted too",
                notes: &[
                    "L7 rules are enforced by the waypoint only: a call that reaches a pod by \
                     its address rather than its service skips it (meshbench's translation then \
                     lets only the waypoint through ztunnel)",
                    "ztunnel judges traffic that passed the waypoint by the waypoint's identity",
                ],
            };
        }
        Documented {
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

/// What istiod's pods say of the installation; without them, an injector whose webhooks call
/// a URL is an external control plane (Istio's model for istiod outside the cluster).
fn istiod(found: &Found) -> Installation {
    let external = found
        .injector_webhooks
        .get(INJECTOR)
        .and_then(|targets| targets.iter().find(|t| t.starts_with("https://")));
    if let (true, false, Some(url)) = (
        found.control_plane.is_empty(),
        found.crds.is_empty(),
        external,
    ) {
        return Installation {
            version: None,
            mode: Some(format!("external control plane at {url}")),
            namespace: None,
            revision: None,
            unusable: None,
        };
    }
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
        mode: None,
        revision,
        ..Installation::running(istiod, "discovery", "")
    }
}

/// What istiod's settings leave out of the proxies' configuration that a stock install sends
/// (each an Istio setting of its own, found in istiod's environment): what a proxy without
/// Istio's own Envoy filters (upstream Envoy under pilot-agent) needs, and what makes its
/// per-request work smaller than a stock istio-proxy's.
fn istiod_without(found: &Found) -> Vec<&'static str> {
    const SWITCHES: &[(&str, &str)] = &[
        ("PILOT_ENABLE_METADATA_EXCHANGE", "metadata exchange"),
        ("PILOT_ENABLE_ALPN_FILTER", "the ALPN filter"),
    ];
    let Some(istiod) = ISTIOD.pick(&found.control_plane) else {
        return Vec::new();
    };
    let env = istiod.env_of(ISTIOD_CONTAINER);
    SWITCHES
        .iter()
        .filter(|(key, _)| {
            env.and_then(|e| e.get(*key))
                .is_some_and(|v| v.eq_ignore_ascii_case("false"))
        })
        .map(|(_, what)| *what)
        .collect()
}

/// ztunnel's and istio-cni's versions, from their images' tags (ztunnel's is its build's
/// commit where it is built from source).
fn ambient_versions(found: &Found) -> String {
    let version = |selector: &LabelSelector, container: &str| {
        found
            .node_agents
            .iter()
            .find(|p| selector.matches(&p.labels))
            .and_then(|p| p.image_version(container))
            .unwrap_or_else(|| "version unknown".into())
    };
    format!(
        "ztunnel {}, istio-cni {}",
        version(&ZTUNNEL, "istio-proxy"),
        version(&CNI, "install-cni")
    )
}

fn has_ztunnel(found: &Found) -> bool {
    found.node_agents.iter().any(|p| ZTUNNEL.matches(&p.labels))
}

/// ztunnel carries every request of an enrolled pod: it is ambient's node agent. istio-cni's
/// agent only programs each pod's redirection into ztunnel and hands ztunnel the pod's network
/// namespace; no request crosses it, so it counts with istiod as ambient's control plane. In
/// sidecar mode neither has a part in an injected pod's traffic (istio-init redirects it into
/// the sidecar): where ambient is installed too, they are the cluster's, not the scenario's.
fn component(pod: &FoundPod, container: &str, ambient: bool) -> Option<ComponentClass> {
    let label = |k: &str| pod.labels.get(k).map(String::as_str);
    let ambient_data_plane =
        label("app") == Some("ztunnel") || label("k8s-app") == Some("istio-cni-node");
    if ambient_data_plane && !ambient {
        None
    } else if label("app") == Some("istiod") || label("k8s-app") == Some("istio-cni-node") {
        Some(ComponentClass::ControlPlane)
    } else if label("app") == Some("ztunnel") {
        Some(ComponentClass::NodeAgent)
    } else if label("gateway.istio.io/managed") == Some("istio.io-mesh-controller") {
        Some(ComponentClass::Waypoint)
    } else if container == "istio-proxy" {
        Some(ComponentClass::Sidecar)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crds() -> std::collections::BTreeMap<String, Vec<String>> {
        SIGNATURE_CRDS
            .iter()
            .map(|c| ((*c).to_owned(), vec!["v1".to_owned()]))
            .collect()
    }

    fn ztunnel_pod(env: &[(&str, &str)]) -> FoundPod {
        FoundPod {
            namespace: "istio-system".into(),
            name: "ztunnel-x".into(),
            labels: [("app".to_owned(), "ztunnel".to_owned())].into(),
            images: [(ZTUNNEL_CONTAINER.to_owned(), "istio/ztunnel:1".to_owned())].into(),
            env: [(
                ZTUNNEL_CONTAINER.to_owned(),
                env.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )]
            .into(),
            ready: true,
            node: "node-1".into(),
        }
    }

    #[test]
    fn istio_s_ca_is_where_ztunnel_or_the_injection_template_says_it_is() {
        let mut found = Found::default();
        assert_eq!(Istio { ambient: true }.identity_service(&found), None);
        // The chart's defaults: istiod's service, its name, the default cluster.
        found.node_agents.push(ztunnel_pod(&[]));
        let service = Istio { ambient: true }.identity_service(&found).unwrap();
        assert_eq!(service.address, "istiod.istio-system.svc:15012");
        assert_eq!(service.server_name, "istiod.istio-system.svc");
        assert_eq!(service.cluster_id, "Kubernetes");
        assert_eq!(service.hbone_port_in_pod, Some(15008));
        // An external istiod, as the test cluster runs it.
        found.node_agents[0] = ztunnel_pod(&[
            ("CA_ADDRESS", "https://10.77.0.1:15012"),
            ("ALT_CA_HOSTNAME", "istiod.istio-system.svc"),
            ("ISTIO_META_CLUSTER_ID", "east"),
        ]);
        let service = Istio { ambient: true }.identity_service(&found).unwrap();
        assert_eq!(service.address, "10.77.0.1:15012");
        assert_eq!(service.server_name, "istiod.istio-system.svc");
        assert_eq!(service.cluster_id, "east");
        // Sidecar mode: no istiod, no CA to ask; with one, its service in its namespace, as
        // the injection template points pilot-agent at it, with istiod's cluster ID.
        assert_eq!(Istio { ambient: false }.identity_service(&found), None);
        found.control_plane.push(FoundPod {
            namespace: "mesh-system".into(),
            name: "istiod-1".into(),
            labels: [("app".to_owned(), "istiod".to_owned())].into(),
            images: Default::default(),
            env: [(
                ISTIOD_CONTAINER.to_owned(),
                [("CLUSTER_ID".to_owned(), "west".to_owned())].into(),
            )]
            .into(),
            ready: true,
            node: "node-3".into(),
        });
        let service = Istio { ambient: false }.identity_service(&found).unwrap();
        assert_eq!(service.address, "istiod.mesh-system.svc:15012");
        assert_eq!(service.server_name, "istiod.mesh-system.svc");
        assert_eq!(service.cluster_id, "west");
        assert_eq!(service.hbone_port_in_pod, None);
    }

    #[test]
    fn detection_names_what_istiod_leaves_out_of_its_proxies_configuration() {
        let istiod = |ready: bool, env: &[(&str, &str)]| FoundPod {
            namespace: "istio-system".into(),
            name: "istiod-1".into(),
            labels: [("app".to_owned(), "istiod".to_owned())].into(),
            images: Default::default(),
            env: [(
                ISTIOD_CONTAINER.to_owned(),
                env.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )]
            .into(),
            ready,
            node: "node-3".into(),
        };
        let mut found = Found::default();
        assert!(istiod_without(&found).is_empty());
        // A stock istiod, not ready, then one without both filters, ready: the ready one speaks.
        found.control_plane.push(istiod(false, &[]));
        assert!(istiod_without(&found).is_empty());
        found.control_plane.push(istiod(
            true,
            &[
                ("PILOT_ENABLE_METADATA_EXCHANGE", "false"),
                ("PILOT_ENABLE_ALPN_FILTER", "False"),
            ],
        ));
        assert_eq!(
            istiod_without(&found),
            ["metadata exchange", "the ALPN filter"]
        );
    }

    #[test]
    fn ambient_s_data_plane_counts_for_ambient_only() {
        let ztunnel = ztunnel_pod(&[]);
        let cni = FoundPod {
            labels: [("k8s-app".to_owned(), "istio-cni-node".to_owned())].into(),
            ..ztunnel_pod(&[])
        };
        let sidecar_mode = Istio { ambient: false };
        let ambient = Istio { ambient: true };
        assert_eq!(
            ambient.component(&ztunnel, ZTUNNEL_CONTAINER),
            Some(ComponentClass::NodeAgent)
        );
        assert_eq!(
            ambient.component(&cni, "install-cni"),
            Some(ComponentClass::ControlPlane)
        );
        assert_eq!(sidecar_mode.component(&ztunnel, ZTUNNEL_CONTAINER), None);
        assert_eq!(sidecar_mode.component(&cni, "install-cni"), None);
        let injected = FoundPod {
            labels: Default::default(),
            ..ztunnel_pod(&[])
        };
        assert_eq!(
            sidecar_mode.component(&injected, "istio-proxy"),
            Some(ComponentClass::Sidecar)
        );
    }

    #[test]
    fn istiod_is_found_in_its_pods_or_as_an_external_control_plane() {
        let mut found = Found {
            crds: crds(),
            ..Found::default()
        };
        let absent = Istio { ambient: false }.interpret(&found);
        assert!(absent
            .unusable
            .unwrap()
            .contains("control plane is not running"));
        found.control_plane.push(FoundPod {
            namespace: "istio-system".into(),
            name: "istiod-1".into(),
            labels: [("app".to_owned(), "istiod".to_owned())].into(),
            images: [(
                "discovery".to_owned(),
                "docker.io/istio/pilot:1.31.0".to_owned(),
            )]
            .into(),
            env: Default::default(),
            ready: true,
            node: "node-1".into(),
        });
        let running = Istio { ambient: false }.interpret(&found);
        assert_eq!(running.version.as_deref(), Some("1.31.0"));
        assert_eq!(running.namespace.as_deref(), Some("istio-system"));
        assert!(running.unusable.is_none());
        // Ambient needs ztunnel.
        assert!(Istio { ambient: true }
            .interpret(&found)
            .unusable
            .unwrap()
            .contains("ztunnel"));

        let external = Found {
            crds: crds(),
            injector_webhooks: [(
                INJECTOR.to_owned(),
                vec!["https://10.0.0.9:15017/inject".to_owned()],
            )]
            .into(),
            ..Found::default()
        };
        let installation = Istio { ambient: false }.interpret(&external);
        assert!(installation.unusable.is_none());
        assert_eq!(
            installation.mode.as_deref(),
            Some("sidecar; external control plane at https://10.0.0.9:15017/inject")
        );
    }
}
