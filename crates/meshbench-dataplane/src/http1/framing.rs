//! Where an HTTP/1.1 message body ends (RFC 9112 section 6). The proxy passes bodies through
//! unchanged, chunked framing included, so all it needs is to find the end: a byte count, the
//! last chunk and its trailers, or the end of the connection.

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body at all (a request without length, a response to HEAD, 1xx, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// A response without length: its body ends when the upstream closes.
    UntilClose,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed chunked body: {0}")]
pub(crate) struct FramingError(&'static str);

/// Finds the end of one body in the bytes that follow its head, however they are split
/// across reads.
#[derive(Debug)]
pub(crate) struct BodyScanner {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Bytes of a fixed-length body (or of the current chunk's data) still to come.
    Data {
        left: u64,
        chunked: bool,
    },
    /// The CRLF after a chunk's data.
    ChunkEnd,
    ChunkSize,
    /// Trailer lines after the last chunk, up to an empty line.
    Trailers,
    UntilClose,
    Done,
}

/// Longest chunk-size or trailer line accepted, so that a peer cannot make the proxy buffer
/// without bound.
const MAX_LINE: usize = 4096;

impl BodyScanner {
    pub(crate) fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Data {
                left: n,
                chunked: false,
            },
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        };
        BodyScanner { state }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the body ends only with the connection.
    pub(crate) fn until_close(&self) -> bool {
        self.state == State::UntilClose
    }

    /// Consumes what it can of `bytes`: returns how many belong to the body. Fewer than all
    /// of them means either the body ended (`is_done`) or an incomplete line waits for more.
    pub(crate) fn advance(&mut self, bytes: &[u8]) -> Result<usize, FramingError> {
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            match self.state {
                State::Done => break,
                State::UntilClose => return Ok(bytes.len()),
                State::Data { left, chunked } => {
                    let n = left.min(rest.len() as u64);
                    at += n as usize;
                    self.state = match (left - n, chunked) {
                        (0, true) => State::ChunkEnd,
                        (0, false) => State::Done,
                        (left, _) => State::Data { left, chunked },
                    };
                }
                State::ChunkEnd => {
                    if rest.len() < 2 {
                        break;
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(FramingError("chunk data not followed by CRLF"));
                    }
                    at += 2;
                    self.state = State::ChunkSize;
                }
                State::ChunkSize => match line(rest)? {
                    Some(end) => {
                        let size = chunk_size(&rest[..end])?;
                        at += end + 2;
                        self.state = match size {
                            0 => State::Trailers,
                            size => State::Data {
                                left: size,
                                chunked: true,
                            },
                        };
                    }
                    None => break,
                },
                State::Trailers => match line(rest)? {
                    // An empty line ends the trailers and the body.
                    Some(0) => {
                        at += 2;
                        self.state = State::Done;
                    }
                    Some(end) => {
                        trailer_line(&rest[..end])?;
                        at += end + 2;
                    }
                    None => break,
                },
            }
        }
        Ok(at)
    }
}

/// The length of the line at the start of `bytes`, without its CRLF; `None` while it is
/// incomplete. A bare LF or CR, or a line longer than `MAX_LINE`, is an error: lenient line
/// endings are where two parsers start to disagree about a body's end.
fn line(bytes: &[u8]) -> Result<Option<usize>, FramingError> {
    let window = &bytes[..bytes.len().min(MAX_LINE + 2)];
    match window.iter().position(|&b| b == b'\n' || b == b'\r') {
        Some(end) if window[end] == b'\n' => Err(FramingError("bare LF in a chunked body")),
        Some(end) => match bytes.get(end + 1) {
            Some(b'\n') => Ok(Some(end)),
            Some(_) => Err(FramingError("bare CR in a chunked body")),
            None => Ok(None),
        },
        None if bytes.len() > MAX_LINE => Err(FramingError("chunk line too long")),
        None => Ok(None),
    }
}

/// A chunk-size line without its CRLF: hex digits, then optional extensions
/// (RFC 9112 section 7.1.1), whose names and values are passed on, not interpreted.
fn chunk_size(line: &[u8]) -> Result<u64, FramingError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(FramingError("chunk size missing"));
    }
    let mut size: u64 = 0;
    for &digit in &line[..digits] {
        let value = (digit as char).to_digit(16).unwrap_or_default();
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(value)))
            .ok_or(FramingError("chunk size overflows"))?;
    }
    let extensions = &line[digits..];
    let first = extensions.iter().find(|&&b| b != b' ' && b != b'\t');
    let visible = extensions
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
    match (first, visible) {
        (None, true) | (Some(b';'), true) => Ok(size),
        _ => Err(FramingError("invalid chunk extension")),
    }
}

