//! TLS streams that hold no buffers while idle, on rustls's unbuffered API.
//!
//! tokio-rustls drives rustls's buffered connection, whose record reader keeps a 4 KiB buffer
//! for the connection's whole life: a thousand idle mTLS connections cost 4 MiB per proxy in
//! buffers alone. Here ciphertext is read into one scratch buffer per thread and handed to rustls
//! from there; a connection keeps bytes of its own only for a record that arrived in part,
//! plaintext its reader had no room for, or ciphertext its socket could not take yet, and frees
//! them once used. OpenSSL's SSL_MODE_RELEASE_BUFFERS gives HAProxy the same property.

use std::cell::RefCell;
use std::io;
use std::mem;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, EncryptError, InsufficientSizeError,
    UnbufferedStatus,
};
use rustls::{ClientConfig, CommonState, ServerConfig};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Room for a partial record (at most 18 KiB) plus a large read, or three full records'
/// ciphertext on the way out.
const SCRATCH_BYTES: usize = 64 * 1024;
/// The least a read asks the socket for; a leftover that leaves less room is read in place.
const MIN_READ: usize = 16 * 1024;
/// Plaintext encrypted per write: three full records, which fit the scratch as ciphertext.
const MAX_PLAINTEXT_PER_WRITE: usize = 3 * 16 * 1024;
/// A close_notify alert's record: header, alert, content type and AEAD tag, with room to spare.
const CLOSE_NOTIFY_BYTES: usize = 64;

thread_local! {
    // Reads and writes of this module never nest, so they share one buffer.
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; SCRATCH_BYTES].into_boxed_slice());
}

/// A client or server end of rustls's unbuffered connection.
pub(crate) trait TlsEnd: Unpin {
    type Data;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
    fn common(&self) -> &CommonState;
}

/// The two ends differ only in the data type rustls hands back.
macro_rules! tls_end {
    ($connection:ty, $data:ty) => {
        impl TlsEnd for $connection {
            type Data = $data;
            fn process<'c, 'i>(
                &'c mut self,
                incoming: &'i mut [u8],
            ) -> UnbufferedStatus<'c, 'i, Self::Data> {
                self.process_tls_records(incoming)
            }
            fn common(&self) -> &CommonState {
                self
            }
        }
    };
}

tls_end!(UnbufferedServerConnection, ServerConnectionData);
tls_end!(UnbufferedClientConnection, ClientConnectionData);

/// The bytes a connection holds between polls; each is empty, without capacity, when idle.
#[derive(Default)]
struct Held {
    /// Ciphertext received but not yet a whole record (or handshake message).
    incoming: Vec<u8>,
    /// Decrypted bytes the reader has not taken yet, from `plaintext_read` on.
    plaintext: Vec<u8>,
    plaintext_read: usize,
    /// Ciphertext to send, from `outgoing_sent` on, before anything encrypted later.
    outgoing: Vec<u8>,
    outgoing_sent: usize,
    /// The peer sent close_notify: no more data will come.
    peer_closed: bool,
    /// The socket's read side ended.
    eof: bool,
    close_notify_queued: bool,
}

impl Held {
    fn deliver(&mut self, payload: &[u8], out: Option<&mut ReadBuf<'_>>) {
        let taken = match out {
            Some(out) if self.plaintext.is_empty() => {
                let n = payload.len().min(out.remaining());
                out.put_slice(&payload[..n]);
                n
            }
            _ => 0,
        };
        self.plaintext.extend_from_slice(&payload[taken..]);
    }

    /// Moves held plaintext to `out`; true if anything moved.
    fn take_plaintext(&mut self, out: &mut ReadBuf<'_>) -> bool {
        let pending = &self.plaintext[self.plaintext_read..];
        if pending.is_empty() {
            return false;
        }
        let n = pending.len().min(out.remaining());
        out.put_slice(&pending[..n]);
        self.plaintext_read += n;
        if self.plaintext_read == self.plaintext.len() {
            self.plaintext = Vec::new();
            self.plaintext_read = 0;
        }
        n > 0
    }

