//! The L7 path: HTTP/1.1 and HTTP/2 parsed on every connection, each request authorized with
//! its method and path (403 on deny, as Istio's RBAC filter answers), then forwarded over a
//! pool of upstream connections. This is the work E1 found to cost more than mTLS itself.
//! Here: telling the protocols apart by the first bytes, and HTTP/2 on hyper; HTTP/1.1 is
//! `http1`'s.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderName, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use meshbench_policy::{Peer, Policy, Request as PolicyRequest};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http1::{Http1Pool, IDENTITY_HEADERS};
use crate::idle::IdleWatch;
use crate::metrics::{Direction, ProxyMetrics};
use crate::serving::Limits;
use crate::splice::read_appending;
use crate::upstream::{is_limit_reached, UpstreamConnector, UpstreamError, UpstreamPool};

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

/// Where the L7 proxy forwards to: one destination, reached over HTTP/1.1 connections
/// pooled per path (the HTTP/1.1 path's plain streams, hyper's client for HTTP/2 requests).
pub(crate) struct L7Upstream {
    http1: Http1Pool,
    http2: Arc<UpstreamPool>,
    limits: Limits,
}

impl L7Upstream {
    pub(crate) fn new(connector: UpstreamConnector, limits: Limits) -> Arc<Self> {
        Arc::new(L7Upstream {
            http1: Http1Pool::new(connector.clone()),
            http2: UpstreamPool::new(connector),
            limits,
        })
    }
}

/// Largest HTTP/2 header list accepted, as the HTTP/1.1 path's largest head.
const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// What every HTTP/2 connection starts with (RFC 9113 section 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves HTTP on `io`, authorizing every request when `inbound` is set, forwarding it to
/// `upstream`. The first bytes tell HTTP/2 (prior knowledge, or negotiated by ALPN) from
/// HTTP/1.1.
pub(crate) async fn serve_http<S>(
    mut io: S,
    inbound: Option<Arc<InboundContext>>,
    upstream: Arc<L7Upstream>,
    recording: Option<Recording>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut first = Vec::new();
    let is_http2 = loop {
        if let Some(is_http2) = is_http2_preface(&first) {
            break is_http2;
        }
        // The first request's head must come within the header read timeout.
        let read = read_appending(&mut io, &mut first);
        match tokio::time::timeout(upstream.limits.header_read_timeout, read).await {
            Ok(Ok(1..)) => {}
            _ => return,
        }
    };
    let limits = upstream.limits;
    if !is_http2 {
        let (inbound, recording) = (inbound.as_deref(), recording.as_ref());
        crate::http1::proxy(io, first, inbound, &upstream.http1, recording, &limits).await;
        return;
    }
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let inbound = inbound.clone();
        let upstream = upstream.http2.clone();
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
    let moved = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(Rewind::new(first, io, moved.clone()));
    let mut builder = http2::Builder::new(TokioExecutor::new());
    // Each stream takes an upstream connection while it waits for its response: bounding
    // streams per connection (and upstream connections per destination, in the connector)
    // is what keeps one client from opening thousands of connections to the app.
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams_per_connection)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .keep_alive_interval(Some(limits.idle_timeout))
        .keep_alive_timeout(limits.handshake_timeout);
    let serving = builder.serve_connection(io, service);
    tokio::pin!(serving);
    let ended = tokio::select! {
        ended = serving.as_mut() => ended,
        () = idle(&moved, limits.idle_timeout) => {
            tracing::debug!("HTTP/2 connection idle: going away");
            serving.as_mut().graceful_shutdown();
            tokio::time::timeout(limits.handshake_timeout, serving)
                .await
                .unwrap_or(Ok(()))
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "HTTP/2 connection ended with an error");
    }
}

/// Resolves once `moved` has not changed for a whole `period` of the idle clock (between one
/// and two periods after the last byte), with no timer of its own.
pub(crate) async fn idle(moved: &AtomicU64, period: std::time::Duration) {
    let mut watch = IdleWatch::new(period);
    std::future::poll_fn(|cx| watch.poll_idle(cx, moved.load(Ordering::Relaxed))).await
}

