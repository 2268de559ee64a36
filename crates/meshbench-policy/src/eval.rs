//! Validation of a policy file and evaluation of connections and requests against it.

use std::net::IpAddr;
use std::path::Path;

use meshbench_identity::SpiffeId;

use crate::file::{
    Action, AuthorizationPolicy, DefaultInbound, PeerAuthenticationMode, PolicyFile, Rule,
};
use crate::matcher::Pattern;
use crate::Error;

/// Who is on the other end of a connection, as the enforcement point knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// No verified identity: plaintext, or TLS without a client certificate.
    Plaintext { source_ip: Option<IpAddr> },
    /// A client certificate that verified against the trust bundle.
    Authenticated {
        id: SpiffeId,
        source_ip: Option<IpAddr>,
    },
}

impl Peer {
    fn identity(&self) -> Option<&SpiffeId> {
        match self {
            Peer::Authenticated { id, .. } => Some(id),
            Peer::Plaintext { .. } => None,
        }
    }

    fn source_ip(&self) -> Option<IpAddr> {
        match self {
            Peer::Plaintext { source_ip } | Peer::Authenticated { source_ip, .. } => *source_ip,
        }
    }
}

/// A connection (L4: `http` is `None`) or a request (L7) to a workload.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub namespace: &'a str,
    pub workload: &'a str,
    pub port: u16,
    pub peer: &'a Peer,
    /// Method and path, where the enforcement point parses HTTP.
    pub http: Option<(&'a str, &'a str)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Which policy or default decided, for logs, metrics and verification reports.
    pub reason: String,
}

impl Decision {
    fn allow(reason: impl Into<String>) -> Self {
        Decision {
            allowed: true,
            reason: reason.into(),
        }
    }

    fn deny(reason: impl Into<String>) -> Self {
        Decision {
            allowed: false,
            reason: reason.into(),
        }
    }
}

/// A condition's verdict: `Unknown` when it needs what the enforcement point does not have
/// (the peer's identity, or HTTP at L4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Match,
    NoMatch,
    Unknown,
}

#[derive(Debug, Clone)]
struct CompiledRule {
    principals: Vec<Pattern>,
    not_principals: Vec<Pattern>,
    namespaces: Vec<Pattern>,
    not_namespaces: Vec<Pattern>,
    ports: Vec<u16>,
    methods: Vec<String>,
    paths: Vec<Pattern>,
}

#[derive(Debug, Clone)]
struct CompiledPolicy {
    name: String,
    namespace: Option<String>,
    workload: Option<String>,
    action: Action,
    rules: Vec<CompiledRule>,
}

/// A validated policy, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Policy {
    file: PolicyFile,
    authorization: Vec<CompiledPolicy>,
}

