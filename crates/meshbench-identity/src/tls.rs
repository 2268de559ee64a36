//! rustls configurations built from PEM files: a server that can require client certificates
//! from a given CA, and a client that presents an SVID and verifies the server by SPIFFE ID.
//! TLS 1.3 only, aws-lc-rs provider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WantsClientCert;
use rustls::server::{ResolvesServerCert, WantsServerCert, WebPkiClientVerifier};
use rustls::{ClientConfig, ConfigBuilder, RootCertStore, ServerConfig};

use crate::spiffe::SpiffeId;
use crate::verifier::{SpiffeClientVerifier, TrustBundle};
use crate::{load_certs, load_private_key, Error, SpiffeServerVerifier, SvidStore};

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate issued by this CA.
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct ClientTlsFiles {
    /// Client certificate and key; both or neither.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Trust bundle for the server's certificate.
    pub ca: PathBuf,
    /// Accept only this server identity; otherwise any SPIFFE ID of the bundle's trust domain.
    pub expect_server_id: Option<SpiffeId>,
}

/// TLS 1.3 cipher suites meshbench can be told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherSuite {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

/// Key exchange groups meshbench can be told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyExchange {
    X25519,
    /// Hybrid post-quantum key exchange (X25519 + ML-KEM-768).
    X25519Mlkem768,
}

impl CipherSuite {
    /// The name `FromStr` reads back.
    pub fn name(self) -> &'static str {
        match self {
            CipherSuite::Aes128Gcm => "aes128gcm",
            CipherSuite::Aes256Gcm => "aes256gcm",
            CipherSuite::Chacha20Poly1305 => "chacha20poly1305",
        }
    }
}

impl KeyExchange {
    /// The name `FromStr` reads back.
    pub fn name(self) -> &'static str {
        match self {
            KeyExchange::X25519 => "x25519",
            KeyExchange::X25519Mlkem768 => "x25519mlkem768",
        }
    }
}

impl std::str::FromStr for CipherSuite {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "aes128gcm" | "tls13aes128gcmsha256" => Ok(CipherSuite::Aes128Gcm),
            "aes256gcm" | "tls13aes256gcmsha384" => Ok(CipherSuite::Aes256Gcm),
            "chacha20poly1305" | "tls13chacha20poly1305sha256" => Ok(CipherSuite::Chacha20Poly1305),
            _ => Err(Error::InvalidName {
                field: "cipher suite",
                value: s.to_owned(),
                reason: "use aes128gcm, aes256gcm or chacha20poly1305".to_owned(),
            }),
        }
    }
}

impl std::str::FromStr for KeyExchange {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "x25519" => Ok(KeyExchange::X25519),
            "x25519mlkem768" => Ok(KeyExchange::X25519Mlkem768),
            _ => Err(Error::InvalidName {
                field: "key exchange",
                value: s.to_owned(),
                reason: "use x25519 or x25519mlkem768".to_owned(),
            }),
        }
    }
}

/// What a TLS endpoint offers, in order of preference. TLS 1.3 only, always.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    pub cipher_suites: Vec<CipherSuite>,
    pub key_exchange: Vec<KeyExchange>,
}

impl Default for TlsOptions {
    /// All three TLS 1.3 suites in rustls' order, and X25519.
    fn default() -> Self {
        TlsOptions {
            cipher_suites: vec![
                CipherSuite::Aes256Gcm,
                CipherSuite::Aes128Gcm,
                CipherSuite::Chacha20Poly1305,
            ],
            key_exchange: vec![KeyExchange::X25519],
        }
    }
}

fn provider_with(options: &TlsOptions) -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::aws_lc_rs::{cipher_suite, kx_group};
    seed_random_generator();
    Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: options
            .cipher_suites
            .iter()
            .map(|s| match s {
                CipherSuite::Aes128Gcm => cipher_suite::TLS13_AES_128_GCM_SHA256,
                CipherSuite::Aes256Gcm => cipher_suite::TLS13_AES_256_GCM_SHA384,
                CipherSuite::Chacha20Poly1305 => cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
            })
            .collect(),
        kx_groups: options
            .key_exchange
            .iter()
            .map(|k| match k {
                KeyExchange::X25519 => kx_group::X25519,
                KeyExchange::X25519Mlkem768 => kx_group::X25519MLKEM768,
            })
            .collect(),
        ..rustls::crypto::aws_lc_rs::default_provider()
    })
}

/// aws-lc seeds its random generator from CPU jitter on first use, which takes tens of
/// milliseconds (420M instructions under callgrind). Done here, where a component builds its
/// TLS configuration at start-up, so that its first handshake is not the one that pays: a lab
/// sidecar pair answered its first request in 99 ms instead of 3.
fn seed_random_generator() {
    static SEEDED: std::sync::Once = std::sync::Once::new();
    SEEDED.call_once(|| {
        let mut byte = [0u8; 1];
        // A failure here would fail the first handshake too, with its own error.
        let _ = rustls::crypto::aws_lc_rs::default_provider()
            .secure_random
            .fill(&mut byte);
    });
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    provider_with(&TlsOptions::default())
}

