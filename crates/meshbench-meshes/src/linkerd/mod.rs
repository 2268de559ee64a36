//! Linkerd as a cluster runs it: its proxy injector adds `linkerd-proxy` to pods annotated
//! `linkerd.io/inject: enabled`; identities are service accounts
//! (`<sa>.<ns>.serviceaccount.identity.linkerd.<trust-domain>`, checked as DNS names).
//!
//! Linkerd's policy is allow-only: a `Server` on a port denies what no `AuthorizationPolicy`
//! grants, and grants name `MeshTLSAuthentication`s (identities) or `NetworkAuthentication`s
//! (plaintext by source network). Our DENY rules and namespace conditions have no equivalent,
//! so each destination's rules are decided pair by pair (`pairs`) for every enrolled workload
//! and for a peer without an identity, and what is allowed is granted: per port (`Server`),
//! or per route (Linkerd's `HTTPRoute` on the `Server`) where methods or paths decide. Linkerd
//! picks the most specific route rather than the first rule, and a network grant lets in
//! every identity of the network too: where that changes an outcome, a note says so.
//!
//! The pods' `config.linkerd.io/default-inbound-policy` annotation carries our default, so the
//! cluster's own default (which let another namespace in, in E3) does not decide the run's.
//!
//! On the test cluster Linkerd runs from its pinned sources (`scripts/linkerd-build`,
//! `scripts/linkerd-lab`); nothing here depends on how it was installed: detection, enrollment
//! and sampling go by Linkerd's own labels, annotations, CRDs and pods.

use std::collections::BTreeMap;

use meshbench_policy::{Action, DefaultInbound, Pattern, PeerAuthenticationMode};
use meshbench_topology::Workload;
use serde_json::{json, Value};

use crate::adapter::{ClusterMesh, MeshAdapter};
use crate::description::{Description, Enrollment, IdentityCheck, PolicySupport};
use crate::installed::{
    metadata, present, resource_name, workload_selector, ComponentClass, Documented, Found,
    FoundPod, IdentityProtocol, IdentityService, Installation, InstalledMesh, InstalledSite,
    LabelSelector, MeshEnrollment, Signature, Translation,
};
use crate::pairs::{self, HttpMatch, Outcome, Source};
use crate::{EnforcedPolicy, Error};

const NAME: &str = "linkerd";
const POLICY: &str = "policy.linkerd.io";

pub(crate) struct Linkerd;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&Linkerd];