impl Policy {
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml(&text)
    }

    pub fn from_yaml(text: &str) -> Result<Self, Error> {
        Self::new(serde_yaml_ng::from_str(text)?)
    }

    pub fn new(file: PolicyFile) -> Result<Self, Error> {
        validate_scopes(&file)?;
        let authorization = file
            .authorization
            .iter()
            .enumerate()
            .map(|(i, p)| compile_policy(i, p))
            .collect::<Result<_, _>>()?;
        Ok(Policy {
            file,
            authorization,
        })
    }

    pub fn file(&self) -> &PolicyFile {
        &self.file
    }

    /// The policy as YAML that [`Policy::from_yaml`] reads back to the same policy: what a
    /// platform gives its proxies.
    pub fn to_yaml(&self) -> Result<String, Error> {
        Ok(serde_yaml_ng::to_string(&self.file)?)
    }

    /// The peer authentication mode of a workload: the most specific declaration wins
    /// (workload, then namespace, then mesh-wide); PERMISSIVE when none applies.
    pub fn peer_authentication(&self, namespace: &str, workload: &str) -> PeerAuthenticationMode {
        let specificity = |ns: &Option<String>, wl: &Option<String>| match (ns, wl) {
            (Some(n), Some(w)) if n == namespace && w == workload => Some(2),
            (Some(n), None) if n == namespace => Some(1),
            (None, None) => Some(0),
            _ => None,
        };
        self.file
            .peer_authentication
            .iter()
            .filter_map(|p| specificity(&p.namespace, &p.workload).map(|s| (s, p.mode)))
            .max_by_key(|(s, _)| *s)
            .map_or(PeerAuthenticationMode::Permissive, |(_, mode)| mode)
    }

    /// Whether a connection may be established at all, by peer authentication alone.
    pub fn admits_connection(&self, namespace: &str, workload: &str, peer: &Peer) -> Decision {
        let mode = self.peer_authentication(namespace, workload);
        match (mode, peer.identity()) {
            (PeerAuthenticationMode::Strict, None) => Decision::deny(format!(
                "peer authentication STRICT for {namespace}/{workload} refuses a peer without mTLS"
            )),
            (PeerAuthenticationMode::Disable, Some(_)) => Decision::deny(format!(
                "peer authentication DISABLE for {namespace}/{workload} accepts plaintext only"
            )),
            (mode, _) => Decision::allow(format!("peer authentication {mode:?}")),
        }
    }

    /// Authorizes a connection or request: peer authentication first, then DENY policies,
    /// then ALLOW policies, then the default inbound policy.
    pub fn authorize(&self, req: &Request<'_>) -> Decision {
        let admitted = self.admits_connection(req.namespace, req.workload, req.peer);
        if !admitted.allowed {
            return admitted;
        }
        let selected: Vec<&CompiledPolicy> = self
            .authorization
            .iter()
            .filter(|p| {
                p.namespace.as_deref().is_none_or(|n| n == req.namespace)
                    && p.workload.as_deref().is_none_or(|w| w == req.workload)
            })
            .collect();
        let facts = PeerFacts::of(req.peer, &self.file.trust_domain);
        for policy in selected.iter().filter(|p| p.action == Action::Deny) {
            if policy
                .rules
                .iter()
                .any(|r| deny_rule_matches(r, req, &facts))
            {
                return Decision::deny(format!("denied by DENY policy {}", policy.name));
            }
        }
        let allows: Vec<&&CompiledPolicy> = selected
            .iter()
            .filter(|p| p.action == Action::Allow)
            .collect();
        if !allows.is_empty() {
            return match allows
                .iter()
                .find(|p| p.rules.iter().any(|r| allow_rule_matches(r, req, &facts)))
            {
                Some(p) => Decision::allow(format!("allowed by ALLOW policy {}", p.name)),
                None => {
                    let names: Vec<&str> = allows.iter().map(|p| p.name.as_str()).collect();
                    Decision::deny(format!(
                        "no rule of ALLOW policy {} matched",
                        names.join(", ")
                    ))
                }
            };
        }
        self.default_inbound(req.peer)
    }

    /// Whether the source and port conditions of rule `rule` of authorization policy `policy`
    /// (indices into the file) hold for a connection from `peer` to `port`, as that policy's
    /// action reads them (an ALLOW needs a positive match, a DENY fails closed). Its method and
    /// path conditions are left to the caller: what a translation into another mesh's L7 rules
    /// needs. `None` when the indices name no rule.
    pub fn rule_admits_source(
        &self,
        policy: usize,
        rule: usize,
        port: u16,
        peer: &Peer,
    ) -> Option<bool> {
        let compiled = self.authorization.get(policy)?;
        let mut source_only = compiled.rules.get(rule)?.clone();
        source_only.methods.clear();
        source_only.paths.clear();
        let facts = PeerFacts::of(peer, &self.file.trust_domain);
        let req = Request {
            namespace: "",
            workload: "",
            port,
            peer,
            http: None,
        };
        Some(match compiled.action {
            Action::Allow => allow_rule_matches(&source_only, &req, &facts),
            Action::Deny => deny_rule_matches(&source_only, &req, &facts),
        })
    }

    fn default_inbound(&self, peer: &Peer) -> Decision {
        let authenticated = peer.identity().is_some();
        let in_cluster = peer
            .source_ip()
            .is_some_and(|ip| self.file.cluster_networks.iter().any(|n| n.contains(&ip)));
        let (allowed, name) = match self.file.default_inbound {
            DefaultInbound::AllUnauthenticated => (true, "all-unauthenticated"),
            DefaultInbound::AllAuthenticated => (authenticated, "all-authenticated"),
            DefaultInbound::ClusterAuthenticated => {
                (authenticated || in_cluster, "cluster-authenticated")
            }
            DefaultInbound::Deny => (false, "deny"),
        };
        let reason = format!("default inbound policy {name}");
        if allowed {
            Decision::allow(reason)
        } else {
            Decision::deny(reason)
        }
    }
}