/// Every root of `path`, for peers verified by their chain alone (an app's own mTLS).
fn root_store(path: &Path) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| Error::MalformedPem {
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

pub fn server_config(files: &ServerTlsFiles, alpn: &[&[u8]]) -> Result<ServerConfig, Error> {
    server_config_with(files, alpn, &TlsOptions::default())
}

pub fn server_config_with(
    files: &ServerTlsFiles,
    alpn: &[&[u8]],
    options: &TlsOptions,
) -> Result<ServerConfig, Error> {
    let certs = load_certs(&files.cert)?;
    let key = load_private_key(&files.key)?;
    let client_roots = match &files.client_ca {
        Some(ca) => Some(root_store(ca)?),
        None => None,
    };
    let mut config = server_builder(client_roots, options)?.with_single_cert(certs, key)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A server presenting whatever SVID `resolver` gives at each handshake (an [`SvidStore`], so
/// rotation takes effect without a restart, or one store per workload chosen by SNI),
/// requiring, when `client_ca` is given, a client SVID vouched for by a root of its own
/// trust domain in that bundle ([`SpiffeClientVerifier`]).
pub fn server_config_for(
    resolver: Arc<dyn ResolvesServerCert>,
    client_ca: Option<&Path>,
    alpn: &[&[u8]],
    options: &TlsOptions,
) -> Result<ServerConfig, Error> {
    let builder = ServerConfig::builder_with_provider(provider_with(options))
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(Arc::new(SpiffeClientVerifier::new(
            &TrustBundle::load(ca)?,
            provider(),
        )?)),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// TLS 1.3 with `options`; client certificates required and verified against `client_roots`
/// when given.
pub(crate) fn server_builder(
    client_roots: Option<RootCertStore>,
    options: &TlsOptions,
) -> Result<ConfigBuilder<ServerConfig, WantsServerCert>, Error> {
    let builder = ServerConfig::builder_with_provider(provider_with(options))
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    Ok(match client_roots {
        Some(roots) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    })
}

pub fn client_config(files: &ClientTlsFiles, alpn: &[&[u8]]) -> Result<ClientConfig, Error> {
    client_config_with(files, alpn, &TlsOptions::default())
}

pub fn client_config_with(
    files: &ClientTlsFiles,
    alpn: &[&[u8]],
    options: &TlsOptions,
) -> Result<ClientConfig, Error> {
    let builder = client_builder(&files.ca, files.expect_server_id.clone(), options)?;
    with_client_cert(builder, files, alpn)
}

/// A client presenting `files`' certificate (if any) and verifying the server's certificate
/// chain to `files.ca` and its DNS name against the name the connection asks for (its SNI), as
/// a mesh whose identities are DNS names does (Linkerd). `files.expect_server_id` is not used:
/// the name connected to is the identity expected.
pub fn client_config_by_name(
    files: &ClientTlsFiles,
    alpn: &[&[u8]],
) -> Result<ClientConfig, Error> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(&files.ca)? {
        roots.add(cert)?;
    }
    let builder = client_builder_with_roots(roots)?;
    with_client_cert(builder, files, alpn)
}

/// Finishes `builder` with `files`' client certificate (if any) and `alpn`.
fn with_client_cert(
    builder: ConfigBuilder<ClientConfig, WantsClientCert>,
    files: &ClientTlsFiles,
    alpn: &[&[u8]],
) -> Result<ClientConfig, Error> {
    let mut config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            builder.with_client_auth_cert(load_certs(cert)?, load_private_key(key)?)?
        }
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) | (None, Some(_)) => {
            return Err(Error::InvalidName {
                field: "client certificate",
                value: String::new(),
                reason: "give both a certificate and its key, or neither".to_owned(),
            })
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A client presenting whatever SVID `store` holds at each handshake and verifying the
/// server against the bundle in `ca` (and `expect_server_id` when given).
pub fn client_config_for(
    store: Arc<SvidStore>,
    ca: &Path,
    expect_server_id: Option<SpiffeId>,
    alpn: &[&[u8]],
    options: &TlsOptions,
) -> Result<ClientConfig, Error> {
    let mut config =
        client_builder(ca, expect_server_id, options)?.with_client_cert_resolver(store);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A TLS 1.3 client that verifies servers by host name against `roots`, as a control plane's
/// clients do (not by SPIFFE ID).
pub(crate) fn client_builder_with_roots(
    roots: RootCertStore,
) -> Result<ConfigBuilder<ClientConfig, WantsClientCert>, Error> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots))
}

fn client_builder(
    ca: &Path,
    expect_server_id: Option<SpiffeId>,
    options: &TlsOptions,
) -> Result<ConfigBuilder<ClientConfig, WantsClientCert>, Error> {
    let bundle =
        TrustBundle::load_with_default(ca, expect_server_id.as_ref().map(SpiffeId::trust_domain))?;
    let trust_domain = Some(bundle.local_trust_domain().to_owned());
    let verifier = SpiffeServerVerifier::new(bundle, trust_domain, expect_server_id);
    Ok(ClientConfig::builder_with_provider(provider_with(options))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier)))
}
