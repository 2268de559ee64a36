//! Serving a hyper service on a TCP listener: optional TLS (with or without required client
//! certificates), HTTP/1.1 and HTTP/2 detected per connection (h2c prior knowledge, or ALPN
//! over TLS), and a graceful shutdown that lets in-flight requests finish.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use meshbench_identity::ServerTlsFiles;
use tokio::net::{TcpListener, TcpStream};
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
    })
}

impl BoundServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound TCP listener has a local address")
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
        let graceful = GracefulShutdown::new();
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
        tokio::pin!(shutdown);
        let mut listener = meshbench_net::PatientListener::new(self.listener, "workload");
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            let service = service.clone();
            let builder = builder.clone();
            let tls = self.tls.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                if let Err(e) = serve_connection(stream, tls, &builder, service, watcher).await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
        drop(listener);
        tokio::select! {
            () = graceful.shutdown() => {}
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

async fn serve_connection<S, B>(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    builder: &auto::Builder<TokioExecutor>,
    service: S,
    watcher: hyper_util::server::graceful::Watcher,
) -> Result<(), BoxError>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    match tls {
        Some(acceptor) => {
            let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                .await
                .map_err(|_| "TLS handshake timed out")??;
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            watcher.watch(conn.into_owned()).await
        }
        None => {
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            watcher.watch(conn.into_owned()).await
        }
    }
}