/// A trailer field line without its CRLF: `name: value`, the name a token, no line folding.
fn trailer_line(line: &[u8]) -> Result<(), FramingError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(FramingError("trailer line without a colon"))?;
    let name_ok = colon > 0
        && line[..colon]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    let value_ok = line[colon + 1..]
        .iter()
        .all(|&b| b == b'\t' || b >= b' ' && b != 0x7f);
    match name_ok && value_ok {
        true => Ok(()),
        false => Err(FramingError("invalid trailer line")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` in pieces of `step` and returns how many belonged to the body once it
    /// ended, carrying incomplete lines over as a reader would.
    fn scan(framing: Framing, bytes: &[u8], step: usize) -> Option<usize> {
        let mut scanner = BodyScanner::new(framing);
        let (mut consumed, mut pending) = (0, Vec::new());
        for piece in bytes.chunks(step) {
            pending.extend_from_slice(piece);
            let n = scanner.advance(&pending).unwrap();
            consumed += n;
            pending.drain(..n);
            if scanner.is_done() {
                return Some(consumed);
            }
        }
        scanner.is_done().then_some(consumed)
    }

    #[test]
    fn a_fixed_length_body_ends_after_its_length_and_leaves_the_next_message() {
        let bytes = b"hello world, then the next request";
        for step in [1, 3, bytes.len()] {
            assert_eq!(scan(Framing::Length(11), bytes, step), Some(11));
        }
        assert_eq!(scan(Framing::Empty, b"GET /", 5), Some(0));
    }

    #[test]
    fn a_chunked_body_ends_after_the_last_chunk_and_its_trailers_in_any_split() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n";
        let mut bytes = body.to_vec();
        bytes.extend_from_slice(b"GET /next HTTP/1.1\r\n");
        for step in 1..=bytes.len() {
            assert_eq!(
                scan(Framing::Chunked, &bytes, step),
                Some(body.len()),
                "step {step}"
            );
        }
        assert_eq!(scan(Framing::Chunked, b"0\r\n\r\n", 1), Some(5));
    }

    #[test]
    fn a_chunked_body_cut_short_is_not_done_and_garbage_is_an_error() {
        assert_eq!(scan(Framing::Chunked, b"5\r\nhel", 2), None);
        let mut scanner = BodyScanner::new(Framing::Chunked);
        assert!(scanner.advance(b"zz\r\n").is_err());
        let mut scanner = BodyScanner::new(Framing::Chunked);
        assert!(scanner.advance(b"1\r\naXY").is_err());
    }

    #[test]
    fn a_body_until_close_takes_everything() {
        let mut scanner = BodyScanner::new(Framing::UntilClose);
        assert_eq!(scanner.advance(b"abc").unwrap(), 3);
        assert!(scanner.until_close() && !scanner.is_done());
    }

    fn refused(bytes: &[u8]) -> bool {
        BodyScanner::new(Framing::Chunked).advance(bytes).is_err()
    }

    #[test]
    fn lenient_chunk_framing_is_refused() {
        for bad in [
            &b"5;a=b\nhello\r\n0\r\n\r\n"[..],
            b"5\nhello",
            b"\r\nhello",
            b";ext\r\n",
            b"5\rhello",
            b"10000000000000000\r\n",
            b"5 x\r\n",
            b"0\r\nx-t: 1\n\r\n",
            b"0\r\n folded\r\n\r\n",
            b"0\r\nno colon\r\n\r\n",
            b"0\r\n\n",
        ] {
            assert!(refused(bad), "{:?}", String::from_utf8_lossy(bad));
        }
        // The longest size that fits is fine; extensions with whitespace too.
        let mut scanner = BodyScanner::new(Framing::Chunked);
        assert_eq!(scanner.advance(b"ffffffffffffffff\r\n").unwrap(), 18);
        let mut scanner = BodyScanner::new(Framing::Chunked);
        assert_eq!(
            scanner.advance(b"1 ; a=\"b c\"\r\nx\r\n0\r\n\r\n").unwrap(),
            21
        );
        assert!(scanner.is_done());
    }

    #[test]
    fn an_endless_chunk_line_is_refused_rather_than_buffered() {
        let mut line = b"1;".to_vec();
        line.resize(MAX_LINE + 8, b'a');
        assert!(refused(&line));
        assert_eq!(
            BodyScanner::new(Framing::Chunked)
                .advance(&line[..MAX_LINE])
                .unwrap(),
            0
        );
    }
}
