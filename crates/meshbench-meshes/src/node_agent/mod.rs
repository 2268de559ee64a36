//! meshbench's node agent (`proxy node-agent`) on each node, holding its pods' SVIDs and
//! carrying their traffic between nodes in HBONE tunnels (HTTP/2 CONNECT over mTLS), as
//! Istio ambient's ztunnel does; a CA service renews the SVIDs. Same-node traffic is either
//! tunnelled too (ztunnel) or left in plaintext (Cilium's choice).

mod cluster;
mod plan;

use std::net::{IpAddr, SocketAddr};

use meshbench_dataplane::{OutboundListener, ServiceEndpoint};
use meshbench_lab::LabComponent;
use meshbench_netlab::{AddressPlan, NodeCapture, NodeRedirect};
use meshbench_topology::Pod;

use crate::adapter::{ClusterMesh, Deploying, Enrolling, LocalEnroll, LocalMesh, MeshAdapter};
use crate::description::{Description, Enrollment, IdentityCheck, PolicySupport};
use crate::enroll::app_port;
use crate::{Deployment, Error, LabContext, MeshContext, Ports};
use plan::{plan, AgentPod, AgentSettings};

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
    let agent_of = |p: &Pod| -> Result<SocketAddr, Error> {
        ctx.across_link(SocketAddr::new(
            net.node_ip(&p.workload.node)?,
            Ports::HBONE,
        ))
    };
    let pods = [
        AgentPod {
            pod: client,
            ip: ctx.pod_ip(client)?,
            // The client app has no listener; its address only names it.
            app: SocketAddr::new(ctx.pod_ip(client)?, 1),
            agent: agent_of(client)?,
            dialled: false,
        },
        AgentPod {
            pod: server,
            ip: ctx.pod_ip(server)?,
            app: server_app,
            agent: agent_of(server)?,
            dialled: true,
        },
    ];
    // Without capture, the client sends to its node's agent explicitly.
    let listen = SocketAddr::new(net.node_bind_ip(&client.workload.node)?, Ports::OUTBOUND);
    let outbound = OutboundListener {
        listen,
        source: format!("{}/{}", client.workload.namespace, client.workload.name),
        destination: server_app,
    };
    let svid = |p: &Pod| ctx.svid_files(p);
    let plans = plan(
        &distinct_nodes(&pods),
        &pods,
        &ctx.pki_layout(&svid),
        &AgentSettings {
            same_node_encryption,
            ca_endpoint,
            bind: &|node| Ok(net.node_bind_ip(node)?),
            transparent: false,
            outbound: vec![(client.workload.node.clone(), outbound)],
            services: vec![],
        },
    )?;
    for agent in plans {
        components.push(ctx.start_node_agent(agent.file).await?);
    }
    let url = if net.captures() {
        net.redirect_on_node(
            &client.workload.node,
            &NodeRedirect {
                source: ctx.pod_ip(client)?,
                destination: net.service_addr(ctx.service)?,
                to_port: Ports::OUTBOUND,
            },
        )?;
        ctx.service_url("http")?
    } else {
        format!("http://{listen}/")
    };
    Ok(Deployment {
        components,
        url,
        client_tls: None,
    })
}

