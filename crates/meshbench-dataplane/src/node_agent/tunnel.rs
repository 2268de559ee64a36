//! One HBONE tunnel as a byte stream: an HTTP/2 CONNECT stream's two halves (h2's
//! `SendStream` and `RecvStream`) read and written in the task that splices it, with HTTP/2
//! flow control as the stream's backpressure.
//!
//! Driving h2 directly, as ztunnel does, rather than through hyper's upgrade: hyper hands each
//! write of an upgraded stream through a channel to a task of its own, which copies it once more
//! and wakes the connection's task in turn; here a write goes straight into the stream, one
//! task wake-up fewer per write on each side, and no task or channel per tunnel.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Settings both ends of an HBONE connection share.
pub(crate) mod settings {
    /// Flow-control windows: large enough that one stream is not throttled to 64 KiB per
    /// round trip, as ztunnel also sizes them.
    pub(crate) const STREAM_WINDOW: u32 = 4 << 20;
    pub(crate) const CONNECTION_WINDOW: u32 = 16 << 20;
    /// A CONNECT's head is a few dozen bytes; anything near this is hostile.
    pub(crate) const MAX_HEADER_LIST: u32 = 16 * 1024;
}

pub(crate) struct Tunnel {
    send: SendStream<Bytes>,
    recv: RecvStream,
    /// Received bytes the reader has not taken yet.
    unread: Bytes,
    end_sent: bool,
}

impl Tunnel {
    pub(crate) fn new(send: SendStream<Bytes>, recv: RecvStream) -> Self {
        Tunnel {
            send,
            recv,
            unread: Bytes::new(),
            end_sent: false,
        }
    }
}

fn io_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e.into_io().unwrap_or_else(|| io::ErrorKind::Other.into());
    }
    let kind = match e.reason() {
        Some(Reason::CANCEL | Reason::STREAM_CLOSED) => io::ErrorKind::ConnectionReset,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

impl AsyncRead for Tunnel {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.unread.is_empty() {
            this.unread = loop {
                match ready!(this.recv.poll_data(cx)) {
                    None => return Poll::Ready(Ok(())),
                    // An empty DATA frame (as an END_STREAM may come) carries nothing to hand on.
                    Some(Ok(data)) if data.is_empty() => continue,
                    Some(Ok(data)) => break data,
                    // The peer ended its side without error: end of stream.
                    Some(Err(e)) if e.reason() == Some(Reason::NO_ERROR) => {
                        return Poll::Ready(Ok(()))
                    }
                    Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
                }
            };
        }
        let n = this.unread.len().min(buf.remaining());
        buf.put_slice(&this.unread[..n]);
        this.unread.advance(n);
        // The window reopens as the bytes leave, so a slow reader holds back its sender.
        this.recv
            .flow_control()
            .release_capacity(n)
            .map_err(io_error)?;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Tunnel {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // Capacity is asked for only with bytes in hand: reserved while idle, it would hold
        // part of the connection's window that other tunnels could use.
        this.send.reserve_capacity(data.len());
        loop {
            let capacity = this.send.capacity();
            if capacity > 0 {
                let n = capacity.min(data.len());
                this.send
                    .send_data(Bytes::copy_from_slice(&data[..n]), false)
                    .map_err(io_error)?;
                return Poll::Ready(Ok(n));
            }
            match ready!(this.send.poll_capacity(cx)) {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
                None => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the tunnel's stream no longer sends",
                    )))
                }
            }
        }
    }

    /// The connection's task writes what the stream queued; nothing waits here.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.end_sent {
            this.end_sent = true;
            this.send.reserve_capacity(0);
            this.send.send_data(Bytes::new(), true).map_err(io_error)?;
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The two ends of one CONNECT stream over an in-memory HTTP/2 connection with h2's
    /// default 64 KiB windows, so a megabyte has to wait for them to reopen many times.
    async fn tunnel_pair() -> (Tunnel, Tunnel) {
        let (client_io, server_io) = tokio::io::duplex(16 * 1024);
        let server = tokio::spawn(async move {
            let mut connection = h2::server::handshake(server_io).await.unwrap();
            let (request, mut respond) = connection.accept().await.unwrap().unwrap();
            let send = respond
                .send_response(http::Response::new(()), false)
                .unwrap();
            tokio::spawn(async move { while connection.accept().await.is_some() {} });
            Tunnel::new(send, request.into_body())
        });
        let (mut sender, connection) = h2::client::handshake(client_io).await.unwrap();
        tokio::spawn(connection);
        let request = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("127.0.0.1:9")
            .body(())
            .unwrap();
        let (response, send) = sender.send_request(request, false).unwrap();
        let response = response.await.unwrap();
        let client = Tunnel::new(send, response.into_body());
        (client, server.await.unwrap())
    }

    /// Writes `out`, ends the stream, and reads everything the other end sends, at once.
    async fn exchange(tunnel: Tunnel, out: Vec<u8>) -> Vec<u8> {
        let (mut reader, mut writer) = tokio::io::split(tunnel);
        let reading = async {
            let mut got = Vec::new();
            reader.read_to_end(&mut got).await.unwrap();
            got
        };
        let writing = async {
            writer.write_all(&out).await.unwrap();
            writer.shutdown().await.unwrap();
        };
        tokio::join!(reading, writing).0
    }

    #[tokio::test]
    async fn a_megabyte_crosses_each_way_through_the_flow_control_windows_then_end_of_stream() {
        let (client, server) = tunnel_pair().await;
        let up: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let down: Vec<u8> = up.iter().rev().copied().collect();
        let both =
            async { tokio::join!(exchange(client, up.clone()), exchange(server, down.clone())) };
        let (at_client, at_server) = tokio::time::timeout(Duration::from_secs(30), both)
            .await
            .expect("stalled: a window was never reopened");
        assert!(at_client == down && at_server == up, "bytes changed");
    }

    #[tokio::test]
    async fn a_stream_the_peer_abandons_is_a_reset_not_an_end_of_stream() {
        let (client, mut server) = tunnel_pair().await;
        // Dropped without END_STREAM: h2 resets the stream (CANCEL).
        drop(client);
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(10), server.read(&mut buf))
            .await
            .expect("the reset arrives");
        assert_eq!(
            read.unwrap_err().kind(),
            io::ErrorKind::ConnectionReset,
            "a truncated tunnel must not look complete to the app"
        );
    }
}