impl MeshAdapter for Linkerd {
    fn describe(&self) -> Description {
        Description {
            identity_format: |namespace, service_account| {
                format!(
                    "{service_account}.{namespace}.serviceaccount.identity.linkerd.{}",
                    crate::TRUST_DOMAIN
                )
            },
            ..Description::new(
                NAME,
                "Linkerd as installed on the cluster: linkerd2-proxy injected into each enrolled \
                 pod; TLS 1.3 mTLS (Linkerd's), peer identity: service account as a DNS name; \
                 our policy as Server, AuthorizationPolicy, MeshTLSAuthentication and \
                 HTTPRoute, decided per pair",
                Enrollment::SidecarPerPod,
            )
            .mtls((IdentityCheck::DnsName, IdentityCheck::DnsName))
            // Seen on the test cluster: the outbound proxy connects to its own pod's app port
            // on loopback, without TLS (proxy-init leaves loopback alone), for a pod's call to
            // itself through its service.
            .within_pod_in_clear()
            .policy(PolicySupport::Translated(
                "Linkerd Server and AuthorizationPolicy, allow-only",
            ))
        }
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl InstalledMesh for Linkerd {
    fn signature(&self) -> Signature {
        Signature {
            crds: &[
                "servers.policy.linkerd.io",
                "authorizationpolicies.policy.linkerd.io",
                "meshtlsauthentications.policy.linkerd.io",
            ],
            control_plane: &[
                LabelSelector(&[("linkerd.io/control-plane-component", "destination")]),
                LabelSelector(&[("linkerd.io/control-plane-component", "identity")]),
                LabelSelector(&[("linkerd.io/control-plane-component", "proxy-injector")]),
            ],
            node_agents: &[],
            config_maps: &[],
            injector_webhooks: &[],
        }
    }

    fn interpret(&self, found: &Found) -> Installation {
        if let Err(why) = present(found, "Linkerd") {
            return Installation::absent(why);
        }
        let destination = found.control_plane.iter().find(|p| {
            p.labels
                .get("linkerd.io/control-plane-component")
                .map(String::as_str)
                == Some("destination")
        });
        Installation::running(destination, "destination", "sidecar")
    }

    fn translate(&self, site: &InstalledSite<'_>) -> Result<Translation, Error> {
        translate(site)
    }

    fn component(&self, pod: &FoundPod, container: &str) -> Option<ComponentClass> {
        if pod
            .labels
            .contains_key("linkerd.io/control-plane-component")
        {
            Some(ComponentClass::ControlPlane)
        } else if container == "linkerd-proxy" {
            Some(ComponentClass::Sidecar)
        } else {
            None
        }
    }

    /// The identity controller as the control plane's own proxies are told to reach it (the
    /// identity controller's proxy asks it on localhost, so another component's is read), and
    /// the trust anchors in the control plane's `linkerd-identity-trust-roots`.
    fn identity_service(&self, found: &Found) -> Option<IdentityService> {
        let proxies = found.control_plane.iter().filter_map(|p| {
            let env = p.env.get("linkerd-proxy")?;
            let address = env.get("LINKERD2_PROXY_IDENTITY_SVC_ADDR")?;
            let name = env.get("LINKERD2_PROXY_IDENTITY_SVC_NAME")?;
            (!address.starts_with("localhost")).then_some((p, address, name))
        });
        let (pod, address, server_name) = proxies
            .clone()
            .find(|(p, ..)| p.ready)
            .or(proxies.clone().next())?;
        Some(IdentityService {
            protocol: IdentityProtocol::Linkerd,
            address: address.clone(),
            server_name: server_name.clone(),
            token_audience: "identity.l5d.io".into(),
            cluster_id: String::new(),
            root_config_map: (
                "linkerd-identity-trust-roots".into(),
                "ca-bundle.crt".into(),
            ),
            root_namespace: Some(pod.namespace.clone()),
            hbone_port_in_pod: None,
        })
    }

    /// linkerd2-proxy's admin server, where the kubelet asks `/live` and `/ready`.
    fn probe_ports(&self) -> &'static [u16] {
        &[4191]
    }

    fn documented(&self) -> Documented {
        Documented {
            wire: "TLS 1.3 between linkerd-proxies, same node or not",
            notes: &[
                "the cluster's default inbound policy (all-unauthenticated unless installed \
                 otherwise) lets every namespace in where no Server applies: E3 saw another \
                 namespace reach the calculator",
                "Linkerd has no DENY: what is not granted on a Server's port is refused",
            ],
        }
    }
}

fn default_name(default: DefaultInbound) -> &'static str {
    match default {
        DefaultInbound::AllUnauthenticated => "all-unauthenticated",
        DefaultInbound::AllAuthenticated => "all-authenticated",
        DefaultInbound::ClusterAuthenticated => "cluster-authenticated",
        DefaultInbound::Deny => "deny",
    }
}

/// Who is granted one grant: identities (service accounts) or a peer without one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Grantee {
    Identities(Vec<(String, String)>),
    Unauthenticated,
}

