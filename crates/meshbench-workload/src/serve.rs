//! Serving a hyper service on a TCP listener: optional TLS (with or without required client
//! certificates), HTTP/1.1 and HTTP/2 detected per connection (h2c prior knowledge, or ALPN
//! over TLS), and a graceful shutdown that lets in-flight requests finish.
//!
//! Limits hold from a connection's first byte ([`ConnectionLimits`]): a cap on connections
//! (the next one is closed at once), a deadline for the bytes that say which protocol a
//! connection speaks (HTTP/2's 24-byte preface included, which hyper itself waits for without
//! a timer), hyper's deadline for each HTTP/1.1 request head, and, where set, an idle timeout
//! for HTTP/2 connections that have no open stream (pings do not keep one open). The workloads
//! (the servers a cell measures) and the control listeners (`meshbench serve`) each have their
//! own values.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use meshbench_identity::ServerTlsFiles;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio_rustls::TlsAcceptor;

use crate::Error;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// Serve TLS with these files; with `client_ca` set, clients must present a certificate.
    pub tls: Option<ServerTlsFiles>,
    /// How long shutdown waits for in-flight requests before dropping them.
    pub drain_timeout: Duration,
}

/// A listener that is bound (so its address is known and port conflicts are reported before
/// anything else starts) but not yet serving.
pub struct BoundServer {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    drain_timeout: Duration,
    limits: ConnectionLimits,
}

/// What a listener allows each connection, and how many.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionLimits {
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// A new connection must show which protocol it speaks within this: its first bytes for
    /// HTTP/1.1, the whole 24-byte preface for HTTP/2 (after the TLS handshake, which has a
    /// deadline of its own).
    pub sniff_timeout: Duration,
    /// An HTTP/2 connection without an open stream for this long is closed (gracefully: a
    /// GOAWAY). `None`: kept while its client keeps it.
    pub h2_idle_timeout: Option<Duration>,
}

impl ConnectionLimits {
    /// The workloads' (the servers a cell measures): more connections than a spec may ask for
    /// (65,536 per point, with a generator or two beside), the request-head deadline for the
    /// first bytes too, and no HTTP/2 idle timeout, since a load generator's connection may
    /// wait between a cell's warm-up and its measured window.
    pub fn workload() -> Self {
        ConnectionLimits {
            max_connections: 131_072,
            sniff_timeout: HEADER_READ_TIMEOUT,
            h2_idle_timeout: None,
        }
    }

    /// A control listener's (`meshbench serve`): a person's browser and scripts.
    pub fn control() -> Self {
        ConnectionLimits {
            max_connections: 256,
            sniff_timeout: Duration::from_secs(10),
            h2_idle_timeout: Some(HEADER_READ_TIMEOUT),
        }
    }
}

pub async fn bind(options: &ServeOptions) -> Result<BoundServer, Error> {
    let tls = match &options.tls {
        Some(files) => {
            let config = meshbench_identity::server_config(files, &[b"h2", b"http/1.1"])?;
            Some(TlsAcceptor::from(Arc::new(config)))
        }
        None => None,
    };
    let listener = meshbench_net::bind(options.listen).await?;
    Ok(BoundServer {
        listener,
        tls,
        drain_timeout: options.drain_timeout,
        limits: ConnectionLimits::workload(),
    })
}

impl BoundServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound TCP listener has a local address")
    }

    /// Serves with `limits` instead of the workloads' ([`ConnectionLimits::workload`]).
    pub fn with_limits(mut self, limits: ConnectionLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Serves `service` until `shutdown` resolves, then drains in-flight connections.
    pub async fn serve<S, B>(self, service: S, shutdown: impl Future<Output = ()>)
    where
        S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // hyper's one HTTP/1.1 timer bounds both a request head and the wait for the next
        // request on a kept-alive connection, so it is longer than a head needs.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_STREAMS)
            .keep_alive_interval(Some(HEADER_READ_TIMEOUT));
        let builder = Arc::new(builder);
        let (stop, stopping) = watch::channel(false);
        let open = Arc::new(OpenConnections::default());
        tokio::pin!(shutdown);
        let mut listener = meshbench_net::PatientListener::new(self.listener, "workload");
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            let Some(slot) = open.take(self.limits.max_connections) else {
                tracing::debug!(%peer, max = self.limits.max_connections, "connection refused: at the cap");
                drop(stream);
                continue;
            };
            let service = service.clone();
            let builder = builder.clone();
            let tls = self.tls.clone();
            let limits = self.limits.clone();
            let stopping = stopping.clone();
            tokio::spawn(async move {
                let _slot = slot;
                if let Err(e) =
                    serve_connection(stream, tls, &builder, service, &limits, stopping).await
                {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
        drop(listener);
        let _ = stop.send(true);
        tokio::select! {
            () = open.all_closed() => {}
            () = tokio::time::sleep(self.drain_timeout) => {
                tracing::warn!("drain timeout reached; dropping remaining connections");
            }
        }
    }
}

/// A TLS client must finish its handshake within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request head must arrive within this, and a kept-alive connection is closed after this
/// long without one.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Concurrent HTTP/2 streams per connection.
const MAX_STREAMS: u32 = 256;
/// What an HTTP/2 client sends first (RFC 9113, section 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The connections being served, and a wake-up when the last one ends.
#[derive(Default)]
struct OpenConnections {
    count: AtomicUsize,
    none_left: Notify,
}

/// One connection's place under the cap, given back when it ends.
struct ConnectionSlot(Arc<OpenConnections>);

impl OpenConnections {
    fn take(self: &Arc<Self>, max: usize) -> Option<ConnectionSlot> {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| ConnectionSlot(self.clone()))
    }

    async fn all_closed(&self) {
        loop {
            let notified = self.none_left.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none_left.notify_waiters();
        }
    }
}

async fn serve_connection<S, B>(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    builder: &auto::Builder<TokioExecutor>,
    service: S,
    limits: &ConnectionLimits,
    stopping: watch::Receiver<bool>,
) -> Result<(), BoxError>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let io: Box<dyn Io> = match tls {
        Some(acceptor) => Box::new(
            tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                .await
                .map_err(|_| "TLS handshake timed out")??,
        ),
        None => Box::new(stream),
    };
    serve_sniffed(io, builder, service, limits, stopping).await
}

