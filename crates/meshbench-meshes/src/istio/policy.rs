//! Our policy as Istio's resources: PeerAuthentication and AuthorizationPolicy
//! (`security.istio.io/v1`), whose fields ours were modelled on, so each of our policies is one
//! of Istio's with the topology's namespaces moved to the cluster's. Three differences:
//!
//! - A policy for every namespace is written into each of the run's namespaces, not Istio's
//!   root namespace: a run never changes what the rest of the cluster enforces.
//! - Istio has no default inbound policy (Linkerd's notion): a default other than
//!   `all-unauthenticated` becomes an ALLOW policy for each enrolled workload that no ALLOW
//!   policy selects.
//! - Ambient: ztunnel enforces L4 only, and a selector policy with L7 conditions would fail
//!   closed there. A workload that any policy with methods or paths selects gets the run's
//!   waypoint (a Gateway of class `istio-waypoint`, its service labelled
//!   `istio.io/use-waypoint`); every policy selecting it is also attached to its service
//!   there (`targetRefs`), policies with L7 conditions only there, and ztunnel's ALLOW
//!   policies admit the waypoint's identity, which is what ztunnel sees once it has passed.
//!   Ambient has no DISABLE: it becomes PERMISSIVE.

use std::collections::BTreeSet;

use meshbench_policy::{
    Action, AuthorizationPolicy, DefaultInbound, From, PeerAuthenticationMode, Policy, Rule,
};
use meshbench_topology::{Topology, Workload};
use serde_json::{json, Map, Value};

use crate::installed::{
    metadata, resource_name, selects, workload_selector, InstalledSite, MeshEnrollment, Translation,
};
use crate::{EnforcedPolicy, Error};

/// The run's waypoint in each namespace that needs one (also its service account's name).
pub(super) const WAYPOINT: &str = "meshbench-waypoint";
const SECURITY: &str = "security.istio.io/v1";

/// What Istio enforces of `policy`, and how it was written, in our language.
pub(super) fn enforced(policy: &Policy, topology: &Topology, ambient: bool) -> EnforcedPolicy {
    let file = policy.file();
    let mut notes = vec![];
    if file
        .peer_authentication
        .iter()
        .any(|p| p.namespace.is_none())
        || file.authorization.iter().any(|p| p.namespace.is_none())
    {
        notes.push(
            "policies for every namespace are written into each of the run's namespaces, not \
             Istio's root namespace"
                .to_owned(),
        );
    }
    if file.default_inbound != DefaultInbound::AllUnauthenticated {
        notes.push(format!(
            "Istio has no default inbound policy: {:?} is an ALLOW policy for each enrolled \
             workload that no ALLOW policy selects",
            file.default_inbound
        ));
    }
    let mut enforced_file = file.clone();
    if ambient {
        for pa in &mut enforced_file.peer_authentication {
            if pa.mode == PeerAuthenticationMode::Disable {
                notes.push(format!(
                    "peer authentication {}: ambient has no DISABLE; enforced as PERMISSIVE \
                     (ztunnel takes plaintext and mTLS)",
                    pa.name
                ));
                pa.mode = PeerAuthenticationMode::Permissive;
            }
        }
        let waypointed: Vec<String> = topology
            .workloads
            .iter()
            .filter(|w| w.meshed && needs_waypoint(file.authorization.as_slice(), w))
            .map(|w| format!("{}/{}", w.namespace, w.name))
            .collect();
        if !waypointed.is_empty() {
            notes.push(format!(
                "L7 rules are enforced at the waypoint {WAYPOINT} for {}: ztunnel lets only the \
                 waypoint call a workload whose ALLOW rules are there, so a call to a pod's \
                 address rather than its service is refused",
                waypointed.join(", ")
            ));
        }
    }
    EnforcedPolicy {
        // Only modes changed: the policy was valid as written.
        policy: Policy::new(enforced_file).unwrap_or_else(|_| policy.clone()),
        notes,
    }
}

/// Whether a policy selecting `workload` has a method or path condition.
fn needs_waypoint(policies: &[AuthorizationPolicy], workload: &Workload) -> bool {
    policies
        .iter()
        .any(|p| selects(p.namespace.as_deref(), p.workload.as_deref(), workload) && is_l7(p))
}

fn is_l7(policy: &AuthorizationPolicy) -> bool {
    policy
        .rules
        .iter()
        .any(|r| !r.to.methods.is_empty() || !r.to.paths.is_empty())
}