/// What identity conditions are evaluated against, derived once per decision.
struct PeerFacts {
    /// `<trust-domain>/ns/<ns>/sa/<sa>`, as Istio writes principals.
    principal: Option<String>,
    /// The namespace of an identity of the policy's own trust domain only: `ns/default` of
    /// another trust domain is another organisation's `default`.
    namespace: Option<String>,
}

impl PeerFacts {
    fn of(peer: &Peer, trust_domain: &str) -> Self {
        let identity = peer.identity();
        PeerFacts {
            principal: identity.map(|id| format!("{}{}", id.trust_domain(), id.path())),
            namespace: identity
                .filter(|id| id.trust_domain() == trust_domain)
                .and_then(|id| {
                    id.path()
                        .strip_prefix("/ns/")
                        .and_then(|rest| rest.split('/').next())
                        .map(str::to_owned)
                }),
        }
    }
}

/// Verdicts of every condition a rule sets.
fn verdicts(rule: &CompiledRule, req: &Request<'_>, facts: &PeerFacts) -> Vec<Verdict> {
    let mut out = Vec::with_capacity(7);
    let (principal, namespace) = (&facts.principal, &facts.namespace);
    let any = |patterns: &[Pattern], value: &str| patterns.iter().any(|p| p.matches(value));
    let mut identity_condition = |patterns: &[Pattern], value: &Option<String>, negated: bool| {
        if patterns.is_empty() {
            return;
        }
        out.push(match value {
            None => Verdict::Unknown,
            Some(v) if any(patterns, v) != negated => Verdict::Match,
            Some(_) => Verdict::NoMatch,
        });
    };
    identity_condition(&rule.principals, principal, false);
    identity_condition(&rule.not_principals, principal, true);
    identity_condition(&rule.namespaces, namespace, false);
    identity_condition(&rule.not_namespaces, namespace, true);
    if !rule.ports.is_empty() {
        out.push(if rule.ports.contains(&req.port) {
            Verdict::Match
        } else {
            Verdict::NoMatch
        });
    }
    if !rule.methods.is_empty() {
        out.push(match req.http {
            None => Verdict::Unknown,
            Some((method, _)) if rule.methods.iter().any(|m| m == method) => Verdict::Match,
            Some(_) => Verdict::NoMatch,
        });
    }
    if !rule.paths.is_empty() {
        out.push(match req.http {
            None => Verdict::Unknown,
            Some((_, path)) if any(&rule.paths, path) => Verdict::Match,
            Some(_) => Verdict::NoMatch,
        });
    }
    out
}

/// ALLOW: every condition must positively match; what cannot be evaluated does not allow.
fn allow_rule_matches(rule: &CompiledRule, req: &Request<'_>, facts: &PeerFacts) -> bool {
    verdicts(rule, req, facts)
        .iter()
        .all(|v| *v == Verdict::Match)
}

/// DENY: fails closed; what cannot be evaluated counts as matching.
fn deny_rule_matches(rule: &CompiledRule, req: &Request<'_>, facts: &PeerFacts) -> bool {
    verdicts(rule, req, facts)
        .iter()
        .all(|v| *v != Verdict::NoMatch)
}

