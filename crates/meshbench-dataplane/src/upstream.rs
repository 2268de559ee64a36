//! The L7 proxy's upstream HTTP/1.1 connections: dialled to one fixed address (the
//! destination's sidecar, or the local app), TCP without Nagle, optionally mTLS verified by the
//! destination's SPIFFE ID, and pooled.
//!
//! An HTTP/1.1 downstream connection sends its requests one at a time, so it leases one
//! upstream connection for its whole life and a request costs no pool lookup (HAProxy's
//! `http-reuse safe` does the same); the lease returns to the idle pool when the downstream
//! connection ends. Requests of an HTTP/2 downstream connection, which run concurrently, take
//! an idle connection each and give it back once its response has been read.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::client::UnbufferedClientConnection;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

use crate::lean_tls::LeanTlsStream;

use crate::metrics::{Direction, ProxyMetrics};

#[derive(Clone)]
pub(crate) struct UpstreamConnector {
    upstream: SocketAddr,
    tls: Option<Arc<ClientConfig>>,
    metrics: Option<Arc<ProxyMetrics>>,
}

impl UpstreamConnector {
    pub(crate) fn new(
        upstream: SocketAddr,
        tls: Option<Arc<ClientConfig>>,
        metrics: Option<Arc<ProxyMetrics>>,
    ) -> Self {
        UpstreamConnector {
            upstream,
            tls,
            metrics,
        }
    }
}

pub(crate) enum UpstreamIo {
    Plain(TokioIo<TcpStream>),
    Tls(TokioIo<Box<LeanTlsStream<UnbufferedClientConnection>>>),
}

impl UpstreamConnector {
    async fn connect(&self) -> io::Result<UpstreamIo> {
        let tcp = TcpStream::connect(self.upstream).await?;
        tcp.set_nodelay(true)?;
        match &self.tls {
            Some(config) => {
                // The verifier checks the SPIFFE ID; the name only feeds SNI.
                let name = ServerName::IpAddress(self.upstream.ip().into());
                let started = Instant::now();
                let tls = crate::lean_tls::connect(config.clone(), name, tcp).await?;
                if let Some(m) = &self.metrics {
                    m.tls_handshake(Direction::Outbound, started.elapsed());
                }
                Ok(UpstreamIo::Tls(TokioIo::new(tls)))
            }
            None => Ok(UpstreamIo::Plain(TokioIo::new(tcp))),
        }
    }

    /// A new HTTP/1.1 connection, driven by a task of its own until either side closes it.
    async fn open(&self) -> io::Result<SendRequest<Incoming>> {
        let io = self.connect().await?;
        let (sender, connection) = http1::handshake(io).await.map_err(io::Error::other)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }
}

/// Upstream connections to one destination: the idle ones, and how to open more.
#[derive(Clone)]
pub(crate) struct UpstreamPool {
    connector: UpstreamConnector,
    idle: Arc<Mutex<Vec<SendRequest<Incoming>>>>,
}

impl UpstreamPool {
    pub(crate) fn new(connector: UpstreamConnector) -> Self {
        UpstreamPool {
            connector,
            idle: Arc::default(),
        }
    }

    /// An idle connection ready for a request, or a new one.
    async fn checkout(&self) -> io::Result<SendRequest<Incoming>> {
        loop {
            let candidate = self.idle.lock().expect("pool lock").pop();
            match candidate {
                Some(sender) if sender.is_ready() => return Ok(sender),
                // Closed by the upstream while idle (or still reading a response): dropped.
                Some(_) => continue,
                None => return self.connector.open().await,
            }
        }
    }

    fn give_back(&self, sender: SendRequest<Incoming>) {
        if !sender.is_closed() {
            self.idle.lock().expect("pool lock").push(sender);
        }
    }

    /// Sends `request` on `sender` once it is ready; a request the connection could not take
    /// (closed before it was written) is sent once more on a new connection, as hyper-util's
    /// client does. Returns the connection used, for the next request.
    async fn send(
        &self,
        mut sender: SendRequest<Incoming>,
        request: Request<Incoming>,
    ) -> (
        Option<SendRequest<Incoming>>,
        Result<Response<Incoming>, UpstreamError>,
    ) {
        let request = match sender.ready().await {
            Ok(()) => match sender.try_send_request(request).await {
                Ok(response) => return (Some(sender), Ok(response)),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => unsent,
                    None => return (None, Err(UpstreamError::Http(e.into_error()))),
                },
            },
            Err(_) => request,
        };
        match self.connector.open().await {
            Ok(mut fresh) => {
                let response = fresh.send_request(request).await;
                (Some(fresh), response.map_err(UpstreamError::Http))
            }
            Err(e) => (None, Err(UpstreamError::Connect(e))),
        }
    }

    /// A lease for one downstream connection's requests.
    pub(crate) fn lease(&self) -> Lease {
        Lease {
            pool: self.clone(),
            sender: Mutex::new(None),
        }
    }
}

/// An upstream connection held by one downstream connection, back to the pool when dropped.
pub(crate) struct Lease {
    pool: UpstreamPool,
    sender: Mutex<Option<SendRequest<Incoming>>>,
}

impl Lease {
    /// Forwards `request`: on the leased connection when `sequential` (HTTP/1.1 downstream),
    /// else on a connection of its own from the pool.
    pub(crate) async fn forward(
        &self,
        request: Request<Incoming>,
        sequential: bool,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let leased = match sequential {
            true => self.sender.lock().expect("lease lock").take(),
            false => None,
        };
        let sender = match leased {
            Some(sender) if !sender.is_closed() => sender,
            _ => self.pool.checkout().await.map_err(UpstreamError::Connect)?,
        };
        let (sender, response) = self.pool.send(sender, request).await;
        if let Some(sender) = sender {
            match sequential {
                true => *self.sender.lock().expect("lease lock") = Some(sender),
                false => self.pool.give_back_when_ready(sender),
            }
        }
        response
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.get_mut().ok().and_then(Option::take) {
            self.pool.give_back(sender);
        }
    }
}

impl UpstreamPool {
    /// A connection whose response body is still being read goes back once it is done.
    fn give_back_when_ready(&self, mut sender: SendRequest<Incoming>) {
        if sender.is_ready() {
            return self.give_back(sender);
        }
        let pool = self.clone();
        tokio::spawn(async move {
            if sender.ready().await.is_ok() {
                pool.give_back(sender);
            }
        });
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("cannot connect upstream: {0}")]
    Connect(io::Error),
    #[error("upstream request failed: {0}")]
    Http(hyper::Error),
}

impl hyper::rt::Read for UpstreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_read(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for UpstreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_flush(cx),
            UpstreamIo::Tls(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_shutdown(cx),
            UpstreamIo::Tls(io) => Pin::new(io).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamIo::Plain(io) => io.is_write_vectored(),
            UpstreamIo::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            UpstreamIo::Tls(io) => Pin::new(io).poll_write_vectored(cx, bufs),
        }
    }
}
