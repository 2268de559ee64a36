//! HTTP/1.1 message heads: parsed with httparse straight from the bytes read, checked for
//! what decides framing (the request smuggling cases of RFC 9112 section 6.3 are refused),
//! and rewritten for the next hop without the hop-by-hop headers (RFC 9110 section 7.6.1).
//! Nothing is decoded into owned header maps: the rewritten head is built by copying the
//! header lines that stay.

use std::io::Write;
use std::ops::Range;

use super::framing::Framing;

/// Most header lines accepted in one head (hyper's default is 100 too).
pub(crate) const MAX_HEADERS: usize = 100;
/// Largest head accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    #[error("malformed head: {0}")]
    Malformed(#[from] httparse::Error),
    #[error("head larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("{0}")]
    Framing(&'static str),
    #[error("{0} is not proxied")]
    Unsupported(&'static str),
}

/// A request head, complete in the buffer it was parsed from.
#[derive(Debug)]
pub(crate) struct RequestHead {
    /// Bytes of the head (the body, or the next request, follows).
    pub len: usize,
    method: Range<usize>,
    /// The target's path, without its query.
    path: Range<usize>,
    pub framing: Framing,
    /// Whether the client keeps the connection open after the response.
    pub keep_alive: bool,
    pub is_head: bool,
    /// Sending it twice has the effect of sending it once (RFC 9110 section 9.2.2).
    pub idempotent: bool,
    /// The client waits for a 100 Continue before it sends the body.
    pub expects_continue: bool,
    /// The head to send upstream: origin-form target, HTTP/1.1, no hop-by-hop headers.
    pub rewritten: Vec<u8>,
}

impl RequestHead {
    pub(crate) fn method<'b>(&self, buf: &'b [u8]) -> &'b str {
        as_str(&buf[self.method.clone()])
    }

    pub(crate) fn path<'b>(&self, buf: &'b [u8]) -> &'b str {
        as_str(&buf[self.path.clone()])
    }
}

/// A response head, complete in the buffer it was parsed from.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub len: usize,
    pub status: u16,
    pub framing: Framing,
    /// Whether the upstream connection can carry another request after this response.
    pub reusable: bool,
    /// Whether the downstream connection closes after this response.
    pub close_downstream: bool,
    /// The head to send downstream.
    pub rewritten: Vec<u8>,
}

fn as_str(bytes: &[u8]) -> &str {
    // httparse admits only visible ASCII in methods and targets.
    std::str::from_utf8(bytes).unwrap_or_default()
}

fn range_in(buf: &[u8], part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

/// Parses a request head at the start of `buf`; `None` until it is complete.
pub(crate) fn parse_request(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf)? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial if buf.len() >= MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge)
        }
        httparse::Status::Partial => return Ok(None),
    };
    let (method, target) = (
        request.method.unwrap_or_default(),
        request.path.unwrap_or_default(),
    );
    if method == "CONNECT" {
        return Err(HeadError::Unsupported("CONNECT"));
    }
    let lines = Lines::of(request.headers);
    let framing = match (lines.chunked()?, lines.content_length()?) {
        (Some(true), None) => Framing::Chunked,
        (Some(_), _) => {
            return Err(HeadError::Framing(
                "transfer-encoding not ending in chunked, or with content-length",
            ))
        }
        (None, Some(n)) => Framing::Length(n),
        (None, None) => Framing::Empty,
    };
    // Absolute form (a request to a proxy) becomes origin form; its authority the host.
    let (origin, authority) = match target.split_once("://") {
        Some((_, rest)) => match rest.find('/') {
            Some(slash) => (&rest[slash..], Some(&rest[..slash])),
            None => ("/", Some(rest)),
        },
        None => (target, None),
    };
    let path = origin.split_once('?').map_or(origin, |(path, _)| path);
    let mut rewritten = Vec::with_capacity(len + 32);
    for part in [method, " ", origin, " HTTP/1.1\r\n"] {
        rewritten.extend_from_slice(part.as_bytes());
    }
    if let (Some(authority), false) = (authority, lines.has("host")) {
        for part in ["host: ", authority, "\r\n"] {
            rewritten.extend_from_slice(part.as_bytes());
        }
    }
    lines.write_end_to_end(&mut rewritten);
    Ok(Some(RequestHead {
        len,
        method: range_in(buf, method),
        path: range_in(buf, path),
        framing,
        // HTTP/1.0 keep-alive is not offered: such a client gets its answer and a close.
        keep_alive: request.version == Some(1) && !lines.connection_has("close"),
        is_head: method == "HEAD",
        idempotent: matches!(
            method,
            "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
        ),
        expects_continue: framing != Framing::Empty
            && lines
                .tokens("expect")
                .any(|token| token.eq_ignore_ascii_case("100-continue")),
        rewritten,
    }))
}

