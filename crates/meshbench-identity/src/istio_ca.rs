//! Istio's certificate API (`istio.v1.auth.IstioCertificateService/CreateCertificate`) served
//! by meshbench's CA, so that Istio's own data planes (ztunnel, as released) get their SVIDs
//! from it where no istiod runs: the bench's `ztunnel-loop`, a lab without a cluster.
//!
//! gRPC over TLS 1.3 with ALPN `h2`, as istiod's port 15012 speaks it. istiod authenticates a
//! caller by its Kubernetes service-account token; here each caller is a bearer token the CA
//! was given for exactly one identity (a secret file only that proxy reads). The CA signs that
//! identity and nothing else: the CSR's names are ignored, and a request to impersonate another
//! identity is refused.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tonic::{Request, Response, Status};

use crate::spiffe::SpiffeId;
use crate::tls::server_builder;
use crate::tls_listener::TlsListener;
use crate::{CertificateAuthority, Error, IssueOptions, TlsOptions};

/// The generated messages, client and server.
#[allow(clippy::all, clippy::pedantic)]
pub mod proto {
    include!("generated/istio.v1.auth.rs");
}

use proto::istio_certificate_service_server::{
    IstioCertificateService, IstioCertificateServiceServer,
};
use proto::{IstioCertificateRequest, IstioCertificateResponse};

/// The DNS name istiod serves its CA under, which ztunnel checks (`ALT_CA_HOSTNAME`).
pub const ISTIOD_HOSTNAME: &str = "istiod.istio-system.svc";
/// A CSR and its metadata are a few hundred bytes; a gRPC message much larger is not one.
pub const ISTIO_CA_MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Streams one connection may have open: a proxy asks for a handful of identities at once.
pub const ISTIO_CA_MAX_STREAMS: u32 = 16;
/// Connections served at once; more wait in the accept queue. A proxy keeps one open.
pub const ISTIO_CA_MAX_CONNECTIONS: usize = 256;
/// A connection that answers no HTTP/2 ping within this long after one is sent is dropped;
/// pings go out after this long without a frame.
pub const ISTIO_CA_KEEPALIVE: Duration = Duration::from_secs(30);
/// A bearer token longer than this is not one of ours (tokens are compared in full).
pub const MAX_TOKEN_BYTES: usize = 4096;
/// The metadata key a node proxy names the identity it asks for with.
const IMPERSONATED_IDENTITY: &str = "ImpersonatedIdentity";

/// A bearer token from the file `field` names: one line, surrounding whitespace not part of
/// it, 1 to [`MAX_TOKEN_BYTES`] bytes; otherwise an error naming the field and the file.
pub fn read_token_file(path: &std::path::Path, field: &'static str) -> Result<String, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let token = text.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(Error::InvalidName {
            field,
            value: path.display().to_string(),
            reason: format!(
                "holds {} bytes; a token is 1 to {MAX_TOKEN_BYTES}",
                token.len()
            ),
        });
    }
    Ok(token.to_owned())
}

/// One caller the CA signs for: whoever presents `token` gets `identity`.
#[derive(Clone)]
pub struct IstioCaCaller {
    pub token: String,
    pub identity: SpiffeId,
}

impl std::fmt::Debug for IstioCaCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in a log line.
        f.debug_struct("IstioCaCaller")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// How the CA serves Istio's API.
#[derive(Debug, Clone)]
pub struct IstioCaOptions {
    /// The longest lifetime it signs; a request asking for less gets what it asked.
    pub max_ttl: Duration,
    /// From accept to a finished TLS handshake.
    pub handshake_timeout: Duration,
    /// The names its serving certificate carries, beside [`ISTIOD_HOSTNAME`].
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
}

pub struct BoundIstioCa {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    signer: Signer,
    handshake_timeout: Duration,
}

/// Binds Istio's certificate API on `listen`, serving with an SVID of istiod's identity
/// (`spiffe://<td>/ns/istio-system/sa/istiod`) that carries `opts`' names.
pub async fn bind_istio_ca(
    ca: CertificateAuthority,
    listen: SocketAddr,
    callers: Vec<IstioCaCaller>,
    opts: &IstioCaOptions,
) -> Result<BoundIstioCa, Error> {
    for caller in &callers {
        if caller.identity.trust_domain() != ca.trust_domain() {
            return Err(Error::InvalidName {
                field: "callers.identity",
                value: caller.identity.to_string(),
                reason: format!("not in the CA's trust domain {}", ca.trust_domain()),
            });
        }
        if caller.token.is_empty() || caller.token.len() > MAX_TOKEN_BYTES {
            return Err(Error::InvalidName {
                field: "callers.token",
                value: format!("{} bytes", caller.token.len()),
                reason: format!("a token is 1 to {MAX_TOKEN_BYTES} bytes"),
            });
        }
    }
    let mut dns_names = vec![ISTIOD_HOSTNAME.to_owned()];
    dns_names.extend(opts.dns_names.iter().cloned());
    let serving = ca.issue(
        "istio-system",
        "istiod",
        &IssueOptions {
            ttl: Some(Duration::from_secs(365 * 24 * 3600)),
            dns_names,
            ip_addresses: opts.ip_addresses.clone(),
        },
    )?;
    let chain = crate::pem::certs_from_pem(serving.cert_pem.as_bytes())?;
    let key = crate::pem::key_from_pem(serving.key_pem.as_bytes())?;
    let mut config = server_builder(None, &TlsOptions::default())?.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let listener = meshbench_net::bind(listen).await?;
    Ok(BoundIstioCa {
        listener,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        signer: Signer {
            ca: Arc::new(ca),
            callers: Arc::new(callers),
            max_ttl: opts.max_ttl,
        },
        handshake_timeout: opts.handshake_timeout,
    })
}

