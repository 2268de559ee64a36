//! The receiving end of HBONE: terminate mTLS as the workload the caller asked for by SNI,
//! take the caller's identity from its verified certificate, then serve HTTP/2 CONNECT
//! streams. Each stream is authorized against that workload's policy and spliced to its app.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use http::{Method, Request, Response, StatusCode};
use meshbench_identity::{spiffe_ids_of, SpiffeId};
use meshbench_policy::{Peer, Policy, Request as AuthzRequest};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::TlsAcceptor;

use super::directory::{Destination, Directory, LocalEntry};
use super::tunnel::settings::{CONNECTION_WINDOW, MAX_HEADER_LIST, STREAM_WINDOW};
use super::tunnel::Tunnel;
use crate::l7::{idle, Rewind};
use crate::metrics::{Direction, ProxyMetrics};
use crate::serving::Limits;

pub(crate) struct HboneInbound {
    directory: Arc<Directory>,
    policy: Arc<Policy>,
    acceptor: TlsAcceptor,
    metrics: Option<Arc<ProxyMetrics>>,
    limits: Limits,
}

/// What every stream of one HBONE connection shares.
struct Caller {
    id: SpiffeId,
    addr: SocketAddr,
    /// The identity the caller asked for by SNI: every stream's target must be a local pod
    /// of it (a workload of several pods on this node has one certificate for all).
    asked_for: SpiffeId,
    directory: Arc<Directory>,
    policy: Arc<Policy>,
    metrics: Option<Arc<ProxyMetrics>>,
    limits: Limits,
}

impl HboneInbound {
    pub(crate) fn new(
        directory: Arc<Directory>,
        policy: Arc<Policy>,
        acceptor: TlsAcceptor,
        metrics: Option<Arc<ProxyMetrics>>,
        limits: Limits,
    ) -> Self {
        HboneInbound {
            directory,
            policy,
            acceptor,
            metrics,
            limits,
        }
    }

    pub(crate) async fn handle(&self, tcp: TcpStream, peer_addr: SocketAddr) {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.limits.handshake_timeout;
        let handshake = meshbench_net::handshake_by(deadline, self.acceptor.accept(tcp));
        let tls = match handshake.await {
            Ok(tls) => tls,
            Err(e) => {
                tracing::debug!(%peer_addr, error = %e, "HBONE handshake failed");
                return;
            }
        };
        if let Some(m) = &self.metrics {
            m.tls_handshake(Direction::Inbound, started.elapsed());
        }
        let (_, session) = tls.get_ref();
        let id = session
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|leaf| spiffe_ids_of(leaf).into_iter().next());
        let destination = session
            .server_name()
            .and_then(|sni| self.directory.local_by_sni(sni))
            .cloned();
        let (Some(id), Some(destination)) = (id, destination) else {
            tracing::info!(%peer_addr, "HBONE caller without a SPIFFE ID or destination; closing");
            return;
        };
        let caller = Arc::new(Caller {
            id,
            addr: peer_addr,
            asked_for: destination.id.clone(),
            directory: self.directory.clone(),
            policy: self.policy.clone(),
            metrics: self.metrics.clone(),
            limits: self.limits,
        });
        let limits = self.limits;
        let moved = Arc::new(AtomicU64::new(0));
        let io = Rewind::new(Vec::new(), tls, moved.clone());
        let handshake = h2::server::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            // The sending pool opens another connection past it, as ztunnel's does.
            .max_concurrent_streams(limits.max_tunnels_per_connection)
            .max_header_list_size(MAX_HEADER_LIST)
            .handshake::<_, Bytes>(io);
        let mut connection = match tokio::time::timeout_at(deadline, handshake).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(e)) => {
                tracing::debug!(%peer_addr, error = %e, "HBONE HTTP/2 handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer_addr, "HBONE caller sent no HTTP/2 preface in time");
                return;
            }
        };
        // Each stream is a task of its own (with its own idle timeout); this one only
        // accepts them and drives the connection. The connection's own bytes decide its
        // idleness, so a connection whose tunnels are all idle goes away too.
        let silent = idle(&moved, limits.idle_timeout);
        tokio::pin!(silent);
        loop {
            let accepted = tokio::select! {
                accepted = connection.accept() => accepted,
                () = &mut silent => {
                    connection.graceful_shutdown();
                    let closed = std::future::poll_fn(|cx| connection.poll_closed(cx));
                    let _ = tokio::time::timeout(limits.handshake_timeout, closed).await;
                    return;
                }
            };
            match accepted {
                Some(Ok((request, respond))) => {
                    let caller = caller.clone();
                    tokio::spawn(async move { tunnel(&caller, request, respond).await });
                }
                Some(Err(e)) => {
                    tracing::debug!(%peer_addr, error = %e, "HBONE connection ended");
                    return;
                }
                None => return,
            }
        }
    }
}

