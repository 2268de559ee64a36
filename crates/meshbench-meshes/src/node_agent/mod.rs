//! meshbench's node agent (`proxy node-agent`) on each node, holding its pods' SVIDs and
//! carrying their traffic between nodes in HBONE tunnels (HTTP/2 CONNECT over mTLS), as
//! Istio ambient's ztunnel does; a CA service renews the SVIDs. Same-node traffic is either
//! tunnelled too (ztunnel) or left in plaintext (Cilium's choice).

mod cluster;

use std::net::SocketAddr;

use meshbench_dataplane::{
    NodeAgentFile, OutboundListener, RemoteWorkload, ServiceEndpoint, TransparentListeners,
};
use meshbench_lab::LabComponent;
use meshbench_netlab::{NodeCapture, NodeRedirect};
use meshbench_topology::Pod;

use crate::adapter::{ClusterMesh, Deploying, Enrolling, LocalEnroll, LocalMesh, MeshAdapter};
use crate::description::{Description, Enrollment, IdentityCheck, PolicySupport};
use crate::enroll::app_port;
use crate::{Deployment, Error, LabContext, MeshContext, Ports};

pub(crate) struct NodeAgent {
    same_node_encryption: bool,
}

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[
    &NodeAgent {
        same_node_encryption: true,
    },
    &NodeAgent {
        same_node_encryption: false,
    },
];

impl MeshAdapter for NodeAgent {
    fn describe(&self) -> Description {
        let (name, same_node) = if self.same_node_encryption {
            ("meshbench-node-agent", "encrypted")
        } else {
            ("meshbench-node-agent-plain-same-node", "plaintext")
        };
        let summary = format!(
            "meshbench node agent per node (ztunnel-like HBONE over TLS 1.3 mTLS), capture on \
             the node, same-node traffic {same_node}, CA service"
        );
        Description {
            encrypts_same_node: self.same_node_encryption,
            tunnels_within_node: self.same_node_encryption,
            ..Description::new(name, summary, Enrollment::AgentPerNode)
                .mtls((IdentityCheck::SpiffeId, IdentityCheck::SpiffeId))
                .policy(PolicySupport::Native)
        }
    }

    fn local(&self) -> Option<&dyn LocalMesh> {
        Some(self)
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl LocalMesh for NodeAgent {
    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        Box::pin(deploy(ctx, self.same_node_encryption))
    }

    fn enroller(&self) -> Option<&dyn LocalEnroll> {
        Some(self)
    }
}

impl LocalEnroll for NodeAgent {
    fn enroll<'a>(&'a self, lab: &'a LabContext<'a>) -> Enrolling<'a> {
        Box::pin(enroll(lab, self.same_node_encryption))
    }
}

