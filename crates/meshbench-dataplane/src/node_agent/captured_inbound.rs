//! Plaintext connections the node captured on their way to one of its workloads: from a
//! workload outside the mesh, on this node or another. They carry no identity, so the policy
//! judges them as unauthenticated peers: a STRICT workload refuses them (the connection is
//! closed: L4 has no 403), a PERMISSIVE one admits them if its authorization does. Without
//! this capture an unenrolled caller would reach an enrolled workload's app directly, around
//! every rule.

use std::net::SocketAddr;
use std::sync::Arc;

use meshbench_policy::{Peer, Policy, Request as AuthzRequest};
use tokio::net::TcpStream;

use super::directory::{Destination, Directory};
use super::outbound::connect;
use crate::metrics::{Direction, ProxyMetrics};
use crate::serving::{original_destination, Limits};

pub(crate) struct CapturedInbound {
    directory: Arc<Directory>,
    policy: Arc<Policy>,
    metrics: Option<Arc<ProxyMetrics>>,
    limits: Limits,
}

impl CapturedInbound {
    pub(crate) fn new(
        directory: Arc<Directory>,
        policy: Arc<Policy>,
        metrics: Option<Arc<ProxyMetrics>>,
        limits: Limits,
    ) -> Self {
        CapturedInbound {
            directory,
            policy,
            metrics,
            limits,
        }
    }

    pub(crate) async fn handle(&self, mut downstream: TcpStream, peer: SocketAddr) {
        let target = match original_destination(&downstream) {
            Ok(original) => self.directory.resolve(original),
            Err(e) => {
                tracing::warn!(%peer, error = %e, "no original destination");
                return;
            }
        };
        let Some(Destination::Local(workload)) = self.directory.destination(target) else {
            tracing::info!(%peer, %target, "captured inbound connection to no local workload");
            return;
        };
        let _open = self
            .metrics
            .as_ref()
            .map(|m| m.connection(Direction::Inbound));
        let decision = self.policy.authorize(&AuthzRequest {
            namespace: &workload.namespace,
            workload: &workload.name,
            port: target.port(),
            peer: &Peer::Plaintext {
                source_ip: Some(peer.ip()),
            },
            http: None,
        });
        if let Some(m) = &self.metrics {
            m.authorized(decision.allowed);
        }
        if !decision.allowed {
            tracing::info!(%peer, %target, reason = %decision.reason, "plaintext connection denied");
            return;
        }
        let Some(mut app) = connect(target, self.limits.connect_timeout).await else {
            return;
        };
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