/// The resources and enrollment of a run.
pub(super) fn translate(site: &InstalledSite<'_>, ambient: bool) -> Result<Translation, Error> {
    let enforced = enforced(site.policy, site.topology, ambient);
    let file = enforced.policy.file();
    let td = file.trust_domain.as_str();
    let mut resources = vec![];
    let scope = |namespace: &Option<String>| -> Vec<String> {
        match namespace {
            Some(ns) => vec![site.namespace(ns).to_owned()],
            None => site.cluster_namespaces(),
        }
    };
    for pa in &file.peer_authentication {
        for ns in scope(&pa.namespace) {
            let mut spec = json!({ "mtls": { "mode": mode_name(pa.mode) } });
            if let Some(w) = &pa.workload {
                spec["selector"] = workload_selector(w);
            }
            resources.push(json!({
                "apiVersion": SECURITY,
                "kind": "PeerAuthentication",
                "metadata": metadata(&resource_name(&["mb", &pa.name]), Some(&ns)),
                "spec": spec,
            }));
        }
    }

    // The default inbound policy, as ALLOW policies of our own language.
    let mut policies = file.authorization.clone();
    let mut from_cluster_networks = BTreeSet::new();
    if file.default_inbound != DefaultInbound::AllUnauthenticated {
        for w in site.enrolled() {
            let allowed_by_some = file.authorization.iter().any(|p| {
                p.action == Action::Allow
                    && selects(p.namespace.as_deref(), p.workload.as_deref(), w)
            });
            if allowed_by_some {
                continue;
            }
            let name = format!("default-inbound-{}", w.name);
            let rules = match file.default_inbound {
                DefaultInbound::Deny => vec![],
                _ => vec![Rule {
                    from: From {
                        principals: vec!["*".into()],
                        ..From::default()
                    },
                    ..Rule::default()
                }],
            };
            if file.default_inbound == DefaultInbound::ClusterAuthenticated {
                from_cluster_networks.insert(name.clone());
            }
            policies.push(AuthorizationPolicy {
                name,
                namespace: Some(w.namespace.clone()),
                workload: Some(w.name.clone()),
                action: Action::Allow,
                rules,
            });
        }
    }

    let waypointed: Vec<&Workload> = if ambient {
        site.enrolled()
            .filter(|w| needs_waypoint(&policies, w))
            .collect()
    } else {
        vec![]
    };
    let mut enrollment = enroll(site, ambient);
    let mut waypoint_namespaces = BTreeSet::new();
    for w in &waypointed {
        let ns = site.namespace(&w.namespace).to_owned();
        for service in site
            .topology
            .services
            .iter()
            .filter(|s| s.workload == w.name)
        {
            enrollment
                .service_labels
                .entry(service.name.clone())
                .or_default()
                .insert("istio.io/use-waypoint".into(), WAYPOINT.into());
        }
        enrollment.waypointed.insert(w.name.clone());
        waypoint_namespaces.insert(ns);
    }
    for ns in &waypoint_namespaces {
        resources.push(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {
                "name": WAYPOINT,
                "namespace": ns,
                "labels": { "istio.io/waypoint-for": "service" },
            },
            "spec": {
                "gatewayClassName": "istio-waypoint",
                "listeners": [{ "name": "mesh", "port": 15008, "protocol": "HBONE" }],
            },
        }));
    }

    for p in &policies {
        let name = resource_name(&["mb", &p.name]);
        let mut rules: Vec<Value> = p.rules.iter().map(|r| rule(site, r)).collect();
        if from_cluster_networks.contains(&p.name) {
            let blocks: Vec<String> = file
                .cluster_networks
                .iter()
                .map(|n| n.to_string())
                .collect();
            if !blocks.is_empty() {
                rules.push(json!({ "from": [{ "source": { "ipBlocks": blocks } }] }));
            }
        }
        for ns in scope(&p.namespace) {
            let selected_waypointed: Vec<&&Workload> = waypointed
                .iter()
                .filter(|w| {
                    site.namespace(&w.namespace) == ns
                        && selects(p.namespace.as_deref(), p.workload.as_deref(), w)
                })
                .collect();
            if !(ambient && is_l7(p)) {
                let mut at_workloads = rules.clone();
                if p.action == Action::Allow && !selected_waypointed.is_empty() {
                    at_workloads.push(json!({
                        "from": [{ "source": {
                            "principals": [format!("{td}/ns/{ns}/sa/{WAYPOINT}")],
                        } }],
                    }));
                }
                let mut spec = json!({ "action": action_name(p.action) });
                if let Some(w) = &p.workload {
                    spec["selector"] = workload_selector(w);
                }
                if !at_workloads.is_empty() {
                    spec["rules"] = Value::Array(at_workloads);
                }
                resources.push(authorization_policy(&name, &ns, spec));
            }
            for w in selected_waypointed {
                for service in site
                    .topology
                    .services
                    .iter()
                    .filter(|s| s.workload == w.name)
                {
                    let mut spec = json!({
                        "action": action_name(p.action),
                        "targetRefs": [{ "kind": "Service", "group": "", "name": service.name }],
                    });
                    if !rules.is_empty() {
                        spec["rules"] = Value::Array(rules.clone());
                    }
                    resources.push(authorization_policy(
                        &resource_name(&["mb", &p.name, &service.name]),
                        &ns,
                        spec,
                    ));
                }
            }
        }
    }
    // A workload whose ALLOW rules are all at the waypoint would take anything ztunnel
    // brings it directly: there, only the waypoint may call it.
    for w in &waypointed {
        let allowed_at_waypoint_only = policies.iter().any(|p| {
            p.action == Action::Allow
                && is_l7(p)
                && selects(p.namespace.as_deref(), p.workload.as_deref(), w)
        });
        if allowed_at_waypoint_only {
            let ns = site.namespace(&w.namespace);
            resources.push(authorization_policy(
                &resource_name(&["mb", "via-waypoint", &w.name]),
                ns,
                json!({
                    "action": "ALLOW",
                    "selector": workload_selector(&w.name),
                    "rules": [{ "from": [{ "source": {
                        "principals": [format!("{td}/ns/{ns}/sa/{WAYPOINT}")],
                    } }] }],
                }),
            ));
        }
    }
    Ok(Translation {
        resources,
        enrollment,
        enforced,
    })
}

