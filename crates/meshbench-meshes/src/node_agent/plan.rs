//! The node agents' configurations, planned once from where a platform put the pods: one
//! `NodeAgentFile` per node that has enrolled pods, and what that node must capture. The local
//! lab starts the files as processes and captures with the node's iptables; a cluster runs
//! them in agent pods on the node's network with the capture beside them. Both call
//! [`plan`], so both measure the same agent.

use std::net::{IpAddr, SocketAddr};

use meshbench_dataplane::{
    LocalWorkload, NodeAgentFile, OutboundListener, RemoteWorkload, ServiceEndpoint,
    TransparentListeners,
};
use meshbench_topology::Pod;

use crate::pki::PkiLayout;
use crate::ports::Ports;
use crate::Error;

/// A pod as the node agents know it, wherever it was placed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AgentPod<'a> {
    pub pod: &'a Pod,
    pub ip: IpAddr,
    /// Where its app listens (or, for a client without a listener, an address that names it).
    pub app: SocketAddr,
    /// Where other nodes' agents reach its node's agent (HBONE).
    pub agent: SocketAddr,
    /// Whether other nodes' agents carry calls to it (every enrolled pod of a topology; a
    /// cell's server but not its client).
    pub dialled: bool,
}

/// How the agents are reached and what they listen on.
pub(crate) struct AgentSettings<'a> {
    pub same_node_encryption: bool,
    /// The CA service that renews the SVIDs.
    pub ca_endpoint: SocketAddr,
    /// The address a node's agent binds its HBONE listener to.
    pub bind: &'a dyn Fn(&str) -> Result<IpAddr, Error>,
    /// Whether the node captures its pods' traffic into the agent (transparent listeners on
    /// every address): an enrolled topology, and a cell with capture.
    pub transparent: bool,
    /// Listeners an app sends to explicitly, by node (a cell without capture).
    pub outbound: Vec<(String, OutboundListener)>,
    /// The services, so that the agent knows which pod a service address leads to.
    pub services: Vec<ServiceEndpoint>,
}

/// One node's agent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentPlan {
    pub node: String,
    pub file: NodeAgentFile,
    /// What the node captures into the agent: what these pods send...
    pub capture_sources: Vec<IpAddr>,
    /// ...and what is sent to them (their apps and the service addresses that lead there),
    /// each once.
    pub capture_destinations: Vec<SocketAddr>,
}

/// The agents of `nodes` for the enrolled `pods` (in `pods`' order on each node). Nodes
/// without an enrolled pod get none.
pub(crate) fn plan(
    nodes: &[String],
    pods: &[AgentPod<'_>],
    pki: &PkiLayout<'_>,
    settings: &AgentSettings<'_>,
) -> Result<Vec<AgentPlan>, Error> {
    let mut plans = vec![];
    for node in nodes {
        let (local, remote): (Vec<&AgentPod<'_>>, Vec<&AgentPod<'_>>) =
            pods.iter().partition(|p| &p.pod.workload.node == node);
        if local.is_empty() {
            continue;
        }
        let mut file = NodeAgentFile::new(
            node,
            pki.ca.clone(),
            SocketAddr::new((settings.bind)(node)?, Ports::HBONE),
        );
        file.same_node_encryption = settings.same_node_encryption;
        // One worker thread, on every platform, so that their figures describe one agent.
        file.threads = Some(1);
        file.policy = Some(pki.policy.clone());
        file.ca_endpoint = Some(settings.ca_endpoint);
        file.workloads = local
            .iter()
            .map(|p| {
                let (cert, key) = (pki.svid)(p.pod);
                let w = &p.pod.workload;
                LocalWorkload {
                    namespace: w.namespace.clone(),
                    name: w.name.clone(),
                    service_account: w.service_account.clone(),
                    cert,
                    key,
                    address: p.app,
                }
            })
            .collect();
        file.destinations = remote
            .iter()
            .filter(|p| p.dialled)
            .map(|p| {
                let w = &p.pod.workload;
                RemoteWorkload {
                    namespace: w.namespace.clone(),
                    name: w.name.clone(),
                    service_account: w.service_account.clone(),
                    address: p.app,
                    node_agent: p.agent,
                }
            })
            .collect();
        file.services = settings.services.clone();
        file.outbound = settings
            .outbound
            .iter()
            .filter(|(on, _)| on == node)
            .map(|(_, listener)| listener.clone())
            .collect();
        if settings.transparent {
            // Bound to every address: a connection redirected from the node's uplink arrives
            // at the uplink's address, one from a pod at the bridge's.
            let any = |port| SocketAddr::from(([0, 0, 0, 0], port));
            file.transparent = Some(TransparentListeners {
                outbound: any(Ports::OUTBOUND),
                inbound: any(Ports::INBOUND),
            });
        }
        let mut capture_destinations = vec![];
        for p in &local {
            capture_destinations.push(p.app);
            capture_destinations.extend(
                settings
                    .services
                    .iter()
                    .filter(|s| s.endpoint == p.app)
                    .map(|s| s.address),
            );
        }
        // A service with several pods on this node is listed once.
        capture_destinations.sort();
        capture_destinations.dedup();
        plans.push(AgentPlan {
            node: node.clone(),
            file,
            capture_sources: local.iter().map(|p| p.ip).collect(),
            capture_destinations,
        });
    }
    Ok(plans)
}
