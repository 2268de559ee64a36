//! The sending end of HBONE: one pooled mTLS HTTP/2 connection per (source identity,
//! destination identity, destination agent), each carrying many CONNECT streams. The source
//! workload's SVID is the client certificate; the destination's SPIFFE ID is required of the
//! server and asked for by SNI.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
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
use crate::serving::Limits;

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

/// One pooled HBONE connection and how many tunnels it carries now.
struct Pooled {
    sender: SendRequest<Empty<Bytes>>,
    streams: Arc<AtomicU32>,
}

/// A tunnel's place on its connection, given back when the tunnel ends.
pub(crate) struct StreamSlot(Arc<AtomicU32>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) struct HbonePool {
    ca: PathBuf,
    tls: TlsOptions,
    metrics: Option<Arc<ProxyMetrics>>,
    limits: Limits,
    /// Connections per key. The map's lock is held only to find a key's entry; a key's own
    /// lock is held across a connect, so concurrent first tunnels to one peer share one new
    /// connection while tunnels to other peers go on (a peer that black-holes the dial stalls
    /// only its own tunnels, each at most `connect_timeout`).
    connections: Mutex<HashMap<PoolKey, Arc<tokio::sync::Mutex<Vec<Pooled>>>>>,
}

impl HbonePool {
    pub(crate) fn new(
        ca: PathBuf,
        tls: TlsOptions,
        metrics: Option<Arc<ProxyMetrics>>,
        limits: Limits,
    ) -> Self {
        HbonePool {
            ca,
            tls,
            metrics,
            limits,
            connections: Mutex::new(HashMap::new()),
        }
    }

    /// A tunnel from `source` to the app at `target` of workload `destination`, whose node's
    /// agent listens on `agent`; it holds its slot on the connection until dropped.
    pub(crate) async fn open(
        &self,
        source: &LocalEntry,
        destination: &SpiffeId,
        agent: SocketAddr,
        target: SocketAddr,
    ) -> Result<(Upgraded, StreamSlot), String> {
        let (mut sender, slot) = self.sender(source, destination, agent).await?;
        let request = Request::builder()
            .method(Method::CONNECT)
            .uri(target.to_string())
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        let tunnel = async {
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
        };
        let upgraded = tokio::time::timeout(self.limits.connect_timeout, tunnel)
            .await
            .map_err(|_| format!("CONNECT {target}: no answer within the connect timeout"))??;
        Ok((upgraded, slot))
    }

    /// A connection with room for one more tunnel (ztunnel's pool works so too: at most
    /// `max_tunnels_per_connection` streams each, a new connection when all are full).
    async fn sender(
        &self,
        source: &LocalEntry,
        destination: &SpiffeId,
        agent: SocketAddr,
    ) -> Result<(SendRequest<Empty<Bytes>>, StreamSlot), String> {
        let key = PoolKey {
            source: source.id.clone(),
            destination: destination.clone(),
            agent,
        };
        let entry = self
            .connections
            .lock()
            .map_err(|_| "HBONE pool lock poisoned".to_owned())?
            .entry(key)
            .or_default()
            .clone();
        let mut pooled = entry.lock().await;
        pooled.retain(|p| !p.sender.is_closed());
        let max = self.limits.max_tunnels_per_connection.max(1);
        if let Some(p) = pooled
            .iter()
            .find(|p| p.streams.load(Ordering::Relaxed) < max)
        {
            p.streams.fetch_add(1, Ordering::Relaxed);
            return Ok((p.sender.clone(), StreamSlot(p.streams.clone())));
        }
        let dial = self.dial(source, destination, agent);
        let sender = tokio::time::timeout(self.limits.connect_timeout, dial)
            .await
            .map_err(|_| format!("agent {agent}: no connection within the connect timeout"))??;
        let streams = Arc::new(AtomicU32::new(1));
        pooled.push(Pooled {
            sender: sender.clone(),
            streams: streams.clone(),
        });
        Ok((sender, StreamSlot(streams)))
    }

    async fn dial(
        &self,
        source: &LocalEntry,
        destination: &SpiffeId,
        agent: SocketAddr,
    ) -> Result<SendRequest<Empty<Bytes>>, String> {
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
        Ok(sender)
    }
}