/// Whether a connection whose first bytes are `first` speaks HTTP/2 with prior knowledge
/// (its preface) or not; `None` while `first` is a proper prefix of the preface.
fn is_http2_preface(first: &[u8]) -> Option<bool> {
    let compared = first.len().min(HTTP2_PREFACE.len());
    if first[..compared] != HTTP2_PREFACE[..compared] {
        return Some(false);
    }
    (compared == HTTP2_PREFACE.len()).then_some(true)
}

/// A stream whose first bytes, read to tell the protocol, are read once more, counting the
/// bytes that cross it (for the idle timeout).
pub(crate) struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    io: S,
    moved: Arc<AtomicU64>,
}

impl<S> Rewind<S> {
    pub(crate) fn new(prefix: Vec<u8>, io: S, moved: Arc<AtomicU64>) -> Self {
        Rewind {
            prefix,
            at: 0,
            io,
            moved,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        this.moved.fetch_add(n as u64, Ordering::Relaxed);
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        this.moved.fetch_add(written as u64, Ordering::Relaxed);
        Poll::Ready(Ok(written))
    }

    // Passed through: without it, HTTP/2 copies a frame's first kilobyte into its own buffer
    // and writes the rest apart, two TLS records and two syscalls for one frame.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        this.moved.fetch_add(written as u64, Ordering::Relaxed);
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

async fn handle(
    mut req: Request<Incoming>,
    inbound: Option<&InboundContext>,
    upstream: &Arc<UpstreamPool>,
    recording: Option<&Recording>,
) -> Response<ProxyBody> {
    // A CONNECT stream is a tunnel, not a request an HTTP/1.1 upstream could serve.
    if req.method() == http::Method::CONNECT {
        return text(StatusCode::NOT_IMPLEMENTED, "CONNECT is not proxied\n");
    }
    sanitize_identity(req.headers_mut(), inbound.map(|ctx| &ctx.peer));
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
        Err(UpstreamError::Connect(e)) if is_limit_reached(&e) => {
            tracing::debug!(error = %e, "upstream connection limit reached");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "upstream connection limit reached\n",
            )
        }
        Err(e) => {
            tracing::debug!(error = %e, "upstream request failed");
            text(StatusCode::BAD_GATEWAY, "upstream connect error\n")
        }
    }
}

/// Drops whatever identity headers the client sent and, inbound from a verified peer, sets
/// them from its certificate (Envoy's `SANITIZE_SET`).
fn sanitize_identity(headers: &mut HeaderMap, peer: Option<&Peer>) {
    for name in IDENTITY_HEADERS {
        headers.remove(name);
    }
    if let Some(Peer::Authenticated { id, .. }) = peer {
        let id = id.to_string();
        for (name, value) in IDENTITY_HEADERS.iter().zip([format!("URI={id}"), id]) {
            if let Ok(value) = http::HeaderValue::try_from(value) {
                headers.insert(*name, value);
            }
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
        .filter_map(|name| HeaderName::try_from(name.trim_matches([' ', '\t'])).ok())
        // Framing and routing are never one hop's: the next hop must see what framed this one.
        .filter(|name| ![header::CONTENT_LENGTH, header::HOST].contains(name))
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

    mod properties {
        use super::super::{is_http2_preface, HTTP2_PREFACE};
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4000))]

            /// Detection waits only while the bytes could still be the preface, and decides
            /// the same however many bytes came at once.
            #[test]
            fn the_protocol_is_told_from_the_first_bytes_alone(
                bytes in prop::collection::vec(any::<u8>(), 0..40),
                preface_len in 0..=HTTP2_PREFACE.len(),
            ) {
                let mut input = HTTP2_PREFACE[..preface_len].to_vec();
                input.extend_from_slice(&bytes);
                let verdict = is_http2_preface(&input);
                let expected = if input.len() < HTTP2_PREFACE.len() {
                    (!HTTP2_PREFACE.starts_with(&input)).then_some(false)
                } else {
                    Some(input.starts_with(HTTP2_PREFACE))
                };
                prop_assert_eq!(verdict, expected);
                // A decision, once made, holds for every longer input.
                for cut in 0..input.len() {
                    if let Some(early) = is_http2_preface(&input[..cut]) {
                        prop_assert_eq!(Some(early), verdict);
                    }
                }
            }
        }
    }
}
