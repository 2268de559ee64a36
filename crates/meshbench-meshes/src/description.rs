//! What a mesh is, as plain data: its names, what it puts beside a workload, and what its
//! security amounts to. The runner, the verifier and the reports read these answers; the
//! verifier checks them on the wire and in the reachability matrix, so each must be true of
//! the configuration meshbench deploys, not of the product in general.

use meshbench_policy::Policy;

/// What a mesh puts beside a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enrollment {
    /// Nothing: the apps talk directly.
    Nothing,
    /// No proxy; the apps do TLS themselves.
    InApp,
    /// A proxy in every meshed pod, capturing its traffic both ways.
    SidecarPerPod,
    /// An agent on every node holding its pods' identities (ztunnel's shape).
    AgentPerNode,
}

/// How the lab's policy (Istio-style PeerAuthentication and AuthorizationPolicy) reaches the
/// mesh's data plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySupport {
    /// No mesh, no policy: the negative control.
    None,
    /// The data plane reads our policy file as it is.
    Native,
    /// Translated into the data plane's own configuration (named).
    Translated(&'static str),
    /// The data plane cannot express it; the reason.
    Unenforceable(&'static str),
}

/// What a proxy verifies about its peer beyond the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityCheck {
    SpiffeId,
    DnsName,
    ChainOnly,
}

impl IdentityCheck {
    pub fn describe(self) -> &'static str {
        match self {
            IdentityCheck::SpiffeId => "SPIFFE ID",
            IdentityCheck::DnsName => "DNS SAN mirroring the SPIFFE ID",
            IdentityCheck::ChainOnly => "chain only",
        }
    }
}

/// What a mesh enforces of a policy ([`crate::MeshAdapter::enforced_policy`]).
#[derive(Debug, Clone)]
pub struct EnforcedPolicy {
    /// The policy as enforced, in our own language.
    pub policy: Policy,
    /// Each difference from the policy as written, or how it was expressed, as a sentence.
    pub notes: Vec<String>,
}

/// One scenario of a mesh, described.
#[derive(Debug, Clone)]
pub struct Description {
    /// The name specs, `--scenarios` and results use.
    pub name: &'static str,
    /// Other names a spec may use.
    pub aliases: &'static [&'static str],
    /// One line for the results: what runs, with which TLS and identity checks.
    pub summary: String,
    pub enrollment: Enrollment,
    /// Whether client and server talk mutually authenticated TLS.
    pub mtls: bool,
    /// Whether traffic between two workloads on one node is encrypted (Cilium's choice is not
    /// to).
    pub encrypts_same_node: bool,
    /// Whether a pod's call to itself (through its own service) is encrypted too. Linkerd's
    /// proxy hands it to the pod's own app over loopback in plaintext: it never leaves the pod.
    pub encrypts_within_pod: bool,
    /// Whether a node's agent tunnels same-node traffic to itself, so that the encrypted leg
    /// is on the node's loopback rather than on a pod's interface.
    pub tunnels_within_node: bool,
    /// What each side verifies about its peer beyond the chain (client of server, server of
    /// client); `None` without mTLS. What the verifier can prove is bounded by it.
    pub identity: Option<(IdentityCheck, IdentityCheck)>,
    pub policy: PolicySupport,
    /// The SPIFFE ID the mesh gives the workload running as a service account (second
    /// argument) in a namespace (first): ours unless a third-party control plane names its
    /// own.
    pub identity_format: fn(&str, &str) -> String,
}

impl Description {
    /// A scenario without mTLS or policy, whose workloads have our SPIFFE IDs.
    pub fn new(name: &'static str, summary: impl Into<String>, enrollment: Enrollment) -> Self {
        Description {
            name,
            aliases: &[],
            summary: summary.into(),
            enrollment,
            mtls: false,
            encrypts_same_node: false,
            encrypts_within_pod: false,
            tunnels_within_node: false,
            identity: None,
            policy: PolicySupport::None,
            identity_format: crate::pki::spiffe_id,
        }
    }

    /// With mTLS everywhere (same node included), each side checking the other as given.
    pub fn mtls(mut self, identity: (IdentityCheck, IdentityCheck)) -> Self {
        self.mtls = true;
        self.encrypts_same_node = true;
        self.encrypts_within_pod = true;
        self.identity = Some(identity);
        self
    }

    /// A pod's call to itself stays in the pod, in plaintext on its loopback (Linkerd's).
    pub fn within_pod_in_clear(mut self) -> Self {
        self.encrypts_within_pod = false;
        self
    }

    pub fn policy(mut self, policy: PolicySupport) -> Self {
        self.policy = policy;
        self
    }

    pub fn aliases(mut self, aliases: &'static [&'static str]) -> Self {
        self.aliases = aliases;
        self
    }
}
