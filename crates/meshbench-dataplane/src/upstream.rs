//! Connections the L7 proxy opens upstream, as hyper-util's pooling client wants them: a
//! connector to one fixed address (the destination's sidecar, or the local app), TCP without
//! Nagle, optionally mTLS verified by the destination's SPIFFE ID.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
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

impl tower_service::Service<Uri> for UpstreamConnector {
    type Response = UpstreamIo;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<UpstreamIo>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Every request goes to the one upstream, whatever its URI says.
    fn call(&mut self, _uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect(this.upstream).await?;
            tcp.set_nodelay(true)?;
            match this.tls {
                Some(config) => {
                    // The verifier checks the SPIFFE ID; the name only feeds SNI.
                    let name = ServerName::IpAddress(this.upstream.ip().into());
                    let started = Instant::now();
                    let tls = crate::lean_tls::connect(config, name, tcp).await?;
                    if let Some(m) = &this.metrics {
                        m.tls_handshake(Direction::Outbound, started.elapsed());
                    }
                    Ok(UpstreamIo::Tls(TokioIo::new(tls)))
                }
                None => Ok(UpstreamIo::Plain(TokioIo::new(tcp))),
            }
        })
    }
}

impl Connection for UpstreamIo {
    fn connected(&self) -> Connected {
        Connected::new()
    }
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
