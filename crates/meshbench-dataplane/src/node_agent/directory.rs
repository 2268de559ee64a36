//! What the agent knows about workloads: the ones on its node (with their SVIDs, chosen per
//! handshake by SNI) and the ones elsewhere (their identity and their node's agent), keyed by
//! the address apps dial.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use meshbench_identity::{SpiffeId, SvidStore};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::ServerName;

use super::config::NodeAgentFile;
use crate::Error;

#[derive(Debug)]
pub(crate) struct LocalEntry {
    pub namespace: String,
    pub name: String,
    pub id: SpiffeId,
    pub store: Arc<SvidStore>,
    /// Connections the agent's HBONE port holds open to this app at once: every tunnel is
    /// one, whichever peer and connection it came over (Envoy's per-cluster circuit breaker).
    pub app_slots: Arc<tokio::sync::Semaphore>,
}

#[derive(Debug, Clone)]
pub(crate) enum Destination {
    Local(Arc<LocalEntry>),
    Remote { id: SpiffeId, agent: SocketAddr },
}

#[derive(Debug)]
pub(crate) struct Directory {
    by_address: HashMap<SocketAddr, Destination>,
    by_name: HashMap<String, Arc<LocalEntry>>,
    by_sni: HashMap<String, Arc<LocalEntry>>,
    /// Local workloads by their pod's address: who opened a captured connection.
    by_ip: HashMap<IpAddr, Arc<LocalEntry>>,
    services: HashMap<SocketAddr, Endpoints>,
}

/// A service's pods, taken in turn (kube-proxy picks one at random; the node's capture comes
/// before its DNAT, so the agent picks instead).
#[derive(Debug, Default)]
struct Endpoints {
    addresses: Vec<SocketAddr>,
    next: std::sync::atomic::AtomicUsize,
}

/// The TLS server name that asks an agent for a workload's certificate: the SPIFFE ID's path
/// segments, most specific first, under the trust domain (`server.sa.app.ns.cluster.local`).
pub fn sni_of(id: &SpiffeId) -> Result<ServerName<'static>, Error> {
    let mut labels: Vec<&str> = id.path().split('/').filter(|s| !s.is_empty()).collect();
    labels.reverse();
    labels.push(id.trust_domain());
    let name = labels.join(".").to_ascii_lowercase();
    ServerName::try_from(name.clone())
        .map_err(|_| Error::Config(format!("{id} maps to {name:?}, which is not a DNS name")))
}

impl Directory {
    /// `max_app_connections`: the tunnels each local app may carry at once.
    pub(crate) fn new(file: &NodeAgentFile, max_app_connections: usize) -> Result<Self, Error> {
        let mut directory = Directory {
            by_address: HashMap::new(),
            by_name: HashMap::new(),
            by_sni: HashMap::new(),
            by_ip: HashMap::new(),
            services: HashMap::new(),
        };
        for s in &file.services {
            let endpoints = directory.services.entry(s.address).or_default();
            if !endpoints.addresses.contains(&s.endpoint) {
                endpoints.addresses.push(s.endpoint);
            }
        }
        for w in &file.workloads {
            let store = Arc::new(SvidStore::from_files(&w.cert, &w.key)?);
            let expected = SpiffeId::for_workload(
                store.spiffe_id().trust_domain(),
                &w.namespace,
                &w.service_account,
            )?;
            if *store.spiffe_id() != expected {
                return Err(Error::Config(format!(
                    "workload {}/{}: {} is an SVID for {}, not {expected}",
                    w.namespace,
                    w.name,
                    w.cert.display(),
                    store.spiffe_id()
                )));
            }
            let entry = Arc::new(LocalEntry {
                namespace: w.namespace.clone(),
                name: w.name.clone(),
                id: expected,
                store,
                app_slots: Arc::new(tokio::sync::Semaphore::new(max_app_connections.max(1))),
            });
            let sni = sni_of(&entry.id)?.to_str().into_owned();
            directory.by_sni.insert(sni, entry.clone());
            directory.by_ip.insert(w.address.ip(), entry.clone());
            directory
                .by_name
                .insert(format!("{}/{}", w.namespace, w.name), entry.clone());
            directory
                .by_address
                .insert(w.address, Destination::Local(entry));
        }
        let trust_domain = directory
            .by_name
            .values()
            .next()
            .map(|e| e.id.trust_domain().to_owned())
            .ok_or_else(|| Error::Config(format!("node {}: no workloads", file.node)))?;
        for d in &file.destinations {
            let id = SpiffeId::for_workload(&trust_domain, &d.namespace, &d.service_account)?;
            if directory.by_address.contains_key(&d.address) {
                return Err(Error::Config(format!(
                    "destination {}/{}: address {} is already a workload's",
                    d.namespace, d.name, d.address
                )));
            }
            directory.by_address.insert(
                d.address,
                Destination::Remote {
                    id,
                    agent: d.node_agent,
                },
            );
        }
        Ok(directory)
    }

    pub(crate) fn destination(&self, address: SocketAddr) -> Option<&Destination> {
        self.by_address.get(&address)
    }

    /// The workload address behind `address`: one of a service's endpoints, each in turn, or
    /// `address` itself.
    pub(crate) fn resolve(&self, address: SocketAddr) -> SocketAddr {
        let Some(endpoints) = self.services.get(&address) else {
            return address;
        };
        let turn = endpoints
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        endpoints
            .addresses
            .get(turn % endpoints.addresses.len().max(1))
            .copied()
            .unwrap_or(address)
    }

    /// Whether `address` is a service's, resolved to its pods.
    pub(crate) fn is_service(&self, address: SocketAddr) -> bool {
        self.services.contains_key(&address)
    }

    /// The local workload whose pod has address `ip`.
    pub(crate) fn local_by_ip(&self, ip: IpAddr) -> Option<Arc<LocalEntry>> {
        self.by_ip.get(&ip).cloned()
    }

    /// A local workload by `namespace/name`.
    pub(crate) fn local(&self, qualified_name: &str) -> Option<Arc<LocalEntry>> {
        self.by_name.get(qualified_name).cloned()
    }

    pub(crate) fn local_by_sni(&self, sni: &str) -> Option<&Arc<LocalEntry>> {
        self.by_sni.get(sni)
    }

    pub(crate) fn stores(&self) -> Vec<Arc<SvidStore>> {
        self.by_name.values().map(|e| e.store.clone()).collect()
    }
}

impl ResolvesServerCert for Directory {
    /// The certificate of the workload the client asked for; none (so no handshake) for a
    /// workload that is not on this node.
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let entry = self.by_sni.get(client_hello.server_name()?)?;
        Some(entry.store.current())
    }
}
