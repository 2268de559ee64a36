//! Scenarios: how client and server talk in one experiment cell. Each scenario knows the extra
//! arguments its server and client processes need.

use std::path::{Path, PathBuf};

use meshbench_identity::{CertificateAuthority, IssueOptions, SpiffeId};
use meshbench_results::ScenarioConfig;

use crate::Error;

/// Trust domain of the lab's built-in CA.
pub const TRUST_DOMAIN: &str = "cluster.local";
const NAMESPACE: &str = "default";
const SERVER_SA: &str = "echo-server";
const CLIENT_SA: &str = "load-generator";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Plain HTTP between client and server.
    Baseline,
    /// The applications do mTLS themselves (E1's baseline-mTLS), distinct SPIFFE identities.
    BaselineMtls,
    /// Plain apps behind meshbench's reference sidecars (L4), mTLS STRICT between them and
    /// only the client's identity allowed to the server.
    Sidecar,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::BaselineMtls => "baseline-mtls",
            Scenario::Sidecar => "sidecar",
        }
    }

    pub fn describe(self) -> ScenarioConfig {
        let id = |sa| {
            SpiffeId::for_workload(TRUST_DOMAIN, NAMESPACE, sa)
                .expect("static identity is valid")
                .to_string()
        };
        match self {
            Scenario::Baseline => ScenarioConfig {
                name: self.name().to_owned(),
                description: "plain HTTP/1.1 between client and server".to_owned(),
                mtls: false,
                client_identity: None,
                server_identity: None,
            },
            Scenario::Sidecar => ScenarioConfig {
                name: self.name().to_owned(),
                description: "plain apps behind meshbench's reference sidecars (L4, TLS 1.3 mTLS STRICT, identity-based ALLOW)"
                    .to_owned(),
                mtls: true,
                client_identity: Some(id(CLIENT_SA)),
                server_identity: Some(id(SERVER_SA)),
            },
            Scenario::BaselineMtls => ScenarioConfig {
                name: self.name().to_owned(),
                description:
                    "client and server do TLS 1.3 mTLS themselves (rustls, ECDSA P-256 SVIDs)"
                        .to_owned(),
                mtls: true,
                client_identity: Some(id(CLIENT_SA)),
                server_identity: Some(id(SERVER_SA)),
            },
        }
    }

    /// Whether the scenario needs the lab's certificates.
    pub fn uses_tls(self) -> bool {
        matches!(self, Scenario::BaselineMtls | Scenario::Sidecar)
    }
}

/// Certificates for the mTLS scenarios, created once per run under `<out>/pki`.
#[derive(Debug, Clone)]
pub struct LabPki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub server_id: String,
    /// STRICT mTLS for the lab namespace; only the load generator may call the server.
    pub policy: PathBuf,
}

impl LabPki {
    pub fn create(dir: &Path) -> Result<Self, Error> {
        let ca = CertificateAuthority::init(dir, TRUST_DOMAIN)?;
        let server = ca.issue(
            NAMESPACE,
            SERVER_SA,
            &IssueOptions {
                dns_names: vec!["localhost".to_owned()],
                ip_addresses: vec![[127, 0, 0, 1].into()],
                ..IssueOptions::default()
            },
        )?;
        let client = ca.issue(NAMESPACE, CLIENT_SA, &IssueOptions::default())?;
        let (server_cert, server_key) = server.write(dir, SERVER_SA)?;
        let (client_cert, client_key) = client.write(dir, CLIENT_SA)?;
        let policy = dir.join("policy.yaml");
        let policy_text = format!(
            "trust_domain: {TRUST_DOMAIN}\n\
             peer_authentication:\n  - {{ name: strict, namespace: {NAMESPACE}, mode: STRICT }}\n\
             authorization:\n  - name: server-only-from-load-generator\n    namespace: {NAMESPACE}\n    workload: {SERVER_SA}\n    action: ALLOW\n    rules:\n      - from: {{ principals: [{TRUST_DOMAIN}/ns/{NAMESPACE}/sa/{CLIENT_SA}] }}\n"
        );
        std::fs::write(&policy, policy_text).map_err(|source| {
            meshbench_identity::Error::Write {
                path: policy.clone(),
                source,
            }
        })?;
        Ok(LabPki {
            ca: dir.join("ca.pem"),
            server_cert,
            server_key,
            client_cert,
            client_key,
            server_id: server.spiffe_id.to_string(),
            policy,
        })
    }

    /// Arguments of a sidecar for `sa`, with its SVID, the bundle and the lab policy.
    pub fn sidecar_args(&self, sa_is_server: bool) -> Vec<String> {
        let (workload, cert, key) = if sa_is_server {
            (SERVER_SA, &self.server_cert, &self.server_key)
        } else {
            (CLIENT_SA, &self.client_cert, &self.client_key)
        };
        vec![
            "proxy".into(),
            "sidecar".into(),
            "--namespace".into(),
            NAMESPACE.into(),
            "--workload".into(),
            workload.into(),
            "--cert".into(),
            path_arg(cert),
            "--key".into(),
            path_arg(key),
            "--ca".into(),
            path_arg(&self.ca),
            "--policy".into(),
            path_arg(&self.policy),
            "--threads".into(),
            "1".into(),
        ]
    }

    pub fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            path_arg(&self.server_cert),
            "--tls-key".into(),
            path_arg(&self.server_key),
            "--client-ca".into(),
            path_arg(&self.ca),
        ]
    }

    pub fn client_args(&self) -> Vec<String> {
        vec![
            "--cert".into(),
            path_arg(&self.client_cert),
            "--key".into(),
            path_arg(&self.client_key),
            "--cacert".into(),
            path_arg(&self.ca),
            "--expect-server-id".into(),
            self.server_id.clone(),
        ]
    }
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}
