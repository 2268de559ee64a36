//! Our policy language as Envoy RBAC, the way Istio translates an AuthorizationPolicy: one
//! RBAC filter for the DENY policies and one for the ALLOW policies (or the default inbound
//! policy) that select a workload, one Envoy policy per rule with the rule's conditions
//! ANDed, principals read from the client certificate's SPIFFE ID (URI SAN).
//!
//! A condition on identity evaluates as our policy engine does for a peer without one: it
//! never allows, and in a DENY rule it denies. Translated naively, a `not_namespaces` DENY
//! rule would let a plaintext caller through (`not_id` of a failed match is true): that is the
//! trap of Istio's security advisory 2021-004, and what the tests below pin down.

use meshbench_policy::{Action, DefaultInbound, Pattern, PolicyFile, Rule};
use serde_json::{json, Map, Value};

const RBAC: &str = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";

/// The RBAC HTTP filters (in order: DENY, then ALLOW) for `namespace/workload`.
pub fn rbac_filters(file: &PolicyFile, namespace: &str, workload: &str) -> Vec<Value> {
    let selected = |action: Action| {
        file.authorization
            .iter()
            .filter(move |p| {
                p.action == action
                    && p.namespace.as_deref().is_none_or(|n| n == namespace)
                    && p.workload.as_deref().is_none_or(|w| w == workload)
            })
            .collect::<Vec<_>>()
    };
    let mut filters = vec![];
    let denies = selected(Action::Deny);
    if !denies.is_empty() {
        let mut policies = Map::new();
        for p in denies {
            for (i, rule) in p.rules.iter().enumerate() {
                policies.insert(format!("{}[{i}]", p.name), envoy_policy(rule, Action::Deny));
            }
        }
        filters.push(filter("DENY", policies));
    }
    let allows = selected(Action::Allow);
    if !allows.is_empty() {
        let mut policies = Map::new();
        for p in allows {
            for (i, rule) in p.rules.iter().enumerate() {
                policies.insert(
                    format!("{}[{i}]", p.name),
                    envoy_policy(rule, Action::Allow),
                );
            }
        }
        filters.push(filter("ALLOW", policies));
    } else if let Some(default) = default_inbound(file) {
        filters.push(default);
    }
    filters
}

fn filter(action: &str, policies: Map<String, Value>) -> Value {
    json!({
        "name": "envoy.filters.http.rbac",
        "typed_config": {
            "@type": RBAC,
            "rules": { "action": action, "policies": policies },
        },
    })
}

/// The default inbound policy, applied when no ALLOW policy selects the workload.
fn default_inbound(file: &PolicyFile) -> Option<Value> {
    let any_permission = json!([{ "any": true }]);
    let policy = |principals: Value| {
        let mut policies = Map::new();
        policies.insert(
            "default-inbound".into(),
            json!({ "permissions": any_permission, "principals": principals }),
        );
        filter("ALLOW", policies)
    };
    match file.default_inbound {
        DefaultInbound::AllUnauthenticated => None,
        DefaultInbound::AllAuthenticated => Some(policy(json!([spiffe_peer()]))),
        DefaultInbound::ClusterAuthenticated => {
            let mut ids = vec![spiffe_peer()];
            ids.extend(file.cluster_networks.iter().map(|net| {
                json!({ "direct_remote_ip": {
                    "address_prefix": net.network().to_string(),
                    "prefix_len": net.prefix_len(),
                } })
            }));
            Some(policy(json!([{ "or_ids": { "ids": ids } }])))
        }
        DefaultInbound::Deny => Some(filter("ALLOW", Map::new())),
    }
}

