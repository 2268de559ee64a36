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
    /// The target's path, without its query; `None` for an absolute target with no path
    /// (`http://web`), whose path is `/`.
    path: Option<Range<usize>>,
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
        buf.get(self.method.clone()).map_or("", as_str)
    }

    /// Adds a header line to the rewritten head (before its blank line).
    pub(crate) fn add_header(&mut self, name: &str, value: &str) {
        let end = self.rewritten.len().saturating_sub(2);
        let line = [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"].concat();
        self.rewritten.splice(end..end, line);
    }

    pub(crate) fn path<'b>(&self, buf: &'b [u8]) -> &'b str {
        match &self.path {
            Some(range) => buf.get(range.clone()).map_or("/", as_str),
            None => "/",
        }
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

/// Where `part`, a slice that httparse took from `buf`, lies in it.
fn range_in(buf: &[u8], part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(buf.as_ptr() as usize)?;
    let range = start..start.checked_add(part.len())?;
    (range.end <= buf.len()).then_some(range)
}

/// The length of the head httparse read from `buf`, `None` while it is incomplete, and an
/// error once it is longer than [`MAX_HEAD_BYTES`] complete or not.
fn head_length(buf: &[u8], parsed: httparse::Status<usize>) -> Result<Option<usize>, HeadError> {
    match parsed {
        httparse::Status::Complete(len) if len <= MAX_HEAD_BYTES => Ok(Some(len)),
        httparse::Status::Partial if buf.len() < MAX_HEAD_BYTES => Ok(None),
        _ => Err(HeadError::TooLarge),
    }
}

/// Parses a request head at the start of `buf`; `None` until it is complete.
pub(crate) fn parse_request(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let Some(len) = head_length(buf, request.parse(buf)?)? else {
        return Ok(None);
    };
    let (method, target) = (
        request.method.unwrap_or_default(),
        request.path.unwrap_or_default(),
    );
    if method == "CONNECT" {
        return Err(HeadError::Unsupported("CONNECT"));
    }
    let lines = Lines::of(request.headers);
    lines.refuse_nominated_end_to_end()?;
    let framing = match (lines.chunked()?, lines.content_length()?) {
        // RFC 9112 section 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing.
        (Some(_), _) if request.version != Some(1) => {
            return Err(HeadError::Framing(
                "transfer-encoding in an HTTP/1.0 request",
            ))
        }
        (Some(true), None) => Framing::Chunked,
        (Some(_), _) => {
            return Err(HeadError::Framing(
                "transfer-encoding not ending in chunked, or with content-length",
            ))
        }
        (None, Some(n)) => Framing::Length(n),
        (None, None) => Framing::Empty,
    };
    let target = RequestTarget::parse(method, target)?;
    let hosts = lines.values("host").count();
    if hosts > 1 {
        return Err(HeadError::Framing("more than one host header"));
    }
    if let Some(host) = lines.values("host").next() {
        if !valid_authority(host) {
            return Err(HeadError::Framing("invalid host header"));
        }
    }
    // RFC 9112 section 3.2: an HTTP/1.1 request without Host is refused, unless its target
    // names the authority.
    if hosts == 0 && request.version == Some(1) && target.authority.is_none() {
        return Err(HeadError::Framing("no host header"));
    }
    let mut rewritten = Vec::with_capacity(len + 32);
    for part in [
        method,
        " ",
        target.origin_prefix,
        target.origin,
        " HTTP/1.1\r\n",
    ] {
        rewritten.extend_from_slice(part.as_bytes());
    }
    // RFC 9112 section 3.2.2: an absolute target's authority replaces any Host header.
    if let Some(authority) = target.authority {
        for part in ["host: ", authority, "\r\n"] {
            rewritten.extend_from_slice(part.as_bytes());
        }
    }
    let skip_host = target.authority.is_some();
    lines.write_end_to_end(&mut rewritten, framing, |name| {
        skip_host && name.eq_ignore_ascii_case("host")
    });
    Ok(Some(RequestHead {
        len,
        method: range_in(buf, method).ok_or(HeadError::Framing("method outside the head"))?,
        path: match target.path {
            "" => None,
            path => Some(range_in(buf, path).ok_or(HeadError::Framing("path outside the head"))?),
        },
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
                .any(|token| token.eq_ignore_ascii_case(b"100-continue")),
        rewritten,
    }))
}

