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

use meshbench_dataplane::{NodeAgentFile, ServiceEndpoint};
use meshbench_netlab::NodeCaptureFile;
use meshbench_role::RoleConfig;
use meshbench_topology::Pod;

use super::plan::{plan, AgentPod, AgentSettings};
use super::NodeAgent;
use crate::cluster::{check_command, CONFIG_DIR_IN_POD};
use crate::pki::PkiLayout;
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
        let enrolled: Vec<AgentPod<'_>> = placed
            .iter()
            .filter(|p| p.enrolled)
            .map(|p| AgentPod {
                pod: p.pod,
                ip: p.ip,
                app: app(p),
                agent: SocketAddr::new(p.host_ip, Ports::HBONE),
                dialled: true,
            })
            .collect();
        // An agent takes tunnels on its node's own address.
        let bind = |node: &str| {
            placed
                .iter()
                .find(|p| p.pod.workload.node == node)
                .map(|p| p.host_ip)
                .ok_or_else(|| Error::Unsupported {
                    mesh: "meshbench-node-agent".into(),
                    what: "a node agent on a node without placed pods",
                })
        };
        let svid = |pod: &Pod| {
            let svid = ClusterCell::svid(pod);
            (svid.cert, svid.key)
        };
        let plans = plan(
            &site.topology.nodes,
            &enrolled,
            &PkiLayout {
                ca: ClusterCell::ca(),
                policy: ClusterCell::policy(),
                svid: &svid,
            },
            &AgentSettings {
                same_node_encryption: self.same_node_encryption,
                ca_endpoint: site.ca_endpoint,
                bind: &bind,
                transparent: true,
                outbound: vec![],
                services,
            },
        )?;
        let config = |name: &str| Path::new(CONFIG_DIR_IN_POD).join(name);
        let mut agents = vec![];
        for agent in plans {
            let capture = NodeCaptureFile {
                sources: agent.capture_sources,
                destinations: agent.capture_destinations,
                outbound_port: Ports::OUTBOUND,
                inbound_port: Ports::INBOUND,
                iptables: meshbench_image::IPTABLES.into(),
            };
            let capture_config = config("node-capture.yaml");
            let agent_config = config("node-agent.yaml");
            let credentials: BTreeSet<String> = enrolled
                .iter()
                .filter(|p| p.pod.workload.node == agent.node)
                .flat_map(|p| identity_files(p.pod))
                .collect();
            agents.push(NodeAgentPod {
                node: agent.node,
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
                        files: [("node-agent.yaml".to_owned(), agent.file.to_yaml())].into(),
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
