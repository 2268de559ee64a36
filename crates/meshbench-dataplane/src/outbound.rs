//! The outbound path: take the app's plaintext connection and carry it to the destination's
//! sidecar over mTLS, presenting this workload's SVID and requiring the destination's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

use crate::l7::{serve_http, L7Upstream, Recording};
use crate::metrics::{Direction, ProxyMetrics};
use crate::sidecar_config::ProxyMode;
use crate::upstream::UpstreamConnector;
use crate::Limits;

pub(crate) struct Outbound {
    upstream: SocketAddr,
    limits: Limits,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// L7 mode: pooled (m)TLS connections to the upstream sidecar.
    client: Option<Arc<L7Upstream>>,
    metrics: Option<Arc<ProxyMetrics>>,
}

impl Outbound {
    pub(crate) fn new(
        upstream: SocketAddr,
        tls: Option<rustls::ClientConfig>,
        mode: ProxyMode,
        metrics: Option<Arc<ProxyMetrics>>,
        limits: Limits,
    ) -> Self {
        let tls = tls.map(Arc::new);
        let client = (mode == ProxyMode::L7).then(|| {
            L7Upstream::new(
                UpstreamConnector::new(upstream, tls.clone(), metrics.clone(), &limits),
                limits,
            )
        });
        Outbound {
            upstream,
            limits,
            tls,
            client,
            metrics,
        }
    }

    pub(crate) async fn handle(&self, mut app: TcpStream) {
        let _open = self
            .metrics
            .as_ref()
            .map(|m| m.connection(Direction::Outbound));
        if let Some(client) = &self.client {
            let recording = self.metrics.clone().map(|metrics| Recording {
                metrics,
                direction: Direction::Outbound,
            });
            // Boxed, as inbound: hyper's state must not size every L4 connection's task.
            Box::pin(serve_http(app, None, client.clone(), recording)).await;
            return;
        }
        let connect = TcpStream::connect(self.upstream);
        let mut upstream = match tokio::time::timeout(self.limits.connect_timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(upstream = %self.upstream, error = %e, "upstream unreachable");
                return;
            }
            Err(_) => {
                tracing::debug!(upstream = %self.upstream, "upstream connect timed out");
                return;
            }
        };
        let idle = self.limits.idle_timeout;
        let _ = upstream.set_nodelay(true);
        match &self.tls {
            Some(config) => {
                // The verifier checks the SPIFFE ID; the name only feeds SNI.
                let name = ServerName::IpAddress(self.upstream.ip().into());
                let started = Instant::now();
                // Boxed, as inbound: the handshake's state must not size the task.
                let handshake = Box::pin(tokio::time::timeout(
                    self.limits.connect_timeout,
                    crate::lean_tls::connect(config.clone(), name, upstream),
                ));
                match handshake.await.unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "handshake timed out",
                    ))
                }) {
                    Ok(mut tls) => {
                        if let Some(m) = &self.metrics {
                            m.tls_handshake(Direction::Outbound, started.elapsed());
                        }
                        self.record(crate::splice::splice(&mut app, &mut tls, idle).await);
                    }
                    Err(e) => {
                        tracing::info!(upstream = %self.upstream, error = %e, "outbound mTLS refused");
                    }
                }
            }
            None => {
                self.record(crate::splice::splice(&mut app, &mut upstream, idle).await);
            }
        }
    }

    fn record(&self, copied: std::io::Result<(u64, u64)>) {
        if let (Some(m), Ok((forward, backward))) = (&self.metrics, copied) {
            m.carried(Direction::Outbound, forward, backward);
        }
    }
}

/// Connections iptables REDIRECTed from the app: routed by their original destination.
pub(crate) struct Captured {
    routes: HashMap<SocketAddr, Outbound>,
    metrics: Option<Arc<ProxyMetrics>>,
    limits: Limits,
}

impl Captured {
    pub(crate) fn new(
        routes: HashMap<SocketAddr, Outbound>,
        metrics: Option<Arc<ProxyMetrics>>,
        limits: Limits,
    ) -> Self {
        Captured {
            routes,
            metrics,
            limits,
        }
    }

    pub(crate) async fn handle(&self, app: TcpStream) {
        let destination = match crate::serving::original_destination(&app) {
            Ok(d) => d,
            Err(e) => {
                tracing::info!(error = %e, "captured connection without an original destination");
                return;
            }
        };
        match self.routes.get(&destination) {
            Some(route) => route.handle(app).await,
            // Not a mesh destination: pass it through untouched, plaintext and L4.
            None => {
                let passthrough = Outbound::new(
                    destination,
                    None,
                    ProxyMode::L4,
                    self.metrics.clone(),
                    self.limits,
                );
                passthrough.handle(app).await
            }
        }
    }
}
