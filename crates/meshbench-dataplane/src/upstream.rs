//! The L7 proxy's upstream HTTP/1.1 connections: dialled to one fixed address (the
//! destination's sidecar, or the local app), TCP without Nagle, optionally mTLS verified by the
//! destination's SPIFFE ID (`UpstreamConnector`, `UpstreamStream`, shared with the HTTP/1.1
//! codec's pool in `http1`), and pooled as hyper client connections for requests that arrived
//! over HTTP/2.
//!
//! A request takes the most recently idle connection (or opens one) and its response's body
//! gives it back when read to the end, so connections are shared between downstream
//! connections as soon as they are idle (like HAProxy's `http-reuse safe`): a thousand idle
//! downstream connections hold no upstream connection each. The pool is a locked stack, a few
//! dozen instructions per request; hyper-util's legacy client spent thousands on its keyed
//! pool.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::client::UnbufferedClientConnection;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::lean_tls::LeanTlsStream;
use crate::metrics::{Direction, ProxyMetrics};

/// Dials the upstream within a cap on open connections (Envoy's circuit breaker
/// `max_connections`) and a deadline for connecting and the TLS handshake. Clones share the
/// cap, so the HTTP/1.1 and HTTP/2 paths to one destination count together.
#[derive(Clone)]
pub(crate) struct UpstreamConnector {
    upstream: SocketAddr,
    tls: Option<Arc<ClientConfig>>,
    metrics: Option<Arc<ProxyMetrics>>,
    slots: Arc<Semaphore>,
    /// Signalled when a pool takes a connection back, for requests waiting at the cap.
    returned: Arc<Notify>,
    connect_timeout: Duration,
}

/// What a request waiting at the connection cap gets first.
pub(crate) enum Ready<T> {
    /// An idle connection a pool took back.
    Idle(T),
    /// Room to open a new one.
    Slot(OwnedSemaphorePermit),
}

/// Every upstream connection allowed is open and none became free in time.
#[derive(Debug, thiserror::Error)]
#[error("upstream connection limit reached")]
pub(crate) struct UpstreamLimitReached;

/// Whether `e` says the upstream connection limit was reached (a 503, not a 502).
pub(crate) fn is_limit_reached(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<UpstreamLimitReached>())
}

impl UpstreamConnector {
    pub(crate) fn new(
        upstream: SocketAddr,
        tls: Option<Arc<ClientConfig>>,
        metrics: Option<Arc<ProxyMetrics>>,
        limits: &crate::Limits,
    ) -> Self {
        UpstreamConnector {
            upstream,
            tls,
            metrics,
            slots: Arc::new(Semaphore::new(limits.max_upstream_connections.max(1))),
            returned: Arc::new(Notify::new()),
            connect_timeout: limits.connect_timeout,
        }
    }

    /// An idle connection from `take_idle`, or room for a new one, whichever comes first
    /// within the connect timeout: at the cap, a request waits for a connection to come back
    /// to its pool or to close.
    pub(crate) async fn idle_or_slot<T>(
        &self,
        mut take_idle: impl FnMut() -> Option<T>,
    ) -> io::Result<Ready<T>> {
        let deadline = tokio::time::Instant::now() + self.connect_timeout;
        loop {
            if let Some(idle) = take_idle() {
                return Ok(Ready::Idle(idle));
            }
            let returned = self.returned.notified();
            tokio::pin!(returned);
            // Registered before looking again, so a give-back in between is not missed.
            returned.as_mut().enable();
            if let Some(idle) = take_idle() {
                return Ok(Ready::Idle(idle));
            }
            tokio::select! {
                slot = self.slots.clone().acquire_owned() => {
                    return slot.map(Ready::Slot).map_err(io::Error::other);
                }
                () = returned => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(io::Error::other(UpstreamLimitReached));
                }
            }
        }
    }

    /// Tells a request waiting at the cap that a pool took a connection back.
    pub(crate) fn returned(&self) {
        self.returned.notify_one();
    }

    /// A new connection, waiting for room under the cap if need be.
    pub(crate) async fn connect(&self) -> io::Result<UpstreamStream> {
        match self
            .idle_or_slot(|| None::<std::convert::Infallible>)
            .await?
        {
            Ready::Slot(slot) => self.connect_in(slot).await,
            Ready::Idle(never) => match never {},
        }
    }

    /// Dials a new connection in `slot`, within the connect timeout.
    pub(crate) async fn connect_in(
        &self,
        slot: OwnedSemaphorePermit,
    ) -> io::Result<UpstreamStream> {
        tokio::time::timeout(self.connect_timeout, self.dial(slot))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "upstream connect timed out"))?
    }

    async fn dial(&self, slot: OwnedSemaphorePermit) -> io::Result<UpstreamStream> {
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
                Ok(UpstreamStream {
                    io: UpstreamIo::Tls(tls),
                    _slot: slot,
                })
            }
            None => Ok(UpstreamStream {
                io: UpstreamIo::Plain(tcp),
                _slot: slot,
            }),
        }
    }

    /// A new HTTP/1.1 connection, driven by a task of its own until either side closes it.
    async fn open(&self) -> io::Result<SendRequest<Incoming>> {
        self.open_in(None).await
    }

    async fn open_in(
        &self,
        slot: Option<OwnedSemaphorePermit>,
    ) -> io::Result<SendRequest<Incoming>> {
        let stream = match slot {
            Some(slot) => self.connect_in(slot).await?,
            None => self.connect().await?,
        };
        let io = TokioIo::new(stream);
        let (sender, connection) = http1::handshake(io).await.map_err(io::Error::other)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }
}