/// One rule as an Envoy policy: every condition of `from` in one principal, every
/// condition of `to` in one permission.
fn envoy_policy(rule: &Rule, action: Action) -> Value {
    let deny = action == Action::Deny;
    let mut ids = vec![];
    let from = &rule.from;
    for (patterns, negated, of) in [
        (&from.principals, false, Of::Principal),
        (&from.not_principals, true, Of::Principal),
        (&from.namespaces, false, Of::Namespace),
        (&from.not_namespaces, true, Of::Namespace),
    ] {
        if patterns.is_empty() {
            continue;
        }
        let matches = json!({ "or_ids": { "ids":
            patterns.iter().map(|p| identity_matcher(p, of)).collect::<Vec<_>>() } });
        ids.push(match (negated, deny) {
            // Without an identity: no match for ALLOW, a match for DENY (fail closed).
            (false, false) => matches,
            (false, true) => json!({ "or_ids": { "ids": [matches, not_spiffe_peer()] } }),
            (true, false) => {
                json!({ "and_ids": { "ids": [spiffe_peer(), { "not_id": matches }] } })
            }
            (true, true) => json!({ "not_id": matches }),
        });
    }
    let mut rules = vec![];
    let to = &rule.to;
    if !to.ports.is_empty() {
        rules.push(or_rules(
            to.ports
                .iter()
                .map(|port| json!({ "destination_port": port }))
                .collect(),
        ));
    }
    if !to.methods.is_empty() {
        rules.push(or_rules(
            to.methods
                .iter()
                .map(|m| json!({ "header": { "name": ":method", "string_match": { "exact": m } } }))
                .collect(),
        ));
    }
    if !to.paths.is_empty() {
        rules.push(or_rules(
            to.paths
                .iter()
                .map(|p| match Pattern::parse(p) {
                    Some(Pattern::Any) | None => json!({ "any": true }),
                    Some(pattern) => {
                        json!({ "url_path": { "path": string_matcher(&pattern, "") } })
                    }
                })
                .collect(),
        ));
    }
    let principal = if ids.is_empty() {
        json!({ "any": true })
    } else {
        json!({ "and_ids": { "ids": ids } })
    };
    let permission = if rules.is_empty() {
        json!({ "any": true })
    } else {
        json!({ "and_rules": { "rules": rules } })
    };
    json!({ "permissions": [permission], "principals": [principal] })
}

fn or_rules(rules: Vec<Value>) -> Value {
    json!({ "or_rules": { "rules": rules } })
}

#[derive(Clone, Copy)]
enum Of {
    Principal,
    Namespace,
}

/// A peer with a SPIFFE identity (a verified client certificate with a `spiffe://` URI SAN).
fn spiffe_peer() -> Value {
    json!({ "authenticated": { "principal_name": { "prefix": "spiffe://" } } })
}

fn not_spiffe_peer() -> Value {
    json!({ "not_id": spiffe_peer() })
}

/// A principal (`<trust-domain>/ns/<ns>/sa/<sa>`, as Istio writes them) or a namespace
/// pattern against the peer's SPIFFE ID.
fn identity_matcher(text: &str, of: Of) -> Value {
    // Patterns were validated when the policy loaded; an invalid one matches nobody.
    let Some(pattern) = Pattern::parse(text) else {
        return json!({ "not_id": { "any": true } });
    };
    let name = match of {
        Of::Principal => match pattern {
            Pattern::Any => json!({ "prefix": "spiffe://" }),
            Pattern::Suffix(s) => {
                json!({ "safe_regex": { "regex": format!("spiffe://.*{}", escape(&s)) } })
            }
            other => string_matcher(&other, "spiffe://"),
        },
        Of::Namespace => {
            let namespace = match pattern {
                Pattern::Any => "[^/]+".to_owned(),
                Pattern::Exact(n) => escape(&n),
                Pattern::Prefix(p) => format!("{}[^/]*", escape(&p)),
                Pattern::Suffix(s) => format!("[^/]*{}", escape(&s)),
            };
            json!({ "safe_regex": { "regex": format!("spiffe://[^/]+/ns/{namespace}/.*") } })
        }
    };
    json!({ "authenticated": { "principal_name": name } })
}

fn string_matcher(pattern: &Pattern, prefix: &str) -> Value {
    match pattern {
        Pattern::Any => json!({ "prefix": prefix }),
        Pattern::Exact(e) => json!({ "exact": format!("{prefix}{e}") }),
        Pattern::Prefix(p) => json!({ "prefix": format!("{prefix}{p}") }),
        Pattern::Suffix(s) => json!({ "suffix": s }),
    }
}

