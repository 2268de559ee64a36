//! A sidecar: one inbound listener in front of its workload's app and any number of outbound
//! listeners, each forwarding the app's plaintext to one destination over mTLS. Listeners are
//! bound first (so port conflicts surface before anything runs), then served until shutdown.
//! Every listener presents the SVID held in one store, which a rotation task keeps renewed
//! through the CA service when one is configured.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use meshbench_identity::{client_config_for, server_config_for, CaClient, SpiffeId, SvidStore};
use tokio::net::TcpListener;

use crate::inbound::Inbound;
use crate::metrics::ProxyMetrics;
use crate::outbound::{Captured, Outbound};
use crate::serving::{accept_loop, listen, spawn_rotation};
use crate::sidecar_config::SidecarConfig;
use crate::Error;

pub struct BoundSidecar {
    inbound: Option<(TcpListener, Arc<Inbound>)>,
    outbound: Vec<(TcpListener, Arc<Outbound>)>,
    transparent: Option<(TcpListener, Arc<Captured>)>,
    rotation: Option<(Arc<SvidStore>, CaClient, f64)>,
    metrics: Option<Arc<ProxyMetrics>>,
    max_connections: usize,
}

/// Loads the identity, builds the TLS configurations and binds every listener.
pub async fn run_sidecar(config: SidecarConfig) -> Result<BoundSidecar, Error> {
    if config.inbound.is_none()
        && config.outbound.is_empty()
        && config.transparent_outbound.is_none()
    {
        return Err(Error::NothingToDo);
    }
    let identity = match (&config.identity, config.mtls) {
        (Some(id), _) => Some(id.clone()),
        (None, false) => None,
        (None, true) => {
            return Err(Error::Config(
                "mTLS needs the workload's certificate, key and trust bundle".to_owned(),
            ))
        }
    };
    // One store for every listener, so a rotation reaches them all at once.
    let store = match &identity {
        Some(id) => Some(Arc::new(SvidStore::from_files(&id.cert, &id.key)?)),
        None => None,
    };
    if let (Some(metrics), Some(store)) = (&config.metrics, &store) {
        metrics.set_certificate_expiry(store.not_after_unix());
    }
    let rotation = match (&identity, &store) {
        (Some(id), Some(store)) => match &id.rotation {
            Some(rotation) => Some((
                store.clone(),
                CaClient::new(rotation.ca_endpoint, store.clone(), &id.ca)?,
                rotation.fraction,
            )),
            None => None,
        },
        _ => None,
    };
    let mut bound = BoundSidecar {
        inbound: None,
        outbound: Vec::new(),
        transparent: None,
        rotation,
        metrics: config.metrics.clone(),
        max_connections: config.limits.max_connections,
    };
    if let Some(inbound) = &config.inbound {
        let tls = match (&identity, &store, config.mtls) {
            (Some(id), Some(store), true) => Some(server_config_for(
                store.clone(),
                Some(&id.ca),
                &[],
                &config.tls,
            )?),
            _ => None,
        };
        let handler = Inbound::new(&config, inbound.app, inbound.transparent, tls);
        bound.inbound = Some((listen(inbound.listen).await?, Arc::new(handler)));
    }
    let outbound_to = |upstream: SocketAddr, upstream_id: Option<SpiffeId>| {
        let tls = match (&identity, &store, config.mtls) {
            (Some(id), Some(store), true) => Some(client_config_for(
                store.clone(),
                &id.ca,
                upstream_id,
                &[],
                &config.tls,
            )?),
            _ => None,
        };
        Ok::<_, Error>(Outbound::new(
            upstream,
            tls,
            config.mode,
            config.metrics.clone(),
            config.limits,
        ))
    };
    for route in &config.outbound {
        let handler = outbound_to(route.upstream, route.upstream_id.clone())?;
        bound
            .outbound
            .push((listen(route.listen).await?, Arc::new(handler)));
    }
    if let Some(transparent) = &config.transparent_outbound {
        let mut routes = std::collections::HashMap::new();
        for (destination, id) in &transparent.destinations {
            routes.insert(*destination, outbound_to(*destination, id.clone())?);
        }
        let captured = Captured::new(routes, config.metrics.clone(), config.limits);
        bound.transparent = Some((listen(transparent.listen).await?, Arc::new(captured)));
    }
    Ok(bound)
}

impl BoundSidecar {
    pub fn inbound_addr(&self) -> Option<SocketAddr> {
        self.inbound.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Explicit outbound listeners in the order configured, then the transparent one.
    pub fn outbound_addrs(&self) -> Vec<SocketAddr> {
        self.outbound
            .iter()
            .map(|(l, _)| l)
            .chain(self.transparent.as_ref().map(|(l, _)| l))
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serves every listener until `shutdown` resolves. Established connections are left to
    /// finish on their own tasks.
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
        if let Some((store, client, fraction)) = self.rotation {
            spawn_rotation(&mut tasks, store, client, fraction, self.metrics.clone());
        }
        let max = self.max_connections;
        if let Some((listener, handler)) = self.inbound {
            tasks.spawn(accept_loop(listener, max, move |stream, peer| {
                let handler = handler.clone();
                async move { handler.handle(stream, peer).await }
            }));
        }
        if let Some((listener, handler)) = self.transparent {
            tasks.spawn(accept_loop(listener, max, move |stream, _peer| {
                let handler = handler.clone();
                async move { handler.handle(stream).await }
            }));
        }
        for (listener, handler) in self.outbound {
            tasks.spawn(accept_loop(listener, max, move |stream, _peer| {
                let handler = handler.clone();
                async move { handler.handle(stream).await }
            }));
        }
        tasks
    }
}
