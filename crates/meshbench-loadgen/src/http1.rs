//! The generator's HTTP/1.1 exchange, kept lean because it is the instrument's hot path:
//! the request is serialized once per run, the response head is parsed in place with
//! httparse (the parser hyper uses), the body is framed by Content-Length or chunked encoding
//! and discarded, and the read buffer is reused. No task, channel or allocation per request.
//!
//! A keep-alive connection the server closed while idle is noticed when the next request on it
//! fails; that request counts as `connection_reset` (no hidden retry) and the next one
//! reconnects.

use std::io;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

const MAX_HEADERS: usize = 64;
pub(crate) const READ_CHUNK: usize = 16 * 1024;

/// Where the reader is in one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    /// Body bytes still to discard.
    Length(usize),
    ChunkSize,
    /// The rest of a chunk and its CRLF.
    ChunkData(usize),
    Trailers,
    UntilClose,
}

/// What [`ResponseReader::advance`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The response is incomplete: read more and call again.
    NeedMore,
    /// The response ended; the connection may carry another request when `reusable`.
    Done { status: u16, reusable: bool },
}

/// Reads one response from whatever bytes arrive, in any split, and discards its body. Both
/// engines use it: the async one (TLS, tokio) and the direct epoll one (plain TCP).
#[derive(Debug)]
pub(crate) struct ResponseReader {
    head_request: bool,
    state: State,
    status: u16,
    close: bool,
}

impl ResponseReader {
    /// A reader for the response to one request; `head_request` when it was a HEAD.
    pub(crate) fn new(head_request: bool) -> Self {
        ResponseReader {
            head_request,
            state: State::Head,
            status: 0,
            close: false,
        }
    }

    /// Consumes the start of `input` that belongs to the response; returns how many bytes
    /// that was (bytes after the response's end are not consumed) and whether it ended.
    /// `memo` knows the last head its caller parsed.
    pub(crate) fn advance(
        &mut self,
        input: &[u8],
        memo: &mut HeadMemo,
    ) -> io::Result<(usize, Progress)> {
        let mut at = 0;
        loop {
            let rest = &input[at..];
            match self.state {
                State::Head => {
                    let Some((head, head_len)) = memo.parse(rest, self.head_request)? else {
                        return Ok((at, Progress::NeedMore));
                    };
                    at += head_len;
                    // Interim responses (100 Continue, 103 Early Hints) precede the real one.
                    if (100..200).contains(&head.status) && head.status != 101 {
                        continue;
                    }
                    self.status = head.status;
                    self.close = head.close;
                    self.state = head.framing;
                }
                State::Length(n) => {
                    let take = n.min(rest.len());
                    at += take;
                    if take < n {
                        self.state = State::Length(n - take);
                        return Ok((at, Progress::NeedMore));
                    }
                    return Ok((at, self.done(true)));
                }
                State::ChunkSize => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((consumed, 0))) => {
                        at += consumed;
                        self.state = State::Trailers;
                    }
                    Ok(httparse::Status::Complete((consumed, size))) => {
                        at += consumed;
                        let size = usize::try_from(size).map_err(|_| invalid("chunk too large"))?;
                        self.state = State::ChunkData(size + 2);
                    }
                    Ok(httparse::Status::Partial) => return Ok((at, Progress::NeedMore)),
                    Err(_) => return Err(invalid("malformed chunk size")),
                },
                State::ChunkData(n) => {
                    let take = n.min(rest.len());
                    at += take;
                    if take < n {
                        self.state = State::ChunkData(n - take);
                        return Ok((at, Progress::NeedMore));
                    }
                    self.state = State::ChunkSize;
                }
                // Trailer lines end with an empty line.
                State::Trailers => match rest.windows(2).position(|w| w == b"\r\n") {
                    Some(0) => return Ok((at + 2, self.done(true))),
                    Some(i) => at += i + 2,
                    None => return Ok((at, Progress::NeedMore)),
                },
                State::UntilClose => return Ok((input.len(), Progress::NeedMore)),
            }
        }
    }

    /// The peer closed the connection: the end of a body delimited by the close, or an error.
    pub(crate) fn eof(&mut self) -> io::Result<Progress> {
        match self.state {
            State::UntilClose => Ok(self.done(false)),
            _ => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }

    fn done(&mut self, framed: bool) -> Progress {
        Progress::Done {
            status: self.status,
            reusable: framed && !self.close,
        }
    }
}

