//! The node agent (ztunnel-like): one per node, serving every workload on it. It holds each
//! local workload's SVID and presents the right one per connection; traffic between nodes
//! travels as HTTP/2 CONNECT streams (HBONE) multiplexed over pooled mTLS connections between
//! agents. L4 only: identity-based authorization, bytes spliced.
//!
//! Identities on the wire: the sending agent presents the *source* workload's SVID as its
//! client certificate and asks, by SNI, for the *destination* workload's; the receiving agent
//! checks that the tunnel's target is that workload before authorizing.

mod captured_inbound;
mod config;
mod directory;
mod inbound;
mod outbound;
mod pool;
mod tunnel;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use meshbench_identity::{server_config_for, CaClient, SvidStore, TlsOptions};
use meshbench_policy::Policy;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use captured_inbound::CapturedInbound;
pub use config::{
    LocalWorkload, NodeAgentFile, OutboundListener, RemoteWorkload, ServiceEndpoint,
    TransparentListeners, DEFAULT_HBONE_PORT,
};
pub use directory::sni_of as hbone_server_name;
use directory::Directory;
use inbound::HboneInbound;
use outbound::{AgentOutbound, FixedPair};
use pool::HbonePool;

use crate::metrics::ProxyMetrics;
use crate::serving::{accept_loop, listen, spawn_rotation, Limits};
use crate::Error;

pub struct NodeAgentConfig {
    pub file: NodeAgentFile,
    pub policy: Arc<Policy>,
    pub tls: TlsOptions,
    pub metrics: Option<Arc<ProxyMetrics>>,
    /// Timeouts and caps of every listener.
    pub limits: Limits,
}

pub struct BoundNodeAgent {
    hbone: TcpListener,
    inbound: Arc<HboneInbound>,
    outbound: Arc<AgentOutbound>,
    fixed: Vec<(TcpListener, Arc<FixedPair>)>,
    /// The node's capture: (outbound listener, plaintext inbound listener and its handler).
    captured: Option<(TcpListener, TcpListener, Arc<CapturedInbound>)>,
    rotations: Vec<(Arc<SvidStore>, CaClient, f64)>,
    metrics: Option<Arc<ProxyMetrics>>,
    max_connections: usize,
}

/// Loads every local SVID, builds the directory and binds the HBONE and outbound listeners.
pub async fn run_node_agent(config: NodeAgentConfig) -> Result<BoundNodeAgent, Error> {
    let directory = Arc::new(Directory::new(
        &config.file,
        config.limits.max_upstream_connections,
    )?);
    let server_tls = server_config_for(
        directory.clone(),
        Some(&config.file.ca),
        &[b"h2"],
        &config.tls,
    )?;
    let hbone = listen(config.file.hbone).await?;
    let hbone_addr = hbone
        .local_addr()
        .map_err(|source| meshbench_net::BindError {
            addr: config.file.hbone,
            source,
        })?;
    let inbound = Arc::new(HboneInbound::new(
        directory.clone(),
        config.policy.clone(),
        TlsAcceptor::from(Arc::new(server_tls)),
        config.metrics.clone(),
        config.limits,
    ));
    let pool = Arc::new(HbonePool::new(
        config.file.ca.clone(),
        config.tls.clone(),
        config.metrics.clone(),
        config.limits,
    ));
    let outbound = Arc::new(AgentOutbound {
        directory: directory.clone(),
        own_hbone: hbone_addr,
        same_node_encryption: config.file.same_node_encryption,
        pool,
        policy: config.policy.clone(),
        metrics: config.metrics.clone(),
        limits: config.limits,
    });
    let mut fixed = Vec::new();
    for listener in &config.file.outbound {
        let pair = outbound.fixed_pair(listener)?;
        fixed.push((listen(listener.listen).await?, Arc::new(pair)));
    }
    let captured = match &config.file.transparent {
        Some(t) => Some((
            listen(t.outbound).await?,
            listen(t.inbound).await?,
            Arc::new(CapturedInbound::new(
                directory.clone(),
                config.policy.clone(),
                config.metrics.clone(),
                config.limits,
            )),
        )),
        None => None,
    };
    let mut rotations = Vec::new();
    if let Some(endpoint) = config.file.ca_endpoint {
        let fraction = config
            .file
            .rotate_at
            .unwrap_or(meshbench_identity::DEFAULT_ROTATE_FRACTION);
        for store in directory.stores() {
            let client = CaClient::new(endpoint, store.clone(), &config.file.ca)?;
            rotations.push((store, client, fraction));
        }
    }
    if let Some(m) = &config.metrics {
        if let Some(earliest) = directory.stores().iter().map(|s| s.not_after_unix()).min() {
            m.set_certificate_expiry(earliest);
        }
    }
    Ok(BoundNodeAgent {
        hbone,
        inbound,
        outbound,
        fixed,
        captured,
        rotations,
        metrics: config.metrics,
        max_connections: config.limits.max_connections,
    })
}

impl BoundNodeAgent {
    pub fn hbone_addr(&self) -> Option<SocketAddr> {
        self.hbone.local_addr().ok()
    }

    pub fn outbound_addrs(&self) -> Vec<SocketAddr> {
        self.fixed
            .iter()
            .filter_map(|(l, _)| l.local_addr().ok())
            .collect()
    }

    /// The listeners for captured connections: (outbound, inbound).
    pub fn captured_addrs(&self) -> Option<(SocketAddr, SocketAddr)> {
        let (outbound, inbound, _) = self.captured.as_ref()?;
        Some((outbound.local_addr().ok()?, inbound.local_addr().ok()?))
    }

    /// Serves until `shutdown` resolves; established tunnels finish on their own tasks.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let mut tasks = self.start();
        shutdown.await;
        tasks.abort_all();
    }

    /// Every listener's accept loop, and the background work, each on its own task. Not
    /// generic, unlike [`Self::serve`]: the accept loops and their tasks compile in this crate,
    /// at the data plane's optimisation level, wherever `serve` is called from.
    fn start(self) -> tokio::task::JoinSet<()> {
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(crate::serving::return_freed_memory());
        for (store, client, fraction) in self.rotations {
            spawn_rotation(&mut tasks, store, client, fraction, self.metrics.clone());
        }
        let inbound = self.inbound;
        let max = self.max_connections;
        tasks.spawn(accept_loop(self.hbone, max, move |stream, peer| {
            let inbound = inbound.clone();
            async move { inbound.handle(stream, peer).await }
        }));
        for (listener, pair) in self.fixed {
            let outbound = self.outbound.clone();
            tasks.spawn(accept_loop(listener, max, move |stream, _peer| {
                let (outbound, pair) = (outbound.clone(), pair.clone());
                async move { outbound.handle_fixed(stream, &pair).await }
            }));
        }
        if let Some((outbound_listener, inbound_listener, inbound)) = self.captured {
            let outbound = self.outbound.clone();
            tasks.spawn(accept_loop(outbound_listener, max, move |stream, peer| {
                let outbound = outbound.clone();
                async move { outbound.handle_captured(stream, peer).await }
            }));
            tasks.spawn(accept_loop(inbound_listener, max, move |stream, peer| {
                let inbound = inbound.clone();
                async move { inbound.handle(stream, peer).await }
            }));
        }
        tasks
    }
}
