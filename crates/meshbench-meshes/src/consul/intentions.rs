//! Our policy as Consul's config entries: one `service-intentions` entry per enrolled
//! destination, with an intention for every enrolled source, and `service-defaults` where a
//! destination takes plaintext.
//!
//! Consul's community edition has one namespace (`default`) and names a workload by its
//! service, which meshbench registers under the workload's service account. So the policy's
//! principals and namespaces cannot be written as Consul sources: they are evaluated here, by
//! our own policy engine, for each enrolled workload of the run, and each (source,
//! destination) pair gets the outcome as an L4 action, or as L7 permissions where the rules
//! that match it name methods or paths. A wildcard source denies every service not
//! enumerated. Istio's order is kept: DENY rules first, then ALLOW rules, then the default;
//! every permission list ends in an explicit catch-all, so no request falls through to
//! Consul's own default.
//!
//! What Consul cannot express is reported ([`EnforcedPolicy::notes`]) and the enforced policy
//! says what it does instead, so that `verify` expects what the mesh really does.

use std::collections::BTreeMap;

use meshbench_policy::{
    Action, DefaultInbound, Pattern, PeerAuthentication, PeerAuthenticationMode, Policy,
};
use meshbench_topology::{Topology, Workload};
use serde_json::{json, Value};

use crate::pairs::{self, HttpMatch, Outcome, Source};
use crate::{EnforcedPolicy, Error};

/// What the policy becomes in Consul.
#[derive(Debug)]
pub(crate) struct Translation {
    /// Config entries to write, in order.
    pub entries: Vec<Value>,
    pub enforced: EnforcedPolicy,
    /// (source, destination) services whose intention allows some request.
    allowed: Vec<(String, String)>,
}

impl Translation {
    /// The services `source` may call at all: Consul makes them its sidecar's upstreams,
    /// except its own service (a call to it is not an upstream's).
    pub(crate) fn upstreams_of<'a>(&'a self, source: &'a str) -> impl Iterator<Item = &'a str> {
        self.allowed
            .iter()
            .filter(move |(s, d)| s == source && d != source)
            .map(|(_, d)| d.as_str())
    }
}

/// An enrolled workload as Consul knows it: its service name, its identity in our policy's
/// language, and the port its app serves.
struct Member<'a> {
    workload: &'a Workload,
    service: String,
    port: u16,
}

