//! The L7 proxy's HTTP/1.1 path, built like HAProxy's and Envoy's codecs rather than on a
//! general HTTP library: each request head is parsed in place (httparse), authorized by its
//! method and path, rewritten for the next hop and sent with the start of its body; bodies
//! pass through unchanged in both directions, framed only to find their end. An idle
//! connection holds no buffer and no parser state (hyper kept 24 KiB of buffers per idle
//! connection), and a request costs a handful of small allocations.

mod framing;
mod head;
mod pool;
#[cfg(test)]
mod properties;

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

use http::StatusCode;
use meshbench_policy::{Peer, Request as PolicyRequest};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::idle::IdleWatch;
use crate::l7::{InboundContext, Recording};
use crate::serving::Limits;
use crate::splice::read_appending;
use crate::upstream::{is_limit_reached, UpstreamStream};
use framing::{BodyScanner, Framing, FramingError};
pub(crate) use head::IDENTITY_HEADERS;
use head::{local_response, parse_request, parse_response, HeadError, RequestHead, ResponseHead};
pub(crate) use pool::Http1Pool;

/// Largest piece of a body moved at once.
const BODY_CHUNK: usize = 16 * 1024;

/// Proxies HTTP/1.1 requests from `downstream` (whose first bytes, already read, are in
/// `pending`) until either side closes.
pub(crate) async fn proxy<S>(
    mut downstream: S,
    mut pending: Vec<u8>,
    inbound: Option<&InboundContext>,
    pool: &Http1Pool,
    recording: Option<&Recording>,
    limits: &Limits,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let idle = limits.idle_timeout;
    // One watch for the connection's life, its count the requests read: waiting for the next
    // one costs no allocation and no registration per request.
    let (mut idle_watch, mut requests) = (IdleWatch::new(idle), 0u64);
    loop {
        // A head's deadline runs from its first byte; before that the connection is idle.
        let mut head_started = (!pending.is_empty()).then(Instant::now);
        let mut head = loop {
            match parse_request(&pending) {
                Ok(Some(head)) => {
                    requests += 1;
                    break head;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "refusing a malformed request");
                    let (status, reason) = match e {
                        HeadError::Unsupported(_) => (501, "Not Implemented"),
                        HeadError::TooLarge => (431, "Request Header Fields Too Large"),
                        _ => (400, "Bad Request"),
                    };
                    let answer = local_response(status, reason, &format!("{e}\n"), true);
                    if write_message(&mut downstream, &answer, idle).await.is_ok() {
                        linger(downstream).await;
                    }
                    return;
                }
            }
            // Between requests the idle clock watches (no timer per idle connection); once a
            // head has begun, its own deadline does.
            let read = read_appending(&mut downstream, &mut pending);
            let waited = match head_started {
                Some(at) => {
                    let left = limits.header_read_timeout.saturating_sub(at.elapsed());
                    tokio::time::timeout(left, read).await.map_err(|_| ())
                }
                None => tokio::select! {
                    biased;
                    read = read => Ok(read),
                    () = std::future::poll_fn(|cx| idle_watch.poll_idle(cx, requests)) => Err(()),
                },
            };
            match waited {
                // End of stream between requests, or in the middle of one: nothing to answer.
                Ok(Ok(0) | Err(_)) => return,
                Ok(Ok(_)) => {
                    head_started.get_or_insert_with(Instant::now);
                }
                // Silent between requests: closed without a word, as servers do.
                Err(_) if head_started.is_none() => return,
                Err(_) => {
                    tracing::debug!("request head not complete within the header read timeout");
                    let answer = local_response(408, "Request Timeout", "request timeout\n", true);
                    if write_message(&mut downstream, &answer, idle).await.is_ok() {
                        linger(downstream).await;
                    }
                    return;
                }
            }
        };
        let started = Instant::now();
        if let Some(Peer::Authenticated { id, .. }) = inbound.map(|ctx| &ctx.peer) {
            // The client's own identity headers were dropped from the head: these are the
            // only ones the app sees.
            head.add_header(IDENTITY_HEADERS[0], &format!("URI={id}"));
            head.add_header(IDENTITY_HEADERS[1], &id.to_string());
        }
        let outcome = if authorized(&head, &pending, inbound, recording) {
            // Boxed: an exchange's state (its reads and writes, each with a deadline) would
            // otherwise size the connection's task while it idles between requests.
            Box::pin(exchange(
                &mut downstream,
                &mut pending,
                &mut head,
                pool,
                idle,
            ))
            .await
        } else {
            // The body is not read: the connection cannot carry another request.
            let close = !head.keep_alive || head.framing != Framing::Empty;
            let answer = local_response(403, "Forbidden", "RBAC: access denied\n", close);
            pending.drain(..head.len);
            write_message(&mut downstream, &answer, idle)
                .await
                .map(|()| Answered {
                    status: 403,
                    close,
                    forwarded: 0,
                    returned: answer.len() as u64,
                })
                .map_err(ExchangeError::Midway)
        };
        match outcome {
            Ok(answered) => {
                if let Some(r) = recording {
                    let status =
                        StatusCode::from_u16(answered.status).unwrap_or(StatusCode::BAD_GATEWAY);
                    r.metrics.response(r.direction, status, started);
                    r.metrics
                        .carried(r.direction, answered.forwarded, answered.returned);
                }
                if answered.close {
                    linger(downstream).await;
                    return;
                }
            }
            Err(ExchangeError::BeforeResponse(e)) => {
                tracing::debug!(error = %e, "upstream request failed");
                // Envoy's answers: 503 when a circuit breaker is open, 502 otherwise.
                let (status, answer) = match is_limit_reached(&e) {
                    true => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        local_response(
                            503,
                            "Service Unavailable",
                            "upstream connection limit reached\n",
                            true,
                        ),
                    ),
                    false => (
                        StatusCode::BAD_GATEWAY,
                        local_response(502, "Bad Gateway", "upstream connect error\n", true),
                    ),
                };
                if let Some(r) = recording {
                    r.metrics.response(r.direction, status, started);
                }
                let _ = write_message(&mut downstream, &answer, idle).await;
                return;
            }
            Err(ExchangeError::BadRequest(e)) => {
                tracing::debug!(error = %e, "refusing a request with a malformed body");
                if let Some(r) = recording {
                    r.metrics
                        .response(r.direction, StatusCode::BAD_REQUEST, started);
                }
                let answer = local_response(400, "Bad Request", &format!("{e}\n"), true);
                if write_message(&mut downstream, &answer, idle).await.is_ok() {
                    linger(downstream).await;
                }
                return;
            }
            Err(ExchangeError::Midway(e)) => {
                tracing::debug!(error = %e, "request failed after its response began");
                return;
            }
        }
        if pending.is_empty() {
            // Idle until the next request: hold no buffer meanwhile.
            pending = Vec::new();
        }
    }
}