fn authorization_policy(name: &str, namespace: &str, spec: Value) -> Value {
    json!({
        "apiVersion": SECURITY,
        "kind": "AuthorizationPolicy",
        "metadata": metadata(name, Some(namespace)),
        "spec": spec,
    })
}

/// Labels that enroll the run's meshed pods and keep the rest out.
fn enroll(site: &InstalledSite<'_>, ambient: bool) -> MeshEnrollment {
    let mut enrollment = MeshEnrollment::default();
    for w in &site.topology.workloads {
        if ambient {
            let mode = if w.meshed { "ambient" } else { "none" };
            enrollment.label_pods(&w.name, "istio.io/dataplane-mode", mode);
            continue;
        }
        // Istio's injector takes a pod by its own label where its namespace has none (a
        // revision's by `istio.io/rev`): the run's namespaces then need no label, which would
        // outlive the cell.
        match (&site.installation.revision, w.meshed) {
            (Some(rev), true) => enrollment.label_pods(&w.name, "istio.io/rev", rev),
            (_, meshed) => {
                let inject = if meshed { "true" } else { "false" };
                enrollment.label_pods(&w.name, "sidecar.istio.io/inject", inject);
            }
        }
    }
    enrollment
}

/// One of our rules as Istio's, its namespaces moved to the cluster's.
fn rule(site: &InstalledSite<'_>, rule: &Rule) -> Value {
    let mut out = Map::new();
    let principals = |list: &[String]| -> Vec<String> {
        list.iter()
            .map(|p| site.principal(p.strip_prefix("spiffe://").unwrap_or(p)))
            .collect()
    };
    let namespaces = |list: &[String]| -> Vec<String> {
        list.iter()
            .map(|n| {
                if n.contains('*') {
                    n.clone()
                } else {
                    site.namespace(n).to_owned()
                }
            })
            .collect()
    };
    let f = &rule.from;
    let mut source = Map::new();
    let put = |map: &mut Map<String, Value>, key: &str, values: Vec<String>| {
        if !values.is_empty() {
            map.insert(key.into(), json!(values));
        }
    };
    put(&mut source, "principals", principals(&f.principals));
    put(&mut source, "notPrincipals", principals(&f.not_principals));
    put(&mut source, "namespaces", namespaces(&f.namespaces));
    put(&mut source, "notNamespaces", namespaces(&f.not_namespaces));
    if !source.is_empty() {
        out.insert("from".into(), json!([{ "source": source }]));
    }
    let t = &rule.to;
    let mut operation = Map::new();
    put(
        &mut operation,
        "ports",
        t.ports.iter().map(u16::to_string).collect(),
    );
    put(&mut operation, "methods", t.methods.clone());
    put(&mut operation, "paths", t.paths.clone());
    if !operation.is_empty() {
        out.insert("to".into(), json!([{ "operation": operation }]));
    }
    Value::Object(out)
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Allow => "ALLOW",
        Action::Deny => "DENY",
    }
}