fn status(code: StatusCode) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = code;
    response
}

/// One CONNECT stream: answered with a refusal, or with 200 and then spliced to its app.
async fn tunnel(caller: &Caller, request: Request<RecvStream>, mut respond: SendResponse<Bytes>) {
    match admit(caller, &request).await {
        Ok((mut app, app_slot)) => {
            let Ok(send) = respond.send_response(status(StatusCode::OK), false) else {
                return;
            };
            let _app_slot = app_slot;
            let metrics = &caller.metrics;
            let _open = metrics.as_ref().map(|m| m.connection(Direction::Inbound));
            let mut stream = Tunnel::new(send, request.into_body());
            let idle = caller.limits.idle_timeout;
            let spliced = crate::splice::splice(&mut stream, &mut app, idle).await;
            if let (Ok((forward, backward)), Some(m)) = (spliced, metrics) {
                m.carried(Direction::Inbound, forward, backward);
            }
        }
        Err(code) => {
            let _ = respond.send_response(status(code), true);
        }
    }
}

/// Authorizes a CONNECT and connects to its app, or says which status refuses it.
async fn admit(
    caller: &Caller,
    request: &Request<RecvStream>,
) -> Result<(TcpStream, OwnedSemaphorePermit), StatusCode> {
    if request.method() != Method::CONNECT {
        return Err(StatusCode::METHOD_NOT_ALLOWED);
    }
    let Some(target) = request
        .uri()
        .authority()
        .and_then(|a| a.as_str().parse::<SocketAddr>().ok())
    else {
        return Err(StatusCode::BAD_REQUEST);
    };
    // The certificate the caller asked for and the app it wants must be one workload's.
    let destination: Arc<LocalEntry> = match caller.directory.destination(target) {
        Some(Destination::Local(entry)) if entry.id == caller.asked_for => entry.clone(),
        _ => return Err(StatusCode::MISDIRECTED_REQUEST),
    };
    let peer = Peer::Authenticated {
        id: caller.id.clone(),
        source_ip: Some(caller.addr.ip()),
    };
    let decision = caller.policy.authorize(&AuthzRequest {
        namespace: &destination.namespace,
        workload: &destination.name,
        port: target.port(),
        peer: &peer,
        http: None,
    });
    if let Some(m) = &caller.metrics {
        m.authorized(decision.allowed);
    }
    if !decision.allowed {
        tracing::info!(caller = %caller.id, %target, reason = %decision.reason, "tunnel denied");
        return Err(StatusCode::FORBIDDEN);
    }
    // Refused at once rather than queued: the caller's pool sees the 503 and the app is
    // not handed more connections than its cap, however many peers and connections ask.
    let Ok(app_slot) = destination.app_slots.clone().try_acquire_owned() else {
        tracing::debug!(%target, "tunnel refused: the app's connection cap is reached");
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    };
    let limits = caller.limits;
    match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(target)).await {
        Ok(Ok(app)) => {
            let _ = app.set_nodelay(true);
            Ok((app, app_slot))
        }
        Ok(Err(e)) => {
            tracing::warn!(%target, error = %e, "cannot reach the app");
            Err(StatusCode::SERVICE_UNAVAILABLE)
        }
        Err(_) => {
            tracing::warn!(%target, "connecting to the app timed out");
            Err(StatusCode::SERVICE_UNAVAILABLE)
        }
    }
}
