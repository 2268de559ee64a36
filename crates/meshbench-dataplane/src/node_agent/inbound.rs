//! The receiving end of HBONE: terminate mTLS as the workload the caller asked for by SNI,
//! take the caller's identity from its verified certificate, then serve HTTP/2 CONNECT
//! streams. Each stream is authorized against that workload's policy and spliced to its app.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use meshbench_identity::{spiffe_ids_of, SpiffeId};
use meshbench_policy::{Peer, Policy, Request as AuthzRequest};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::directory::{Destination, Directory, LocalEntry};
use super::pool::{CONNECTION_WINDOW, STREAM_WINDOW};
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
        let service = hyper::service::service_fn(move |request| {
            let caller = caller.clone();
            async move { Ok::<_, Infallible>(tunnel(&caller, request).await) }
        });
        let limits = self.limits;
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            // The sending pool opens another connection past it, as ztunnel's does.
            .max_concurrent_streams(limits.max_tunnels_per_connection)
            .max_header_list_size(16 * 1024)
            .keep_alive_interval(Some(limits.idle_timeout))
            .keep_alive_timeout(limits.handshake_timeout);
        let moved = Arc::new(AtomicU64::new(0));
        let io = TokioIo::new(Rewind::new(Vec::new(), tls, moved.clone()));
        let serving = builder.serve_connection(io, service);
        tokio::pin!(serving);
        // The connection's own bytes: tunnels run on tasks of their own (with their own idle
        // timeout), so a connection whose tunnels are all idle goes away too.
        let served = tokio::select! {
            served = serving.as_mut() => served,
            () = idle(&moved, limits.idle_timeout) => {
                serving.as_mut().graceful_shutdown();
                tokio::time::timeout(limits.handshake_timeout, serving)
                    .await
                    .unwrap_or(Ok(()))
            }
        };
        if let Err(e) = served {
            tracing::debug!(%peer_addr, error = %e, "HBONE connection ended");
        }
    }
}

fn status(code: StatusCode) -> Response<Empty<Bytes>> {
    let mut response = Response::new(Empty::new());
    *response.status_mut() = code;
    response
}

async fn tunnel(caller: &Caller, mut request: Request<Incoming>) -> Response<Empty<Bytes>> {
    if request.method() != Method::CONNECT {
        return status(StatusCode::METHOD_NOT_ALLOWED);
    }
    let Some(target) = request
        .uri()
        .authority()
        .and_then(|a| a.as_str().parse::<SocketAddr>().ok())
    else {
        return status(StatusCode::BAD_REQUEST);
    };
    // The certificate the caller asked for and the app it wants must be one workload's.
    let destination: Arc<LocalEntry> = match caller.directory.destination(target) {
        Some(Destination::Local(entry)) if entry.id == caller.asked_for => entry.clone(),
        _ => return status(StatusCode::MISDIRECTED_REQUEST),
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
        return status(StatusCode::FORBIDDEN);
    }
    // Refused at once rather than queued: the caller's pool sees the 503 and the app is
    // not handed more connections than its cap, however many peers and connections ask.
    let Ok(app_slot) = destination.app_slots.clone().try_acquire_owned() else {
        tracing::debug!(%target, "tunnel refused: the app's connection cap is reached");
        return status(StatusCode::SERVICE_UNAVAILABLE);
    };
    let limits = caller.limits;
    let mut app =
        match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(target)).await {
            Ok(Ok(app)) => app,
            Ok(Err(e)) => {
                tracing::warn!(%target, error = %e, "cannot reach the app");
                return status(StatusCode::SERVICE_UNAVAILABLE);
            }
            Err(_) => {
                tracing::warn!(%target, "connecting to the app timed out");
                return status(StatusCode::SERVICE_UNAVAILABLE);
            }
        };
    let _ = app.set_nodelay(true);
    let upgrade = hyper::upgrade::on(&mut request);
    let metrics = caller.metrics.clone();
    tokio::spawn(async move {
        let _app_slot = app_slot;
        let _open = metrics.as_ref().map(|m| m.connection(Direction::Inbound));
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let mut stream = TokioIo::new(upgraded);
        let idle = limits.idle_timeout;
        if let Ok((forward, backward)) = crate::splice::splice(&mut stream, &mut app, idle).await {
            if let Some(m) = &metrics {
                m.carried(Direction::Inbound, forward, backward);
            }
        }
    });
    status(StatusCode::OK)
}
