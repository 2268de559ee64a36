//! Property tests of the HTTP/1.1 codec, the differential test of request smuggling among them:
//! no input panics the parsers, a body's end does not depend on how its bytes were split
//! across reads, and every request the proxy forwards is framed, for an independent strict
//! parser written here, exactly as the proxy framed it: the same head end, the same body end,
//! nothing left over that the next hop could read as a second request. Requests are drawn from
//! the fragments request smuggling is made of (duplicate and signed lengths, transfer codings
//! with odd whitespace, Connection nominations, absolute targets, bare line feeds), and the
//! committed corpus (`corpus/http1-requests/`) is replayed through the same checks.

use proptest::prelude::*;

use super::framing::{BodyScanner, Framing};
use super::head::{parse_request, parse_response};

/// What the proxy sends upstream for `input`: its rewritten head and the body bytes it framed;
/// `None` when it refuses the request or waits for more.
fn forwarded(input: &[u8]) -> Option<Vec<u8>> {
    let head = parse_request(input).ok()??;
    let rest = &input[head.len..];
    let mut scanner = BodyScanner::new(head.framing);
    let n = scanner.advance(rest).ok()?;
    if !scanner.is_done() {
        return None;
    }
    let mut out = head.rewritten.clone();
    out.extend_from_slice(&rest[..n]);
    Some(out)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// An independent strict reading of one request message at the start of `bytes`: CRLF line
/// ends only, one Host at most, framing by exactly one of a digits-only Content-Length or a
/// Transfer-Encoding ending in chunked (decoded strictly); returns the message's length.
fn strict_message_len(bytes: &[u8]) -> Result<usize, String> {
    let head_end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of head")?;
    let head = &bytes[..head_end];
    for (i, &b) in head.iter().enumerate() {
        let bare_lf = b == b'\n' && (i == 0 || head[i - 1] != b'\r');
        let bare_cr = b == b'\r' && head.get(i + 1) != Some(&b'\n');
        if bare_lf || bare_cr {
            return Err(format!("bare line end at {i}"));
        }
    }
    // Field values may carry obs-text; lengths come from the bytes, not from this text.
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let start: Vec<&str> = lines.next().unwrap_or_default().split(' ').collect();
    let [method, target, "HTTP/1.1"] = start.as_slice() else {
        return Err(format!("start line {start:?}"));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err("method".into());
    }
    if !(target.starts_with('/') || *target == "*") {
        return Err(format!("target {target:?} not in origin form"));
    }
    let (mut lengths, mut codings, mut hosts) = (vec![], vec![], 0);
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(format!("line {line:?}"))?;
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(format!("header name {name:?}"));
        }
        let value = value.trim_matches([' ', '\t']);
        if value.bytes().any(|b| b < b' ' && b != b'\t' || b == 0x7f) {
            return Err(format!("control character in {name}"));
        }
        match name.to_ascii_lowercase().as_str() {
            "content-length" => lengths.push(value.to_owned()),
            "transfer-encoding" => codings.extend(
                value
                    .split(',')
                    .map(|c| c.trim_matches([' ', '\t']).to_ascii_lowercase())
                    .filter(|c| !c.is_empty()),
            ),
            "host" => hosts += 1,
            "connection" => {
                for token in value.split(',') {
                    let token = token.trim_matches([' ', '\t']).to_ascii_lowercase();
                    if ["content-length", "transfer-encoding", "host"].contains(&token.as_str()) {
                        return Err(format!("connection names {token}"));
                    }
                }
            }
            _ => {}
        }
    }
    if hosts > 1 {
        return Err("several hosts".into());
    }
    let body_start = head_end + 4;
    let body_len = match (lengths.as_slice(), codings.last()) {
        ([], None) => 0,
        ([length], None) if length.bytes().all(|b| b.is_ascii_digit()) => {
            length.parse::<usize>().map_err(|e| e.to_string())?
        }
        ([], Some(last)) if last.split(';').next() == Some("chunked") => {
            strict_chunked_len(&bytes[body_start..])?
        }
        _ => return Err(format!("framing {lengths:?} {codings:?}")),
    };
    if bytes.len() < body_start + body_len {
        return Err("body cut short".into());
    }
    Ok(body_start + body_len)
}