fn validate_scopes(file: &PolicyFile) -> Result<(), Error> {
    if let Err(e) = meshbench_identity::SpiffeId::for_trust_domain(&file.trust_domain) {
        return Err(Error::invalid("trust_domain", e.to_string()));
    }
    for (i, p) in file.peer_authentication.iter().enumerate() {
        let at = format!("peer_authentication[{i}] {:?}", p.name);
        check_scope(&at, &p.name, &p.namespace, &p.workload)?;
        if let Some(other) = file.peer_authentication[..i]
            .iter()
            .find(|o| o.namespace == p.namespace && o.workload == p.workload)
        {
            return Err(Error::invalid(
                at,
                format!("has the same scope as {:?}; keep one", other.name),
            ));
        }
    }
    for (i, p) in file.authorization.iter().enumerate() {
        let at = format!("authorization[{i}] {:?}", p.name);
        check_scope(&at, &p.name, &p.namespace, &p.workload)?;
        if file.authorization[..i].iter().any(|o| o.name == p.name) {
            return Err(Error::invalid(at, "a policy of that name already exists"));
        }
    }
    Ok(())
}

fn check_scope(
    at: &str,
    name: &str,
    namespace: &Option<String>,
    workload: &Option<String>,
) -> Result<(), Error> {
    if name.trim().is_empty() {
        return Err(Error::invalid(at, "name must not be empty"));
    }
    if workload.is_some() && namespace.is_none() {
        return Err(Error::invalid(at, "workload needs a namespace"));
    }
    for (field, value) in [("namespace", namespace), ("workload", workload)] {
        if let Some(v) = value {
            let ok = !v.is_empty()
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
            if !ok {
                return Err(Error::invalid(
                    at,
                    format!("{field} {v:?} is not a valid name"),
                ));
            }
        }
    }
    Ok(())
}

fn compile_policy(index: usize, p: &AuthorizationPolicy) -> Result<CompiledPolicy, Error> {
    let rules = p
        .rules
        .iter()
        .enumerate()
        .map(|(r, rule)| {
            compile_rule(
                rule,
                &format!("authorization[{index}] {:?}: rules[{r}]", p.name),
            )
        })
        .collect::<Result<_, _>>()?;
    Ok(CompiledPolicy {
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        workload: p.workload.clone(),
        action: p.action,
        rules,
    })
}

fn patterns(
    values: &[String],
    at: &str,
    normalize: fn(&str) -> &str,
) -> Result<Vec<Pattern>, Error> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Pattern::parse(normalize(v)).ok_or_else(|| {
                Error::invalid(
                    format!("{at}[{i}]"),
                    format!("{v:?}: use an exact value, *, or one * at the start or end"),
                )
            })
        })
        .collect()
}

fn as_is(value: &str) -> &str {
    value
}

fn strip_spiffe(principal: &str) -> &str {
    principal.strip_prefix("spiffe://").unwrap_or(principal)
}

fn compile_rule(rule: &Rule, at: &str) -> Result<CompiledRule, Error> {
    let methods = rule
        .to
        .methods
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ok = !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase());
            if ok {
                Ok(m.clone())
            } else {
                Err(Error::invalid(
                    format!("{at}.to.methods[{i}]"),
                    format!("{m:?} is not an upper-case HTTP method"),
                ))
            }
        })
        .collect::<Result<_, _>>()?;
    for (i, path) in rule.to.paths.iter().enumerate() {
        if !(path.starts_with('/') || path.starts_with('*')) {
            return Err(Error::invalid(
                format!("{at}.to.paths[{i}]"),
                format!("{path:?} must start with / (or * for a suffix match)"),
            ));
        }
    }
    if rule.to.ports.contains(&0) {
        return Err(Error::invalid(
            format!("{at}.to.ports"),
            "port 0 is not a port",
        ));
    }
    Ok(CompiledRule {
        principals: patterns(
            &rule.from.principals,
            &format!("{at}.from.principals"),
            strip_spiffe,
        )?,
        not_principals: patterns(
            &rule.from.not_principals,
            &format!("{at}.from.not_principals"),
            strip_spiffe,
        )?,
        namespaces: patterns(
            &rule.from.namespaces,
            &format!("{at}.from.namespaces"),
            as_is,
        )?,
        not_namespaces: patterns(
            &rule.from.not_namespaces,
            &format!("{at}.from.not_namespaces"),
            as_is,
        )?,
        ports: rule.to.ports.clone(),
        methods,
        paths: patterns(&rule.to.paths, &format!("{at}.to.paths"), as_is)?,
    })
}
