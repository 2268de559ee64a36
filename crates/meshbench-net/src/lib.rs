//! Accepting connections on a listener that faces the network. A failed accept (out of file
//! descriptors, most often) must neither spin the CPU nor flood the log, and must not stop
//! the connections already established from being served: the accept pauses, 10 ms doubling
//! to 1 s while accepts keep failing, and one warning per 10 s counts the failures since the
//! last. The data plane, the CA service and the workloads all accept this way. A TLS
//! handshake on an accepted connection must then finish by a deadline ([`handshake_by`]), so
//! that a peer sending half a ClientHello holds nothing for long.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

/// Longest pause after a failed accept.
pub const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// First pause after a failed accept; each further failure doubles it.
pub const MIN_ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// At most one "accept failed" line per this period.
pub const ACCEPT_LOG_PERIOD: Duration = Duration::from_secs(10);

/// A listener that could not be opened, naming the address asked for.
#[derive(Debug)]
pub struct BindError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot listen on {}: {}", self.addr, self.source)
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Opens a TCP listener on `addr`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })
}

/// Why an accepted connection's TLS handshake did not finish.
#[derive(Debug)]
pub enum HandshakeFailed<E> {
    Refused(E),
    TimedOut,
}

impl<E: std::fmt::Display> std::fmt::Display for HandshakeFailed<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeFailed::Refused(e) => e.fmt(f),
            HandshakeFailed::TimedOut => f.write_str("not finished by the handshake deadline"),
        }
    }
}

/// Runs `handshake`, cut off at `deadline`.
pub async fn handshake_by<T, E>(
    deadline: tokio::time::Instant,
    handshake: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, HandshakeFailed<E>> {
    match tokio::time::timeout_at(deadline, handshake).await {
        Ok(done) => done.map_err(HandshakeFailed::Refused),
        Err(_) => Err(HandshakeFailed::TimedOut),
    }
}

/// A listener whose `accept` retries failures with a growing pause.
#[derive(Debug)]
pub struct PatientListener {
    listener: TcpListener,
    /// Names the listener in the log line ("CA", "data plane").
    what: &'static str,
    backoff: Duration,
    last_log: Option<Instant>,
    unlogged: u64,
}

impl PatientListener {
    pub fn new(listener: TcpListener, what: &'static str) -> Self {
        PatientListener {
            listener,
            what,
            backoff: Duration::ZERO,
            last_log: None,
            unlogged: 0,
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection, with `TCP_NODELAY` set (every listener here carries
    /// request-response traffic whose latency is measured). Never fails: failures are
    /// waited out. Cancel-safe, as `TcpListener::accept` is.
    pub async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    self.backoff = Duration::ZERO;
                    let _ = stream.set_nodelay(true);
                    return (stream, peer);
                }
                Err(e) => {
                    self.unlogged += 1;
                    if self
                        .last_log
                        .is_none_or(|at| at.elapsed() >= ACCEPT_LOG_PERIOD)
                    {
                        tracing::warn!(
                            listener = self.what,
                            error = %e,
                            failures = self.unlogged,
                            "accept failed"
                        );
                        (self.last_log, self.unlogged) = (Some(Instant::now()), 0);
                    }
                    self.backoff = (self.backoff * 2).clamp(MIN_ACCEPT_BACKOFF, MAX_ACCEPT_BACKOFF);
                    tokio::time::sleep(self.backoff).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepts_with_nodelay_and_reports_the_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut patient = PatientListener::new(listener, "test");
        let client = TcpStream::connect(addr).await.unwrap();
        let (stream, peer) = patient.accept().await;
        assert_eq!(peer, client.local_addr().unwrap());
        assert!(stream.nodelay().unwrap());
    }
}
