//! The L7 path: HTTP/1.1 and HTTP/2 parsed on every connection, each request authorized with
//! its method and path (403 on deny, as Istio's RBAC filter answers), then forwarded over a
//! pool of upstream connections. This is the work E1 found to cost more than mTLS itself.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderName, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use meshbench_policy::{Peer, Policy, Request as PolicyRequest};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::metrics::{Direction, ProxyMetrics};
use crate::upstream::UpstreamPool;

type ProxyBody = BoxBody<Bytes, hyper::Error>;

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
/// `upstream`.
pub(crate) async fn serve_http<S>(
    io: S,
    inbound: Option<Arc<InboundContext>>,
    upstream: Arc<UpstreamPool>,
    recording: Option<Recording>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let inbound = inbound.clone();
        let upstream = upstream.clone();
        let recording = recording.clone();
        async move {
            let started = Instant::now();
            let response = handle(req, inbound.as_deref(), &upstream, recording.as_ref()).await;
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
    upstream: &Arc<UpstreamPool>,
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
    // HTTP/2 carries the host in the URI, HTTP/1.1 in a header.
    if let (false, Some(authority)) = (
        parts.headers.contains_key(header::HOST),
        parts.uri.authority(),
    ) {
        if let Ok(host) = authority.as_str().parse() {
            parts.headers.insert(header::HOST, host);
        }
    }
    // Upstream is HTTP/1.1 in origin form; the path is kept as parsed (shared, not copied).
    parts.uri = Uri::from(
        parts
            .uri
            .into_parts()
            .path_and_query
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    );
    parts.version = http::Version::HTTP_11;
    match upstream.forward(Request::from_parts(parts, body)).await {
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
static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("keep-alive"),
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over their few names costs less than a hashed
    // removal per hop-by-hop name (which was 5% of the L7 proxy's instructions).
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    // So are the headers the Connection header names.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(&named) {
        headers.remove(name);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped_and_the_others_kept() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, x-trace"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("x-trace", "abc"),
            ("x-request-id", "7"),
            ("content-length", "2"),
        ] {
            headers.insert(HeaderName::from_static(name), value.parse().unwrap());
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<_> = headers.keys().map(|n| n.as_str()).collect();
        left.sort();
        assert_eq!(left, ["content-length", "x-request-id"]);
        let untouched = headers.clone();
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers, untouched);
    }
}