/// A request target in the forms a proxy accepts (RFC 9112 section 3.2): origin form
/// (`/path?query`), absolute form (`http://authority/path?query`, what a client sends to a
/// proxy) and asterisk form (`*`, for OPTIONS). CONNECT's authority form is refused earlier.
struct RequestTarget<'b> {
    /// The absolute form's authority, which becomes the Host.
    authority: Option<&'b str>,
    /// Written before `origin` upstream: `/` when the absolute form has no path.
    origin_prefix: &'static str,
    /// Path and query as sent upstream (after `origin_prefix`).
    origin: &'b str,
    /// The path without its query, a slice of the head; empty for `/` implied.
    path: &'b str,
}

impl<'b> RequestTarget<'b> {
    fn parse(method: &str, target: &'b str) -> Result<Self, HeadError> {
        let invalid = HeadError::Framing("invalid request target");
        // A fragment is never sent (RFC 9110 section 4.2.4); httparse lets `#` through.
        if target.contains('#') {
            return Err(invalid);
        }
        if target.starts_with('/') {
            return Ok(RequestTarget {
                authority: None,
                origin_prefix: "",
                origin: target,
                path: target.split_once('?').map_or(target, |(path, _)| path),
            });
        }
        if target == "*" {
            return match method {
                "OPTIONS" => Ok(RequestTarget {
                    authority: None,
                    origin_prefix: "",
                    origin: target,
                    path: target,
                }),
                _ => Err(invalid),
            };
        }
        // Only a target that starts with a scheme is in absolute form: `://` elsewhere (in a
        // query, say) is data.
        let (scheme, rest) = target
            .split_once("://")
            .ok_or(HeadError::Framing("invalid request target"))?;
        if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
            return Err(invalid);
        }
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, origin) = rest.split_at(authority_end);
        if authority.is_empty() || !valid_authority(authority.as_bytes()) {
            return Err(HeadError::Framing(
                "invalid authority in the request target",
            ));
        }
        let (origin_prefix, path) = match origin.as_bytes().first() {
            Some(b'/') => ("", origin.split_once('?').map_or(origin, |(path, _)| path)),
            // `http://web` or `http://web?q`: the path is `/`.
            _ => ("/", ""),
        };
        Ok(RequestTarget {
            authority: Some(authority),
            origin_prefix,
            origin,
            path,
        })
    }
}

/// A Host value or an absolute target's authority: `host[:port]` with the characters RFC
/// 3986 allows there, and no userinfo (`user@host` is how targets are made to look like
/// other hosts).
fn valid_authority(value: &[u8]) -> bool {
    value.iter().all(|&b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'%'
                    | b'['
                    | b']'
            )
    })
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
    let Some(len) = head_length(buf, response.parse(buf)?)? else {
        return Ok(None);
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
    lines.write_end_to_end(&mut rewritten, framing, |_| false);
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

/// Headers that frame or route a message: a `Connection` header naming one of them would
/// make the next hop frame or route it otherwise than the proxy did, the start of request
/// smuggling. A request doing that is refused; in a response the nomination is ignored.
const NEVER_HOP_BY_HOP: [&str; 3] = ["content-length", "transfer-encoding", "host"];

/// Headers that state a client's identity to the app. Whatever a client says there is
/// dropped; an inbound proxy sets them from the certificate it verified (Envoy's
/// `SANITIZE_SET`), so the app can trust what it reads.
pub(crate) const IDENTITY_HEADERS: [&str; 2] = ["x-forwarded-client-cert", "x-meshbench-identity"];

/// Optional whitespace around list elements and values (RFC 9110 section 5.6.3): space and
/// tab only. Unicode whitespace (`chunked\u{a0}`) is not whitespace in HTTP.
fn trim_ows(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != b' ' && b != b'\t');
    let end = bytes.iter().rposition(|&b| b != b' ' && b != b'\t');
    match (start, end) {
        (Some(start), Some(end)) => &bytes[start..=end],
        _ => &[],
    }
}

