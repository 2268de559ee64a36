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
const READ_CHUNK: usize = 16 * 1024;

pub(crate) struct Http1Connection {
    io: Box<dyn Io>,
    buf: BytesMut,
    reusable: bool,
}

/// How a response body is delimited.
enum Framing {
    None,
    Length(usize),
    Chunked,
    UntilClose,
}

fn invalid(reason: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.into())
}

impl Http1Connection {
    pub(crate) fn new(io: Box<dyn Io>) -> Self {
        Http1Connection {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            reusable: true,
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
        loop {
            let (status, framing, close, head_len) = match self.parse_head(head)? {
                Some(parsed) => parsed,
                None => {
                    self.fill().await?;
                    continue;
                }
            };
            self.buf.advance(head_len);
            // Interim responses (100 Continue, 103 Early Hints) precede the real one.
            if (100..200).contains(&status) && status != 101 {
                continue;
            }
            match framing {
                Framing::None => {}
                Framing::Length(n) => self.skip(n).await?,
                Framing::Chunked => self.skip_chunked().await?,
                Framing::UntilClose => while self.fill().await.is_ok() {},
            }
            self.reusable = !close && !matches!(framing, Framing::UntilClose);
            return Ok(status);
        }
    }

    /// `None` while the head is incomplete.
    fn parse_head(&self, head: bool) -> io::Result<Option<(u16, Framing, bool, usize)>> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let head_len = match response.parse(&self.buf) {
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
                let text =
                    std::str::from_utf8(h.value).map_err(|_| invalid("bad content-length"))?;
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
        let framing = if head || status == 204 || status == 304 || (100..200).contains(&status) {
            Framing::None
        } else if chunked {
            Framing::Chunked
        } else if let Some(n) = length {
            Framing::Length(n)
        } else {
            Framing::UntilClose
        };
        Ok(Some((status, framing, close, head_len)))
    }

    async fn fill(&mut self) -> io::Result<()> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        match self.io.read_buf(&mut self.buf).await? {
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(()),
        }
    }

    /// Discards `n` body bytes.
    async fn skip(&mut self, mut n: usize) -> io::Result<()> {
        loop {
            let take = n.min(self.buf.len());
            self.buf.advance(take);
            n -= take;
            if n == 0 {
                return Ok(());
            }
            self.buf.clear();
            self.fill().await?;
        }
    }

    async fn skip_chunked(&mut self) -> io::Result<()> {
        loop {
            let (consumed, size) = match httparse::parse_chunk_size(&self.buf) {
                Ok(httparse::Status::Complete(parsed)) => parsed,
                Ok(httparse::Status::Partial) => {
                    self.fill().await?;
                    continue;
                }
                Err(_) => return Err(invalid("malformed chunk size")),
            };
            self.buf.advance(consumed);
            if size == 0 {
                return self.skip_trailers().await;
            }
            let size = usize::try_from(size).map_err(|_| invalid("chunk too large"))?;
            self.skip(size + 2).await?;
        }
    }

    /// Trailer lines end with an empty line.
    async fn skip_trailers(&mut self) -> io::Result<()> {
        loop {
            match self.buf.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.buf.advance(2);
                    return Ok(());
                }
                Some(i) => self.buf.advance(i + 2),
                None => self.fill().await?,
            }
        }
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
                conn.fill().await.unwrap();
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

    #[tokio::test]
    async fn garbage_is_an_error_not_a_status() {
        let (s, reusable, _) = exchange(b"SSH-2.0-OpenSSH\r\n\r\n", false).await;
        assert_eq!(s.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(!reusable);
    }
}