fn translate(site: &InstalledSite<'_>) -> Result<Translation, Error> {
    let policy = site.policy;
    let file = policy.file();
    let mut notes = vec![];
    let mut enrollment = MeshEnrollment::default();
    let mut resources = vec![];
    for w in &site.topology.workloads {
        let inject = if w.meshed { "enabled" } else { "disabled" };
        enrollment.annotate_pods(&w.name, "linkerd.io/inject", inject);
        if w.meshed {
            enrollment.annotate_pods(
                &w.name,
                "config.linkerd.io/default-inbound-policy",
                default_name(file.default_inbound),
            );
        }
    }
    if !file.cluster_networks.is_empty() {
        notes.push(
            "Linkerd's cluster networks are set when it is installed, not per run: the \
             cluster's decide what cluster-authenticated admits"
                .into(),
        );
    }
    for pa in &file.peer_authentication {
        if pa.mode == PeerAuthenticationMode::Disable {
            notes.push(format!(
                "peer authentication {}: Linkerd cannot turn mTLS off between meshed pods; \
                 plaintext is taken where it is granted",
                pa.name
            ));
        }
    }
    let enrolled: Vec<&Workload> = site.enrolled().collect();
    for destination in &enrolled {
        let port = site.app_port(destination);
        let ns = site.namespace(&destination.namespace).to_owned();
        let server = resource_name(&["mb", &destination.name]);
        let mut outcomes: Vec<(Grantee, Outcome)> = vec![];
        for source in &enrolled {
            let outcome = pairs::outcome(policy, Source::Enrolled(source), destination, port)?;
            let identity = (
                source.service_account.clone(),
                site.namespace(&source.namespace).to_owned(),
            );
            outcomes.push((Grantee::Identities(vec![identity]), outcome));
        }
        let plaintext = pairs::outcome(policy, Source::Unauthenticated, destination, port)?;
        let denied_identities: Vec<String> = outcomes
            .iter()
            .filter(|(_, o)| !o.allows_some())
            .filter_map(|(g, _)| match g {
                Grantee::Identities(ids) => ids.first().map(|(sa, ns)| format!("{ns}/{sa}")),
                Grantee::Unauthenticated => None,
            })
            .collect();
        if plaintext.allows_some() && !denied_identities.is_empty() {
            notes.push(format!(
                "{}/{}: Linkerd grants plaintext by network, which admits every identity of \
                 the network too: {} would be let in",
                destination.namespace,
                destination.name,
                denied_identities.join(", ")
            ));
        }
        outcomes.push((Grantee::Unauthenticated, plaintext));
        resources.push(json!({
            "apiVersion": format!("{POLICY}/v1beta3"),
            "kind": "Server",
            "metadata": metadata(&server, Some(&ns)),
            "spec": {
                "podSelector": workload_selector(&destination.name),
                "port": port,
                "proxyProtocol": "unknown",
                "accessPolicy": "deny",
            },
        }));
        let routed = outcomes.iter().any(|(_, o)| matches!(o, Outcome::L7(_)));
        // What each target (the Server, or each route) grants, to whom.
        let mut grants: BTreeMap<String, Vec<Grantee>> = BTreeMap::new();
        if !routed {
            for (grantee, outcome) in &outcomes {
                if outcome.allows_some() {
                    grants
                        .entry(server.clone())
                        .or_default()
                        .push(grantee.clone());
                }
            }
        } else {
            let routes = routes(&outcomes);
            for (i, m) in routes.iter().enumerate() {
                let route = resource_name(&["mb", &destination.name, &format!("r{i}")]);
                resources.push(http_route(&route, &ns, &server, m));
                for (grantee, outcome) in &outcomes {
                    if granted_on(outcome, m) {
                        grants
                            .entry(route.clone())
                            .or_default()
                            .push(grantee.clone());
                    }
                }
            }
            notes.push(format!(
                "{}/{}: Linkerd picks the most specific route, not the first rule: overlapping \
                 method and path rules are decided by specificity",
                destination.namespace, destination.name
            ));
        }
        for (target, grantees) in grants {
            let identities: Vec<(String, String)> = grantees
                .iter()
                .filter_map(|g| match g {
                    Grantee::Identities(ids) => Some(ids.clone()),
                    Grantee::Unauthenticated => None,
                })
                .flatten()
                .collect();
            let kind = if target == server {
                "Server"
            } else {
                "HTTPRoute"
            };
            if !identities.is_empty() {
                let name = resource_name(&[&target, "mtls"]);
                resources.push(json!({
                    "apiVersion": format!("{POLICY}/v1alpha1"),
                    "kind": "MeshTLSAuthentication",
                    "metadata": metadata(&name, Some(&ns)),
                    "spec": {
                        "identityRefs": identities.iter().map(|(sa, sa_ns)| json!({
                            "kind": "ServiceAccount", "name": sa, "namespace": sa_ns,
                        })).collect::<Vec<_>>(),
                    },
                }));
                resources.push(authorization(
                    &name,
                    &ns,
                    kind,
                    &target,
                    "MeshTLSAuthentication",
                ));
            }
            if grantees.contains(&Grantee::Unauthenticated) {
                let name = resource_name(&[&target, "plaintext"]);
                let networks: Vec<Value> =
                    if pairs::unauthenticated_from_cluster_networks_only(policy)
                        && !file.cluster_networks.is_empty()
                    {
                        file.cluster_networks
                            .iter()
                            .map(|n| json!({ "cidr": n.to_string() }))
                            .collect()
                    } else {
                        vec![json!({ "cidr": "0.0.0.0/0" }), json!({ "cidr": "::/0" })]
                    };
                resources.push(json!({
                    "apiVersion": format!("{POLICY}/v1alpha1"),
                    "kind": "NetworkAuthentication",
                    "metadata": metadata(&name, Some(&ns)),
                    "spec": { "networks": networks },
                }));
                resources.push(authorization(
                    &name,
                    &ns,
                    kind,
                    &target,
                    "NetworkAuthentication",
                ));
            }
        }
    }
    Ok(Translation {
        resources,
        enrollment,
        enforced: EnforcedPolicy {
            policy: policy.clone(),
            notes,
        },
    })
}

