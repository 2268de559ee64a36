//! The receiving end of HBONE: terminate mTLS as the workload the caller asked for by SNI,
//! take the caller's identity from its verified certificate, then serve HTTP/2 CONNECT
//! streams. Each stream is authorized against that workload's policy and spliced to its app.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_identity::{spiffe_ids_of, SpiffeId};
use meshbench_policy::{Peer, Policy, Request as AuthzRequest};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::directory::{Directory, LocalEntry};
use super::pool::{CONNECTION_WINDOW, STREAM_WINDOW};
use crate::metrics::{Direction, ProxyMetrics};

pub(crate) struct HboneInbound {
    directory: Arc<Directory>,
    policy: Arc<Policy>,
    acceptor: TlsAcceptor,
    metrics: Option<Arc<ProxyMetrics>>,
}

/// What every stream of one HBONE connection shares.
struct Caller {
    id: SpiffeId,
    addr: SocketAddr,
    destination: Arc<LocalEntry>,
    policy: Arc<Policy>,
    metrics: Option<Arc<ProxyMetrics>>,
}

impl HboneInbound {
    pub(crate) fn new(
        directory: Arc<Directory>,
        policy: Arc<Policy>,
        acceptor: TlsAcceptor,
        metrics: Option<Arc<ProxyMetrics>>,
    ) -> Self {
        HboneInbound {
            directory,
            policy,
            acceptor,
            metrics,
        }
    }

    pub(crate) async fn handle(&self, tcp: TcpStream, peer_addr: SocketAddr) {
        let started = Instant::now();
        let tls = match self.acceptor.accept(tcp).await {
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
            destination,
            policy: self.policy.clone(),
            metrics: self.metrics.clone(),
        });
        let service = hyper::service::service_fn(move |request| {
            let caller = caller.clone();
            async move { Ok::<_, Infallible>(tunnel(&caller, request).await) }
        });
        let served = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_concurrent_streams(u32::MAX)
            .serve_connection(TokioIo::new(tls), service)
            .await;
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
    let destination = &caller.destination;
    // The certificate the caller asked for and the app it wants must be one workload.
    if target != destination.address {
        return status(StatusCode::MISDIRECTED_REQUEST);
    }
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
    let mut app = match TcpStream::connect(target).await {
        Ok(app) => app,
        Err(e) => {
            tracing::warn!(%target, error = %e, "cannot reach the app");
            return status(StatusCode::SERVICE_UNAVAILABLE);
        }
    };
    let _ = app.set_nodelay(true);
    let upgrade = hyper::upgrade::on(&mut request);
    let metrics = caller.metrics.clone();
    tokio::spawn(async move {
        let _open = metrics.as_ref().map(|m| m.connection(Direction::Inbound));
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let mut stream = TokioIo::new(upgraded);
        if let Ok((forward, backward)) = crate::splice::splice(&mut stream, &mut app).await {
            if let Some(m) = &metrics {
                m.carried(Direction::Inbound, forward, backward);
            }
        }
    });
    status(StatusCode::OK)
}
