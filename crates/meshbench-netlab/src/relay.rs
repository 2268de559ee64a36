//! The loopback backend's wire: where the netns backend captures the link between nodes with
//! tcpdump, the loopback backend has no link, so a cell that wants evidence puts recording
//! relays where the link would be. A [`WireTap`] hands out one relay per server-side address
//! the client side dials; each relay forwards every connection and keeps what crossed it
//! (the start of each direction, enough for the TLS records, the negotiated version and
//! suite, and the request marker), judged like a capture. A relay is in the path, so it adds
//! its own copy to every exchange: evidence, not a measurement.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::wire::{judge_flow, WireReport};
use crate::Error;

/// Bytes kept per direction of a connection: the analysis needs the first records and the
/// request, not the bulk of a long transfer.
const KEPT_PER_DIRECTION: usize = 256 * 1024;

#[derive(Default)]
struct Recorded {
    client: Option<SocketAddr>,
    server: Option<SocketAddr>,
    to_server: Vec<u8>,
    to_client: Vec<u8>,
}

/// Recording relays for one cell.
#[derive(Default)]
pub struct WireTap {
    relays: Mutex<Vec<(SocketAddr, SocketAddr)>>,
    recorded: Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>>,
    tasks: Mutex<JoinSet<()>>,
}

impl WireTap {
    pub fn new() -> Self {
        WireTap::default()
    }

    /// The address to dial instead of `upstream`: a relay to it, started on first use (on
    /// `upstream`'s loopback address, port chosen by the kernel). Needs a tokio runtime.
    pub fn relay_to(&self, upstream: SocketAddr) -> Result<SocketAddr, Error> {
        let mut relays = self.relays.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((listen, _)) = relays.iter().find(|(_, to)| *to == upstream) {
            return Ok(*listen);
        }
        let io = |source| Error::Io {
            path: format!("relay to {upstream}").into(),
            source,
        };
        let listener =
            std::net::TcpListener::bind(SocketAddr::new(upstream.ip(), 0)).map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        let listen = listener.local_addr().map_err(io)?;
        let listener = TcpListener::from_std(listener).map_err(io)?;
        let recorded = self.recorded.clone();
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(accept(listener, upstream, recorded));
        relays.push((listen, upstream));
        Ok(listen)
    }

    /// Stops every relay and judges what crossed them.
    pub fn finish(&self, marker: &[u8]) -> WireReport {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
        let recorded = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
        let flows = recorded
            .iter()
            .filter_map(|r| {
                let r = r.lock().unwrap_or_else(|p| p.into_inner());
                let (client, server) = (r.client?, r.server?);
                (!r.to_server.is_empty() || !r.to_client.is_empty())
                    .then(|| judge_flow(client, server, &r.to_server, &r.to_client, marker))
            })
            .collect();
        WireReport { packets: 0, flows }
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    recorded: Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>>,
) {
    let mut connections = JoinSet::new();
    while let Ok((downstream, client)) = listener.accept().await {
        let record = Arc::new(Mutex::new(Recorded {
            client: Some(client),
            server: Some(upstream),
            ..Recorded::default()
        }));
        recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record.clone());
        connections.spawn(relay(downstream, upstream, record));
    }
}

async fn relay(downstream: TcpStream, upstream: SocketAddr, record: Arc<Mutex<Recorded>>) {
    let Ok(upstream) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = (downstream.set_nodelay(true), upstream.set_nodelay(true));
    let (down_read, down_write) = downstream.into_split();
    let (up_read, up_write) = upstream.into_split();
    let forward = copy(down_read, up_write, record.clone(), true);
    let backward = copy(up_read, down_write, record, false);
    let _ = tokio::join!(forward, backward);
}

/// Copies one direction, keeping its first bytes; the write side is shut down at the end,
/// so a half-close crosses the relay as it would cross a link.
async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    record: Arc<Mutex<Recorded>>,
    to_server: bool,
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buffer).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        {
            let mut r = record.lock().unwrap_or_else(|p| p.into_inner());
            let kept = if to_server {
                &mut r.to_server
            } else {
                &mut r.to_client
            };
            let room = KEPT_PER_DIRECTION.saturating_sub(kept.len());
            kept.extend_from_slice(&buffer[..n.min(room)]);
        }
        to.write_all(&buffer[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_relay_forwards_and_sees_plaintext() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server_addr = server.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut request = [0u8; 18];
            s.read_exact(&mut request).await.unwrap();
            s.write_all(b"pong").await.unwrap();
        });
        let tap = WireTap::new();
        let relay = tap.relay_to(server_addr).unwrap();
        assert_eq!(
            tap.relay_to(server_addr).unwrap(),
            relay,
            "one relay per upstream"
        );
        let mut client = TcpStream::connect(relay).await.unwrap();
        client.write_all(b"ping secret-marker").await.unwrap();
        let mut answer = [0u8; 4];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"pong");
        let report = tap.finish(b"secret-marker");
        assert_eq!(report.flows.len(), 1);
        assert!(report.marker_seen());
        assert!(!report.all_tls());
        assert_eq!(report.flows[0].server, server_addr);
    }
}