/// The distinct request matches of every source's per-request outcome, the catch-all last.
fn routes(outcomes: &[(Grantee, Outcome)]) -> Vec<HttpMatch> {
    let mut all: Vec<HttpMatch> = vec![];
    for (_, outcome) in outcomes {
        if let Outcome::L7(matches) = outcome {
            for (_, m) in matches {
                if !all.contains(m) && *m != HttpMatch::any() {
                    all.push(m.clone());
                }
            }
        }
    }
    all.push(HttpMatch::any());
    all
}

/// Whether a source with `outcome` is granted the route of `m`: the first entry of its
/// outcome with exactly that match decides; without one, its last entry (the catch-all).
fn granted_on(outcome: &Outcome, m: &HttpMatch) -> bool {
    match outcome {
        Outcome::L4(action) => *action == Action::Allow,
        Outcome::L7(matches) => matches
            .iter()
            .find(|(_, x)| x == m)
            .or(matches.last())
            .is_some_and(|(action, _)| *action == Action::Allow),
    }
}

fn http_route(name: &str, namespace: &str, server: &str, m: &HttpMatch) -> Value {
    let path = match &m.path {
        Pattern::Exact(p) => json!({ "type": "Exact", "value": p }),
        Pattern::Prefix(p) => json!({ "type": "PathPrefix", "value": p }),
        Pattern::Suffix(s) => {
            json!({ "type": "RegularExpression", "value": format!(".*{}", pairs::regex_escape(s)) })
        }
        Pattern::Any => json!({ "type": "PathPrefix", "value": "/" }),
    };
    let matches: Vec<Value> = if m.methods.is_empty() {
        vec![json!({ "path": path })]
    } else {
        m.methods
            .iter()
            .map(|method| json!({ "path": path, "method": method }))
            .collect()
    };
    json!({
        "apiVersion": format!("{POLICY}/v1beta3"),
        "kind": "HTTPRoute",
        "metadata": metadata(name, Some(namespace)),
        "spec": {
            "parentRefs": [{ "group": POLICY, "kind": "Server", "name": server }],
            "rules": [{ "matches": matches }],
        },
    })
}

