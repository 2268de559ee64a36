//! The node agent on a cluster, as ztunnel runs: one pod per node on the node's own network,
//! holding the SVIDs of that node's enrolled pods only, taking HBONE tunnels on the node's
//! address, and beside it (its main container) the node's capture, which sends every
//! connection an enrolled pod opens, and every connection to one, to the agent, and takes
//! its rules out of the node again when the pod stops. The pods themselves get nothing
//! added. Each node's agent is configured for its own node (ztunnel learns this from istiod;
//! meshbench writes it, once the pods' addresses are known).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use meshbench_dataplane::{
    LocalWorkload, NodeAgentFile, RemoteWorkload, ServiceEndpoint, TransparentListeners,
};
use meshbench_netlab::NodeCaptureFile;
use meshbench_role::RoleConfig;
use meshbench_topology::Pod;

use super::NodeAgent;
use crate::cluster::{check_command, CONFIG_DIR_IN_POD};
use crate::{
    identity_files, AddedContainer, ClusterCell, ClusterMesh, ClusterSite, Error, NodeAgentPod,
    PlacedPod, PodAdditions, Ports,
};

impl ClusterMesh for NodeAgent {
    fn can_enroll(&self) -> bool {
        true
    }

    fn enroll_pod(&self, _site: &ClusterSite<'_>, _pod: &Pod) -> Result<PodAdditions, Error> {
        Ok(PodAdditions::default())
    }

    fn needs_ca(&self) -> bool {
        true
    }

    fn node_agents(
        &self,
        site: &ClusterSite<'_>,
        placed: &[PlacedPod<'_>],
    ) -> Result<Vec<NodeAgentPod>, Error> {
        let app = |p: &PlacedPod<'_>| SocketAddr::new(p.ip, site.app_port(p.pod));
        let services: Vec<ServiceEndpoint> = site
            .topology
            .services
            .iter()
            .flat_map(|s| {
                let address = site.services.get(&s.name).copied();
                placed
                    .iter()
                    .filter(move |p| p.pod.workload.name == s.workload)
                    .filter_map(move |endpoint| {
                        Some(ServiceEndpoint {
                            address: address?,
                            endpoint: SocketAddr::new(endpoint.ip, s.target_port),
                        })
                    })
            })
            .collect();
        let enrolled: Vec<&PlacedPod<'_>> = placed.iter().filter(|p| p.enrolled).collect();
        let mut agents = vec![];
        for node in &site.topology.nodes {
            let (local, remote): (Vec<&PlacedPod<'_>>, Vec<&PlacedPod<'_>>) =
                enrolled.iter().partition(|p| &p.pod.workload.node == node);
            let Some(first) = local.first() else {
                continue;
            };
            let config = |name: &str| Path::new(CONFIG_DIR_IN_POD).join(name);
            let mut file = NodeAgentFile::new(
                node,
                ClusterCell::ca(),
                SocketAddr::new(first.host_ip, Ports::HBONE),
            );
            file.same_node_encryption = self.same_node_encryption;
            // One worker thread, as on the local lab, so that the two backends' figures
            // describe the same agent.
            file.threads = Some(1);
            file.policy = Some(ClusterCell::policy());
            file.ca_endpoint = Some(site.ca_endpoint);
            file.workloads = local
                .iter()
                .map(|p| {
                    let svid = ClusterCell::svid(p.pod);
                    let w = &p.pod.workload;
                    LocalWorkload {
                        namespace: w.namespace.clone(),
                        name: w.name.clone(),
                        service_account: w.service_account.clone(),
                        cert: svid.cert,
                        key: svid.key,
                        address: app(p),
                    }
                })
                .collect();
            file.destinations = remote
                .iter()
                .map(|p| {
                    let w = &p.pod.workload;
                    RemoteWorkload {
                        namespace: w.namespace.clone(),
                        name: w.name.clone(),
                        service_account: w.service_account.clone(),
                        address: app(p),
                        node_agent: SocketAddr::new(p.host_ip, Ports::HBONE),
                    }
                })
                .collect();
            file.services = services.clone();
            let any = |port| SocketAddr::from(([0, 0, 0, 0], port));
            file.transparent = Some(TransparentListeners {
                outbound: any(Ports::OUTBOUND),
                inbound: any(Ports::INBOUND),
            });
            let mut destinations = vec![];
            for p in &local {
                destinations.push(app(p));
                destinations.extend(
                    services
                        .iter()
                        .filter(|s| s.endpoint == app(p))
                        .map(|s| s.address),
                );
            }
            // A service with several pods on this node is listed once.
            destinations.sort();
            destinations.dedup();
            let capture = NodeCaptureFile {
                sources: local.iter().map(|p| p.ip).collect(),
                destinations,
                outbound_port: Ports::OUTBOUND,
                inbound_port: Ports::INBOUND,
                iptables: meshbench_image::IPTABLES.into(),
            };
            let capture_config = config("node-capture.yaml");
            let agent_config = config("node-agent.yaml");
            let credentials: BTreeSet<String> =
                local.iter().flat_map(|p| identity_files(p.pod)).collect();
            agents.push(NodeAgentPod {
                node: node.clone(),
                args: NodeCaptureFile::command_line(&capture_config),
                files: [("node-capture.yaml".to_owned(), capture.to_yaml())].into(),
                capabilities: vec!["NET_ADMIN", "NET_RAW"],
                ready_command: check_command::<NodeCaptureFile>(&capture_config),
                additions: PodAdditions {
                    init: vec![],
                    containers: vec![AddedContainer {
                        name: "meshbench-node-agent",
                        program: None,
                        args: NodeAgentFile::command_line(&agent_config),
                        files: [("node-agent.yaml".to_owned(), file.to_yaml())].into(),
                        run_as_user: Some(meshbench_netlab::PROXY_UID),
                        capabilities: vec![],
                        role: "node-agent",
                        ready_port: Some(Ports::HBONE),
                        ready_command: None,
                        scratch: None,
                    }],
                    identity: false,
                    ..PodAdditions::default()
                },
                credentials: credentials.into_iter().collect(),
            });
        }
        Ok(agents)
    }
}
