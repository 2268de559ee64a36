//! The CA as a running service (the lab's control plane): workloads renew their SVIDs by
//! sending a certificate signing request over mTLS, authenticated by the SVID they still hold,
//! as SPIRE agents renew theirs. The CA signs only the identity the caller proved; it never
//! trusts a name the request asks for.
//!
//! Protocol: `POST /v1/svid` with a PEM CSR as the body; the answer is the signed leaf, PEM.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::RootCertStore;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::spiffe::{spiffe_ids_of, SpiffeId};
use crate::tls::server_builder;
use crate::tls_listener::TlsListener;
use crate::{CertificateAuthority, Error, IssueOptions, TlsOptions};

/// The path renewals are posted to.
pub const RENEW_PATH: &str = "/v1/svid";
/// Namespace and service account of the CA's own serving identity.
pub const CA_SERVICE_NAMESPACE: &str = "meshbench-system";
pub const CA_SERVICE_ACCOUNT: &str = "ca";
/// A CSR is a few hundred bytes; anything much larger is not one.
const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// From accept to a finished TLS handshake, and from a connection's first byte to its request
/// head; a renewal's whole connection gets `CONNECTION_LIFETIME`.
pub const CA_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
/// Renewals served at once; more wait in the accept queue.
const MAX_CONNECTIONS: usize = 1024;

/// The SPIFFE ID the CA service presents, which renewing workloads require.
pub fn ca_service_id(trust_domain: &str) -> Result<SpiffeId, Error> {
    SpiffeId::for_workload(trust_domain, CA_SERVICE_NAMESPACE, CA_SERVICE_ACCOUNT)
}

pub struct BoundCaServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ca: Arc<CertificateAuthority>,
    svid_ttl: Duration,
    handshake_timeout: Duration,
}

/// Binds the CA service on `listen`. It serves with an SVID of its own (issued for
/// [`ca_service_id`], lasting as long as the process), requires client certificates from the
/// CA, and signs renewals valid for `svid_ttl`.
pub async fn bind_ca_server(
    ca: CertificateAuthority,
    listen: SocketAddr,
    svid_ttl: Duration,
) -> Result<BoundCaServer, Error> {
    let serving = ca.issue(
        CA_SERVICE_NAMESPACE,
        CA_SERVICE_ACCOUNT,
        &IssueOptions {
            ttl: Some(Duration::from_secs(365 * 24 * 3600)),
            ..IssueOptions::default()
        },
    )?;
    let mut roots = RootCertStore::empty();
    roots.add(ca.cert_der().clone())?;
    let chain = crate::pem::certs_from_pem(serving.cert_pem.as_bytes())?;
    let key = crate::pem::key_from_pem(serving.key_pem.as_bytes())?;
    let config =
        server_builder(Some(roots), &TlsOptions::default())?.with_single_cert(chain, key)?;
    let listener = meshbench_net::bind(listen).await?;
    Ok(BoundCaServer {
        listener,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        ca: Arc::new(ca),
        svid_ttl,
        handshake_timeout: CA_HANDSHAKE_TIMEOUT,
    })
}

impl BoundCaServer {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// How long a caller may take from connecting to a finished TLS handshake (default
    /// [`CA_HANDSHAKE_TIMEOUT`]); the request head's own deadline is as long.
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Serves renewals until `shutdown` resolves: at most `MAX_CONNECTIONS` at once, each
    /// handshaken within 10 s, its request head within 10 s and done within 30 s.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let (ca, ttl, handshake_timeout) = (self.ca, self.svid_ttl, self.handshake_timeout);
        let listener = TlsListener {
            listener: self.listener,
            acceptor: self.acceptor,
            what: "CA",
            max_connections: MAX_CONNECTIONS,
            handshake_timeout,
        };
        listener
            .serve(shutdown, move |tls, _peer| {
                let caller = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|certs| certs.first())
                    .and_then(|leaf| spiffe_ids_of(leaf).into_iter().next());
                let ca = ca.clone();
                let service = hyper::service::service_fn(move |request| {
                    let ca = ca.clone();
                    let caller = caller.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(renew(&ca, caller, ttl, request).await)
                    }
                });
                let serving = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(handshake_timeout.min(HEADER_READ_TIMEOUT))
                    .serve_connection(TokioIo::new(tls), service);
                async move {
                    let _ = tokio::time::timeout(CONNECTION_LIFETIME, serving).await;
                }
            })
            .await;
    }
}

fn answer(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

async fn renew(
    ca: &CertificateAuthority,
    caller: Option<SpiffeId>,
    ttl: Duration,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if request.method() != Method::POST || request.uri().path() != RENEW_PATH {
        return answer(
            StatusCode::NOT_FOUND,
            format!("POST a CSR to {RENEW_PATH}\n"),
        );
    }
    let Some(caller) = caller else {
        return answer(
            StatusCode::FORBIDDEN,
            "the client certificate carries no SPIFFE ID\n".to_owned(),
        );
    };
    let body = match Limited::new(request.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => return answer(StatusCode::BAD_REQUEST, format!("unreadable body: {e}\n")),
    };
    let Ok(csr) = std::str::from_utf8(&body) else {
        return answer(StatusCode::BAD_REQUEST, "the CSR is not PEM\n".to_owned());
    };
    match ca.sign_request(csr, &caller, Some(ttl)) {
        Ok(signed) => {
            tracing::debug!(%caller, not_after = %signed.not_after, "renewed SVID");
            answer(StatusCode::OK, signed.cert_pem)
        }
        Err(e) => answer(StatusCode::BAD_REQUEST, format!("{e}\n")),
    }
}