/// What a response head says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    status: u16,
    /// How the body is framed.
    framing: State,
    /// The server closes the connection after this response.
    close: bool,
}

/// Heads longer than this are not remembered.
const MEMO_MAX_HEAD: usize = 1024;

/// The last response head parsed and what it said. Under load a server answers with the same
/// head, byte for byte, until its Date header changes once a second, and parsing the head is
/// most of the generator's own work per response: a head equal to the last one is known without
/// parsing it again. Parsing is a function of the head's bytes (and of whether the request was
/// a HEAD), so the answer is the same either way; any other head is parsed.
#[derive(Debug, Default)]
pub(crate) struct HeadMemo {
    bytes: Vec<u8>,
    head_request: bool,
    head: Option<Head>,
}

impl HeadMemo {
    /// `None` while the head at the start of `buf` is incomplete; else what it says and its
    /// length.
    fn parse(&mut self, buf: &[u8], head_request: bool) -> io::Result<Option<(Head, usize)>> {
        if let Some(head) = self.head {
            if self.head_request == head_request && buf.starts_with(&self.bytes) {
                return Ok(Some((head, self.bytes.len())));
            }
        }
        let Some((head, len)) = parse_head(buf, head_request)? else {
            return Ok(None);
        };
        self.head = (len <= MEMO_MAX_HEAD).then_some(head);
        self.bytes.clear();
        if self.head.is_some() {
            self.bytes.extend_from_slice(&buf[..len]);
            self.head_request = head_request;
        }
        Ok(Some((head, len)))
    }
}

/// `None` while the head is incomplete; else what it says and its length.
fn parse_head(buf: &[u8], head_request: bool) -> io::Result<Option<(Head, usize)>> {
    // Left uninitialised: httparse writes the headers it finds, and initialising room for 64
    // would write 2 KiB per response on the generator's hot path.
    let mut headers = [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let head_len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(invalid(format!("malformed response head: {e}"))),
    };
    let status = response.code.ok_or_else(|| invalid("no status code"))?;
    let mut close = response.version == Some(0);
    let mut length = None;
    let mut chunked = false;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(h.value).map_err(|_| invalid("bad content-length"))?;
            length = Some(
                text.trim()
                    .parse::<usize>()
                    .map_err(|_| invalid("bad content-length"))?,
            );
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.to_ascii_lowercase().ends_with(b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = h.value.to_ascii_lowercase();
            close |= v == b"close";
            close &= v != b"keep-alive";
        }
    }
    let framing = if head_request || status == 204 || status == 304 || (100..200).contains(&status)
    {
        State::Length(0)
    } else if chunked {
        State::ChunkSize
    } else if let Some(n) = length {
        State::Length(n)
    } else {
        State::UntilClose
    };
    Ok(Some((
        Head {
            status,
            framing,
            close,
        },
        head_len,
    )))
}

fn invalid(reason: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.into())
}

/// An HTTP/1.1 connection over any async byte stream (plain TCP or TLS), one request at a time.
pub(crate) struct Http1Connection {
    io: Box<dyn Io>,
    buf: BytesMut,
    reusable: bool,
    memo: HeadMemo,
}

impl Http1Connection {
    pub(crate) fn new(io: Box<dyn Io>) -> Self {
        Http1Connection {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            reusable: true,
            memo: HeadMemo::default(),
        }
    }

    pub(crate) fn is_reusable(&self) -> bool {
        self.reusable
    }

    /// Writes `request` (a complete serialized request) and reads the whole response;
    /// returns the final status.
    pub(crate) async fn exchange(&mut self, request: &[u8], head: bool) -> io::Result<u16> {
        self.reusable = false;
        self.io.write_all(request).await?;
        let mut reader = ResponseReader::new(head);
        loop {
            let (consumed, progress) = reader.advance(&self.buf, &mut self.memo)?;
            self.buf.advance(consumed);
            let progress = match progress {
                Progress::NeedMore => match self.fill().await? {
                    0 => reader.eof()?,
                    _ => continue,
                },
                done => done,
            };
            if let Progress::Done { status, reusable } = progress {
                self.reusable = reusable;
                return Ok(status);
            }
        }
    }

