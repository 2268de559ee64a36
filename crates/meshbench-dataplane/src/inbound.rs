//! The inbound path: tell TLS from plaintext by the first byte, terminate mTLS (the peer's
//! SPIFFE ID comes from its verified certificate, never from anything it says), decide by
//! policy, then splice bytes to the app. A denied connection is closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use meshbench_identity::spiffe_ids_of;
use meshbench_policy::{Peer, Policy, Request};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::l7::{serve_http, InboundContext, L7Upstream, Recording};
use crate::metrics::{Direction, ProxyMetrics};
use crate::sidecar_config::{ProxyMode, SidecarConfig};
use crate::upstream::UpstreamConnector;
use crate::Limits;

/// First byte of a TLS handshake record (ClientHello).
const TLS_HANDSHAKE: u8 = 0x16;

pub(crate) struct Inbound {
    namespace: String,
    workload: String,
    app: SocketAddr,
    transparent: bool,
    policy: Arc<Policy>,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    /// L7 mode: pooled connections to the app.
    app_client: Option<Arc<L7Upstream>>,
    metrics: Option<Arc<ProxyMetrics>>,
}

impl Inbound {
    pub(crate) fn new(
        config: &SidecarConfig,
        app: SocketAddr,
        transparent: bool,
        tls: Option<rustls::ServerConfig>,
    ) -> Self {
        Inbound {
            namespace: config.namespace.clone(),
            workload: config.workload.clone(),
            app,
            transparent,
            policy: config.policy.clone(),
            tls: tls.map(Arc::new),
            limits: config.limits,
            app_client: (config.mode == ProxyMode::L7).then(|| {
                L7Upstream::new(
                    UpstreamConnector::new(app, None, None, &config.limits),
                    config.limits,
                )
            }),
            metrics: config.metrics.clone(),
        }
    }

