//! Keeping a workload's SVID fresh: at a fraction of its remaining lifetime, generate a new
//! key, have the CA service sign it (authenticated by the SVID still held) and swap it into
//! the [`SvidStore`]. Established connections are untouched; new handshakes use the new SVID.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::ca_server::{ca_service_id, RENEW_PATH};
use crate::{client_config_for, Error, SvidRequest, SvidStore, TlsOptions};

/// Renew when this fraction of the SVID's lifetime has passed, unless told otherwise
/// (Istio and SPIRE renew at half-life).
pub const DEFAULT_ROTATE_FRACTION: f64 = 0.5;
/// Retries after a failed renewal start here and double, up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(30);
/// One renewal, from connect to the signed certificate: a CA that accepts and never answers
/// must not hold the renewal until the SVID expires.
pub const RENEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Talks to the CA service on behalf of one workload.
#[derive(Clone)]
pub struct CaClient {
    endpoint: SocketAddr,
    connector: TlsConnector,
}

impl CaClient {
    /// A client that presents `store`'s SVID and accepts only the CA service of the trust
    /// domain in `ca_bundle`.
    pub fn new(
        endpoint: SocketAddr,
        store: Arc<SvidStore>,
        ca_bundle: &std::path::Path,
    ) -> Result<Self, Error> {
        let expected = ca_service_id(store.spiffe_id().trust_domain())?;
        let config = client_config_for(
            store,
            ca_bundle,
            Some(expected),
            &[],
            &TlsOptions::default(),
        )?;
        Ok(CaClient {
            endpoint,
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// One renewal: a new key, signed by the CA, installed in `store`, within
    /// [`RENEW_TIMEOUT`].
    pub async fn renew(&self, store: &SvidStore) -> Result<(), Error> {
        tokio::time::timeout(RENEW_TIMEOUT, self.renew_once(store))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Renew {
                    endpoint: self.endpoint,
                    reason: format!("no answer within {RENEW_TIMEOUT:?}"),
                })
            })
    }

    async fn renew_once(&self, store: &SvidStore) -> Result<(), Error> {
        let fail = |reason: String| Error::Renew {
            endpoint: self.endpoint,
            reason,
        };
        let request = SvidRequest::generate()?;
        let tcp = TcpStream::connect(self.endpoint)
            .await
            .map_err(|e| fail(format!("connect: {e}")))?;
        let tls = self
            .connector
            .connect(ServerName::IpAddress(self.endpoint.ip().into()), tcp)
            .await
            .map_err(|e| fail(format!("TLS: {e}")))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| fail(format!("HTTP: {e}")))?;
        tokio::spawn(connection);
        let http_request = Request::builder()
            .method(Method::POST)
            .uri(RENEW_PATH)
            .header(http::header::HOST, self.endpoint.to_string())
            .header(http::header::CONTENT_TYPE, "application/pkcs10")
            .body(Full::new(Bytes::from(request.csr_pem.clone())))
            .map_err(|e| fail(e.to_string()))?;
        let response = sender
            .send_request(http_request)
            .await
            .map_err(|e| fail(format!("HTTP: {e}")))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(format!("HTTP body: {e}")))?
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        if status != StatusCode::OK {
            return Err(fail(format!("{status}: {}", text.trim())));
        }
        store.install(&text, request)
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Renews `store`'s SVID forever, each time `fraction` of the way from now to its expiry, and
/// calls `on_rotate` after each renewal. Failures are retried with backoff; they never take
/// the current SVID away.
pub async fn rotate_forever(
    store: Arc<SvidStore>,
    client: CaClient,
    fraction: f64,
    on_rotate: impl Fn(&SvidStore) + Send + 'static,
) {
    loop {
        let remaining = (store.not_after_unix() as f64 - unix_now()).max(0.0);
        tokio::time::sleep(Duration::from_secs_f64(remaining * fraction)).await;
        let mut retry = FIRST_RETRY;
        loop {
            match client.renew(&store).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?retry, "SVID renewal failed");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(MAX_RETRY);
                }
            }
        }
        tracing::info!(
            id = %store.spiffe_id(),
            not_after = store.not_after_unix(),
            "SVID rotated"
        );
        on_rotate(&store);
    }
}