/// Parses a response head at the start of `buf`, to a request that was a HEAD or not and
/// whose client keeps its connection or not; `None` until it is complete.
pub(crate) fn parse_response(
    buf: &[u8],
    to_head: bool,
    client_keeps_alive: bool,
) -> Result<Option<ResponseHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf)? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial if buf.len() >= MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge)
        }
        httparse::Status::Partial => return Ok(None),
    };
    let status = response.code.unwrap_or_default();
    let lines = Lines::of(response.headers);
    let framing = if to_head || (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::Empty
    } else {
        match (lines.chunked()?, lines.content_length()?) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) | (None, None) => Framing::UntilClose,
            (None, Some(n)) => Framing::Length(n),
        }
    };
    let reusable = response.version == Some(1)
        && !lines.connection_has("close")
        && framing != Framing::UntilClose;
    let close_downstream = !client_keeps_alive || framing == Framing::UntilClose;
    let mut rewritten = Vec::with_capacity(len + 32);
    // Into the head's own buffer: no string allocated per response.
    let _ = write!(rewritten, "HTTP/1.1 {status} ");
    rewritten.extend_from_slice(response.reason.unwrap_or_default().as_bytes());
    rewritten.extend_from_slice(b"\r\n");
    if close_downstream && !(100..200).contains(&status) {
        rewritten.extend_from_slice(b"connection: close\r\n");
    }
    lines.write_end_to_end(&mut rewritten);
    Ok(Some(ResponseHead {
        len,
        status,
        framing,
        reusable,
        close_downstream,
        rewritten,
    }))
}

/// A short response the proxy answers itself.
pub(crate) fn local_response(status: u16, reason: &str, body: &str, close: bool) -> Vec<u8> {
    let connection = if close { "connection: close\r\n" } else { "" };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n{connection}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Headers meaningful for one hop only. Transfer-Encoding is not among them here: bodies
/// pass through with their chunked framing, so it stays true on the next hop.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "upgrade",
];

/// A parsed head's header lines.
struct Lines<'h, 'b> {
    headers: &'h [httparse::Header<'b>],
}

