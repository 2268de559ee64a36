//! The sending end of HBONE: one pooled mTLS HTTP/2 connection per (source identity,
//! destination identity, destination agent), each carrying many CONNECT streams. The source
//! workload's SVID is the client certificate; the destination's SPIFFE ID is required of the
//! server and asked for by SNI.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use hyper::client::conn::http2::SendRequest;
use hyper::upgrade::Upgraded;
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_identity::{client_config_for, SpiffeId, TlsOptions};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::directory::{sni_of, LocalEntry};
use crate::metrics::{Direction, ProxyMetrics};

/// HTTP/2 flow-control windows: large enough that one stream is not throttled to 64 KiB per
/// round trip, as ztunnel also sizes them.
pub(crate) const STREAM_WINDOW: u32 = 4 << 20;
pub(crate) const CONNECTION_WINDOW: u32 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    source: SpiffeId,
    destination: SpiffeId,
    agent: SocketAddr,
}

pub(crate) struct HbonePool {
    ca: PathBuf,
    tls: TlsOptions,
    metrics: Option<Arc<ProxyMetrics>>,
    // Held across a connect, so concurrent first tunnels share one new connection.
    connections: tokio::sync::Mutex<HashMap<PoolKey, SendRequest<Empty<Bytes>>>>,
}

impl HbonePool {
    pub(crate) fn new(ca: PathBuf, tls: TlsOptions, metrics: Option<Arc<ProxyMetrics>>) -> Self {
        HbonePool {
            ca,
            tls,
            metrics,
            connections: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// A tunnel from `source` to the app at `target` of workload `destination`, whose node's
    /// agent listens on `agent`.
    pub(crate) async fn open(
        &self,
        source: &LocalEntry,
        destination: &SpiffeId,
        agent: SocketAddr,
        target: SocketAddr,
    ) -> Result<Upgraded, String> {
        let mut sender = self.sender(source, destination, agent).await?;
        let request = Request::builder()
            .method(Method::CONNECT)
            .uri(target.to_string())
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("CONNECT {target}: {e}"))?;
        if response.status() != StatusCode::OK {
            return Err(format!("CONNECT {target}: {}", response.status()));
        }
        hyper::upgrade::on(response)
            .await
            .map_err(|e| format!("CONNECT {target}: {e}"))
    }

    async fn sender(
        &self,
        source: &LocalEntry,
        destination: &SpiffeId,
        agent: SocketAddr,
    ) -> Result<SendRequest<Empty<Bytes>>, String> {
        let key = PoolKey {
            source: source.id.clone(),
            destination: destination.clone(),
            agent,
        };
        let mut connections = self.connections.lock().await;
        if let Some(sender) = connections.get(&key) {
            if !sender.is_closed() {
                return Ok(sender.clone());
            }
        }
        let config = client_config_for(
            source.store.clone(),
            &self.ca,
            Some(destination.clone()),
            &[b"h2"],
            &self.tls,
        )
        .map_err(|e| e.to_string())?;
        let tcp = TcpStream::connect(agent)
            .await
            .map_err(|e| format!("agent {agent}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let name = sni_of(destination).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let tls = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("agent {agent}: mTLS as {destination}: {e}"))?;
        if let Some(m) = &self.metrics {
            m.tls_handshake(Direction::Outbound, started.elapsed());
        }
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("agent {agent}: HTTP/2: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%agent, error = %e, "HBONE connection ended");
            }
        });
        connections.insert(key, sender.clone());
        Ok(sender)
    }
}