    fn encode<D>(&mut self, encode: &mut EncodeTlsData<'_, D>) -> Result<(), rustls::Error> {
        let start = self.outgoing.len();
        let required = match encode.encode(&mut []) {
            Ok(_) => return Ok(()),
            Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
                required_size
            }
            Err(e) => return Err(rustls::Error::General(e.to_string())),
        };
        self.outgoing.resize(start + required, 0);
        encode
            .encode(&mut self.outgoing[start..])
            .map(|_| ())
            .map_err(|e| rustls::Error::General(e.to_string()))
    }

    fn queue_outgoing(&mut self, bytes: &[u8]) {
        self.outgoing.extend_from_slice(bytes);
    }

    fn has_outgoing(&self) -> bool {
        self.outgoing_sent < self.outgoing.len()
    }

    /// Keeps unconsumed ciphertext; an idle connection keeps no allocation.
    fn keep_incoming(&mut self, rest: &[u8]) {
        if rest.is_empty() {
            self.incoming = Vec::new();
        } else {
            self.incoming.clear();
            self.incoming.extend_from_slice(rest);
        }
    }
}

/// What to send once rustls allows application data.
enum Send<'a> {
    Nothing,
    /// Encrypt the plaintext into the buffer; the length is returned.
    Data(&'a [u8], &'a mut [u8]),
    CloseNotify,
}

/// Feeds the ciphertext in `work` to rustls until it needs more bytes (or `send` is done).
/// Plaintext goes to `out` while it has room and is held otherwise; bytes rustls wants sent
/// (handshake messages, alerts, key updates) are queued in `held.outgoing`. Returns how much of
/// `work` rustls consumed and how many bytes of ciphertext `send` produced.
fn drive<C: TlsEnd>(
    conn: &mut C,
    work: &mut [u8],
    held: &mut Held,
    mut out: Option<&mut ReadBuf<'_>>,
    mut send: Send<'_>,
) -> Result<(usize, usize), rustls::Error> {
    let mut consumed = 0;
    loop {
        let UnbufferedStatus { mut discard, state } = conn.process(&mut work[consumed..]);
        let more = match state? {
            ConnectionState::ReadTraffic(mut traffic) => {
                while let Some(record) = traffic.next_record() {
                    let record = record?;
                    discard += record.discard;
                    held.deliver(record.payload, out.as_deref_mut());
                }
                true
            }
            ConnectionState::EncodeTlsData(mut encode) => {
                held.encode(&mut encode)?;
                true
            }
            // Queued bytes are sent before anything queued after them: done as far as rustls
            // needs to know.
            ConnectionState::TransmitTlsData(transmit) => {
                transmit.done();
                true
            }
            ConnectionState::PeerClosed => {
                held.peer_closed = true;
                true
            }
            ConnectionState::Closed => {
                held.peer_closed = true;
                false
            }
            ConnectionState::WriteTraffic(mut traffic) => {
                let encrypted = match mem::replace(&mut send, Send::Nothing) {
                    Send::Nothing => 0,
                    Send::Data(plaintext, ciphertext) => traffic
                        .encrypt(plaintext, ciphertext)
                        .map_err(encrypt_error)?,
                    Send::CloseNotify => {
                        let mut record = [0u8; CLOSE_NOTIFY_BYTES];
                        let n = traffic
                            .queue_close_notify(&mut record)
                            .map_err(encrypt_error)?;
                        held.queue_outgoing(&record[..n]);
                        0
                    }
                };
                consumed += discard;
                return Ok((consumed, encrypted));
            }
            // Waiting for the peer's handshake messages; early data is never accepted.
            _ => false,
        };
        consumed += discard;
        if !more {
            return Ok((consumed, 0));
        }
    }
}

/// After a TLS error rustls holds an alert for the peer: queue it, and nothing else. `work`
/// must be the buffer of the failed call: rustls's record state may still point into it.
fn queue_alert<C: TlsEnd>(conn: &mut C, work: &mut [u8], held: &mut Held) {
    if let Ok(ConnectionState::EncodeTlsData(mut encode)) = conn.process(work).state {
        let _ = held.encode(&mut encode);
    }
}

