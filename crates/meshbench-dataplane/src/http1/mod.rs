//! The L7 proxy's HTTP/1.1 path, built like HAProxy's and Envoy's codecs rather than on a
//! general HTTP library: each request head is parsed in place (httparse), authorized by its
//! method and path, rewritten for the next hop and sent with the start of its body; bodies
//! pass through unchanged in both directions, framed only to find their end. An idle
//! connection holds no buffer and no parser state (hyper kept 24 KiB of buffers per idle
//! connection), and a request costs a handful of small allocations.

mod framing;
mod head;
mod pool;

use std::io;
use std::time::Instant;

use http::StatusCode;
use meshbench_policy::Request as PolicyRequest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::l7::{InboundContext, Recording};
use crate::splice::read_appending;
use framing::{BodyScanner, Framing};
use head::{local_response, parse_request, parse_response, HeadError, RequestHead};
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
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let head = loop {
            match parse_request(&pending) {
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "refusing a malformed request");
                    let (status, reason) = match e {
                        HeadError::Unsupported(_) => (501, "Not Implemented"),
                        HeadError::TooLarge => (431, "Request Header Fields Too Large"),
                        _ => (400, "Bad Request"),
                    };
                    let answer = local_response(status, reason, &format!("{e}\n"), true);
                    let _ = write_message(&mut downstream, &answer).await;
                    return;
                }
            }
            // End of stream between requests, or in the middle of one: nothing to answer.
            match read_appending(&mut downstream, &mut pending).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let started = Instant::now();
        let outcome = if authorized(&head, &pending, inbound, recording) {
            exchange(&mut downstream, &mut pending, &head, pool).await
        } else {
            // The body was not read: the connection cannot carry another request.
            let close = !head.keep_alive || head.framing != Framing::Empty;
            let answer = local_response(403, "Forbidden", "RBAC: access denied\n", close);
            pending.drain(..head.len);
            write_message(&mut downstream, &answer)
                .await
                .map(|()| Answered { status: 403, close })
                .map_err(ExchangeError::Midway)
        };
        match outcome {
            Ok(answered) => {
                if let Some(r) = recording {
                    let status =
                        StatusCode::from_u16(answered.status).unwrap_or(StatusCode::BAD_GATEWAY);
                    r.metrics.response(r.direction, status, started);
                }
                if answered.close {
                    let _ = downstream.shutdown().await;
                    return;
                }
            }
            Err(ExchangeError::BeforeResponse(e)) => {
                tracing::debug!(error = %e, "upstream request failed");
                if let Some(r) = recording {
                    r.metrics
                        .response(r.direction, StatusCode::BAD_GATEWAY, started);
                }
                let answer = local_response(502, "Bad Gateway", "upstream connect error\n", true);
                let _ = write_message(&mut downstream, &answer).await;
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
}

#[derive(Debug, thiserror::Error)]
enum ExchangeError {
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
    head: &RequestHead,
    pool: &Http1Pool,
) -> Result<Answered, ExchangeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let before = ExchangeError::BeforeResponse;
    let mut request_body = BodyScanner::new(head.framing);
    let sent_now = request_body
        .advance(&pending[head.len..])
        .map_err(|e| before(io::Error::other(e)))?;
    let mut first_write = head.rewritten.clone();
    first_write.extend_from_slice(&pending[head.len..head.len + sent_now]);
    pending.drain(..head.len + sent_now);
    let whole_request_sent = request_body.is_done();

    let mut lease = pool.checkout().await.map_err(before)?;
    let mut response = Vec::new();
    let mut attempt = write_message(&mut lease.stream, &first_write).await;
    if attempt.is_ok() && !whole_request_sent {
        attempt = copy_body(downstream, &mut lease.stream, request_body, pending)
            .await
            .map(|_| ());
    }
    if attempt.is_ok() {
        attempt = read_some(&mut lease.stream, &mut response).await;
    }
    if attempt.is_err() && lease.reused && whole_request_sent {
        // The upstream closed the idle connection as the request went out: once more on a
        // new connection, as hyper's client does with a request that was never answered.
        lease = pool.open().await.map_err(before)?;
        write_message(&mut lease.stream, &first_write)
            .await
            .map_err(before)?;
        response.clear();
        attempt = read_some(&mut lease.stream, &mut response).await;
    }
    attempt.map_err(before)?;

    let midway = ExchangeError::Midway;
    let (answer, body_start) = loop {
        match parse_response(&response, head.is_head, head.keep_alive) {
            Ok(Some(answer)) if (100..200).contains(&answer.status) => {
                // 100 Continue and other interim answers go straight through.
                write_message(downstream, &answer.rewritten)
                    .await
                    .map_err(midway)?;
                response.drain(..answer.len);
            }
            Ok(Some(answer)) => {
                let len = answer.len;
                break (answer, len);
            }
            Ok(None) => read_some(&mut lease.stream, &mut response)
                .await
                .map_err(before)?,
            Err(e) => return Err(before(io::Error::other(e))),
        }
    };
    let mut response_body = BodyScanner::new(answer.framing);
    let sent_now = response_body
        .advance(&response[body_start..])
        .map_err(|e| before(io::Error::other(e)))?;
    let mut reusable = answer.reusable;
    let mut out = answer.rewritten;
    out.extend_from_slice(&response[body_start..body_start + sent_now]);
    let mut rest = response.split_off(body_start + sent_now);
    write_message(downstream, &out).await.map_err(midway)?;
    if !response_body.is_done() {
        let upstream_ended = copy_body(&mut lease.stream, downstream, response_body, &mut rest)
            .await
            .map_err(midway)?;
        reusable &= !upstream_ended;
    }
    // Bytes past the response's end were never asked for.
    if reusable && rest.is_empty() {
        pool.give_back(lease.stream);
    }
    Ok(Answered {
        status: answer.status,
        close: answer.close_downstream,
    })
}

/// Reads more into `buf`; the end of the stream is an error here.
async fn read_some<R>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<()>
where
    R: AsyncRead + Unpin,
{
    match read_appending(reader, buf).await? {
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        _ => Ok(()),
    }
}

async fn write_message<W>(writer: &mut W, bytes: &[u8]) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    writer.write_all(bytes).await?;
    writer.flush().await
}

/// Copies the rest of a body from `from` to `to`, `carry` holding bytes already read (an
/// incomplete chunk line). Returns whether `from` ended (a body delimited by its close). On
/// return `carry` holds what followed the body.
async fn copy_body<R, W>(
    from: &mut R,
    to: &mut W,
    mut scanner: BodyScanner,
    carry: &mut Vec<u8>,
) -> io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(BODY_CHUNK.max(carry.len()));
    buf.append(carry);
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(BODY_CHUNK);
        }
        let ended = from.read_buf(&mut buf).await? == 0;
        let n = scanner.advance(&buf).map_err(io::Error::other)?;
        to.write_all(&buf[..n]).await?;
        buf.drain(..n);
        if scanner.is_done() {
            to.flush().await?;
            *carry = buf;
            return Ok(false);
        }
        if ended {
            to.flush().await?;
            return match scanner.until_close() {
                true => Ok(true),
                false => Err(io::ErrorKind::UnexpectedEof.into()),
            };
        }
    }
}