struct Answered {
    status: u16,
    close: bool,
    /// Bytes written upstream (the request) and downstream (the response).
    forwarded: u64,
    returned: u64,
}

#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    /// The request's body was not valid chunked framing: the client gets a 400 (the
    /// upstream connection, which may have seen part of it, is dropped).
    #[error("{0}")]
    BadRequest(FramingError),
    /// Nothing was sent downstream yet: the client can be told with a 502.
    #[error("{0}")]
    BeforeResponse(io::Error),
    /// The response had begun: all that is left is to close.
    #[error("{0}")]
    Midway(io::Error),
}

fn authorized(
    head: &RequestHead,
    buf: &[u8],
    inbound: Option<&InboundContext>,
    recording: Option<&Recording>,
) -> bool {
    let Some(ctx) = inbound else { return true };
    let decision = ctx.policy.authorize(&PolicyRequest {
        namespace: &ctx.namespace,
        workload: &ctx.workload,
        port: ctx.port,
        peer: &ctx.peer,
        http: Some((head.method(buf), head.path(buf))),
    });
    if let Some(r) = recording {
        r.metrics.authorized(decision.allowed);
    }
    if !decision.allowed {
        tracing::info!(peer = ?ctx.peer, reason = %decision.reason, "request denied");
    }
    decision.allowed
}