impl BoundIstioCa {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves: at most [`ISTIO_CA_MAX_CONNECTIONS`] connections,
    /// each handshaken within the handshake timeout, with at most [`ISTIO_CA_MAX_STREAMS`]
    /// streams and messages of at most [`ISTIO_CA_MAX_MESSAGE_BYTES`].
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let service = IstioCertificateServiceServer::new(self.signer)
            .max_decoding_message_size(ISTIO_CA_MAX_MESSAGE_BYTES)
            .max_encoding_message_size(ISTIO_CA_MAX_MESSAGE_BYTES);
        let routes = tonic::service::Routes::new(service);
        let listener = TlsListener {
            listener: self.listener,
            acceptor: self.acceptor,
            what: "Istio CA",
            max_connections: ISTIO_CA_MAX_CONNECTIONS,
            handshake_timeout: self.handshake_timeout,
        };
        listener
            .serve(shutdown, move |tls, peer| {
                let serving = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .max_concurrent_streams(ISTIO_CA_MAX_STREAMS)
                    .max_header_list_size(16 * 1024)
                    .keep_alive_interval(ISTIO_CA_KEEPALIVE)
                    .keep_alive_timeout(ISTIO_CA_KEEPALIVE)
                    .serve_connection(
                        TokioIo::new(tls),
                        hyper_util::service::TowerToHyperService::new(routes.clone()),
                    );
                async move {
                    if let Err(e) = serving.await {
                        tracing::debug!(%peer, error = %e, "Istio CA: connection ended");
                    }
                }
            })
            .await;
    }
}

#[derive(Clone)]
struct Signer {
    ca: Arc<CertificateAuthority>,
    callers: Arc<Vec<IstioCaCaller>>,
    max_ttl: Duration,
}

/// Equal in time whatever the contents: a token is not guessed a byte at a time.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Signer {
    /// The identity the request's bearer token was given for.
    fn caller<T>(&self, request: &Request<T>) -> Result<&SpiffeId, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .ok_or_else(|| Status::unauthenticated("no authorization header"))?;
        let token = header
            .as_bytes()
            .strip_prefix(b"Bearer ")
            .ok_or_else(|| Status::unauthenticated("authorization is not a bearer token"))?;
        self.callers
            .iter()
            .find(|c| same_secret(c.token.as_bytes(), token))
            .map(|c| &c.identity)
            .ok_or_else(|| Status::unauthenticated("unknown bearer token"))
    }

    /// The lifetime to sign: what was asked (seconds; 0 or less for the CA's own), at most
    /// the CA's maximum.
    fn ttl(&self, asked: i64) -> Duration {
        u64::try_from(asked)
            .ok()
            .filter(|&s| s > 0)
            .map_or(self.max_ttl, |s| Duration::from_secs(s).min(self.max_ttl))
    }
}

/// The identity a node proxy asks to impersonate, if it names one.
fn impersonated(request: &IstioCertificateRequest) -> Option<&str> {
    let value = request
        .metadata
        .as_ref()?
        .fields
        .get(IMPERSONATED_IDENTITY)?;
    match &value.kind {
        Some(prost_types::value::Kind::StringValue(s)) => Some(s),
        _ => None,
    }
}

#[tonic::async_trait]
impl IstioCertificateService for Signer {
    async fn create_certificate(
        &self,
        request: Request<IstioCertificateRequest>,
    ) -> Result<Response<IstioCertificateResponse>, Status> {
        let identity = self.caller(&request)?.clone();
        let message = request.into_inner();
        if let Some(asked) = impersonated(&message) {
            if asked != identity.to_string() {
                return Err(Status::permission_denied(format!(
                    "{identity} may not impersonate {asked}"
                )));
            }
        }
        let ttl = self.ttl(message.validity_duration);
        let signed = self
            .ca
            .sign_request(&message.csr, &identity, Some(ttl))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        tracing::debug!(%identity, not_after = %signed.not_after, "signed an SVID for Istio's API");
        Ok(Response::new(IstioCertificateResponse {
            cert_chain: vec![signed.cert_pem, self.ca.cert_pem().to_owned()],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_in_full() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }
}
