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
                State::ChunkSize => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((used, 0))) => {
                        at += used;
                        self.state = State::Trailers;
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        at += used;
                        self.state = State::Data {
                            left: size,
                            chunked: true,
                        };
                    }
                    Ok(httparse::Status::Partial) if rest.len() < MAX_LINE => break,
                    _ => return Err(FramingError("invalid chunk size line")),
                },
                State::Trailers => match rest.iter().position(|&b| b == b'\n') {
                    Some(end) => {
                        at += end + 1;
                        // An empty line ends the trailers and the body.
                        if end == 0 || (end == 1 && rest[0] == b'\r') {
                            self.state = State::Done;
                        }
                    }
                    None if rest.len() < MAX_LINE => break,
                    None => return Err(FramingError("trailer line too long")),
                },
            }
        }
        Ok(at)
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
}
