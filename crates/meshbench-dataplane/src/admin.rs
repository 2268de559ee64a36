//! The proxy's admin endpoint (`GET /metrics`, `GET /ready`): a small, bounded HTTP server
//! over the proxy's metrics.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::metrics::ProxyMetrics;
use crate::Error;

/// Binds the admin listener.
pub async fn bind_admin(addr: SocketAddr) -> Result<TcpListener, Error> {
    Ok(meshbench_net::bind(addr).await?)
}

/// Admin connections served at once: a scraper needs one or two.
const ADMIN_MAX_CONNECTIONS: usize = 64;
/// An admin connection's whole life, and its request head's deadline.
const ADMIN_CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
const ADMIN_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `/metrics` and `/ready` until `shutdown` resolves: at most 64 connections at once,
/// each for at most 30 s, its request head within 10 s.
pub async fn serve_admin(
    listener: TcpListener,
    metrics: Arc<ProxyMetrics>,
    shutdown: impl Future<Output = ()>,
) {
    let accepting =
        crate::serving::accept_loop(listener, ADMIN_MAX_CONNECTIONS, move |stream, _peer| {
            let metrics = metrics.clone();
            async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let metrics = metrics.clone();
                    async move { Ok::<_, Infallible>(admin_response(&req, &metrics)) }
                });
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(ADMIN_HEADER_READ_TIMEOUT);
                let serving = builder.serve_connection(TokioIo::new(stream), service);
                let _ = tokio::time::timeout(ADMIN_CONNECTION_LIFETIME, serving).await;
            }
        });
    tokio::select! {
        () = accepting => {}
        () = shutdown => {}
    }
}

fn admin_response(req: &Request<Incoming>, metrics: &ProxyMetrics) -> Response<Full<Bytes>> {
    let wants_openmetrics = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" if wants_openmetrics => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode_openmetrics(),
        ),
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.encode_prometheus_text(),
        ),
        "/ready" => (StatusCode::OK, "text/plain", "ready\n".to_owned()),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        content_type.parse().expect("static header value"),
    );
    response
}