fn authorization(name: &str, namespace: &str, kind: &str, target: &str, authn: &str) -> Value {
    json!({
        "apiVersion": format!("{POLICY}/v1alpha1"),
        "kind": "AuthorizationPolicy",
        "metadata": metadata(name, Some(namespace)),
        "spec": {
            "targetRef": { "group": POLICY, "kind": kind, "name": target },
            "requiredAuthenticationRefs": [{ "group": POLICY, "kind": authn, "name": name }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate_unplaced;
    use meshbench_policy::Policy;
    use meshbench_topology::e3;

    fn control_plane_pod(component: &str, address: &str, ready: bool) -> FoundPod {
        let env: BTreeMap<String, String> = [
            ("LINKERD2_PROXY_IDENTITY_SVC_ADDR", address),
            (
                "LINKERD2_PROXY_IDENTITY_SVC_NAME",
                "linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        FoundPod {
            namespace: "linkerd".into(),
            name: format!("linkerd-{component}-x"),
            labels: [(
                "linkerd.io/control-plane-component".to_owned(),
                component.to_owned(),
            )]
            .into(),
            images: BTreeMap::new(),
            env: [("linkerd-proxy".to_owned(), env)].into(),
            ready,
            node: "node-3".into(),
        }
    }

    #[test]
    fn the_identity_controller_is_where_the_control_plane_s_proxies_are_told_it_is() {
        let mut found = Found::default();
        assert_eq!(Linkerd.identity_service(&found), None);
        // The identity controller's own proxy asks it on localhost: not an address for others.
        found
            .control_plane
            .push(control_plane_pod("identity", "localhost.:8080", true));
        assert_eq!(Linkerd.identity_service(&found), None);
        found.control_plane.push(control_plane_pod(
            "destination",
            "linkerd-identity-headless.linkerd.svc.cluster.local.:8080",
            true,
        ));
        let service = Linkerd.identity_service(&found).unwrap();
        assert_eq!(service.protocol, IdentityProtocol::Linkerd);
        assert_eq!(
            service.address,
            "linkerd-identity-headless.linkerd.svc.cluster.local.:8080"
        );
        assert_eq!(
            service.server_name,
            "linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local"
        );
        assert_eq!(service.token_audience, "identity.l5d.io");
        assert_eq!(service.root_namespace.as_deref(), Some("linkerd"));
        assert_eq!(
            service.root_config_map,
            (
                "linkerd-identity-trust-roots".to_owned(),
                "ca-bundle.crt".to_owned()
            )
        );
    }

    #[test]
    fn e3s_calculator_grants_the_experimenter_only() {
        let topology = e3::topology(
            &[e3::CALCULATOR, e3::EXPERIMENTER, e3::CHECKER],
            crate::Ports::APP,
        );
        let policy = Policy::from_yaml(&e3::zero_trust_policy(crate::TRUST_DOMAIN)).unwrap();
        let t = translate_unplaced(&Linkerd, &policy, &topology).unwrap();
        let mtls = t
            .resources
            .iter()
            .find(|r| {
                r["kind"] == "MeshTLSAuthentication"
                    && r["metadata"]["name"] == "mb-calculator-mtls"
            })
            .unwrap();
        assert_eq!(
            mtls["spec"]["identityRefs"],
            json!([{ "kind": "ServiceAccount", "name": "experimenter", "namespace": "app" }])
        );
        // STRICT: no plaintext grant for the calculator.
        assert!(!t
            .resources
            .iter()
            .any(|r| r["metadata"]["name"] == "mb-calculator-plaintext"));
        assert_eq!(
            t.enrollment.pod_annotations[e3::IMPOSTOR]["linkerd.io/inject"],
            "disabled"
        );
    }
}