/// A token (RFC 9110 section 5.6.2).
fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes.iter().all(|&b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

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

    /// The comma-separated elements of every `name` header, without their optional
    /// whitespace; empty elements are skipped (RFC 9110 section 5.6.1).
    fn tokens(&self, name: &'static str) -> impl Iterator<Item = &'b [u8]> + '_ {
        self.values(name)
            .flat_map(|value| value.split(|&b| b == b','))
            .map(trim_ows)
            .filter(|token| !token.is_empty())
    }

    fn connection_has(&self, option: &str) -> bool {
        self.tokens("connection")
            .any(|token| token.eq_ignore_ascii_case(option.as_bytes()))
    }

    /// Refuses a `Connection` header that names a framing or routing header.
    fn refuse_nominated_end_to_end(&self) -> Result<(), HeadError> {
        let nominated = self.tokens("connection").any(|token| {
            NEVER_HOP_BY_HOP
                .iter()
                .any(|name| token.eq_ignore_ascii_case(name.as_bytes()))
        });
        match nominated {
            true => Err(HeadError::Framing(
                "connection header names content-length, transfer-encoding or host",
            )),
            false => Ok(()),
        }
    }

    /// `Some(true)` when transfer codings are given and the last is chunked. Each coding
    /// must be a token, and chunked may only be the last (RFC 9112 section 7).
    fn chunked(&self) -> Result<Option<bool>, HeadError> {
        let mut last = None;
        for token in self.tokens("transfer-encoding") {
            // A coding may carry parameters (`gzip;q=1` is not one, but extensions are).
            let name = trim_ows(token.split(|&b| b == b';').next().unwrap_or_default());
            if !is_token(name) {
                return Err(HeadError::Framing("invalid transfer-encoding"));
            }
            if last == Some(true) {
                return Err(HeadError::Framing("a transfer coding after chunked"));
            }
            last = Some(name.eq_ignore_ascii_case(b"chunked"));
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
                .filter(|t| t.iter().all(u8::is_ascii_digit))
                .and_then(|t| std::str::from_utf8(t).ok())
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

    /// Copies every end-to-end header line except those `skip` names and the client's
    /// identity headers, writes the framing the proxy used to find the body's end, then the
    /// blank line ending the head. A body framed by its length gets one `content-length`
    /// with that length (never a copy of the peer's lines, so the next hop cannot frame it
    /// otherwise); chunked and until-close bodies keep their transfer codings and lose any
    /// content-length (RFC 9112 section 6.3, point 3); bodies that are empty by status or
    /// method keep their lines as sent, since those describe another message.
    fn write_end_to_end(&self, out: &mut Vec<u8>, framing: Framing, skip: impl Fn(&str) -> bool) {
        let connection_names: Vec<&[u8]> = self
            .tokens("connection")
            .filter(|token| {
                !NEVER_HOP_BY_HOP
                    .iter()
                    .any(|name| token.eq_ignore_ascii_case(name.as_bytes()))
            })
            .collect();
        for header in self.headers {
            let name = header.name;
            let hop = HOP_BY_HOP
                .iter()
                .chain(&IDENTITY_HEADERS)
                .any(|hop| name.eq_ignore_ascii_case(hop))
                || connection_names
                    .iter()
                    .any(|hop| name.as_bytes().eq_ignore_ascii_case(hop));
            let framed_by_us =
                name.eq_ignore_ascii_case("content-length") && framing != Framing::Empty;
            if !hop && !framed_by_us && !skip(name) {
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(header.value);
                out.extend_from_slice(b"\r\n");
            }
        }
        if let Framing::Length(n) = framing {
            let _ = write!(out, "content-length: {n}\r\n");
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

    /// `buf` parses as a request for `path`, forwarded as `rewritten`.
    fn assert_rewritten(buf: &[u8], path: &str, rewritten: &str) {
        let head = parse_request(buf).unwrap().unwrap();
        assert_eq!(head.path(buf), path);
        assert_eq!(text(&head.rewritten), rewritten);
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
        assert_rewritten(
            b"GET http://calc:8080/sum?a=1 HTTP/1.1\r\nAccept: */*\r\n\r\n",
            "/sum",
            "GET /sum?a=1 HTTP/1.1\r\nhost: calc:8080\r\nAccept: */*\r\n\r\n",
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
        let agreeing =
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
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
        let closing = parse_request(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
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
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
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

    fn refused(buf: &[u8]) -> bool {
        matches!(parse_request(buf), Err(HeadError::Framing(_)))
    }

    #[test]
    fn a_connection_header_never_removes_framing_or_routing() {
        for nominated in [
            "content-length",
            "Transfer-Encoding",
            "host",
            "x, content-length",
        ] {
            let buf = format!(
                "POST / HTTP/1.1\r\nHost: a\r\nConnection: {nominated}\r\nContent-Length: 3\r\n\r\nabc"
            );
            assert!(refused(buf.as_bytes()), "{nominated}");
        }
        // A response's nomination is ignored: the framing the proxy used is written.
        let response = parse_response(
            b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 2\r\n\r\nok",
            false,
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(response.framing, Framing::Length(2));
        assert_eq!(
            text(&response.rewritten),
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
        );
    }

    #[test]
    fn the_proxy_writes_the_length_it_framed_the_body_by() {
        let buf =
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\ncontent-length:  3\r\n\r\nabc";
        let head = parse_request(buf).unwrap().unwrap();
        assert_eq!(
            text(&head.rewritten),
            "POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 3\r\n\r\n"
        );
        // Chunked wins over a length only in a response, and the length is dropped.
        let response = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(response.framing, Framing::Chunked);
        assert_eq!(
            text(&response.rewritten),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
    }

    #[test]
    fn only_ascii_whitespace_is_whitespace_in_framing_headers() {
        assert!(refused(
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\u{a0}\r\n\r\n".as_bytes()
        ));
        assert!(refused(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\u{a0}\r\n\r\n".as_bytes()
        ));
        assert!(refused(
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
        ));
        assert!(refused(
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
        ));
        let tabbed = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\t3\t\r\n\r\n";
        assert_eq!(
            parse_request(tabbed).unwrap().unwrap().framing,
            Framing::Length(3)
        );
    }

    #[test]
    fn request_targets_are_read_only_in_the_forms_a_proxy_accepts() {
        // Absolute form without a path: the path is `/` (this used to panic).
        assert_rewritten(
            b"GET http://web HTTP/1.1\r\n\r\n",
            "/",
            "GET / HTTP/1.1\r\nhost: web\r\n\r\n",
        );
        // The target's authority replaces the Host header.
        assert_rewritten(
            b"GET http://web?q=1 HTTP/1.1\r\nHost: other\r\n\r\n",
            "/",
            "GET /?q=1 HTTP/1.1\r\nhost: web\r\n\r\n",
        );
        // `://` in a query is data, not an authority.
        let buf = b"GET /go?to=http://evil/admin HTTP/1.1\r\nHost: calc\r\n\r\n";
        let head = parse_request(buf).unwrap().unwrap();
        assert_eq!(head.path(buf), "/go");
        assert!(text(&head.rewritten)
            .starts_with("GET /go?to=http://evil/admin HTTP/1.1\r\nHost: calc\r\n"));
        let options = parse_request(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert!(options.is_some());
        for bad in [
            &b"GET * HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"GET admin HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET http://user@web/ HTTP/1.1\r\n\r\n",
            b"GET ftp://web/ HTTP/1.1\r\n\r\n",
            b"GET http:///x HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            b"GET /#frag HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert!(refused(bad), "{}", text(bad));
        }
    }

    #[test]
    fn a_clients_identity_headers_never_pass() {
        let buf = b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Client-Cert: URI=spiffe://x/y\r\n\
            x-meshbench-identity: spiffe://x/y\r\n\r\n";
        let mut head = parse_request(buf).unwrap().unwrap();
        assert_eq!(text(&head.rewritten), "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        head.add_header(
            "x-meshbench-identity",
            "spiffe://cluster.local/ns/app/sa/web",
        );
        assert_eq!(
            text(&head.rewritten),
            "GET / HTTP/1.1\r\nHost: a\r\nx-meshbench-identity: spiffe://cluster.local/ns/app/sa/web\r\n\r\n"
        );
    }
}
