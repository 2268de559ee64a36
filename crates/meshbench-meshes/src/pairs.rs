//! Our policy decided pair by pair, for meshes whose resources cannot say what it says:
//! Consul's community edition has no namespaces, Linkerd has no DENY, Cilium names peers by
//! labels, not by SPIFFE IDs. Each destination's rules are evaluated by our own engine for
//! one source at a time (an enrolled workload's identity, or a peer without one), and what
//! that source may do there is everything, nothing, or per request: method and path matches
//! in Istio's order (DENY rules, ALLOW rules, the default), ending in a catch-all, so that no
//! request falls through to the mesh's own default.

use meshbench_identity::SpiffeId;
use meshbench_policy::{
    Action, DefaultInbound, Pattern, Peer, PeerAuthenticationMode, Policy, Rule,
};
use meshbench_topology::Workload;

use crate::Error;

/// Which requests an HTTP match takes: any of `methods` (all when empty) on `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpMatch {
    pub methods: Vec<String>,
    pub path: Pattern,
}

impl HttpMatch {
    /// Every request.
    pub(crate) fn any() -> Self {
        HttpMatch {
            methods: vec![],
            path: Pattern::Any,
        }
    }
}

/// What one source may do at one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every connection allowed, or none.
    L4(Action),
    /// Per request: the first match decides; the last one takes every request.
    L7(Vec<(Action, HttpMatch)>),
}

impl Outcome {
    /// Whether any request from the source may pass.
    pub(crate) fn allows_some(&self) -> bool {
        match self {
            Outcome::L4(action) => *action == Action::Allow,
            Outcome::L7(matches) => matches.iter().any(|(a, _)| *a == Action::Allow),
        }
    }
}

/// Who calls, as the destination's enforcement point knows it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source<'a> {
    /// An enrolled workload, by its verified identity.
    Enrolled(&'a Workload),
    /// A peer without an identity (an unenrolled workload, plaintext).
    Unauthenticated,
}

impl Source<'_> {
    fn peer(&self, trust_domain: &str) -> Result<Peer, Error> {
        Ok(match self {
            Source::Enrolled(w) => Peer::Authenticated {
                id: SpiffeId::for_workload(trust_domain, &w.namespace, &w.service_account)?,
                source_ip: None,
            },
            Source::Unauthenticated => Peer::Plaintext { source_ip: None },
        })
    }
}

/// What `source` may do at `destination` (serving on `port`) under `policy`. A peer without
/// an identity is refused by STRICT peer authentication, and its default under
/// `cluster-authenticated` is "allowed": the caller limits it to the cluster networks.
pub(crate) fn outcome(
    policy: &Policy,
    source: Source<'_>,
    destination: &Workload,
    port: u16,
) -> Result<Outcome, Error> {
    let file = policy.file();
    let (ns, wl) = (&destination.namespace, &destination.name);
    let peer = source.peer(&file.trust_domain)?;
    let unauthenticated = matches!(source, Source::Unauthenticated);
    if unauthenticated && policy.peer_authentication(ns, wl) == PeerAuthenticationMode::Strict {
        return Ok(Outcome::L4(Action::Deny));
    }
    let selecting = |action: Action| {
        file.authorization
            .iter()
            .enumerate()
            .filter(move |(_, p)| {
                p.action == action
                    && p.namespace.as_deref().is_none_or(|n| n == ns)
                    && p.workload.as_deref().is_none_or(|n| n == wl)
            })
            .flat_map(|(i, p)| {
                p.rules
                    .iter()
                    .enumerate()
                    .map(move |(r, rule)| (i, r, rule))
            })
    };
    let admits = |i: usize, r: usize| {
        policy
            .rule_admits_source(i, r, port, &peer)
            .unwrap_or(false)
    };
    let mut matches = vec![];
    for (i, r, rule) in selecting(Action::Deny) {
        if admits(i, r) {
            match http_matches(rule) {
                None => return Ok(Outcome::L4(Action::Deny)),
                Some(m) => matches.extend(m.into_iter().map(|m| (Action::Deny, m))),
            }
        }
    }
    let allow_policies = file.authorization.iter().any(|p| {
        p.action == Action::Allow
            && p.namespace.as_deref().is_none_or(|n| n == ns)
            && p.workload.as_deref().is_none_or(|n| n == wl)
    });
    let fallback = if allow_policies {
        let mut fallback = Action::Deny;
        for (i, r, rule) in selecting(Action::Allow) {
            if admits(i, r) {
                match http_matches(rule) {
                    None => {
                        fallback = Action::Allow;
                        break;
                    }
                    Some(m) => matches.extend(m.into_iter().map(|m| (Action::Allow, m))),
                }
            }
        }
        fallback
    } else {
        match file.default_inbound {
            DefaultInbound::Deny => Action::Deny,
            DefaultInbound::AllAuthenticated if unauthenticated => Action::Deny,
            // Every other default admits a peer with a verified identity; a peer without one
            // under cluster-authenticated only from the cluster networks (the caller's part).
            _ => Action::Allow,
        }
    };
    // Matches with the fallback's own action change nothing once no match of the other
    // action follows them (one before an overlapping one still decides first).
    while matches
        .last()
        .is_some_and(|(action, _)| *action == fallback)
    {
        matches.pop();
    }
    if matches.is_empty() {
        return Ok(Outcome::L4(fallback));
    }
    matches.push((fallback, HttpMatch::any()));
    Ok(Outcome::L7(matches))
}