fn mode_name(mode: PeerAuthenticationMode) -> &'static str {
    match mode {
        PeerAuthenticationMode::Strict => "STRICT",
        PeerAuthenticationMode::Permissive => "PERMISSIVE",
        PeerAuthenticationMode::Disable => "DISABLE",
    }
}

/// Resources by kind and name, for tests.
#[cfg(test)]
pub(super) fn by_name(resources: &[Value]) -> std::collections::BTreeMap<String, &Value> {
    resources
        .iter()
        .map(|r| {
            (
                format!(
                    "{}/{}/{}",
                    r["kind"].as_str().unwrap_or_default(),
                    r["metadata"]["namespace"].as_str().unwrap_or_default(),
                    r["metadata"]["name"].as_str().unwrap_or_default()
                ),
                r,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installed::{translate_unplaced, InstalledMesh};
    use meshbench_topology::e3;

    fn translated(mesh: &dyn InstalledMesh, meshed: &[&str], policy: &str) -> Translation {
        let topology = e3::topology(meshed, crate::Ports::APP);
        let policy = Policy::from_yaml(policy).unwrap();
        translate_unplaced(mesh, &policy, &topology).unwrap()
    }

    #[test]
    fn e3s_policy_is_istios_own_and_every_member_is_labelled() {
        let t = translated(
            &super::super::Istio { ambient: false },
            &[e3::CALCULATOR, e3::EXPERIMENTER],
            &e3::zero_trust_policy(crate::TRUST_DOMAIN),
        );
        let r = by_name(&t.resources);
        assert_eq!(
            r["AuthorizationPolicy/app/mb-calculator-only-from-experimenter"]["spec"],
            json!({
                "action": "ALLOW",
                "selector": { "matchLabels": { "meshbench.io/workload": "calculator" } },
                "rules": [{ "from": [{ "source": {
                    "principals": ["cluster.local/ns/app/sa/experimenter"] } }] }],
            })
        );
        assert_eq!(
            r["PeerAuthentication/app/mb-strict-app"]["spec"],
            json!({ "mtls": { "mode": "STRICT" } })
        );
        assert_eq!(
            t.enrollment.pod_labels[e3::CALCULATOR]["sidecar.istio.io/inject"],
            "true"
        );
        assert_eq!(
            t.enrollment.pod_labels[e3::IMPOSTOR]["sidecar.istio.io/inject"],
            "false"
        );
        assert!(t.enforced.notes.is_empty(), "{:?}", t.enforced.notes);
    }

    #[test]
    fn ambient_sends_l7_rules_to_a_waypoint_that_ztunnel_lets_through() {
        let t = translated(
            &super::super::Istio { ambient: true },
            &[e3::CALCULATOR, e3::EXPERIMENTER],
            "authorization:\n\
             \x20 - name: calc\n    namespace: app\n    workload: calculator\n    action: ALLOW\n    rules:\n\
             \x20     - from: { principals: [cluster.local/ns/app/sa/experimenter] }\n        to: { methods: [POST] }\n",
        );
        let r = by_name(&t.resources);
        assert!(r.contains_key("Gateway/app/meshbench-waypoint"), "{r:#?}");
        let at_waypoint = &r["AuthorizationPolicy/app/mb-calc-calculator"]["spec"];
        assert_eq!(at_waypoint["targetRefs"][0]["name"], "calculator");
        assert_eq!(
            at_waypoint["rules"][0]["to"][0]["operation"]["methods"][0],
            "POST"
        );
        // Never at ztunnel, where it would fail closed; there only the waypoint may call.
        assert!(!r.contains_key("AuthorizationPolicy/app/mb-calc"), "{r:#?}");
        assert_eq!(
            r["AuthorizationPolicy/app/mb-via-waypoint-calculator"]["spec"]["rules"][0]["from"][0]
                ["source"]["principals"][0],
            "cluster.local/ns/app/sa/meshbench-waypoint"
        );
        assert_eq!(
            t.enrollment.service_labels[e3::CALCULATOR]["istio.io/use-waypoint"],
            WAYPOINT
        );
        assert!(t.enforced.notes.iter().any(|n| n.contains("waypoint")));
    }
}