impl<'h, 'b> Lines<'h, 'b> {
    fn of(headers: &'h [httparse::Header<'b>]) -> Self {
        Lines { headers }
    }

    fn values(&self, name: &'static str) -> impl Iterator<Item = &'b [u8]> + '_ {
        self.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    fn has(&self, name: &'static str) -> bool {
        self.values(name).next().is_some()
    }

    /// The comma-separated tokens of every `name` header.
    fn tokens(&self, name: &'static str) -> impl Iterator<Item = &'b str> + '_ {
        self.values(name)
            .flat_map(|value| as_str(value).split(','))
            .map(str::trim)
            .filter(|token| !token.is_empty())
    }

    fn connection_has(&self, option: &str) -> bool {
        self.tokens("connection")
            .any(|token| token.eq_ignore_ascii_case(option))
    }

    /// `Some(true)` when transfer codings are given and the last is chunked.
    fn chunked(&self) -> Result<Option<bool>, HeadError> {
        let mut last = None;
        for token in self.tokens("transfer-encoding") {
            last = Some(token.eq_ignore_ascii_case("chunked"));
        }
        if last.is_none() && self.has("transfer-encoding") {
            return Err(HeadError::Framing("empty transfer-encoding"));
        }
        Ok(last)
    }

    /// The content length; several headers must agree (RFC 9112 section 6.3, point 5).
    fn content_length(&self) -> Result<Option<u64>, HeadError> {
        let mut length = None;
        for token in self.tokens("content-length") {
            // Digits only: `parse` would also take a sign.
            let n = Some(token)
                .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or(HeadError::Framing("invalid content-length"))?;
            if length.is_some_and(|seen| seen != n) {
                return Err(HeadError::Framing("conflicting content-length headers"));
            }
            length = Some(n);
        }
        if length.is_none() && self.has("content-length") {
            return Err(HeadError::Framing("empty content-length"));
        }
        Ok(length)
    }

    /// Copies every end-to-end header line, then the blank line ending the head.
    fn write_end_to_end(&self, out: &mut Vec<u8>) {
        let connection_names: Vec<&str> = self.tokens("connection").collect();
        for header in self.headers {
            let hop = HOP_BY_HOP
                .iter()
                .chain(&connection_names)
                .any(|name| header.name.eq_ignore_ascii_case(name));
            if !hop {
                out.extend_from_slice(header.name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(header.value);
                out.extend_from_slice(b"\r\n");
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: &[u8]) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_request_is_rewritten_without_hop_by_hop_headers_and_keeps_its_body_framing() {
        let buf = b"POST /add?x=1 HTTP/1.1\r\nHost: calc\r\nConnection: keep-alive, X-Trace\r\n\
            Keep-Alive: timeout=5\r\nTE: trailers\r\nX-Trace: abc\r\nX-Request-Id: 7\r\n\
            Transfer-Encoding: chunked\r\n\r\n5\r\nhello";
        let head = parse_request(buf).unwrap().unwrap();
        assert_eq!(&buf[head.len..], b"5\r\nhello");
        assert_eq!((head.method(buf), head.path(buf)), ("POST", "/add"));
        assert_eq!(head.framing, Framing::Chunked);
        assert!(head.keep_alive && !head.is_head);
        assert_eq!(
            text(&head.rewritten),
            "POST /add?x=1 HTTP/1.1\r\nHost: calc\r\nX-Request-Id: 7\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        );
    }

    #[test]
    fn an_absolute_target_becomes_origin_form_with_its_authority_as_host() {
        let buf = b"GET http://calc:8080/sum?a=1 HTTP/1.1\r\nAccept: */*\r\n\r\n";
        let head = parse_request(buf).unwrap().unwrap();
        assert_eq!(head.path(buf), "/sum");
        assert_eq!(
            text(&head.rewritten),
            "GET /sum?a=1 HTTP/1.1\r\nhost: calc:8080\r\nAccept: */*\r\n\r\n"
        );
    }

    #[test]
    fn requests_that_could_smuggle_a_second_one_are_refused() {
        for buf in [
            &b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        ] {
            assert!(
                matches!(parse_request(buf), Err(HeadError::Framing(_))),
                "{}",
                text(buf)
            );
        }
        let agreeing = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(
            parse_request(agreeing).unwrap().unwrap().framing,
            Framing::Length(3)
        );
    }

    #[test]
    fn an_incomplete_head_waits_and_an_endless_one_is_refused() {
        assert!(parse_request(b"GET / HTTP/1.1\r\nHost: a")
            .unwrap()
            .is_none());
        let mut endless = b"GET / HTTP/1.1\r\nX: ".to_vec();
        endless.resize(MAX_HEAD_BYTES + 1, b'a');
        assert!(matches!(parse_request(&endless), Err(HeadError::TooLarge)));
    }

    #[test]
    fn http_1_0_and_connection_close_end_the_client_connection() {
        let old = parse_request(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        let closing = parse_request(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!old.keep_alive && !closing.keep_alive);
        let response = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            false,
            false,
        )
        .unwrap()
        .unwrap();
        assert!(response.close_downstream && response.reusable);
        assert_eq!(
            text(&response.rewritten),
            "HTTP/1.1 200 OK\r\nconnection: close\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn a_response_body_is_framed_by_the_request_and_status_too() {
        let frame = |head: &[u8], to_head: bool| {
            parse_response(head, to_head, true)
                .unwrap()
                .unwrap()
                .framing
        };
        let sized = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n";
        assert_eq!(frame(sized, false), Framing::Length(12));
        assert_eq!(frame(sized, true), Framing::Empty);
        assert_eq!(
            frame(
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 12\r\n\r\n",
                false
            ),
            Framing::Empty
        );
        assert_eq!(
            frame(b"HTTP/1.1 100 Continue\r\n\r\n", false),
            Framing::Empty
        );
        let unsized_ = parse_response(b"HTTP/1.1 200 OK\r\n\r\n", false, true)
            .unwrap()
            .unwrap();
        assert_eq!(unsized_.framing, Framing::UntilClose);
        assert!(!unsized_.reusable && unsized_.close_downstream);
    }
}