/// A connection's bytes, over TLS or not. Behind one trait object, hyper's server compiles
/// once for both (it was two copies per service); a read or write costs a virtual call.
trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// Reads what says which protocol `io` speaks (within the sniff deadline), then serves it,
/// the bytes read replayed first.
async fn serve_sniffed<S, B>(
    mut io: Box<dyn Io>,
    builder: &auto::Builder<TokioExecutor>,
    service: S,
    limits: &ConnectionLimits,
    stopping: watch::Receiver<bool>,
) -> Result<(), BoxError>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let first = tokio::time::timeout(limits.sniff_timeout, sniff(&mut io))
        .await
        .map_err(|_| "no request began within the sniff deadline")??;
    let h2 = first.as_slice() == H2_PREFACE;
    let io = Prefixed {
        prefix: first,
        at: 0,
        inner: io,
    };
    match limits.h2_idle_timeout.filter(|_| h2) {
        Some(idle_timeout) => {
            let activity = Arc::new(Activity::new());
            let service = Tracked {
                inner: service,
                activity: activity.clone(),
            };
            let idle = activity.idle_for(idle_timeout);
            drive(
                builder.serve_connection(TokioIo::new(io), service),
                stopping,
                idle,
            )
            .await
        }
        None => {
            let never = std::future::pending::<()>();
            drive(
                builder.serve_connection(TokioIo::new(io), service),
                stopping,
                never,
            )
            .await
        }
    }
}

/// The first bytes of a connection: enough to tell HTTP/2's preface from anything else.
async fn sniff<I: AsyncRead + Unpin>(io: &mut I) -> Result<Vec<u8>, BoxError> {
    let mut buf = [0u8; H2_PREFACE.len()];
    let mut n = 0;
    while n < buf.len() && H2_PREFACE.starts_with(&buf[..n]) {
        let read = io.read(&mut buf[n..]).await?;
        if read == 0 {
            return Err("closed before a request".into());
        }
        n += read;
    }
    Ok(buf[..n].to_vec())
}

/// Serves a connection until it ends; shut down gracefully when the server stops or `idle`
/// fires.
async fn drive<C, E>(
    conn: C,
    mut stopping: watch::Receiver<bool>,
    idle: impl Future<Output = ()>,
) -> Result<(), BoxError>
where
    C: Future<Output = Result<(), E>> + GracefulConnection,
    E: Into<BoxError>,
{
    tokio::pin!(conn);
    tokio::pin!(idle);
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => return result.map_err(Into::into),
            _ = stopping.wait_for(|stop| *stop), if !closing => {
                closing = true;
                conn.as_mut().close_gracefully();
            }
            () = &mut idle, if !closing => {
                closing = true;
                conn.as_mut().close_gracefully();
            }
        }
    }
}

/// hyper-util's connection, shut down by name (its `graceful_shutdown` is inherent).
trait GracefulConnection {
    fn close_gracefully(self: Pin<&mut Self>);
}

impl<I, S, B> GracefulConnection for auto::Connection<'_, I, S, TokioExecutor>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    fn close_gracefully(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// A stream whose first bytes were already read: they are read again first.
struct Prefixed<I> {
    prefix: Vec<u8>,
    at: usize,
    inner: I,
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Prefixed<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// An HTTP/2 connection's open streams (a request until its response body has been sent),
/// and since when it has had none.
struct Activity {
    open: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl Activity {
    fn new() -> Self {
        Activity {
            open: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
        }
    }

    fn begin(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Ordering::AcqRel);
        StreamGuard(self.clone())
    }

    /// Resolves once the connection has had no open stream for `timeout`.
    async fn idle_for(self: Arc<Self>, timeout: Duration) {
        loop {
            let wait = if self.open.load(Ordering::Acquire) > 0 {
                timeout
            } else {
                let since = *self.idle_since.lock().unwrap_or_else(|p| p.into_inner());
                let left = timeout.saturating_sub(since.elapsed());
                if left.is_zero() {
                    return;
                }
                left
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// One open stream; its end stamps the connection's idle time.
struct StreamGuard(Arc<Activity>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A service whose requests are counted as open streams until their responses' bodies end.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

type TrackedFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<TrackedBody<B>>, E>> + Send>>;

impl<S, B> Service<Request<Incoming>> for Tracked<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<B, S::Error>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let guard = self.activity.begin();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|inner| TrackedBody {
                inner,
                _guard: guard,
            }))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds its stream open until it is dropped.
    struct TrackedBody<B> {
        #[pin]
        inner: B,
        _guard: StreamGuard,
    }
}

impl<B: Body> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
