//! Cilium as a cluster runs it: its agent on every node is the data plane (eBPF, an Envoy in
//! the agent for L7 rules). Its "mutual authentication" is a handshake between the agents
//! (SPIFFE identities from SPIRE) before a flow is admitted, not TLS on the data path:
//! encryption is WireGuard or IPsec between nodes, and WireGuard leaves traffic between two
//! pods of one node in plaintext. So `cilium` is not mTLS here, and verification must expect
//! plaintext on the wire where the cluster has no encryption.
//!
//! Peers are named by labels, not SPIFFE IDs: each destination's rules are decided pair by
//! pair (`pairs`) and written as a CiliumNetworkPolicy admitting each allowed source by its
//! namespace and service-account labels with `authentication.mode: required`, per port, or
//! per request where methods or paths decide (Cilium's L7 rules are allow-only regular
//! expressions). Plaintext admitted by the policy is admitted from every endpoint
//! (`fromEntities: all`) or from the cluster networks.
//!
//! What the installation has decides the translation: with mutual authentication off (as on
//! the test cluster, `scripts/cilium-lab`: SPIRE is not built there) peers are admitted by the
//! identity of their labels alone, with no `authentication` on the rules; with the L7 proxy
//! off (no Cilium Envoy there) per-request rules cannot be enforced and a pair with any
//! request allowed is allowed at L4. Each such loss is a note of the enforced policy. This
//! kernel has no WireGuard and no IPsec ESP: the test cluster's Cilium encrypts nothing.

use meshbench_policy::{Action, DefaultInbound, Pattern};
use meshbench_topology::Workload;
use serde_json::{json, Value};

use crate::adapter::{ClusterMesh, MeshAdapter};
use crate::description::{Description, Enrollment, PolicySupport};
use crate::installed::{
    metadata, resource_name, workload_selector, ComponentClass, ConfigMapRef, Documented, Found,
    FoundPod, Installation, InstalledMesh, InstalledSite, LabelSelector, MeshEnrollment, Signature,
    Translation,
};
use crate::pairs::{self, HttpMatch, Outcome, Source};
use crate::{EnforcedPolicy, Error};

const NAME: &str = "cilium";
const NAMESPACE_LABEL: &str = "k8s:io.kubernetes.pod.namespace";
const SERVICE_ACCOUNT_LABEL: &str = "k8s:io.cilium.k8s.policy.serviceaccount";
const CONFIG: ConfigMapRef = ConfigMapRef::in_any_namespace("cilium-config");

pub(crate) struct Cilium;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&Cilium];

