//! Verification results (`meshbench verify`): for each mesh, E3's security cases with every
//! probe's expected and observed outcome, the evidence on the wire, and identity checks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Environment;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyReport {
    pub schema_version: u32,
    /// `"meshbench.verify"`.
    pub kind: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub finished_at: String,
    pub environment: Environment,
    /// Where the meshes were verified: the local lab, or `kubernetes/<version> (<server>)`
    /// (absent: the local lab, before this field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// The declared zero-trust policy (YAML) every expectation was derived from.
    pub policy: String,
    pub meshes: Vec<MeshVerification>,
    /// Every verdict passed.
    pub passed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MeshVerification {
    pub mesh: String,
    pub description: String,
    pub cases: Vec<CaseVerification>,
    pub identity: Vec<IdentityCheck>,
    /// Why the mesh could not be verified (nothing else is then reported).
    pub error: Option<String>,
    /// What was not checked, or checked otherwise than locally, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseVerification {
    /// E3's case number (1-6); 7 and up are meshbench's additions.
    pub case: u32,
    pub title: String,
    /// The workloads the mesh enrolled in this case.
    pub meshed: Vec<String>,
    pub probes: Vec<ProbeVerification>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Pass,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeVerification {
    /// The calling workload (`experimenter`, `security-checker`, ...).
    pub from: String,
    /// The service called.
    pub to: String,
    /// Method and path, e.g. `POST /add`.
    pub request: String,
    pub expected_allowed: bool,
    /// The policy rule or default that decided the expectation.
    pub expected_reason: String,
    /// The outcome class: `http_200`, `http_403`, `connect_refused`, `connection_reset`,
    /// `tls_...`, `timeout`, `other`.
    pub observed: String,
    pub observed_allowed: bool,
    pub verdict: Verdict,
    /// Remarks a reader should see, e.g. a denial that came as a reset rather than a 403.
    pub note: Option<String>,
    pub wire: Option<WireEvidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WireEvidence {
    /// Where the capture ran: `inter-node link (node-1 uplink)` or the destination pod's
    /// interface for a same-node path.
    pub capture_point: String,
    /// `inter-node` or `same-node`.
    pub path: String,
    /// TCP connections between the two sides that carried payload.
    pub connections: u32,
    /// Of those, the ones whose every payload byte parsed as TLS records.
    pub tls_connections: u32,
    pub tls_versions: Vec<String>,
    pub cipher_suites: Vec<String>,
    /// The marker the request carried in its body and header.
    pub marker: String,
    pub marker_seen: bool,
    /// Whether the mesh should have encrypted this path (both ends enrolled).
    pub encryption_expected: bool,
    /// TLS 1.3 encrypts certificates, so whether a client certificate was sent and which
    /// SPIFFE ID the server presented cannot be read off the wire; the identity checks
    /// establish them by handshaking with the server's proxy.
    pub note: Option<String>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdentityCheck {
    /// `valid-identity`, `no-client-certificate`, `other-trust-domain`,
    /// `expired-certificate`, `forged-identity-header`, `rotation-under-load`.
    pub name: String,
    pub description: String,
    /// `refused` or `allowed`.
    pub expected: String,
    /// The outcome class observed.
    pub observed: String,
    /// The SPIFFE ID the server's proxy presented, where the handshake got that far.
    pub server_id: Option<String>,
    pub verdict: Verdict,
}