/// The enrolled `pods` where the lab put them, and its services.
fn on_the_lab<'a>(
    addresses: &AddressPlan,
    pods: &'a [Pod],
    app_port: impl Fn(&Pod) -> u16,
) -> Result<(Vec<AgentPod<'a>>, Vec<ServiceEndpoint>), Error> {
    let agents = pods
        .iter()
        .map(|pod| {
            let ip = IpAddr::from(addresses.pod(&pod.name)?.ip);
            let node = IpAddr::from(addresses.node(&pod.workload.node)?.ip);
            Ok(AgentPod {
                pod,
                ip,
                app: SocketAddr::new(ip, app_port(pod)),
                agent: SocketAddr::new(node, Ports::HBONE),
                dialled: true,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let services = addresses
        .services
        .iter()
        .map(|s| ServiceEndpoint {
            address: s.addr,
            endpoint: s.endpoint,
        })
        .collect();
    Ok((agents, services))
}

/// The nodes of `pods`, each once, in the pods' order.
fn distinct_nodes(pods: &[AgentPod<'_>]) -> Vec<String> {
    let mut nodes: Vec<String> = vec![];
    for p in pods {
        if !nodes.contains(&p.pod.workload.node) {
            nodes.push(p.pod.workload.node.clone());
        }
    }
    nodes
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
    let (pods, services) = on_the_lab(net.plan(), &meshed, |pod| app_port(lab, pod))?;
    let (ca, ca_endpoint) = lab.control_plane().await?;
    let svid = |p: &Pod| lab.svid_files(p);
    let plans = plan(
        &topology.nodes,
        &pods,
        &lab.pki_layout(&svid),
        &AgentSettings {
            same_node_encryption,
            ca_endpoint,
            bind: &|node| Ok(net.node_bind_ip(node)?),
            transparent: true,
            outbound: vec![],
            services,
        },
    )?;
    let mut components = vec![ca];
    for agent in plans {
        let capture = NodeCapture {
            sources: agent.capture_sources.clone(),
            destinations: agent.capture_destinations.clone(),
            outbound_port: Ports::OUTBOUND,
            inbound_port: Ports::INBOUND,
        };
        let node = agent.node.clone();
        components.push(lab.start_node_agent(agent.file).await?);
        net.capture_on_node(&node, &capture)?;
    }
    Ok(components)
}

#[cfg(test)]
mod tests {
    use meshbench_dataplane::NodeAgentFile;
    use meshbench_netlab::NodeCaptureFile;

    use super::*;
    use crate::cluster::same_addresses::E3AtLabAddresses;
    use crate::cluster::{ClusterCell, PlacedPod};
    use crate::pki::PkiLayout;
    use crate::ClusterMesh;

    /// The node agents of a topology placed at the same addresses, with the same credentials'
    /// layout: the lab's inputs and the cluster's give the agents the same files and the nodes
    /// the same capture.
    #[test]
    fn the_lab_and_the_cluster_plan_the_same_agents() {
        let e3 = E3AtLabAddresses::new();
        let (topology, addresses) = (&e3.topology, &e3.addresses);
        let pods: Vec<Pod> = topology
            .pods()
            .into_iter()
            .filter(|p| p.workload.meshed)
            .collect();
        let mut nodes: Vec<&str> = pods.iter().map(|p| p.workload.node.as_str()).collect();
        nodes.dedup();
        assert!(nodes.len() > 1, "the enrolled pods span nodes");
        let agent = NodeAgent {
            same_node_encryption: true,
        };

        // The cluster: its pods placed at the lab's addresses.
        let everyone = topology.pods();
        let placed: Vec<PlacedPod<'_>> = everyone
            .iter()
            .map(|pod| PlacedPod {
                pod,
                ip: addresses.pod(&pod.name).unwrap().ip.into(),
                host_ip: addresses.node(&pod.workload.node).unwrap().ip.into(),
                enrolled: pod.workload.meshed,
            })
            .collect();
        let site = e3.site();
        let on_cluster = agent.node_agents(&site, &placed).unwrap();

        // The lab: the same pods, bound as the cluster binds, reading the cluster's layout.
        let (lab_pods, lab_services) =
            on_the_lab(addresses, &pods, |pod| site.app_port(pod)).unwrap();
        let svid = |pod: &Pod| {
            let svid = ClusterCell::svid(pod);
            (svid.cert, svid.key)
        };
        let on_lab = plan(
            &topology.nodes,
            &lab_pods,
            &PkiLayout {
                ca: ClusterCell::ca(),
                policy: ClusterCell::policy(),
                svid: &svid,
            },
            &AgentSettings {
                same_node_encryption: true,
                ca_endpoint: site.ca_endpoint,
                bind: &|node| Ok(addresses.node(node)?.ip.into()),
                transparent: true,
                outbound: vec![],
                services: lab_services,
            },
        )
        .unwrap();

        assert_eq!(on_cluster.len(), on_lab.len());
        for (cluster, lab) in on_cluster.iter().zip(&on_lab) {
            assert_eq!(cluster.node, lab.node);
            let file: NodeAgentFile =
                serde_yaml_ng::from_str(&cluster.additions.containers[0].files["node-agent.yaml"])
                    .unwrap();
            assert_eq!(file, lab.file, "node {}", lab.node);
            let capture: NodeCaptureFile =
                serde_yaml_ng::from_str(&cluster.files["node-capture.yaml"]).unwrap();
            assert_eq!(capture.sources, lab.capture_sources, "node {}", lab.node);
            assert_eq!(
                capture.destinations, lab.capture_destinations,
                "node {}",
                lab.node
            );
        }
    }
}
