//! The policy file as users write it (YAML), with field names close to Istio's and Linkerd's.
//!
//! ```yaml
//! trust_domain: cluster.local
//! default_inbound: all-unauthenticated
//! cluster_networks: [10.0.0.0/8]
//! peer_authentication:
//!   - name: strict-app
//!     namespace: app
//!     mode: STRICT
//! authorization:
//!   - name: calculator-only-from-experimenter
//!     namespace: app
//!     workload: calculator
//!     action: ALLOW
//!     rules:
//!       - from:
//!           principals: [cluster.local/ns/app/sa/experimenter]
//!         to:
//!           ports: [8080]
//!           methods: [POST]
//! ```

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default = "default_trust_domain")]
    pub trust_domain: String,
    /// What a workload that no ALLOW policy selects admits.
    pub default_inbound: DefaultInbound,
    /// Networks whose plaintext peers `cluster-authenticated` admits (Linkerd's
    /// clusterNetworks).
    pub cluster_networks: Vec<IpNet>,
    pub peer_authentication: Vec<PeerAuthentication>,
    pub authorization: Vec<AuthorizationPolicy>,
}

fn default_trust_domain() -> String {
    "cluster.local".to_owned()
}

/// Linkerd's default inbound policies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DefaultInbound {
    /// Everyone, with or without an identity (Istio's and Linkerd's default).
    #[default]
    AllUnauthenticated,
    /// Only peers with a verified identity.
    AllAuthenticated,
    /// Peers with a verified identity, or plaintext peers from the cluster networks.
    ClusterAuthenticated,
    Deny,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerAuthentication {
    pub name: String,
    /// Absent: mesh-wide.
    pub namespace: Option<String>,
    /// Absent: every workload of the namespace.
    pub workload: Option<String>,
    pub mode: PeerAuthenticationMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PeerAuthenticationMode {
    /// mTLS only; plaintext connections are refused.
    Strict,
    /// mTLS or plaintext (Istio's default).
    Permissive,
    /// Plaintext only.
    Disable,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizationPolicy {
    pub name: String,
    /// Absent: every namespace.
    pub namespace: Option<String>,
    /// Absent: every workload of the namespace.
    pub workload: Option<String>,
    pub action: Action,
    /// The policy applies when any rule matches. An ALLOW policy with no rules allows
    /// nothing; a DENY policy with no rules denies nothing.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Action {
    Allow,
    Deny,
}

/// A rule matches when every condition given matches (an absent condition matches anything).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rule {
    pub from: From,
    pub to: To,
}

/// Source conditions. All of them need the peer's verified identity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct From {
    /// `<trust-domain>/ns/<ns>/sa/<sa>` (or a full `spiffe://` ID); `*` and a leading or
    /// trailing `*` are wildcards.
    pub principals: Vec<String>,
    pub not_principals: Vec<String>,
    pub namespaces: Vec<String>,
    pub not_namespaces: Vec<String>,
}

/// Destination conditions. `methods` and `paths` need L7 (HTTP) enforcement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct To {
    pub ports: Vec<u16>,
    pub methods: Vec<String>,
    /// Exact paths, or prefixes (`/api/*`) and suffixes (`*.json`).
    pub paths: Vec<String>,
}