    /// Reads more into the buffer; 0 at the end of the stream.
    async fn fill(&mut self) -> io::Result<usize> {
        reserve_read_space(&mut self.buf);
        self.io.read_buf(&mut self.buf).await
    }
}

/// Room for the next read, without growing a buffer whose data was consumed.
pub(crate) fn reserve_read_space(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < READ_CHUNK / 4 {
        buf.reserve(READ_CHUNK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one exchange against a scripted server reply.
    async fn exchange(reply: &'static [u8], head: bool) -> (io::Result<u16>, bool, Vec<u8>) {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut request = vec![0u8; 64];
            let n = server.read(&mut request).await.unwrap();
            // Reply in small pieces so every parser path sees partial input.
            for piece in reply.chunks(7) {
                server.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            server.write_all(b"NEXT").await.unwrap();
            request.truncate(n);
            request
        });
        let mut conn = Http1Connection::new(Box::new(client));
        let status = conn
            .exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", head)
            .await;
        let sent = server.await.unwrap();
        let reusable = conn.is_reusable();
        // Whatever follows the response must still be in the buffer, untouched.
        if status.is_ok() && reusable {
            while conn.buf.len() < 4 {
                assert!(conn.fill().await.unwrap() > 0);
            }
            assert_eq!(&conn.buf[..4], b"NEXT");
        }
        assert!(sent.starts_with(b"GET / HTTP/1.1"));
        (status, reusable, sent)
    }

    #[tokio::test]
    async fn frames_bodies_by_length_chunks_and_status() {
        let (s, reusable, _) =
            exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false).await;
        assert_eq!((s.unwrap(), reusable), (200, true));
        let chunked = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: y\r\n\r\n";
        let (s, reusable, _) = exchange(chunked, false).await;
        assert_eq!((s.unwrap(), reusable), (201, true));
        let (s, reusable, _) = exchange(b"HTTP/1.1 204 No Content\r\n\r\n", false).await;
        assert_eq!((s.unwrap(), reusable), (204, true));
        let (s, _, _) = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true).await;
        assert_eq!(s.unwrap(), 200, "HEAD responses have no body");
        let interim =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno";
        let (s, _, _) = exchange(interim, false).await;
        assert_eq!(s.unwrap(), 403);
    }

    #[tokio::test]
    async fn connection_close_and_http10_end_reuse() {
        let (s, reusable, _) = exchange(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            false,
        )
        .await;
        assert_eq!((s.unwrap(), reusable), (200, false));
        let (s, reusable, _) =
            exchange(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false).await;
        assert_eq!((s.unwrap(), reusable), (200, false));
    }

    #[test]
    fn a_remembered_head_reads_as_its_parse_and_any_other_head_is_parsed() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let unavailable = b"HTTP/1.1 503 No\r\nContent-Length: 5\r\n\r\nhello";
        let fresh = |bytes: &[u8], head: bool| parse_head(bytes, head).unwrap().unwrap();
        let mut memo = HeadMemo::default();
        for (bytes, head) in [
            (&ok[..], false),
            (&ok[..], false),
            (&unavailable[..], false),
            (&ok[..], true),
            (&ok[..], false),
        ] {
            assert_eq!(memo.parse(bytes, head).unwrap(), Some(fresh(bytes, head)));
        }
        // A head cut short is incomplete, even when it begins like the remembered one.
        assert_eq!(memo.parse(&ok[..20], false).unwrap(), None);
        // Bytes after the head (the body) do not change what the head says.
        let mut longer = ok.to_vec();
        longer.extend_from_slice(b"HTTP/1.1 404");
        assert_eq!(memo.parse(&longer, false).unwrap(), Some(fresh(ok, false)));
    }

    #[tokio::test]
    async fn garbage_is_an_error_not_a_status() {
        let (s, reusable, _) = exchange(b"SSH-2.0-OpenSSH\r\n\r\n", false).await;
        assert_eq!(s.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(!reusable);
    }
}