impl MeshAdapter for Cilium {
    /// Not mTLS: same-node traffic stays plaintext.
    fn describe(&self) -> Description {
        Description::new(
            NAME,
            "Cilium as installed on the cluster: its agent on each node (eBPF, Envoy for L7 \
             where the cluster runs it); mutual authentication between agents before a flow \
             where the cluster has it (not TLS on the data path), encryption between nodes as \
             the cluster has it (WireGuard leaves same-node traffic in plaintext); our policy as \
             CiliumNetworkPolicy, with authentication required where mutual authentication is on",
            Enrollment::AgentPerNode,
        )
        .policy(PolicySupport::Translated(
            "CiliumNetworkPolicy (authentication.mode required where mutual authentication is on)",
        ))
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl InstalledMesh for Cilium {
    fn signature(&self) -> Signature {
        Signature {
            crds: &[
                "ciliumnetworkpolicies.cilium.io",
                "ciliumidentities.cilium.io",
            ],
            control_plane: &[LabelSelector(&[("io.cilium/app", "operator")])],
            node_agents: &[LabelSelector(&[("k8s-app", "cilium")])],
            config_maps: &[CONFIG],
            injector_webhooks: &[],
        }
    }

    fn interpret(&self, found: &Found) -> Installation {
        if found.crds.is_empty() {
            return Installation::absent(
                "Cilium is not installed on this cluster (none of its CRDs)",
            );
        }
        if !found.node_agents.iter().any(|p| p.ready) {
            return Installation::absent(
                "Cilium's CRDs are installed but no Cilium agent is running",
            );
        }
        let config = found.config_map(CONFIG);
        let value = |key: &str| config.and_then(|c| c.get(key)).map(String::as_str);
        let on = |key: &str| value(key) == Some("true");
        let encryption = if on("enable-wireguard") {
            "wireguard"
        } else if on("enable-ipsec") {
            "ipsec"
        } else {
            "none"
        };
        let features = Features {
            mutual_authentication: on("mesh-auth-mutual-enabled") || on("mesh-auth-enabled"),
            // On unless turned off: the agent's own default.
            l7_proxy: value("enable-l7-proxy") != Some("false"),
        };
        let agent = found.node_agents.iter().find(|p| p.ready);
        // The agent runs as `cilium-agent` in upstream's chart; its version is the image's.
        Installation::running(agent, "cilium-agent", features.mode(encryption))
    }

    fn translate(&self, site: &InstalledSite<'_>) -> Result<Translation, Error> {
        translate(site)
    }

    fn component(&self, pod: &FoundPod, _container: &str) -> Option<ComponentClass> {
        let label = |k: &str| pod.labels.get(k).map(String::as_str);
        if label("k8s-app") == Some("cilium") || label("k8s-app") == Some("cilium-envoy") {
            Some(ComponentClass::NodeAgent)
        } else if label("io.cilium/app") == Some("operator") {
            Some(ComponentClass::ControlPlane)
        } else {
            None
        }
    }

    fn documented(&self) -> Documented {
        Documented {
            wire: "no TLS: plaintext, or WireGuard (UDP 51871) or IPsec ESP between nodes where \
                   the cluster enables them; same-node traffic stays plaintext under WireGuard",
            notes: &[
                "mutual authentication admits a flow after a handshake between the agents; \
                 the packets themselves are not authenticated",
                "Cilium's CPU in the kernel (eBPF, softirq) is charged to no pod",
            ],
        }
    }
}

/// What of Cilium's a translation can rely on, as the installation's mode states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Features {
    /// SPIRE-backed mutual authentication (`authentication.mode: required` is honoured).
    mutual_authentication: bool,
    /// The agent's Envoy, which enforces HTTP rules.
    l7_proxy: bool,
}

const MUTUAL_OFF: &str = "mutual authentication: off";
const L7_OFF: &str = "L7 proxy: off";

impl Features {
    /// The installation's mode: what `mesh detect` shows and [`Features::of`] reads back.
    fn mode(self, encryption: &str) -> String {
        format!(
            "encryption: {encryption}; mutual authentication: {}; L7 proxy: {}",
            if self.mutual_authentication {
                "on"
            } else {
                "off"
            },
            if self.l7_proxy { "on" } else { "off" }
        )
    }