/// A rule's method and path conditions (any of them matches), or `None` when it has none (it
/// matches every request).
fn http_matches(rule: &Rule) -> Option<Vec<HttpMatch>> {
    let (methods, paths) = (&rule.to.methods, &rule.to.paths);
    if methods.is_empty() && paths.is_empty() {
        return None;
    }
    let paths: Vec<Pattern> = if paths.is_empty() {
        vec![Pattern::Any]
    } else {
        // The policy was validated: a path that does not parse is not there.
        paths.iter().filter_map(|p| Pattern::parse(p)).collect()
    };
    Some(
        paths
            .into_iter()
            .map(|path| HttpMatch {
                methods: methods.clone(),
                path,
            })
            .collect(),
    )
}

/// `text` as a literal in a regular expression (RE2 and POSIX extended alike).
pub(crate) fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether the default admits unauthenticated peers from the cluster networks only.
pub(crate) fn unauthenticated_from_cluster_networks_only(policy: &Policy) -> bool {
    policy.file().default_inbound == DefaultInbound::ClusterAuthenticated
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_topology::e3;

    fn workload(name: &str) -> Workload {
        e3::topology(&[], crate::Ports::APP)
            .workloads
            .into_iter()
            .find(|w| w.name == name)
            .unwrap()
    }

    #[test]
    fn e3s_calculator_takes_the_experimenter_only_and_no_plaintext() {
        let policy = Policy::from_yaml(&e3::zero_trust_policy(crate::TRUST_DOMAIN)).unwrap();
        let calculator = workload(e3::CALCULATOR);
        let of = |source| outcome(&policy, source, &calculator, crate::Ports::APP).unwrap();
        let (experimenter, checker) = (workload(e3::EXPERIMENTER), workload(e3::CHECKER));
        assert_eq!(
            of(Source::Enrolled(&experimenter)),
            Outcome::L4(Action::Allow)
        );
        assert_eq!(of(Source::Enrolled(&checker)), Outcome::L4(Action::Deny));
        assert_eq!(of(Source::Unauthenticated), Outcome::L4(Action::Deny));
        // The external namespace is PERMISSIVE with no rule: plaintext passes there.
        let external = workload(e3::EXTERNAL_CHECKER);
        assert_eq!(
            outcome(
                &policy,
                Source::Unauthenticated,
                &external,
                crate::Ports::APP
            )
            .unwrap(),
            Outcome::L4(Action::Allow)
        );
    }

    #[test]
    fn an_allow_rule_without_sources_admits_plaintext_and_paths_keep_their_order() {
        let policy = Policy::from_yaml(
            "authorization:\n\
             \x20 - name: no-admin\n    namespace: app\n    workload: calculator\n    action: DENY\n    rules:\n\
             \x20     - to: { paths: [/admin/*] }\n\
             \x20 - name: open\n    namespace: app\n    workload: calculator\n    action: ALLOW\n    rules:\n\
             \x20     - to: { methods: [GET] }\n",
        )
        .unwrap();
        let calculator = workload(e3::CALCULATOR);
        let got = outcome(
            &policy,
            Source::Unauthenticated,
            &calculator,
            crate::Ports::APP,
        )
        .unwrap();
        assert_eq!(
            got,
            Outcome::L7(vec![
                (
                    Action::Deny,
                    HttpMatch {
                        methods: vec![],
                        path: Pattern::Prefix("/admin/".into())
                    }
                ),
                (
                    Action::Allow,
                    HttpMatch {
                        methods: vec!["GET".into()],
                        path: Pattern::Any
                    }
                ),
                (Action::Deny, HttpMatch::any()),
            ])
        );
        assert!(got.allows_some());
    }
}