/// An upstream connection's byte stream, plaintext or mTLS, holding its place under the
/// connection cap until dropped.
pub(crate) struct UpstreamStream {
    io: UpstreamIo,
    _slot: OwnedSemaphorePermit,
}

enum UpstreamIo {
    Plain(TcpStream),
    Tls(Box<LeanTlsStream<UnbufferedClientConnection>>),
}

/// Upstream connections to one destination: the idle ones, and how to open more.
pub(crate) struct UpstreamPool {
    connector: UpstreamConnector,
    /// Last in, first out: the connection just released is the warmest.
    idle: Mutex<Vec<SendRequest<Incoming>>>,
}

impl UpstreamPool {
    pub(crate) fn new(connector: UpstreamConnector) -> Arc<Self> {
        Arc::new(UpstreamPool {
            connector,
            idle: Mutex::default(),
        })
    }

    /// Forwards `request` on an idle connection (or a new one). The connection returns to the
    /// pool when the response's body has been read to its end.
    pub(crate) async fn forward(
        self: &Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<ReleaseAtEnd>, UpstreamError> {
        let sender = self.checkout().await.map_err(UpstreamError::Connect)?;
        let (sender, response) = self.send(sender, request).await;
        let (parts, body) = response?.into_parts();
        let release = ReleaseAtEnd {
            body,
            connection: sender.map(|sender| (sender, self.clone())),
        };
        Ok(Response::from_parts(parts, release))
    }

    async fn checkout(&self) -> io::Result<SendRequest<Incoming>> {
        let take_idle = || {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            // Closed by the upstream while idle: dropped on the way.
            std::iter::from_fn(|| idle.pop()).find(|sender| !sender.is_closed())
        };
        match self.connector.idle_or_slot(take_idle).await? {
            Ready::Idle(sender) => Ok(sender),
            Ready::Slot(slot) => self.connector.open_in(Some(slot)).await,
        }
    }

    fn give_back(&self, sender: SendRequest<Incoming>) {
        if !sender.is_closed() {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(sender);
            self.connector.returned();
        }
    }

    /// Sends `request` on `sender` once it is ready; a request the connection could not take
    /// (closed before it was written) is sent once more on a new connection, as hyper-util's
    /// client does. Returns the connection used.
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
}

/// A response body that gives its connection back to the pool once read to the end. A body
/// dropped before its end takes the connection with it: what is left unread would be the
/// next request's response.
pub(crate) struct ReleaseAtEnd {
    body: Incoming,
    connection: Option<(SendRequest<Incoming>, Arc<UpstreamPool>)>,
}

impl ReleaseAtEnd {
    fn release(&mut self) {
        if let Some((sender, pool)) = self.connection.take() {
            pool.give_back(sender);
        }
    }
}

impl Body for ReleaseAtEnd {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        if frame.is_none() || this.body.is_end_stream() {
            this.release();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for ReleaseAtEnd {
    fn drop(&mut self) {
        // An empty body may never be polled.
        if self.body.is_end_stream() {
            self.release();
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("cannot connect upstream: {0}")]
    Connect(io::Error),
    #[error("upstream request failed: {0}")]
    Http(hyper::Error),
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            UpstreamIo::Plain(io) => Pin::new(io).poll_read(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            UpstreamIo::Plain(io) => Pin::new(io).poll_flush(cx),
            UpstreamIo::Tls(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            UpstreamIo::Plain(io) => Pin::new(io).poll_shutdown(cx),
            UpstreamIo::Tls(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}