/// Escapes RE2's special characters.
fn escape(literal: &str) -> String {
    let mut out = String::with_capacity(literal.len());
    for c in literal.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_policy::Policy;

    /// E3's policy, its ALLOW narrowed to POSTs to `/add` and under `/api/`.
    fn e3_policy() -> String {
        let narrowed = "        to: { methods: [POST], paths: [/add, /api/*] }\n";
        meshbench_topology::e3::zero_trust_policy("cluster.local") + narrowed
    }

    fn rbac(workload: &str) -> Vec<Value> {
        let policy = Policy::from_yaml(&e3_policy()).unwrap();
        rbac_filters(policy.file(), "app", workload)
    }

    #[test]
    fn deny_comes_first_and_a_not_namespaces_rule_also_catches_peers_without_identity() {
        let filters = rbac("calculator");
        assert_eq!(filters.len(), 2);
        let deny = &filters[0]["typed_config"]["rules"];
        assert_eq!(deny["action"], "DENY");
        let principal = &deny["policies"]["deny-other-namespaces[0]"]["principals"][0];
        // A plain `not_id` of the namespace match: true for a peer without any identity.
        let condition = &principal["and_ids"]["ids"][0];
        assert!(condition.get("not_id").is_some(), "{condition}");
        let regex = &condition["not_id"]["or_ids"]["ids"][0]["authenticated"]["principal_name"]
            ["safe_regex"]["regex"];
        assert_eq!(regex, "spiffe://[^/]+/ns/app/.*");
    }

    #[test]
    fn allow_rules_need_the_identity_and_the_request() {
        let filters = rbac("calculator");
        let allow = &filters[1]["typed_config"]["rules"];
        assert_eq!(allow["action"], "ALLOW");
        let policy = &allow["policies"]["calculator-only-from-experimenter[0]"];
        assert_eq!(
            policy["principals"][0]["and_ids"]["ids"][0]["or_ids"]["ids"][0]["authenticated"]
                ["principal_name"]["exact"],
            "spiffe://cluster.local/ns/app/sa/experimenter"
        );
        let rules = &policy["permissions"][0]["and_rules"]["rules"];
        assert_eq!(
            rules[0]["or_rules"]["rules"][0]["header"]["string_match"]["exact"],
            "POST"
        );
        assert_eq!(
            rules[1]["or_rules"]["rules"][1]["url_path"]["path"]["prefix"],
            "/api/"
        );
    }

    #[test]
    fn a_workload_no_allow_policy_selects_gets_the_default_inbound_policy() {
        // all-unauthenticated (the default): only the namespace's DENY.
        assert_eq!(rbac("security-checker").len(), 1);
        let deny_all = "default_inbound: deny\n";
        let policy = Policy::from_yaml(deny_all).unwrap();
        let filters = rbac_filters(policy.file(), "app", "x");
        assert_eq!(filters[0]["typed_config"]["rules"]["action"], "ALLOW");
        assert_eq!(
            filters[0]["typed_config"]["rules"]["policies"],
            json!({}),
            "an ALLOW filter without policies denies everything"
        );
    }

    #[test]
    fn negated_conditions_in_allow_rules_require_an_identity() {
        let yaml = "authorization:
  - name: not-the-checker
    action: ALLOW
    rules:
      - from: { not_principals: [cluster.local/ns/app/sa/checker] }
";
        let policy = Policy::from_yaml(yaml).unwrap();
        let filters = rbac_filters(policy.file(), "app", "calculator");
        let ids = &filters[0]["typed_config"]["rules"]["policies"]["not-the-checker[0]"]
            ["principals"][0]["and_ids"]["ids"][0]["and_ids"]["ids"];
        assert_eq!(ids[0], spiffe_peer());
        assert!(ids[1].get("not_id").is_some());
    }

    #[test]
    fn regex_literals_are_escaped() {
        assert_eq!(escape("a.b*c"), "a\\.b\\*c");
    }
}