pub(crate) fn translate(policy: &Policy, topology: &Topology) -> Result<Translation, Error> {
    let members = members(topology)?;
    let file = policy.file();
    let mut notes = vec![
        "Consul has no namespaces here (community edition) and names a workload by its service: \
         the policy's principals and namespaces were evaluated for each enrolled service and \
         written as one intention per pair of them, every other source denied"
            .to_owned(),
    ];
    let mut enforced_file = file.clone();
    let mut entries = vec![];
    let mut permissive_allowed = false;
    let mut allowed = vec![];
    for destination in &members {
        let w = destination.workload;
        let mode = policy.peer_authentication(&w.namespace, &w.name);
        let selected = file.authorization.iter().any(|p| {
            p.namespace.as_deref().is_none_or(|n| n == w.namespace)
                && p.workload.as_deref().is_none_or(|n| n == w.name)
        });
        let plaintext_ok = !selected && file.default_inbound == DefaultInbound::AllUnauthenticated;
        match mode {
            PeerAuthenticationMode::Strict => {}
            PeerAuthenticationMode::Permissive if plaintext_ok => {
                permissive_allowed = true;
                entries.push(json!({
                    "Kind": "service-defaults",
                    "Name": destination.service,
                    "Protocol": "http",
                    "MutualTLSMode": "permissive",
                }));
            }
            PeerAuthenticationMode::Permissive | PeerAuthenticationMode::Disable => {
                notes.push(format!(
                    "{}/{}: peer authentication {mode:?} is enforced as STRICT: {}",
                    w.namespace,
                    w.name,
                    if mode == PeerAuthenticationMode::Disable {
                        "Consul cannot turn mTLS off for a service in the mesh"
                    } else {
                        "Consul's permissive mode lets plaintext bypass intentions, and \
                         authorization rules or a default that needs an identity apply here"
                    }
                ));
                // In place of the workload's own declaration, if it has one.
                enforced_file.peer_authentication.retain(|p| {
                    p.namespace.as_deref() != Some(&w.namespace)
                        || p.workload.as_deref() != Some(&w.name)
                });
                enforced_file.peer_authentication.push(PeerAuthentication {
                    name: format!("consul-strict-{}-{}", w.namespace, w.name),
                    namespace: Some(w.namespace.clone()),
                    workload: Some(w.name.clone()),
                    mode: PeerAuthenticationMode::Strict,
                });
            }
        }
        let mut sources = vec![];
        for source in &members {
            let outcome = pairs::outcome(
                policy,
                Source::Enrolled(source.workload),
                destination.workload,
                destination.port,
            )?;
            if outcome != Outcome::L4(Action::Deny) {
                allowed.push((source.service.clone(), destination.service.clone()));
            }
            sources.push(intention_source(&source.service, outcome));
        }
        sources.push(json!({ "Name": "*", "Action": "deny" }));
        entries.push(json!({
            "Kind": "service-intentions",
            "Name": destination.service,
            "Sources": sources,
        }));
    }
    // Every destination not enrolled here is denied to every source, as the wildcard of each
    // entry denies unlisted sources.
    entries.push(json!({
        "Kind": "service-intentions",
        "Name": "*",
        "Sources": [{ "Name": "*", "Action": "deny" }],
    }));
    entries.insert(0, super::config::mesh_entry(permissive_allowed));
    entries.insert(1, super::config::proxy_defaults());
    // A duplicate name would have been refused when the policy was first read.
    let enforced = Policy::new(enforced_file)?;
    Ok(Translation {
        entries,
        enforced: EnforcedPolicy {
            policy: enforced,
            notes,
        },
        allowed,
    })
}

/// The enrolled workloads with a service, refusing what Consul cannot tell apart.
fn members(topology: &Topology) -> Result<Vec<Member<'_>>, Error> {
    let mut by_service: BTreeMap<&str, &Workload> = BTreeMap::new();
    let mut members = vec![];
    for w in topology.workloads.iter().filter(|w| w.meshed) {
        if let Some(other) = by_service.insert(&w.service_account, w) {
            return Err(Error::Inexpressible {
                mesh: super::NAME.into(),
                why: format!(
                    "two enrolled workloads ({}/{} and {}/{}) under one service account {:?}: \
                     Consul names a workload by its service, so they would be one",
                    other.namespace, other.name, w.namespace, w.name, w.service_account
                ),
            });
        }
        let port = topology
            .services
            .iter()
            .find(|s| s.workload == w.name)
            .map_or(crate::Ports::APP, |s| s.target_port);
        members.push(Member {
            workload: w,
            service: w.service_account.clone(),
            port,
        });
    }
    Ok(members)
}

/// A request match as Consul's intention permissions write it.
fn http_json(m: &HttpMatch) -> Value {
    let mut http = match &m.path {
        Pattern::Exact(p) => json!({ "PathExact": p }),
        Pattern::Prefix(p) => json!({ "PathPrefix": p }),
        Pattern::Suffix(s) => json!({ "PathRegex": format!(".*{}", pairs::regex_escape(s)) }),
        Pattern::Any => json!({ "PathPrefix": "/" }),
    };
    if !m.methods.is_empty() {
        http["Methods"] = json!(m.methods);
    }
    http
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Allow => "allow",
        Action::Deny => "deny",
    }
}

