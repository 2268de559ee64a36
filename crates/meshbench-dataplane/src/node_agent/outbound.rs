//! An outbound listener of the node agent: connections from one local workload to one
//! destination. Remote destinations (and local ones when same-node encryption is on) are
//! tunnelled over HBONE; with it off, a local destination is authorized here by the source's
//! identity and connected directly, as Cilium does within a node.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use meshbench_identity::SpiffeId;
use meshbench_policy::{Peer, Policy, Request as AuthzRequest};
use tokio::net::TcpStream;

use super::config::OutboundListener;
use super::directory::{Destination, Directory, LocalEntry};
use super::pool::HbonePool;
use crate::metrics::{Direction, ProxyMetrics};
use crate::Error;

enum Route {
    Tunnel {
        destination: SpiffeId,
        agent: SocketAddr,
    },
    Direct {
        destination: Arc<LocalEntry>,
    },
}

pub(crate) struct AgentOutbound {
    source: Arc<LocalEntry>,
    target: SocketAddr,
    route: Route,
    pool: Arc<HbonePool>,
    policy: Arc<Policy>,
    metrics: Option<Arc<ProxyMetrics>>,
}

impl AgentOutbound {
    pub(crate) fn new(
        directory: &Directory,
        listener: &OutboundListener,
        own_hbone: SocketAddr,
        same_node_encryption: bool,
        pool: Arc<HbonePool>,
        policy: Arc<Policy>,
        metrics: Option<Arc<ProxyMetrics>>,
    ) -> Result<Self, Error> {
        let source = directory.local(&listener.source).ok_or_else(|| {
            Error::Config(format!(
                "outbound {}: source {:?} is not a workload of this node (use namespace/name)",
                listener.listen, listener.source
            ))
        })?;
        let route = match directory.destination(listener.destination) {
            Some(Destination::Local(entry)) if same_node_encryption => Route::Tunnel {
                destination: entry.id.clone(),
                agent: own_hbone,
            },
            Some(Destination::Local(entry)) => Route::Direct {
                destination: entry.clone(),
            },
            Some(Destination::Remote { id, agent }) => Route::Tunnel {
                destination: id.clone(),
                agent: *agent,
            },
            None => {
                return Err(Error::Config(format!(
                    "outbound {}: no workload listens on destination {}",
                    listener.listen, listener.destination
                )))
            }
        };
        Ok(AgentOutbound {
            source,
            target: listener.destination,
            route,
            pool,
            policy,
            metrics,
        })
    }

    pub(crate) async fn handle(&self, mut app: TcpStream) {
        let _open = self
            .metrics
            .as_ref()
            .map(|m| m.connection(Direction::Outbound));
        let copied = match &self.route {
            Route::Tunnel { destination, agent } => {
                let upgraded = match self
                    .pool
                    .open(&self.source, destination, *agent, self.target)
                    .await
                {
                    Ok(upgraded) => upgraded,
                    Err(e) => {
                        tracing::info!(source = %self.source.id, error = %e, "tunnel refused");
                        return;
                    }
                };
                let mut tunnel = TokioIo::new(upgraded);
                crate::splice::splice(&mut app, &mut tunnel).await
            }
            Route::Direct { destination } => {
                let peer = Peer::Authenticated {
                    id: self.source.id.clone(),
                    source_ip: app.peer_addr().ok().map(|a| a.ip()),
                };
                let decision = self.policy.authorize(&AuthzRequest {
                    namespace: &destination.namespace,
                    workload: &destination.name,
                    port: self.target.port(),
                    peer: &peer,
                    http: None,
                });
                if let Some(m) = &self.metrics {
                    m.authorized(decision.allowed);
                }
                if !decision.allowed {
                    tracing::info!(source = %self.source.id, reason = %decision.reason, "denied");
                    return;
                }
                let mut upstream = match TcpStream::connect(self.target).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(target = %self.target, error = %e, "cannot reach the app");
                        return;
                    }
                };
                let _ = upstream.set_nodelay(true);
                crate::splice::splice(&mut app, &mut upstream).await
            }
        };
        if let (Some(m), Ok((forward, backward))) = (&self.metrics, copied) {
            m.carried(Direction::Outbound, forward, backward);
        }
    }
}
