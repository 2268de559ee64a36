//! The node agent's outbound side: connections a local workload opens, arriving either on an
//! explicit listener (one source, one destination) or captured by the node (the source known
//! by its pod's address, the destination by `SO_ORIGINAL_DST`). Mesh destinations elsewhere
//! (and local ones when same-node encryption is on) are tunnelled over HBONE; with it off, a
//! local destination is authorized here by the source's identity and connected directly, as
//! Cilium does within a node; a destination outside the mesh is connected in plaintext, as
//! ztunnel passes through to workloads it does not serve.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use meshbench_identity::SpiffeId;
use meshbench_policy::{Peer, Policy, Request as AuthzRequest};
use tokio::net::TcpStream;

use super::config::OutboundListener;
use super::directory::{Destination, Directory, LocalEntry};
use super::pool::HbonePool;
use crate::metrics::{Direction, ProxyMetrics};
use crate::serving::{original_destination, Limits};
use crate::Error;

enum Route {
    Tunnel {
        destination: SpiffeId,
        agent: SocketAddr,
    },
    Direct {
        destination: Arc<LocalEntry>,
    },
    Passthrough,
}

pub(crate) struct AgentOutbound {
    pub(crate) directory: Arc<Directory>,
    pub(crate) own_hbone: SocketAddr,
    pub(crate) same_node_encryption: bool,
    pub(crate) pool: Arc<HbonePool>,
    pub(crate) policy: Arc<Policy>,
    pub(crate) metrics: Option<Arc<ProxyMetrics>>,
    pub(crate) limits: Limits,
}

/// An explicit outbound listener's fixed pair.
pub(crate) struct FixedPair {
    source: Arc<LocalEntry>,
    target: SocketAddr,
}

impl AgentOutbound {
    /// Checks an explicit listener: its source must be a local workload and its destination
    /// a workload or a service the agent knows.
    pub(crate) fn fixed_pair(&self, listener: &OutboundListener) -> Result<FixedPair, Error> {
        let source = self.directory.local(&listener.source).ok_or_else(|| {
            Error::Config(format!(
                "outbound {}: source {:?} is not a workload of this node (use namespace/name)",
                listener.listen, listener.source
            ))
        })?;
        let known = self.directory.destination(listener.destination).is_some()
            || self.directory.is_service(listener.destination);
        if !known {
            return Err(Error::Config(format!(
                "outbound {}: no workload listens on destination {}",
                listener.listen, listener.destination
            )));
        }
        Ok(FixedPair {
            source,
            target: listener.destination,
        })
    }

    fn route(&self, target: SocketAddr) -> Route {
        match self.directory.destination(target) {
            Some(Destination::Local(entry)) if self.same_node_encryption => Route::Tunnel {
                destination: entry.id.clone(),
                agent: self.own_hbone,
            },
            Some(Destination::Local(entry)) => Route::Direct {
                destination: entry.clone(),
            },
            Some(Destination::Remote { id, agent }) => Route::Tunnel {
                destination: id.clone(),
                agent: *agent,
            },
            None => Route::Passthrough,
        }
    }

    pub(crate) async fn handle_fixed(&self, app: TcpStream, pair: &FixedPair) {
        // A fixed target may be a service's address too.
        let target = self.directory.resolve(pair.target);
        self.forward(app, &pair.source, target).await;
    }

    /// A connection the node captured from one of its pods.
    pub(crate) async fn handle_captured(&self, app: TcpStream, peer: SocketAddr) {
        let Some(source) = self.directory.local_by_ip(peer.ip()) else {
            tracing::info!(%peer, "captured connection from a pod this agent does not serve");
            return;
        };
        let original = match original_destination(&app) {
            Ok(original) => original,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "no original destination");
                return;
            }
        };
        let target = self.directory.resolve(original);
        self.forward(app, &source, target).await;
    }

    async fn forward(&self, mut app: TcpStream, source: &LocalEntry, target: SocketAddr) {
        let _open = self
            .metrics
            .as_ref()
            .map(|m| m.connection(Direction::Outbound));
        let (idle, connect_timeout) = (self.limits.idle_timeout, self.limits.connect_timeout);
        let copied = match self.route(target) {
            Route::Tunnel { destination, agent } => {
                // Boxed: dialling a peer agent (TLS, HTTP/2, their deadlines) takes far more
                // state than splicing, and would size the tunnel's task for its whole life.
                let opened = Box::pin(self.pool.open(source, &destination, agent, target)).await;
                let (mut tunnel, _slot) = match opened {
                    Ok(opened) => opened,
                    Err(e) => {
                        tracing::info!(source = %source.id, error = %e, "tunnel refused");
                        return;
                    }
                };
                crate::splice::splice(&mut app, &mut tunnel, idle).await
            }
            Route::Direct { destination } => {
                let peer = Peer::Authenticated {
                    id: source.id.clone(),
                    source_ip: app.peer_addr().ok().map(|a| a.ip()),
                };
                let decision = self.policy.authorize(&AuthzRequest {
                    namespace: &destination.namespace,
                    workload: &destination.name,
                    port: target.port(),
                    peer: &peer,
                    http: None,
                });
                if let Some(m) = &self.metrics {
                    m.authorized(decision.allowed);
                }
                if !decision.allowed {
                    tracing::info!(source = %source.id, reason = %decision.reason, "denied");
                    return;
                }
                let Some(mut upstream) = connect(target, connect_timeout).await else {
                    return;
                };
                crate::splice::splice(&mut app, &mut upstream, idle).await
            }
            Route::Passthrough => {
                let Some(mut upstream) = connect(target, connect_timeout).await else {
                    return;
                };
                crate::splice::splice(&mut app, &mut upstream, idle).await
            }
        };
        if let (Some(m), Ok((forward, backward))) = (&self.metrics, copied) {
            m.carried(Direction::Outbound, forward, backward);
        }
    }
}

pub(crate) async fn connect(target: SocketAddr, timeout: Duration) -> Option<TcpStream> {
    match tokio::time::timeout(timeout, TcpStream::connect(target)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Some(stream)
        }
        Ok(Err(e)) => {
            tracing::warn!(%target, error = %e, "cannot reach the destination");
            None
        }
        Err(_) => {
            tracing::warn!(%target, "connecting to the destination timed out");
            None
        }
    }
}