    pub(crate) async fn handle(&self, stream: TcpStream, peer_addr: SocketAddr) {
        let _open = self
            .metrics
            .as_ref()
            .map(|m| m.connection(Direction::Inbound));
        let source_ip = Some(peer_addr.ip());
        // A REDIRECTed connection goes to the app port it was sent to.
        let app = match self.transparent {
            true => match crate::serving::original_destination(&stream) {
                Ok(original) => SocketAddr::new(self.app.ip(), original.port()),
                Err(e) => {
                    tracing::info!(%peer_addr, error = %e, "no original destination");
                    return;
                }
            },
            false => self.app,
        };
        // Detection and the handshake share one deadline from accept: a peer that sends
        // nothing, or half a ClientHello, is dropped when it passes.
        let deadline = tokio::time::Instant::now() + self.limits.handshake_timeout;
        let mut first = [0u8; 1];
        let is_tls = match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
            Ok(Ok(1)) => first[0] == TLS_HANDSHAKE,
            // Closed, failed, or silent past the deadline.
            _ => return,
        };
        match (is_tls, &self.tls) {
            (true, Some(config)) => {
                let started = Instant::now();
                // Boxed: the handshake's state would otherwise size the connection's task for its
                // whole life (2.5 KiB, more than everything the task keeps afterwards).
                let handshake = Box::pin(meshbench_net::handshake_by(
                    deadline,
                    crate::lean_tls::accept(config.clone(), stream),
                ));
                let tls = match handshake.await {
                    Ok(tls) => tls,
                    Err(e) => {
                        tracing::debug!(%peer_addr, error = %e, "inbound TLS handshake failed");
                        return;
                    }
                };
                if let Some(m) = &self.metrics {
                    m.tls_handshake(Direction::Inbound, started.elapsed());
                }
                let id = tls
                    .connection()
                    .peer_certificates()
                    .and_then(|certs| certs.first())
                    .and_then(|leaf| spiffe_ids_of(leaf).into_iter().next());
                let peer = match id {
                    Some(id) => Peer::Authenticated { id, source_ip },
                    // A verified certificate without a SPIFFE ID carries no mesh identity.
                    None => Peer::Plaintext { source_ip },
                };
                self.forward_if_allowed(tls, &peer, app).await;
            }
            // TLS arriving at a sidecar that does not terminate it: not ours to accept.
            (true, None) => {}
            (false, _) => {
                self.forward_if_allowed(stream, &Peer::Plaintext { source_ip }, app)
                    .await
            }
        }
    }

    async fn forward_if_allowed<S>(&self, mut downstream: S, peer: &Peer, app: SocketAddr)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if let Some(client) = &self.app_client {
            // L7: peer authentication per connection, authorization per request.
            let admitted = self
                .policy
                .admits_connection(&self.namespace, &self.workload, peer);
            if !admitted.allowed {
                tracing::info!(?peer, reason = %admitted.reason, "inbound connection refused");
                return;
            }
            let context = InboundContext {
                namespace: self.namespace.as_str().into(),
                workload: self.workload.as_str().into(),
                port: app.port(),
                policy: self.policy.clone(),
                peer: peer.clone(),
            };
            let recording = self.metrics.clone().map(|metrics| Recording {
                metrics,
                direction: Direction::Inbound,
            });
            // Boxed: hyper's connection state would otherwise size every connection's task,
            // L4 ones included, for its whole life.
            Box::pin(serve_http(
                downstream,
                Some(Arc::new(context)),
                client.clone(),
                recording,
            ))
            .await;
            return;
        }
        let decision = self.policy.authorize(&Request {
            namespace: &self.namespace,
            workload: &self.workload,
            port: app.port(),
            peer,
            http: None,
        });
        if let Some(m) = &self.metrics {
            m.authorized(decision.allowed);
        }
        if !decision.allowed {
            tracing::info!(?peer, reason = %decision.reason, "inbound connection denied");
            return;
        }
        let connect = tokio::time::timeout(self.limits.connect_timeout, TcpStream::connect(app));
        let mut app = match connect.await {
            Ok(Ok(app)) => app,
            Ok(Err(e)) => {
                tracing::warn!(%app, error = %e, "cannot reach the app");
                return;
            }
            Err(_) => {
                tracing::warn!(%app, "connecting to the app timed out");
                return;
            }
        };
        let _ = app.set_nodelay(true);
        let idle = self.limits.idle_timeout;
        if let Ok((forward, backward)) =
            crate::splice::splice(&mut downstream, &mut app, idle).await
        {
            if let Some(m) = &self.metrics {
                m.carried(Direction::Inbound, forward, backward);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::Outbound;

    /// A connection's task lives as long as the connection: with a thousand connections open,
    /// every kilobyte of its state is a megabyte of the proxy's memory. Handshakes, hyper's
    /// state and rustls's connection are boxed so that they do not size it.
    #[tokio::test]
    async fn a_connections_task_stays_under_a_kilobyte() {
        let config = SidecarConfig {
            namespace: "app".into(),
            workload: "server".into(),
            identity: None,
            mtls: false,
            tls: Default::default(),
            mode: ProxyMode::L4,
            metrics: None,
            policy: Arc::new(Policy::from_yaml("{}").unwrap()),
            inbound: None,
            outbound: vec![],
            transparent_outbound: None,
            limits: Limits::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let inbound = Inbound::new(&config, addr, false, None);
        let outbound = Outbound::new(addr, None, ProxyMode::L4, None, Limits::default());
        let (first, second) = (TcpStream::connect(addr), TcpStream::connect(addr));
        let (first, second) = tokio::join!(first, second);
        let inbound_task = std::mem::size_of_val(&inbound.handle(first.unwrap(), addr));
        let outbound_task = std::mem::size_of_val(&outbound.handle(second.unwrap()));
        assert!(
            inbound_task <= 1024 && outbound_task <= 1024,
            "inbound {inbound_task} B, outbound {outbound_task} B"
        );
    }
}