fn strict_chunked_len(body: &[u8]) -> Result<usize, String> {
    let mut at = 0;
    let line = |at: usize| -> Result<&[u8], String> {
        let end = body[at..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk line without CRLF")?;
        let line = &body[at..at + end];
        if line.contains(&b'\n') || line.contains(&b'\r') {
            return Err("bare line end in a chunk line".into());
        }
        Ok(line)
    };
    loop {
        let size_line = line(at)?;
        at += size_line.len() + 2;
        let digits = size_line
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        let size = usize::from_str_radix(std::str::from_utf8(digits).unwrap_or("x"), 16)
            .map_err(|e| format!("chunk size: {e}"))?;
        if size == 0 {
            loop {
                let trailer = line(at)?;
                at += trailer.len() + 2;
                if trailer.is_empty() {
                    return Ok(at);
                }
            }
        }
        at += size;
        if body.get(at..at + 2) != Some(b"\r\n") {
            return Err("chunk data not followed by CRLF".into());
        }
        at += 2;
    }
}

/// The proxy's framing, checked by the strict parser: the whole forwarded message is one
/// request, no more and no less.
fn check_differential(input: &[u8]) -> Result<(), TestCaseError> {
    if let Some(out) = forwarded(input) {
        let strict = strict_message_len(&out);
        prop_assert_eq!(
            strict,
            Ok(out.len()),
            "forwarded {:?} from {:?}",
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(input)
        );
    }
    Ok(())
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "HEAD", "OPTIONS", "DELETE"];
const TARGETS: &[&str] = &[
    "/",
    "/a?b=c",
    "http://web",
    "http://web/x?y",
    "HTTP://Web:80?q",
    "/go?u=http://evil/admin",
    "*",
    "http://a@b/",
    "/admin",
];
const VERSIONS: &[&str] = &["HTTP/1.1", "HTTP/1.0"];
const HEADERS: &[&str] = &[
    "Host: calc",
    "host:calc",
    "Host: a b",
    "Host: a@b",
    "Host:",
    "Content-Length: 5",
    "Content-Length: 0",
    "content-length:5",
    "Content-Length: 05",
    "Content-Length: +5",
    "Content-Length: 5, 5",
    "Content-Length: 5,6",
    "Content-Length: \t5 \t",
    "Content-Length: 5\u{a0}",
    "Content-Length: 99999999999999999999",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: Chunked",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked, gzip",
    "Transfer-Encoding: chunked\u{a0}",
    "Transfer-Encoding:  chunked ",
    "Transfer-Encoding: xchunked",
    "Transfer-Encoding: ",
    "Transfer-Encoding: chunked;a=b",
    "Transfer-Encoding: identity",
    "Connection: close",
    "Connection: keep-alive, x-a",
    "Connection: content-length",
    "Connection: Transfer-Encoding",
    "Connection: host",
    "Connection: , te",
    "X-A: 1",
    "Expect: 100-continue",
    "Keep-Alive: 5",
    "TE: trailers",
    "Upgrade: h2c",
    "X-Forwarded-Client-Cert: URI=spiffe://evil/x",
];
const BODIES: &[&str] = &[
    "",
    "hello",
    "5\r\nhello\r\n0\r\n\r\n",
    "5;e=1\r\nhello\r\n0\r\nT: 1\r\n\r\n",
    "0\r\n\r\n",
    "5\nhello\r\n0\r\n\r\n",
    "5\r\nhello\r\n0\r\nT: 1\n\r\n",
    "\r\nhello",
    "GET /admin HTTP/1.1\r\nHost: calc\r\n\r\n",
    "ffffffffffffffffff\r\n",
    "3\r\nabc\r\n0\r\n\r\nGET /admin HTTP/1.1\r\n\r\n",
    "5\r\nhello\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: calc\r\n\r\n",
];

prop_compose! {
    /// A request built from smuggling's fragments, its lines ended by CRLF or now and then
    /// by a bare LF.
    fn request()(
        method in prop::sample::select(METHODS),
        target in prop::sample::select(TARGETS),
        version in prop::sample::select(VERSIONS),
        headers in prop::collection::vec((prop::sample::select(HEADERS), prop::bool::weighted(0.1)), 0..7),
        body in prop::sample::select(BODIES),
    ) -> Vec<u8> {
        let mut out = format!("{method} {target} {version}\r\n");
        for (header, bare_lf) in headers {
            out.push_str(header);
            out.push_str(if bare_lf { "\n" } else { "\r\n" });
        }
        out.push_str("\r\n");
        out.push_str(body);
        out.into_bytes()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn every_forwarded_request_frames_as_a_strict_parser_reads_it(input in request()) {
        check_differential(&input)?;
    }

    #[test]
    fn no_bytes_panic_the_parsers(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_request(&bytes);
        let _ = parse_response(&bytes, false, true);
        for framing in [Framing::Chunked, Framing::Length(7), Framing::UntilClose] {
            let _ = BodyScanner::new(framing).advance(&bytes);
        }
    }

    #[test]
    fn mutated_requests_never_panic_and_still_frame_strictly(
        input in request(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut input = input;
        for (at, byte) in flips {
            let at = at.index(input.len());
            input[at] = byte;
        }
        let _ = parse_response(&input, false, true);
        check_differential(&input)?;
    }

    #[test]
    fn a_bodys_end_does_not_depend_on_how_it_was_read(
        body in prop::sample::select(BODIES),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let bytes = body.as_bytes();
        let whole = {
            let mut scanner = BodyScanner::new(Framing::Chunked);
            scanner.advance(bytes).map(|n| (n, scanner.is_done()))
        };
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut scanner = BodyScanner::new(Framing::Chunked);
        let (mut pending, mut consumed, mut last) = (Vec::new(), 0, 0);
        let mut result = Ok(());
        for point in points.into_iter().chain([bytes.len()]) {
            pending.extend_from_slice(&bytes[last..point]);
            last = point;
            match scanner.advance(&pending) {
                Ok(n) => {
                    consumed += n;
                    pending.drain(..n);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            if scanner.is_done() {
                break;
            }
        }
        match (whole, result) {
            (Ok((n, done)), Ok(())) => {
                prop_assert_eq!(done, scanner.is_done());
                if done {
                    prop_assert_eq!(n, consumed);
                }
            }
            (Err(_), Err(_)) => {}
            // A cut can only delay an error until more bytes come, never invent one or hide
            // one that the whole input shows.
            (whole, split) => prop_assert!(false, "whole {:?} vs split {:?}", whole, split),
        }
    }
}

#[test]
fn the_committed_corpus_frames_strictly_and_panics_nothing() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/http1-requests");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let input = std::fs::read(&path).unwrap();
        let _ = parse_response(&input, false, true);
        if let Err(e) = check_differential(&input) {
            panic!("{}: {e}", path.display());
        }
        replayed += 1;
    }
    assert!(replayed >= 10, "the corpus in {} is missing", dir.display());
}