fn encrypt_error(e: EncryptError) -> rustls::Error {
    rustls::Error::General(e.to_string())
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// A TLS 1.3 connection over TCP that holds no buffer while idle.
pub(crate) struct LeanTlsStream<C> {
    conn: C,
    io: TcpStream,
    held: Held,
}

/// Terminates TLS on `io` as a server.
///
/// Streams come boxed: rustls's connection is a kilobyte, and every move of it through an
/// async caller would otherwise reserve another copy in the caller's task for its whole life.
pub(crate) async fn accept(
    config: Arc<ServerConfig>,
    io: TcpStream,
) -> io::Result<Box<LeanTlsStream<UnbufferedServerConnection>>> {
    let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
    LeanTlsStream::handshake(conn, io).await
}

/// Opens TLS on `io` as a client of `name`.
pub(crate) async fn connect(
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    io: TcpStream,
) -> io::Result<Box<LeanTlsStream<UnbufferedClientConnection>>> {
    let conn = UnbufferedClientConnection::new(config, name).map_err(tls_error)?;
    LeanTlsStream::handshake(conn, io).await
}

impl<C: TlsEnd> LeanTlsStream<C> {
    async fn handshake(mut conn: C, mut io: TcpStream) -> io::Result<Box<Self>> {
        let mut held = Held::default();
        // The handshake is short-lived, so it reads into a buffer of its own.
        let mut incoming = Vec::new();
        loop {
            match drive(&mut conn, &mut incoming, &mut held, None, Send::Nothing) {
                Ok((consumed, _)) => {
                    incoming.drain(..consumed);
                }
                Err(e) => {
                    // Tell the peer why, as a buffered connection would.
                    queue_alert(&mut conn, &mut incoming, &mut held);
                    let _ = io.write_all(&held.outgoing).await;
                    return Err(tls_error(e));
                }
            }
            if held.has_outgoing() {
                io.write_all(&held.outgoing).await?;
                held.outgoing = Vec::new();
            }
            if !conn.common().is_handshaking() {
                break;
            }
            let filled = incoming.len();
            incoming.resize(filled + MIN_READ, 0);
            let n = io.read(&mut incoming[filled..]).await?;
            incoming.truncate(filled + n);
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed during the TLS handshake",
                ));
            }
        }
        held.keep_incoming(&incoming);
        Ok(Box::new(LeanTlsStream { conn, io, held }))
    }

    /// The negotiated connection: peer certificates, ALPN, suite.
    pub(crate) fn connection(&self) -> &CommonState {
        self.conn.common()
    }

    /// Sends queued ciphertext; ready once none is left.
    fn poll_send_outgoing(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let held = &mut self.held;
        while held.has_outgoing() {
            let n = ready!(
                Pin::new(&mut self.io).poll_write(cx, &held.outgoing[held.outgoing_sent..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            held.outgoing_sent += n;
        }
        held.outgoing = Vec::new();
        held.outgoing_sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Has rustls process the incoming bytes held back, then `send`; returns the bytes of the
    /// records `send` became.
    fn send(&mut self, send: Send<'_>) -> io::Result<usize> {
        let mut incoming = mem::take(&mut self.held.incoming);
        let driven = drive(&mut self.conn, &mut incoming, &mut self.held, None, send);
        let (consumed, encrypted) = driven.map_err(tls_error)?;
        self.held.keep_incoming(&incoming[consumed..]);
        Ok(encrypted)
    }

    /// Reads once from the socket after the `leftover` bytes at the front of `work` and feeds
    /// everything to rustls. Returns the range of `work` still to be kept.
    fn fill_and_drive(
        &mut self,
        cx: &mut Context<'_>,
        work: &mut [u8],
        leftover: usize,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<Range<usize>>> {
        let mut read = ReadBuf::new(&mut work[leftover..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut read))?;
        let n = read.filled().len();
        if n == 0 {
            self.held.eof = true;
            return Poll::Ready(Ok(0..leftover));
        }
        let end = leftover + n;
        match drive(
            &mut self.conn,
            &mut work[..end],
            &mut self.held,
            Some(out),
            Send::Nothing,
        ) {
            Ok((consumed, _)) => Poll::Ready(Ok(consumed..end)),
            Err(e) => {
                // Best effort: the alert goes out if the socket takes it now.
                queue_alert(&mut self.conn, &mut work[..end], &mut self.held);
                let _ = self.poll_send_outgoing(cx);
                Poll::Ready(Err(tls_error(e)))
            }
        }
    }

    /// One read from the socket, through rustls, into `out` (or held plaintext).
    fn poll_fill(&mut self, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let leftover = self.held.incoming.len();
            if leftover + MIN_READ <= scratch.len() {
                scratch[..leftover].copy_from_slice(&self.held.incoming);
                let keep = ready!(self.fill_and_drive(cx, &mut scratch, leftover, out))?;
                self.held.keep_incoming(&scratch[keep]);
            } else {
                // A handshake message larger than the scratch: read in place.
                let mut work = mem::take(&mut self.held.incoming);
                work.resize(leftover + MIN_READ, 0);
                let polled = self.fill_and_drive(cx, &mut work, leftover, out);
                let keep = match &polled {
                    Poll::Ready(Ok(keep)) => keep.clone(),
                    _ => 0..leftover,
                };
                work.truncate(keep.end);
                work.drain(..keep.start);
                self.held.incoming = work;
                ready!(polled)?;
            }
            Poll::Ready(Ok(()))
        })
    }
}

impl<C: TlsEnd> AsyncRead for LeanTlsStream<C> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.held.take_plaintext(buf) || this.held.peer_closed {
                return Poll::Ready(Ok(()));
            }
            if this.held.eof {
                return Poll::Ready(match this.held.incoming.is_empty() {
                    true => Ok(()),
                    false => Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a TLS record",
                    )),
                });
            }
            // Replies rustls queued while reading (a key update) leave even if this side
            // never writes; the socket's write readiness wakes this task if they must wait.
            if this.held.has_outgoing() {
                if let Poll::Ready(Err(e)) = this.poll_send_outgoing(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            let before = buf.filled().len();
            ready!(this.poll_fill(cx, buf))?;
            if buf.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<C: TlsEnd> AsyncWrite for LeanTlsStream<C> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Backpressure: earlier ciphertext leaves first.
        ready!(this.poll_send_outgoing(cx))?;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let data = &data[..data.len().min(MAX_PLAINTEXT_PER_WRITE)];
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let encrypted = this.send(Send::Data(data, &mut scratch))?;
            if encrypted == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the TLS connection no longer sends data",
                )));
            }
            let ciphertext = &scratch[..encrypted];
            let sent = match this.held.has_outgoing() {
                true => 0,
                false => match Pin::new(&mut this.io).poll_write(cx, ciphertext) {
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => 0,
                },
            };
            if sent < ciphertext.len() {
                this.held.queue_outgoing(&ciphertext[sent..]);
                if let Poll::Ready(Err(e)) = this.poll_send_outgoing(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            Poll::Ready(Ok(data.len()))
        })
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send_outgoing(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.held.close_notify_queued {
            this.held.close_notify_queued = true;
            this.send(Send::CloseNotify)?;
        }
        ready!(this.poll_send_outgoing(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_fixtures::TestPki;
    use meshbench_identity::{client_config, server_config, spiffe_ids_of};
    use tokio::net::TcpListener;

    struct Pki {
        _pki: TestPki,
        server: Arc<ServerConfig>,
        client: Arc<ClientConfig>,
        anonymous_client: Arc<ClientConfig>,
    }

    fn pki() -> Pki {
        let pki = TestPki::new("default", &["server", "client"]);
        let client = |sa| Arc::new(client_config(&pki.client_files(sa), &[]).unwrap());
        Pki {
            server: Arc::new(server_config(&pki.server_files("server"), &[]).unwrap()),
            client: client(Some("client")),
            anonymous_client: client(None),
            _pki: pki,
        }
    }

    fn name() -> ServerName<'static> {
        ServerName::try_from("localhost").unwrap()
    }

    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    /// Sends `outgoing` and reads until end of stream, both at once; returns what was read.
    async fn both_ways_intact<S: AsyncRead + AsyncWrite, C: AsyncRead + AsyncWrite>(
        server: S,
        client: C,
        up: Vec<u8>,
        down: Vec<u8>,
        client_read_chunk: usize,
    ) {
        let (at_server, at_client) = tokio::join!(
            exchange(server, down.clone(), 16 * 1024),
            exchange(client, up.clone(), client_read_chunk)
        );
        assert!(
            at_server == up && at_client == down,
            "bytes changed in transit"
        );
    }

    async fn exchange<S: AsyncRead + AsyncWrite>(
        stream: S,
        outgoing: Vec<u8>,
        read_chunk: usize,
    ) -> Vec<u8> {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let write = async move {
            writer.write_all(&outgoing).await.unwrap();
            writer.shutdown().await.unwrap();
        };
        let read = async move {
            let mut got = Vec::new();
            let mut chunk = vec![0u8; read_chunk];
            loop {
                let n = reader.read(&mut chunk).await.unwrap();
                if n == 0 {
                    return got;
                }
                got.extend_from_slice(&chunk[..n]);
            }
        };
        tokio::join!(write, read).1
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[tokio::test]
    async fn a_server_carries_a_megabyte_each_way_with_a_tokio_rustls_client() {
        let pki = pki();
        let (client_tcp, server_tcp) = tcp_pair().await;
        let connector = tokio_rustls::TlsConnector::from(pki.client.clone());
        let (client, server) = tokio::join!(
            connector.connect(name(), client_tcp),
            accept(pki.server.clone(), server_tcp)
        );
        let (client, server) = (client.unwrap(), server.unwrap());
        let leaf = &server.connection().peer_certificates().unwrap()[0];
        assert_eq!(
            spiffe_ids_of(leaf)[0].to_string(),
            "spiffe://cluster.local/ns/default/sa/client"
        );
        let (up, down) = (bytes(1 << 20, 1), bytes(1 << 20, 2));
        both_ways_intact(server, client, up, down, 16 * 1024).await;
    }

    #[tokio::test]
    async fn a_client_carries_data_to_a_tokio_rustls_server_through_a_small_reader() {
        let pki = pki();
        let (client_tcp, server_tcp) = tcp_pair().await;
        let acceptor = tokio_rustls::TlsAcceptor::from(pki.server.clone());
        let (client, server) = tokio::join!(
            connect(pki.client.clone(), name(), client_tcp),
            acceptor.accept(server_tcp)
        );
        let (client, server) = (client.unwrap(), server.unwrap());
        let (up, down) = (bytes(300_000, 3), bytes(200_000, 4));
        // A 7-byte reader leaves most of every record held between reads.
        both_ways_intact(server, client, up, down, 7).await;
    }

    #[tokio::test]
    async fn an_idle_connection_holds_no_buffers() {
        let pki = pki();
        let (client_tcp, server_tcp) = tcp_pair().await;
        let (client, server) = tokio::join!(
            connect(pki.client.clone(), name(), client_tcp),
            accept(pki.server.clone(), server_tcp)
        );
        let (mut client, mut server) = (client.unwrap(), server.unwrap());
        let request = bytes(40_000, 5);
        client.write_all(&request).await.unwrap();
        client.flush().await.unwrap();
        let mut got = vec![0u8; request.len()];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, request);
        server.write_all(b"ok").await.unwrap();
        server.flush().await.unwrap();
        let mut answer = [0u8; 2];
        client.read_exact(&mut answer).await.unwrap();
        for (end, held) in [("client", &client.held), ("server", &server.held)] {
            let capacities = (
                held.incoming.capacity(),
                held.plaintext.capacity(),
                held.outgoing.capacity(),
            );
            assert_eq!(capacities, (0, 0, 0), "{end} holds buffers while idle");
        }
    }

    #[tokio::test]
    async fn a_client_without_a_certificate_is_refused_with_the_alert() {
        let pki = pki();
        let (client_tcp, server_tcp) = tcp_pair().await;
        let connector = tokio_rustls::TlsConnector::from(pki.anonymous_client.clone());
        let client = async move {
            // TLS 1.3: the client finishes first and hears the verdict on its first read.
            let mut tls = connector.connect(name(), client_tcp).await?;
            let mut byte = [0u8; 1];
            tls.read(&mut byte).await
        };
        let (client, server) = tokio::join!(client, accept(pki.server.clone(), server_tcp));
        assert!(server.is_err(), "the server accepted an anonymous client");
        let error = client.expect_err("the client was not refused").to_string();
        assert!(
            error.contains("CertificateRequired"),
            "the client did not get the alert: {error}"
        );
    }
}