async fn deploy(ctx: &MeshContext<'_>, same_node_encryption: bool) -> Result<Deployment, Error> {
    let (ca, ca_endpoint) = ctx.control_plane().await?;
    let mut components = vec![ca];
    let net = ctx.net;
    let (client, server) = (ctx.client_pod, ctx.server_pod);
    let server_app = SocketAddr::new(ctx.pod_ip(server)?, Ports::APP);
    let pods = [client, server];
    let client_ns_name = format!("{}/{}", client.workload.namespace, client.workload.name);
    let mut nodes: Vec<&str> = pods.iter().map(|p| p.workload.node.as_str()).collect();
    nodes.dedup();
    let mut url = String::new();
    for node in nodes {
        let bind = net.node_bind_ip(node)?;
        let local = |p: &Pod| p.workload.node == node;
        let workloads = pods
            .iter()
            .filter(|p| local(p))
            .map(|p| {
                // The client app has no listener; its address only names it.
                let port = if p.name == server.name { Ports::APP } else { 1 };
                Ok(ctx.agent_local_workload(p, SocketAddr::new(ctx.pod_ip(p)?, port)))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let mut destinations = vec![];
        if !local(server) {
            destinations.push(RemoteWorkload {
                namespace: server.workload.namespace.clone(),
                name: server.workload.name.clone(),
                service_account: server.workload.service_account.clone(),
                address: server_app,
                node_agent: ctx.across_link(SocketAddr::new(
                    net.node_ip(&server.workload.node)?,
                    Ports::HBONE,
                ))?,
            });
        }
        let mut outbound = vec![];
        if local(client) {
            let listen = SocketAddr::new(bind, Ports::OUTBOUND);
            outbound.push(OutboundListener {
                listen,
                source: client_ns_name.clone(),
                destination: server_app,
            });
            url = if net.captures() {
                ctx.service_url("http")?
            } else {
                format!("http://{listen}/")
            };
        }
        let mut file = NodeAgentFile::new(
            node,
            ctx.pki.ca.clone(),
            SocketAddr::new(bind, Ports::HBONE),
        );
        file.same_node_encryption = same_node_encryption;
        file.policy = Some(ctx.pki.policy.clone());
        file.ca_endpoint = Some(ca_endpoint);
        file.workloads = workloads;
        file.destinations = destinations;
        file.outbound = outbound;
        components.push(ctx.start_node_agent(file).await?);
        if local(client) && net.captures() {
            net.redirect_on_node(
                node,
                &NodeRedirect {
                    source: ctx.pod_ip(client)?,
                    destination: net.service_addr(ctx.service)?,
                    to_port: Ports::OUTBOUND,
                },
            )?;
        }
    }
    Ok(Deployment {
        components,
        url,
        client_tls: None,
    })
}

async fn enroll(
    lab: &LabContext<'_>,
    same_node_encryption: bool,
) -> Result<Vec<LabComponent>, Error> {
    let net = lab.net;
    let topology = net.topology();
    let meshed: Vec<Pod> = topology
        .pods()
        .into_iter()
        .filter(|p| p.workload.meshed)
        .collect();
    let app_addr = |pod: &Pod| -> Result<SocketAddr, Error> {
        Ok(SocketAddr::new(lab.pod_ip(pod)?, app_port(lab, pod)))
    };
    let services = net
        .plan()
        .services
        .iter()
        .map(|s| ServiceEndpoint {
            address: s.addr,
            endpoint: s.endpoint,
        })
        .collect::<Vec<_>>();
    let (ca, ca_endpoint) = lab.control_plane().await?;
    let mut components = vec![ca];
    for node in &topology.nodes {
        let (local, remote): (Vec<&Pod>, Vec<&Pod>) =
            meshed.iter().partition(|p| &p.workload.node == node);
        if local.is_empty() {
            continue;
        }
        let workloads = local
            .iter()
            .map(|p| Ok(lab.agent_local_workload(p, app_addr(p)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        let destinations = remote
            .iter()
            .map(|p| {
                Ok(RemoteWorkload {
                    namespace: p.workload.namespace.clone(),
                    name: p.workload.name.clone(),
                    service_account: p.workload.service_account.clone(),
                    address: app_addr(p)?,
                    node_agent: SocketAddr::new(net.node_ip(&p.workload.node)?, Ports::HBONE),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let any = |port| SocketAddr::from(([0, 0, 0, 0], port));
        let mut file = NodeAgentFile::new(
            node,
            lab.pki.ca.clone(),
            SocketAddr::new(net.node_bind_ip(node)?, Ports::HBONE),
        );
        file.same_node_encryption = same_node_encryption;
        file.policy = Some(lab.pki.policy.clone());
        file.ca_endpoint = Some(ca_endpoint);
        file.workloads = workloads;
        file.destinations = destinations;
        file.services = services.clone();
        // Bound to every address: a connection REDIRECTed from the uplink arrives at the
        // uplink's address, one from a pod at the bridge's.
        file.transparent = Some(TransparentListeners {
            outbound: any(Ports::OUTBOUND),
            inbound: any(Ports::INBOUND),
        });
        components.push(lab.start_node_agent(file).await?);
        let mut capture = NodeCapture {
            sources: vec![],
            destinations: vec![],
            outbound_port: Ports::OUTBOUND,
            inbound_port: Ports::INBOUND,
        };
        for pod in &local {
            let app = app_addr(pod)?;
            capture.sources.push(lab.pod_ip(pod)?);
            capture.destinations.push(app);
            capture.destinations.extend(
                services
                    .iter()
                    .filter(|s| s.endpoint == app)
                    .map(|s| s.address),
            );
        }
        net.capture_on_node(node, &capture)?;
    }
    Ok(components)
}