fn intention_source(service: &str, outcome: Outcome) -> Value {
    match outcome {
        Outcome::L4(action) => json!({ "Name": service, "Action": action_name(action) }),
        Outcome::L7(permissions) => json!({
            "Name": service,
            "Permissions": permissions
                .into_iter()
                .map(|(action, m)| json!({ "Action": action_name(action), "HTTP": http_json(&m) }))
                .collect::<Vec<_>>(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_policy::{Peer, Request};
    use meshbench_topology::e3;

    fn e3_case(meshed: &[&str]) -> (Policy, Topology) {
        let policy = Policy::from_yaml(&e3::zero_trust_policy(crate::TRUST_DOMAIN)).unwrap();
        (policy, e3::topology(meshed, crate::Ports::APP))
    }

    fn intentions_of<'a>(entries: &'a [Value], destination: &str) -> &'a Vec<Value> {
        entries
            .iter()
            .find(|e| e["Kind"] == "service-intentions" && e["Name"] == destination)
            .and_then(|e| e["Sources"].as_array())
            .unwrap_or_else(|| panic!("no intentions for {destination}: {entries:#?}"))
    }

    fn action_for(entries: &[Value], destination: &str, source: &str) -> Value {
        intentions_of(entries, destination)
            .iter()
            .find(|s| s["Name"] == source)
            .map(|s| s["Action"].clone())
            .unwrap_or_else(|| panic!("no intention {source} -> {destination}"))
    }

    #[test]
    fn e3s_policy_becomes_one_intention_per_enrolled_pair() {
        let all = [
            e3::CALCULATOR,
            e3::EXPERIMENTER,
            e3::CHECKER,
            e3::EXTERNAL_CHECKER,
        ];
        let (policy, topology) = e3_case(&all);
        let t = translate(&policy, &topology).unwrap();
        let e = &t.entries;
        assert_eq!(action_for(e, e3::CALCULATOR, e3::EXPERIMENTER), "allow");
        assert_eq!(action_for(e, e3::CALCULATOR, e3::CHECKER), "deny");
        assert_eq!(action_for(e, e3::CALCULATOR, e3::EXTERNAL_CHECKER), "deny");
        assert_eq!(action_for(e, e3::CHECKER, e3::CHECKER), "allow");
        assert_eq!(action_for(e, e3::CHECKER, e3::EXTERNAL_CHECKER), "deny");
        assert_eq!(action_for(e, e3::EXTERNAL_CHECKER, e3::CHECKER), "allow");
        // Every entry ends by denying whatever it does not name.
        let last = intentions_of(e, e3::CALCULATOR).last().unwrap();
        assert_eq!(
            (&last["Name"], &last["Action"]),
            (&json!("*"), &json!("deny"))
        );
        // The external namespace is PERMISSIVE with no rule selecting it: Consul's
        // permissive mode means the same there, and the mesh entry allows it.
        let defaults = e
            .iter()
            .find(|e| e["Kind"] == "service-defaults")
            .expect("the external checker takes plaintext");
        assert_eq!(defaults["Name"], e3::EXTERNAL_CHECKER);
        assert_eq!(defaults["MutualTLSMode"], "permissive");
        assert_eq!(e[0]["Kind"], "mesh");
        assert_eq!(e[0]["AllowEnablingPermissiveMutualTLS"], true);
        assert_eq!(t.enforced.policy.file(), policy.file());
        let upstreams: Vec<&str> = t.upstreams_of(e3::EXPERIMENTER).collect();
        // The external checker's namespace is open to every identity; no service is its own
        // upstream.
        assert_eq!(
            upstreams,
            [e3::CALCULATOR, e3::CHECKER, e3::EXTERNAL_CHECKER]
        );
        let upstreams: Vec<&str> = t.upstreams_of(e3::EXTERNAL_CHECKER).collect();
        assert!(upstreams.is_empty(), "{upstreams:?}");
    }

    #[test]
    fn only_enrolled_workloads_are_sources_or_destinations() {
        let (policy, topology) = e3_case(&[e3::CALCULATOR, e3::EXTERNAL_CHECKER]);
        let t = translate(&policy, &topology).unwrap();
        let names: Vec<&Value> = intentions_of(&t.entries, e3::CALCULATOR)
            .iter()
            .map(|s| &s["Name"])
            .collect();
        assert_eq!(names, [e3::CALCULATOR, e3::EXTERNAL_CHECKER, "*"]);
        assert!(!t.entries.iter().any(|e| e["Name"] == e3::EXPERIMENTER));
    }

    fn policy(yaml: &str) -> Policy {
        Policy::from_yaml(yaml).unwrap()
    }

    #[test]
    fn methods_and_paths_become_l7_permissions_in_istios_order() {
        let (_, topology) = e3_case(&[e3::CALCULATOR, e3::EXPERIMENTER, e3::CHECKER]);
        let p = policy(
            "authorization:\n\
             \x20 - name: no-admin\n    namespace: app\n    workload: calculator\n    action: DENY\n    rules:\n\
             \x20     - to: { paths: [/admin/*, '*.bak'] }\n\
             \x20 - name: readers\n    namespace: app\n    workload: calculator\n    action: ALLOW\n    rules:\n\
             \x20     - from: { principals: [cluster.local/ns/app/sa/experimenter] }\n        to: { methods: [POST], paths: [/add] }\n",
        );
        let t = translate(&p, &topology).unwrap();
        let source = intentions_of(&t.entries, e3::CALCULATOR)
            .iter()
            .find(|s| s["Name"] == e3::EXPERIMENTER)
            .unwrap();
        assert_eq!(
            source["Permissions"],
            json!([
                { "Action": "deny", "HTTP": { "PathPrefix": "/admin/" } },
                { "Action": "deny", "HTTP": { "PathRegex": ".*\\.bak" } },
                { "Action": "allow", "HTTP": { "PathExact": "/add", "Methods": ["POST"] } },
                { "Action": "deny", "HTTP": { "PathPrefix": "/" } },
            ])
        );
        // The checker matches no ALLOW rule: nothing is allowed, whatever the path.
        assert_eq!(action_for(&t.entries, e3::CALCULATOR, e3::CHECKER), "deny");
        // Nothing selects the experimenter: the default admits every identity.
        assert_eq!(
            action_for(&t.entries, e3::EXPERIMENTER, e3::CHECKER),
            "allow"
        );
    }

    #[test]
    fn what_consul_cannot_express_is_enforced_as_strict_and_said() {
        let (_, topology) = e3_case(&[e3::CALCULATOR, e3::EXPERIMENTER]);
        let p = policy(
            "peer_authentication:\n  - { name: off, namespace: app, workload: experimenter, mode: DISABLE }\n\
             authorization:\n\
             \x20 - name: calc\n    namespace: app\n    workload: calculator\n    action: ALLOW\n    rules:\n\
             \x20     - from: { principals: ['*'] }\n",
        );
        let t = translate(&p, &topology).unwrap();
        let notes = t.enforced.notes.join("\n");
        assert!(
            notes.contains("app/calculator: peer authentication Permissive is enforced as STRICT"),
            "{notes}"
        );
        assert!(
            notes.contains("app/experimenter: peer authentication Disable is enforced as STRICT"),
            "{notes}"
        );
        assert!(!t.entries.iter().any(|e| e["Kind"] == "service-defaults"));
        let enforced = &t.enforced.policy;
        let plaintext = Peer::Plaintext { source_ip: None };
        for workload in [e3::CALCULATOR, e3::EXPERIMENTER] {
            let decision = enforced.authorize(&Request {
                namespace: e3::APP,
                workload,
                port: crate::Ports::APP,
                peer: &plaintext,
                http: None,
            });
            assert!(!decision.allowed, "{workload}: {}", decision.reason);
        }
    }

    #[test]
    fn two_enrolled_workloads_under_one_service_account_are_refused() {
        let (policy, mut topology) = e3_case(&[e3::CALCULATOR, e3::EXPERIMENTER]);
        let calculator = topology
            .workloads
            .iter_mut()
            .find(|w| w.name == e3::CALCULATOR)
            .unwrap();
        calculator.service_account = e3::EXPERIMENTER.into();
        let err = translate(&policy, &topology).unwrap_err().to_string();
        assert!(
            err.contains("under one service account \"experimenter\""),
            "{err}"
        );
    }
}
