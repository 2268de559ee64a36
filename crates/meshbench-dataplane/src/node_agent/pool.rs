//! The sending end of HBONE: one pooled mTLS HTTP/2 connection per (source identity,
//! destination identity, destination agent), each carrying many CONNECT streams. The source
//! workload's SVID is the client certificate; the destination's SPIFFE ID is required of the
//! server and asked for by SNI.

use std::collections::HashMap;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use h2::client::SendRequest;
use http::{Method, Request, StatusCode};
use meshbench_identity::{client_config_for, SpiffeId, TlsOptions};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::directory::{sni_of, LocalEntry};
use super::tunnel::settings::{CONNECTION_WINDOW, MAX_HEADER_LIST, STREAM_WINDOW};
use super::tunnel::Tunnel;
use crate::metrics::{Direction, ProxyMetrics};
use crate::serving::Limits;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    source: SpiffeId,
    destination: SpiffeId,
    agent: SocketAddr,
}

/// One pooled HBONE connection and how many tunnels it carries now.
#[derive(Clone)]
struct Pooled {
    sender: SendRequest<Bytes>,
    streams: Arc<AtomicU32>,
    /// Set once the connection's task ends or it takes no more streams (the peer's GOAWAY).
    closed: Arc<AtomicBool>,
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
    /// agent listens on `agent`; it holds its slot on the connection until dropped. A pooled
    /// connection found closing before the CONNECT left is given up and the tunnel tried once
    /// on another: nothing reached the peer yet.
    pub(crate) async fn open(
        &self,
        source: &LocalEntry,
        destination: &SpiffeId,
        agent: SocketAddr,
        target: SocketAddr,
    ) -> Result<(Tunnel, StreamSlot), String> {
        let mut retried = false;
        loop {
            let (chosen, slot) = self.connection(source, destination, agent).await?;
            let attempt =
                tokio::time::timeout(self.limits.connect_timeout, connect(chosen.sender, target));
            match attempt.await {
                Ok(Ok(tunnel)) => return Ok((tunnel, slot)),
                Ok(Err(Refused::Unsent(e))) if !retried => {
                    tracing::debug!(%agent, error = %e, "pooled HBONE connection closing");
                    chosen.closed.store(true, Ordering::Relaxed);
                    retried = true;
                }
                Ok(Err(Refused::Unsent(e) | Refused::Answered(e))) => {
                    return Err(format!("CONNECT {target}: {e}"))
                }
                Err(_) => {
                    return Err(format!(
                        "CONNECT {target}: no answer within the connect timeout"
                    ))
                }
            }
        }
    }

    /// A connection with room for one more tunnel (ztunnel's pool works so too: at most
    /// `max_tunnels_per_connection` streams each, a new connection when all are full).
    async fn connection(
        &self,
        source: &LocalEntry,
        destination: &SpiffeId,
        agent: SocketAddr,
    ) -> Result<(Pooled, StreamSlot), String> {
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
        pooled.retain(|p| !p.closed.load(Ordering::Relaxed));
        let max = self.limits.max_tunnels_per_connection.max(1);
        if let Some(p) = pooled
            .iter()
            .find(|p| p.streams.load(Ordering::Relaxed) < max)
        {
            p.streams.fetch_add(1, Ordering::Relaxed);
            return Ok((p.clone(), StreamSlot(p.streams.clone())));
        }
        let dial = self.dial(source, destination, agent);
        let (sender, closed) = tokio::time::timeout(self.limits.connect_timeout, dial)
            .await
            .map_err(|_| format!("agent {agent}: no connection within the connect timeout"))??;
        let dialled = Pooled {
            sender,
            streams: Arc::new(AtomicU32::new(1)),
            closed,
        };
        pooled.push(dialled.clone());
        let slot = StreamSlot(dialled.streams.clone());
        Ok((dialled, slot))
    }

    async fn dial(
        &self,
        source: &LocalEntry,
        destination: &SpiffeId,
        agent: SocketAddr,
    ) -> Result<(SendRequest<Bytes>, Arc<AtomicBool>), String> {
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
        let (sender, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(MAX_HEADER_LIST)
            // Until the peer's settings say otherwise; the pool keeps below its own cap.
            .initial_max_send_streams(self.limits.max_tunnels_per_connection as usize)
            .enable_push(false)
            .handshake::<_, Bytes>(tls)
            .await
            .map_err(|e| format!("agent {agent}: HTTP/2: {e}"))?;
        let closed = Arc::new(AtomicBool::new(false));
        let ended = closed.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%agent, error = %e, "HBONE connection ended");
            }
            ended.store(true, Ordering::Relaxed);
        });
        Ok((sender, closed))
    }
}

/// Why a CONNECT got no tunnel: before it left (the connection is closing; another may
/// serve), or after (the peer answered or the stream failed).
enum Refused {
    Unsent(String),
    Answered(String),
}

/// Sends the CONNECT for `target` and waits for its answer.
async fn connect(mut sender: SendRequest<Bytes>, target: SocketAddr) -> Result<Tunnel, Refused> {
    // Ready at once unless the peer's stream limit is reached; an error means the connection
    // takes no more streams.
    poll_fn(|cx| sender.poll_ready(cx))
        .await
        .map_err(|e| Refused::Unsent(e.to_string()))?;
    let request = Request::builder()
        .method(Method::CONNECT)
        .uri(target.to_string())
        .body(())
        .map_err(|e| Refused::Answered(e.to_string()))?;
    let (response, send) = sender
        .send_request(request, false)
        .map_err(|e| Refused::Unsent(e.to_string()))?;
    let response = response
        .await
        .map_err(|e| Refused::Answered(e.to_string()))?;
    if response.status() != StatusCode::OK {
        return Err(Refused::Answered(response.status().to_string()));
    }
    Ok(Tunnel::new(send, response.into_body()))
}