    /// What an installation has; a translation without one (validation against the CRDs)
    /// uses every feature.
    fn of(installation: &Installation) -> Self {
        let mode = installation.mode.as_deref().unwrap_or_default();
        Features {
            mutual_authentication: !mode.contains(MUTUAL_OFF),
            l7_proxy: !mode.contains(L7_OFF),
        }
    }
}

fn translate(site: &InstalledSite<'_>) -> Result<Translation, Error> {
    let policy = site.policy;
    let file = policy.file();
    let features = Features::of(site.installation);
    let mut notes = vec![];
    if !features.mutual_authentication {
        notes.push(
            "Cilium's mutual authentication is off on this cluster: peers are admitted by the \
             identity of their labels alone (the agent's map of addresses to identities), with \
             no handshake, and nothing on the wire proves who sent a packet"
                .into(),
        );
    }
    // `authentication` on every rule that admits named peers, where the cluster honours it
    // (without mutual authentication the agent would drop every such flow).
    let authenticated = |mut rule: Value| {
        if features.mutual_authentication {
            rule["authentication"] = json!({ "mode": "required" });
        }
        rule
    };
    let mut resources = vec![];
    let enrolled: Vec<&Workload> = site.enrolled().collect();
    if enrolled.len() < site.topology.workloads.len() {
        notes.push(
            "Cilium manages every pod of the cluster: an unenrolled workload still carries \
             the identity of its labels and can pass mutual authentication"
                .into(),
        );
    }
    for destination in &enrolled {
        let port = site.app_port(destination);
        let mut ingress = vec![];
        let mut l4_peers = vec![];
        let mut denied = vec![];
        for source in &enrolled {
            let outcome = pairs::outcome(policy, Source::Enrolled(source), destination, port)?;
            let peer = json!({ "matchLabels": {
                NAMESPACE_LABEL: site.namespace(&source.namespace),
                SERVICE_ACCOUNT_LABEL: source.service_account,
            } });
            match outcome {
                Outcome::L4(Action::Allow) => l4_peers.push(peer),
                Outcome::L4(Action::Deny) => {
                    denied.push(format!("{}/{}", source.namespace, source.name))
                }
                Outcome::L7(matches) if !features.l7_proxy => {
                    let (rules, _) = http_rules(&matches);
                    let source_name = format!("{}/{}", source.namespace, source.name);
                    if rules.as_ref().is_some_and(Vec::is_empty) {
                        denied.push(source_name);
                    } else {
                        notes.push(format!(
                            "{}/{} from {source_name}: Cilium's L7 proxy is off on this \
                             cluster, so its per-request rules cannot be enforced: every \
                             request is allowed",
                            destination.namespace, destination.name
                        ));
                        l4_peers.push(peer);
                    }
                }
                Outcome::L7(matches) => {
                    let (rules, note) = http_rules(&matches);
                    if let Some(note) = note {
                        notes.push(format!(
                            "{}/{} from {}/{}: {note}",
                            destination.namespace, destination.name, source.namespace, source.name
                        ));
                    }
                    let mut to_port = json!({ "ports": [port_json(port)] });
                    if let Some(rules) = rules {
                        to_port["rules"] = json!({ "http": rules });
                    }
                    ingress.push(authenticated(json!({
                        "fromEndpoints": [peer],
                        "toPorts": [to_port],
                    })));
                }
            }
        }
        if !l4_peers.is_empty() {
            ingress.insert(
                0,
                authenticated(json!({
                    "fromEndpoints": l4_peers,
                    "toPorts": [{ "ports": [port_json(port)] }],
                })),
            );
        }
        let plaintext = pairs::outcome(policy, Source::Unauthenticated, destination, port)?;
        if plaintext.allows_some() {
            if !denied.is_empty() {
                notes.push(format!(
                    "{}/{}: plaintext is admitted from every endpoint, so {} would be let in",
                    destination.namespace,
                    destination.name,
                    denied.join(", ")
                ));
            }
            let mut rule = if pairs::unauthenticated_from_cluster_networks_only(policy)
                && !file.cluster_networks.is_empty()
            {
                json!({ "fromCIDRSet": file.cluster_networks.iter()
                    .map(|n| json!({ "cidr": n.to_string() })).collect::<Vec<_>>() })
            } else {
                json!({ "fromEntities": ["all"] })
            };
            rule["toPorts"] = json!([{ "ports": [port_json(port)] }]);
            ingress.push(rule);
        }
        if ingress.is_empty() {
            // Nobody admitted: Cilium refuses a rule without any ingress section (and builds
            // its default deny from the rules there are), so the policy holds one rule that
            // selects no peer, Cilium's own idiom for denying all ingress.
            ingress.push(json!({}));
        }
        let ns = site.namespace(&destination.namespace);
        resources.push(json!({
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumNetworkPolicy",
            "metadata": metadata(&resource_name(&["mb", &destination.name]), Some(ns)),
            "spec": {
                "endpointSelector": workload_selector(&destination.name),
                "enableDefaultDeny": { "ingress": true, "egress": false },
                "ingress": ingress,
            },
        }));
    }
    if file.default_inbound == DefaultInbound::ClusterAuthenticated
        && file.cluster_networks.is_empty()
    {
        notes.push(
            "cluster-authenticated without cluster networks admits plaintext from every \
             endpoint"
                .into(),
        );
    }
    Ok(Translation {
        resources,
        // Cilium enrolls every pod of the cluster; its policies select the run's.
        enrollment: MeshEnrollment::default(),
        enforced: EnforcedPolicy {
            policy: policy.clone(),
            notes,
        },
    })
}

fn port_json(port: u16) -> Value {
    json!({ "port": port.to_string(), "protocol": "TCP" })
}

/// A per-request outcome as Cilium's allow-only HTTP rules: the requests allowed before any
/// catch-all, or `None` (every request) when the catch-all allows, with a note where DENY
/// matches ahead of it cannot be kept.
fn http_rules(matches: &[(Action, HttpMatch)]) -> (Option<Vec<Value>>, Option<String>) {
    let fallback_allows = matches.last().is_some_and(|(a, _)| *a == Action::Allow);
    if fallback_allows {
        return (
            None,
            Some(
                "Cilium's HTTP rules are allow-only: the DENY rules ahead of an allowed \
                 catch-all cannot be written, every request is allowed"
                    .into(),
            ),
        );
    }
    let mut rules = vec![];
    let mut denied: Vec<&HttpMatch> = vec![];
    for (action, m) in matches {
        match action {
            Action::Deny => denied.push(m),
            Action::Allow if !denied.contains(&m) => {
                let methods: Vec<Option<String>> = if m.methods.is_empty() {
                    vec![None]
                } else {
                    m.methods
                        .iter()
                        .map(|x| Some(pairs::regex_escape(x)))
                        .collect()
                };
                for method in methods {
                    let mut rule = json!({ "path": path_regex(&m.path) });
                    if let Some(method) = method {
                        rule["method"] = Value::from(method);
                    }
                    rules.push(rule);
                }
            }
            Action::Allow => {}
        }
    }
    let note = denied.iter().any(|d| **d != HttpMatch::any()).then(|| {
        "Cilium's HTTP rules are allow-only: a DENY that overlaps a later ALLOW is not kept"
            .to_owned()
    });
    (Some(rules), note)
}

fn path_regex(path: &Pattern) -> String {
    match path {
        Pattern::Exact(p) => pairs::regex_escape(p),
        Pattern::Prefix(p) => format!("{}.*", pairs::regex_escape(p)),
        Pattern::Suffix(s) => format!(".*{}", pairs::regex_escape(s)),
        Pattern::Any => "/.*".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate_unplaced;
    use meshbench_policy::Policy;
    use meshbench_topology::e3;

    #[test]
    fn e3s_calculator_admits_the_experimenters_labels_with_authentication() {
        let topology = e3::topology(&[e3::CALCULATOR, e3::EXPERIMENTER], crate::Ports::APP);
        let policy = Policy::from_yaml(&e3::zero_trust_policy(crate::TRUST_DOMAIN)).unwrap();
        let t = translate_unplaced(&Cilium, &policy, &topology).unwrap();
        let calculator = calculator_policy(&t);
        assert_eq!(
            calculator["spec"]["ingress"],
            json!([{
                "fromEndpoints": [{ "matchLabels": {
                    NAMESPACE_LABEL: "app", SERVICE_ACCOUNT_LABEL: "experimenter" } }],
                "toPorts": [{ "ports": [{ "port": crate::Ports::APP.to_string(), "protocol": "TCP" }] }],
                "authentication": { "mode": "required" },
            }])
        );
    }

    /// `policy` for `topology` as the cluster of `installation` enforces it.
    fn translated_for(
        installation: &Installation,
        policy: &Policy,
        topology: &meshbench_topology::Topology,
    ) -> Translation {
        Cilium
            .translate(&InstalledSite {
                topology,
                policy,
                namespaces: &Default::default(),
                installation,
            })
            .unwrap()
    }

    /// The calculator's CiliumNetworkPolicy in a translation.
    fn calculator_policy(t: &Translation) -> &Value {
        t.resources
            .iter()
            .find(|r| r["metadata"]["name"] == "mb-calculator")
            .unwrap()
    }

    /// A running agent with `config` as its cilium-config.
    fn installed(config: &[(&str, &str)]) -> Installation {
        let found = Found {
            crds: [(
                "ciliumnetworkpolicies.cilium.io".to_owned(),
                vec!["v2".to_owned()],
            )]
            .into(),
            node_agents: vec![FoundPod {
                namespace: "kube-system".into(),
                name: "cilium-abcde".into(),
                labels: [("k8s-app".to_owned(), "cilium".to_owned())].into(),
                images: [(
                    "cilium-agent".to_owned(),
                    "quay.io/cilium/cilium:v1.20.2".to_owned(),
                )]
                .into(),
                env: Default::default(),
                ready: true,
                node: "node-1".into(),
            }],
            config_maps: [(
                crate::installed::FoundConfigMap {
                    namespace: "kube-system".into(),
                    name: "cilium-config".into(),
                },
                config
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )]
            .into(),
            ..Found::default()
        };
        Cilium.interpret(&found)
    }

    #[test]
    fn an_agent_without_encryption_mutual_authentication_or_l7_proxy_says_so_and_runs() {
        let bare = installed(&[("enable-l7-proxy", "false"), ("enable-wireguard", "false")]);
        assert_eq!(bare.version.as_deref(), Some("v1.20.2"));
        assert_eq!(
            bare.mode.as_deref(),
            Some("encryption: none; mutual authentication: off; L7 proxy: off")
        );
        assert!(bare.unusable.is_none(), "{:?}", bare.unusable);
        let full = installed(&[
            ("enable-wireguard", "true"),
            ("mesh-auth-mutual-enabled", "true"),
        ]);
        assert_eq!(
            full.mode.as_deref(),
            Some("encryption: wireguard; mutual authentication: on; L7 proxy: on")
        );
    }

    #[test]
    fn without_mutual_authentication_peers_are_admitted_by_their_labels_and_the_policy_says_so() {
        let topology = e3::topology(&[e3::CALCULATOR, e3::EXPERIMENTER], crate::Ports::APP);
        let policy = Policy::from_yaml(&e3::zero_trust_policy(crate::TRUST_DOMAIN)).unwrap();
        let installation = installed(&[("enable-l7-proxy", "false")]);
        let t = translated_for(&installation, &policy, &topology);
        let calculator = calculator_policy(&t);
        assert_eq!(
            calculator["spec"]["ingress"],
            json!([{
                "fromEndpoints": [{ "matchLabels": {
                    NAMESPACE_LABEL: "app", SERVICE_ACCOUNT_LABEL: "experimenter" } }],
                "toPorts": [{ "ports": [{ "port": crate::Ports::APP.to_string(), "protocol": "TCP" }] }],
            }])
        );
        assert!(
            t.enforced
                .notes
                .iter()
                .any(|n| n.contains("mutual authentication is off")
                    && n.contains("identity of their labels alone")),
            "{:?}",
            t.enforced.notes
        );
    }

    #[test]
    fn without_the_l7_proxy_a_pair_with_requests_allowed_is_allowed_at_l4_with_a_note() {
        let topology = e3::topology(&[e3::CALCULATOR, e3::EXPERIMENTER], crate::Ports::APP);
        let policy = Policy::from_yaml(&format!(
            "trust_domain: {td}\n\
             authorization:\n\
             \x20 - name: get-only\n    namespace: app\n    workload: calculator\n    action: ALLOW\n    rules:\n      - from: {{ principals: [{td}/ns/app/sa/experimenter] }}\n        to: {{ methods: [GET] }}\n",
            td = crate::TRUST_DOMAIN
        ))
        .unwrap();
        let installation = installed(&[
            ("enable-l7-proxy", "false"),
            ("mesh-auth-mutual-enabled", "true"),
        ]);
        let t = translated_for(&installation, &policy, &topology);
        let calculator = calculator_policy(&t);
        let ingress = calculator["spec"]["ingress"].as_array().unwrap();
        assert!(
            ingress
                .iter()
                .all(|rule| rule["toPorts"][0].get("rules").is_none()),
            "{ingress:?}"
        );
        assert_eq!(ingress[0]["authentication"], json!({ "mode": "required" }));
        assert!(
            t.enforced
                .notes
                .iter()
                .any(|n| n.contains("L7 proxy is off") && n.contains("every request is allowed")),
            "{:?}",
            t.enforced.notes
        );
    }

    #[test]
    fn a_destination_that_admits_nobody_gets_one_rule_that_selects_no_peer() {
        // Only the external checker and the calculator enrolled: the calculator admits none
        // of them (another namespace; the experimenter is not there).
        let topology = e3::topology(&[e3::CALCULATOR, e3::EXTERNAL_CHECKER], crate::Ports::APP);
        let policy = Policy::from_yaml(&e3::zero_trust_policy(crate::TRUST_DOMAIN)).unwrap();
        let t = translate_unplaced(&Cilium, &policy, &topology).unwrap();
        let calculator = calculator_policy(&t);
        assert_eq!(calculator["spec"]["ingress"], json!([{}]));
        assert_eq!(calculator["spec"]["enableDefaultDeny"]["ingress"], true);
    }

    #[test]
    fn allowed_requests_become_regular_expressions() {
        let (rules, note) = http_rules(&[
            (
                Action::Allow,
                HttpMatch {
                    methods: vec!["GET".into()],
                    path: Pattern::Prefix("/api/".into()),
                },
            ),
            (Action::Deny, HttpMatch::any()),
        ]);
        assert_eq!(
            rules.unwrap(),
            [json!({ "path": "/api/.*", "method": "GET" })]
        );
        assert!(note.is_none());
    }
}