/// Carries one request upstream and its response back. On return `pending` holds what the
/// client sent after the request (a pipelined next one).
async fn exchange<S>(
    downstream: &mut S,
    pending: &mut Vec<u8>,
    head: &mut RequestHead,
    pool: &Http1Pool,
    idle: Duration,
) -> Result<Answered, ExchangeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let before = ExchangeError::BeforeResponse;
    let mut request_body = BodyScanner::new(head.framing);
    let sent_now = request_body
        .advance(&pending[head.len..])
        .map_err(ExchangeError::BadRequest)?;
    let mut first_write = std::mem::take(&mut head.rewritten);
    first_write.extend_from_slice(&pending[head.len..head.len + sent_now]);
    pending.drain(..head.len + sent_now);
    let whole_request_sent = request_body.is_done();

    let mut forwarded = first_write.len() as u64;
    let mut lease = pool.checkout().await.map_err(before)?;
    let mut response = Vec::new();
    let mut attempt = write_message(&mut lease.stream, &first_write, idle).await;
    let mut body_refused = false;
    if whole_request_sent {
        // A request that failed to go out can be sent again; one that went out only if
        // sending it twice does no harm (RFC 9110 section 9.2.2).
        let resendable = attempt.is_err() || head.idempotent;
        if attempt.is_ok() {
            attempt = read_some(&mut lease.stream, &mut response, idle).await;
        }
        if attempt.is_err() && lease.reused && resendable {
            // The upstream closed the idle connection as the request went out: once more on
            // a new connection (the dead one's place under the cap given up first).
            drop(lease);
            lease = pool.open().await.map_err(before)?;
            write_message(&mut lease.stream, &first_write, idle)
                .await
                .map_err(before)?;
            response.clear();
            attempt = read_some(&mut lease.stream, &mut response, idle).await;
        }
        attempt.map_err(before)?;
    } else {
        attempt.map_err(before)?;
        // A client that expects 100 Continue sends its body only once told to.
        let go_ahead = !head.expects_continue
            || next_head(
                &mut lease.stream,
                &mut response,
                downstream,
                head,
                None,
                idle,
            )
            .await?
            .is_none();
        if go_ahead {
            let (_, copied) = copy_body(downstream, &mut lease.stream, request_body, pending, idle)
                .await
                .map_err(|e| match e {
                    CopyError::Framing(e) => ExchangeError::BadRequest(e),
                    CopyError::Io(e) => before(e),
                })?;
            forwarded += copied;
        } else {
            body_refused = true;
        }
    }
    let keeps_alive = head.keep_alive && !body_refused;
    let answer = next_head(
        &mut lease.stream,
        &mut response,
        downstream,
        head,
        Some(keeps_alive),
        idle,
    )
    .await?
    .ok_or_else(|| before(io::Error::other("no final response")))?;
    let body_start = answer.len;
    let mut response_body = BodyScanner::new(answer.framing);
    let sent_now = response_body
        .advance(response.get(body_start..).unwrap_or_default())
        .map_err(|e| before(io::Error::other(e)))?;
    // A body refused before it was sent leaves both connections out of step.
    let mut reusable = answer.reusable && !body_refused;
    let mut out = answer.rewritten;
    out.extend_from_slice(&response[body_start..body_start + sent_now]);
    let mut rest = response.split_off(body_start + sent_now);
    let midway = ExchangeError::Midway;
    write_message(downstream, &out, idle)
        .await
        .map_err(midway)?;
    let mut returned = out.len() as u64;
    if !response_body.is_done() {
        let (upstream_ended, copied) = copy_body(
            &mut lease.stream,
            downstream,
            response_body,
            &mut rest,
            idle,
        )
        .await
        .map_err(|e| midway(e.into()))?;
        reusable &= !upstream_ended;
        returned += copied;
    }
    // Bytes past the response's end were never asked for.
    if reusable && rest.is_empty() {
        pool.give_back(lease.stream);
    }
    Ok(Answered {
        status: answer.status,
        close: answer.close_downstream || body_refused,
        forwarded,
        returned,
    })
}

