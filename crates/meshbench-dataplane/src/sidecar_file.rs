//! The sidecar's configuration file (YAML): what `meshbench proxy sidecar --config FILE`
//! reads, what the lab and the bench write, and what the human flags of `proxy sidecar` are
//! turned into, so a sidecar is configured one way whoever starts it. Relative paths are
//! resolved against the file's directory.
//!
//! ```yaml
//! namespace: app
//! workload: server
//! identity: { cert: pki/app.server.pem, key: pki/app.server.key, ca: pki/ca.pem }
//! mode: l7
//! policy: pki/policy.yaml
//! inbound: { listen: 0.0.0.0:15006, app: 127.0.0.1:8080 }
//! outbound:
//!   - { listen: 127.0.0.1:15001, upstream: 10.0.0.2:15006, upstream_id: spiffe://cluster.local/ns/app/sa/db }
//! limits: { idle_timeout: 60s }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use meshbench_identity::{CipherSuite, KeyExchange, SpiffeId, TlsOptions, DEFAULT_ROTATE_FRACTION};
use meshbench_policy::Policy;
use meshbench_role::RoleConfig;
use serde::{Deserialize, Serialize};

use crate::{
    Error, InboundConfig, Limits, OutboundRoute, ProxyMetrics, ProxyMode, Rotation, SidecarConfig,
    SidecarIdentity, TransparentOutbound,
};

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarFile {
    /// Namespace of the workload the sidecar belongs to.
    pub namespace: String,
    /// The workload (policy selectors use it).
    pub workload: String,
    /// The workload's SVID and the peers' trust bundle; required with mTLS.
    pub identity: Option<IdentityFiles>,
    /// Off: plaintext between sidecars (what mTLS itself costs).
    #[serde(default = "yes")]
    pub mtls: bool,
    #[serde(default)]
    pub mode: Mode,
    /// Policy file; without one, PERMISSIVE and allow-all.
    pub policy: Option<PathBuf>,
    pub inbound: Option<InboundListener>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbound: Vec<OutboundListener>,
    /// The listener for the app's connections REDIRECTed by iptables.
    pub transparent_outbound: Option<TransparentListener>,
    #[serde(default)]
    pub tls: TlsChoice,
    #[serde(default)]
    pub limits: Limits,
    /// Off: no metrics are recorded at all (part of E1's throughput decomposition).
    #[serde(default = "yes")]
    pub metrics: bool,
    /// Serve Prometheus metrics on this address (GET /metrics).
    pub admin: Option<SocketAddr>,
    /// Write the metrics (Prometheus text) to this file when stopping.
    pub metrics_file: Option<PathBuf>,
    /// Runtime worker threads (default: one per core).
    pub threads: Option<usize>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Trust bundle for peers.
    pub ca: PathBuf,
    /// Renew the SVID through this CA service.
    pub ca_endpoint: Option<SocketAddr>,
    /// Renew when this fraction of the SVID's remaining lifetime has passed.
    #[serde(default = "default_rotate_at")]
    pub rotate_at: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Splice bytes, authorize by identity.
    #[default]
    L4,
    /// Parse HTTP, authorize every request.
    L7,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboundListener {
    pub listen: SocketAddr,
    /// The local app the sidecar fronts.
    pub app: SocketAddr,
    /// Connections arrive REDIRECTed by iptables; each goes to the app's address at the port
    /// it was originally sent to.
    #[serde(default)]
    pub transparent: bool,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundListener {
    pub listen: SocketAddr,
    /// The destination's inbound sidecar.
    pub upstream: SocketAddr,
    /// The identity the destination must present; any of the trust domain if absent.
    pub upstream_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransparentListener {
    pub listen: SocketAddr,
    /// Meshed destinations; any other passes through in plaintext.
    #[serde(default)]
    pub destinations: Vec<MeshedDestination>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeshedDestination {
    pub address: SocketAddr,
    pub id: Option<String>,
}

/// TLS 1.3 cipher suites and key exchange groups offered, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsChoice {
    pub cipher_suites: Vec<String>,
    pub key_exchange: Vec<String>,
}

impl Default for TlsChoice {
    fn default() -> Self {
        TlsChoice {
            cipher_suites: ["aes256gcm", "aes128gcm", "chacha20poly1305"]
                .map(String::from)
                .to_vec(),
            key_exchange: vec!["x25519".into()],
        }
    }
}

meshbench_role::serde_defaults! {
    yes: bool = true,
    default_rotate_at: f64 = DEFAULT_ROTATE_FRACTION,
}

fn bad(field: &str, problem: impl std::fmt::Display) -> Error {
    Error::Config(format!("{field}: {problem}"))
}

fn spiffe_id(field: &str, value: &str) -> Result<SpiffeId, Error> {
    SpiffeId::parse(value).map_err(|e| bad(field, e))
}

impl SidecarFile {
    /// A sidecar of `namespace/workload` with every other field at its default.
    pub fn new(namespace: &str, workload: &str) -> Self {
        SidecarFile {
            namespace: namespace.to_owned(),
            workload: workload.to_owned(),
            identity: None,
            mtls: true,
            mode: Mode::L4,
            policy: None,
            inbound: None,
            outbound: vec![],
            transparent_outbound: None,
            tls: TlsChoice::default(),
            limits: Limits::default(),
            metrics: true,
            admin: None,
            metrics_file: None,
            threads: None,
        }
    }

    /// The running sidecar's configuration: every field checked (an error names it), the
    /// policy loaded, and the metrics registry when metrics are on.
    pub fn to_config(&self) -> Result<SidecarConfig, Error> {
        self.limits.validate().map_err(Error::Config)?;
        if self.threads == Some(0) {
            return Err(bad("threads", "must be at least 1"));
        }
        let policy = match &self.policy {
            Some(path) => Policy::load(path).map_err(|e| bad("policy", e))?,
            None => Policy::from_yaml("{}").map_err(|e| bad("policy", e))?,
        };
        let identity = match &self.identity {
            Some(files) => {
                if !(files.rotate_at > 0.0 && files.rotate_at < 1.0) {
                    return Err(bad(
                        "identity.rotate_at",
                        format!("{} is not a fraction between 0 and 1", files.rotate_at),
                    ));
                }
                Some(SidecarIdentity {
                    cert: files.cert.clone(),
                    key: files.key.clone(),
                    ca: files.ca.clone(),
                    rotation: files.ca_endpoint.map(|ca_endpoint| Rotation {
                        ca_endpoint,
                        fraction: files.rotate_at,
                    }),
                })
            }
            None => None,
        };
        let outbound = self
            .outbound
            .iter()
            .enumerate()
            .map(|(i, route)| {
                Ok(OutboundRoute {
                    listen: route.listen,
                    upstream: route.upstream,
                    upstream_id: route
                        .upstream_id
                        .as_deref()
                        .map(|id| spiffe_id(&format!("outbound[{i}].upstream_id"), id))
                        .transpose()?,
                })
            })
            .collect::<Result<_, Error>>()?;
        let transparent_outbound = match &self.transparent_outbound {
            Some(t) => Some(TransparentOutbound {
                listen: t.listen,
                destinations: t
                    .destinations
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        let field = format!("transparent_outbound.destinations[{i}].id");
                        Ok((
                            d.address,
                            d.id.as_deref()
                                .map(|id| spiffe_id(&field, id))
                                .transpose()?,
                        ))
                    })
                    .collect::<Result<_, Error>>()?,
            }),
            None => None,
        };
        Ok(SidecarConfig {
            namespace: self.namespace.clone(),
            workload: self.workload.clone(),
            identity,
            mtls: self.mtls,
            tls: self.tls.options()?,
            mode: match self.mode {
                Mode::L4 => ProxyMode::L4,
                Mode::L7 => ProxyMode::L7,
            },
            metrics: self.metrics.then(|| Arc::new(ProxyMetrics::new())),
            policy: Arc::new(policy),
            inbound: self.inbound.as_ref().map(|i| InboundConfig {
                listen: i.listen,
                app: i.app,
                transparent: i.transparent,
            }),
            outbound,
            transparent_outbound,
            limits: self.limits,
        })
    }
}

impl TlsChoice {
    pub fn options(&self) -> Result<TlsOptions, Error> {
        let cipher_suites = self
            .cipher_suites
            .iter()
            .map(|s| {
                s.parse::<CipherSuite>()
                    .map_err(|e| bad("tls.cipher_suites", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key_exchange = self
            .key_exchange
            .iter()
            .map(|s| {
                s.parse::<KeyExchange>()
                    .map_err(|e| bad("tls.key_exchange", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if cipher_suites.is_empty() || key_exchange.is_empty() {
            return Err(bad(
                "tls",
                "offer at least one cipher suite and one key exchange",
            ));
        }
        Ok(TlsOptions {
            cipher_suites,
            key_exchange,
        })
    }
}

impl RoleConfig for SidecarFile {
    const COMMAND: &'static [&'static str] = &["proxy", "sidecar"];

    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| meshbench_role::resolve(p, base);
        if let Some(id) = &mut self.identity {
            resolve(&mut id.cert);
            resolve(&mut id.key);
            resolve(&mut id.ca);
        }
        if let Some(policy) = &mut self.policy {
            resolve(policy);
        }
        if let Some(file) = &mut self.metrics_file {
            resolve(file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back_as_itself() {
        let mut file = SidecarFile::new("app", "server");
        file.mode = Mode::L7;
        file.inbound = Some(InboundListener {
            listen: "0.0.0.0:15006".parse().unwrap(),
            app: "127.0.0.1:8080".parse().unwrap(),
            transparent: true,
        });
        file.outbound.push(OutboundListener {
            listen: "127.0.0.1:15001".parse().unwrap(),
            upstream: "10.0.0.2:15006".parse().unwrap(),
            upstream_id: Some("spiffe://cluster.local/ns/app/sa/db".into()),
        });
        file.limits.idle_timeout = std::time::Duration::from_millis(1500);
        let read: SidecarFile = serde_yaml_ng::from_str(&file.to_yaml()).unwrap();
        assert_eq!(read, file);
        assert!(file.to_yaml().contains("idle_timeout: 1s 500ms"));
        file.to_config().unwrap();
    }

    #[test]
    fn bad_fields_are_named() {
        let parse = |yaml: &str| -> String {
            let file: SidecarFile = match serde_yaml_ng::from_str(yaml) {
                Ok(file) => file,
                Err(e) => return e.to_string(),
            };
            file.to_config()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let base = "namespace: app\nworkload: w\n";
        assert!(
            parse(&format!("{base}limits: {{ idle_timeout: 0s }}")).contains("limits.idle_timeout")
        );
        assert!(parse(&format!("{base}limits: {{ idle_timeout: soon }}")).contains("idle_timeout"));
        assert!(
            parse(&format!("{base}tls: {{ cipher_suites: [rc4] }}")).contains("tls.cipher_suites")
        );
        assert!(parse(&format!(
            "{base}outbound: [{{ listen: 127.0.0.1:1, upstream: 127.0.0.1:2, upstream_id: nope }}]"
        ))
        .contains("outbound[0].upstream_id"));
        assert!(parse(&format!("{base}mode: l9")).contains("mode"));
        assert!(parse(&format!("{base}colour: red")).contains("colour"));
    }
}
