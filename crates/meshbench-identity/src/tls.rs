//! rustls configurations built from PEM files: a server that can require client certificates
//! from a given CA, and a client that presents an SVID and verifies the server by SPIFFE ID.
//! TLS 1.3 only, aws-lc-rs provider.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::spiffe::{spiffe_ids_of, SpiffeId};
use crate::{load_certs, load_private_key, Error, SpiffeServerVerifier};

#[derive(Debug, Clone)]
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

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn root_store(path: &std::path::Path) -> Result<(RootCertStore, Option<String>), Error> {
    let mut roots = RootCertStore::empty();
    let mut trust_domain = None;
    for cert in load_certs(path)? {
        trust_domain = trust_domain.or_else(|| {
            spiffe_ids_of(&cert)
                .first()
                .map(|id| id.trust_domain().to_owned())
        });
        roots.add(cert).map_err(|e| Error::MalformedPem {
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok((roots, trust_domain))
}

pub fn server_config(files: &ServerTlsFiles, alpn: &[&[u8]]) -> Result<ServerConfig, Error> {
    let certs = load_certs(&files.cert)?;
    let key = load_private_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let (roots, _) = root_store(ca)?;
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

pub fn client_config(files: &ClientTlsFiles, alpn: &[&[u8]]) -> Result<ClientConfig, Error> {
    let (roots, trust_domain) = root_store(&files.ca)?;
    let verifier = SpiffeServerVerifier::new(
        Arc::new(roots),
        trust_domain,
        files.expect_server_id.clone(),
    );
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
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