/// Reads response heads, passing interim ones (1xx) downstream as they come, up to the final
/// one, rewritten for a client that keeps its connection or not. Without that (`None`), the
/// client waits for a 100 Continue: `None` once it has been passed on. The final head stays
/// in `response`.
async fn next_head<S>(
    upstream: &mut UpstreamStream,
    response: &mut Vec<u8>,
    downstream: &mut S,
    head: &RequestHead,
    client_keeps_alive: Option<bool>,
    idle: Duration,
) -> Result<Option<ResponseHead>, ExchangeError>
where
    S: AsyncWrite + Unpin,
{
    loop {
        let keeps_alive = client_keeps_alive.unwrap_or(head.keep_alive);
        match parse_response(response, head.is_head, keeps_alive) {
            Ok(Some(answer)) if (100..200).contains(&answer.status) => {
                write_message(downstream, &answer.rewritten, idle)
                    .await
                    .map_err(ExchangeError::Midway)?;
                response.drain(..answer.len);
                if client_keeps_alive.is_none() && answer.status == 100 {
                    return Ok(None);
                }
            }
            Ok(Some(answer)) => return Ok(Some(answer)),
            Ok(None) => read_some(upstream, response, idle)
                .await
                .map_err(ExchangeError::BeforeResponse)?,
            Err(e) => return Err(ExchangeError::BeforeResponse(io::Error::other(e))),
        }
    }
}

/// How long a connection closed with input unread (a refused request's body) keeps reading
/// it: closing a socket with unread input resets the connection, and the reset can destroy
/// the answer before the client reads it (the lingering close of RFC 9112 section 9.6).
const LINGER: Duration = Duration::from_secs(1);

async fn linger<S>(mut downstream: S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let drain = async {
        let _ = downstream.shutdown().await;
        let mut discarded = Vec::new();
        while let Ok(1..) = read_appending(&mut downstream, &mut discarded).await {
            discarded.clear();
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Reads more into `buf` within `idle`; the end of the stream is an error here.
async fn read_some<R>(reader: &mut R, buf: &mut Vec<u8>, idle: Duration) -> io::Result<()>
where
    R: AsyncRead + Unpin,
{
    match within(idle, read_appending(reader, buf)).await? {
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        _ => Ok(()),
    }
}

/// Writes a whole message within `idle`: a peer that stops reading cannot hold the
/// connection (and its buffered bytes) forever.
async fn write_message<W>(writer: &mut W, bytes: &[u8], idle: Duration) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    within(idle, async {
        writer.write_all(bytes).await?;
        writer.flush().await
    })
    .await
}

/// `io`, or a `TimedOut` error once `limit` has passed. A timer is only registered when
/// `io` has to wait.
async fn within<T>(limit: Duration, io: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    tokio::time::timeout(limit, io)
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")))
}

#[derive(Debug, thiserror::Error)]
enum CopyError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Framing(#[from] FramingError),
}

impl From<CopyError> for io::Error {
    fn from(e: CopyError) -> Self {
        match e {
            CopyError::Io(e) => e,
            CopyError::Framing(e) => io::Error::other(e),
        }
    }
}

/// Copies the rest of a body from `from` to `to`, `carry` holding bytes already read (an
/// incomplete chunk line). Returns whether `from` ended (a body delimited by its close) and
/// the bytes copied. On return `carry` holds what followed the body.
async fn copy_body<R, W>(
    from: &mut R,
    to: &mut W,
    mut scanner: BodyScanner,
    carry: &mut Vec<u8>,
    idle: Duration,
) -> Result<(bool, u64), CopyError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(BODY_CHUNK.max(carry.len()));
    let mut copied = 0;
    buf.append(carry);
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(BODY_CHUNK);
        }
        let ended = within(idle, from.read_buf(&mut buf)).await? == 0;
        let n = scanner.advance(&buf)?;
        within(idle, to.write_all(&buf[..n])).await?;
        copied += n as u64;
        buf.drain(..n);
        if scanner.is_done() {
            to.flush().await?;
            *carry = buf;
            return Ok((false, copied));
        }
        if ended {
            to.flush().await?;
            return match scanner.until_close() {
                true => Ok((true, copied)),
                false => Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            };
        }
    }
}
