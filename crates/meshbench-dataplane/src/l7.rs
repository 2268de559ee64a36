//! The L7 path: HTTP/1.1 and HTTP/2 parsed on every connection, each request authorized with
//! its method and path (403 on deny, as Istio's RBAC filter answers), then forwarded over a
//! pool of upstream connections. This is the work E1 found to cost more than mTLS itself.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use meshbench_policy::{Peer, Policy, Request as PolicyRequest};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::metrics::{Direction, ProxyMetrics};
use crate::upstream::UpstreamConnector;

type ProxyBody = BoxBody<Bytes, hyper::Error>;
pub(crate) type UpstreamClient = Client<UpstreamConnector, Incoming>;

pub(crate) fn upstream_client(connector: UpstreamConnector) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build(connector)
}

/// Where responses are counted.
#[derive(Clone)]
pub(crate) struct Recording {
    pub metrics: Arc<ProxyMetrics>,
    pub direction: Direction,
}

/// Who is asking, where to: the part of the policy request fixed per connection, shared by
/// its requests.
pub(crate) struct InboundContext {
    pub namespace: Arc<str>,
    pub workload: Arc<str>,
    pub port: u16,
    pub policy: Arc<Policy>,
    pub peer: Peer,
}

/// Serves HTTP on `io`, authorizing every request when `inbound` is set, forwarding it to
/// `client`'s upstream.
pub(crate) async fn serve_http<S>(
    io: S,
    inbound: Option<Arc<InboundContext>>,
    client: UpstreamClient,
    recording: Option<Recording>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let inbound = inbound.clone();
        let client = client.clone();
        let recording = recording.clone();
        async move {
            let started = Instant::now();
            let response = handle(req, inbound.as_deref(), &client, recording.as_ref()).await;
            if let Some(r) = &recording {
                r.metrics.response(r.direction, response.status(), started);
            }
            Ok::<_, Infallible>(response)
        }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    if let Err(e) = builder.serve_connection(TokioIo::new(io), service).await {
        tracing::debug!(error = %e, "L7 connection ended with an error");
    }
}

async fn handle(
    req: Request<Incoming>,
    inbound: Option<&InboundContext>,
    client: &UpstreamClient,
    recording: Option<&Recording>,
) -> Response<ProxyBody> {
    if let Some(ctx) = inbound {
        let decision = ctx.policy.authorize(&PolicyRequest {
            namespace: &ctx.namespace,
            workload: &ctx.workload,
            port: ctx.port,
            peer: &ctx.peer,
            http: Some((req.method().as_str(), req.uri().path())),
        });
        if let Some(r) = recording {
            r.metrics.authorized(decision.allowed);
        }
        if !decision.allowed {
            tracing::info!(peer = ?ctx.peer, reason = %decision.reason, "request denied");
            return text(StatusCode::FORBIDDEN, "RBAC: access denied\n");
        }
    }
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // The pool is keyed by URI; the connector ignores it and dials its one upstream.
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = match Uri::builder()
        .scheme("http")
        .authority("upstream")
        .path_and_query(path)
        .build()
    {
        Ok(uri) => uri,
        Err(_) => return text(StatusCode::BAD_REQUEST, "bad request target\n"),
    };
    parts.version = http::Version::HTTP_11;
    match client.request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => {
            tracing::debug!(error = %e, "upstream request failed");
            text(StatusCode::BAD_GATEWAY, "upstream connect error\n")
        }
    }
}

/// Headers meaningful for one hop only (RFC 9110 section 7.6.1).
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

fn text(status: StatusCode, body: &'static str) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from_static(body.as_bytes()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, "text/plain".parse().expect("valid"));
    response
}
