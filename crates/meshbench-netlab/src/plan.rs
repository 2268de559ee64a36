//! Addresses for a topology. netns: node `k` (from 1) owns 10.244.k.0/24 (its bridge is .1,
//! its pods .2 up), reaches the fabric as 10.255.0.k, and services get ClusterIPs from
//! 10.96.0.10 on. loopback: node `k` is 127.R.k.1 and its pods 127.R.k.2 up, where R is chosen
//! per lab so concurrent labs do not collide; services are their pod's address and port.

use std::net::{Ipv4Addr, SocketAddr};

use meshbench_topology::Topology;

use crate::Error;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    pub name: String,
    /// 1-based, in declaration order.
    pub index: u8,
    /// The node's own address: its bridge (netns) or its 127.R.k.1 (loopback).
    pub ip: Ipv4Addr,
    /// netns only: the node's address on the inter-node fabric.
    pub uplink: Option<Ipv4Addr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAddress {
    pub name: String,
    pub node: String,
    pub ip: Ipv4Addr,
    /// 1-based over the whole lab; names the pod's veth on its node.
    pub index: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAddress {
    pub name: String,
    pub namespace: String,
    /// What clients dial: ClusterIP and service port (netns), or the pod's own address and
    /// target port (loopback).
    pub addr: SocketAddr,
    /// The pod behind it and the port its app listens on.
    pub endpoint: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPlan {
    pub nodes: Vec<NodeAddress>,
    pub pods: Vec<PodAddress>,
    pub services: Vec<ServiceAddress>,
}

const MAX_NODES: usize = 200;
const MAX_PODS_PER_NODE: usize = 250;

impl AddressPlan {
    pub fn netns(topology: &Topology) -> Result<Self, Error> {
        Self::build(
            topology,
            |k| [10, 244, k, 1],
            |k| Some([10, 255, 0, k].into()),
            true,
        )
    }

    pub fn loopback(topology: &Topology, second_octet: u8) -> Result<Self, Error> {
        Self::build(
            topology,
            move |k| [127, second_octet, k, 1],
            |_| None,
            false,
        )
    }

    fn build(
        topology: &Topology,
        node_ip: impl Fn(u8) -> [u8; 4],
        uplink: impl Fn(u8) -> Option<Ipv4Addr>,
        cluster_ips: bool,
    ) -> Result<Self, Error> {
        topology.validate()?;
        let too_big = |message: String| {
            Error::Topology(meshbench_topology::Error {
                field: "nodes".into(),
                message,
            })
        };
        if topology.nodes.len() > MAX_NODES {
            return Err(too_big(format!("at most {MAX_NODES} nodes")));
        }
        let nodes: Vec<NodeAddress> = topology
            .nodes
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let k = (i + 1) as u8;
                NodeAddress {
                    name: name.clone(),
                    index: k,
                    ip: node_ip(k).into(),
                    uplink: uplink(k),
                }
            })
            .collect();
        let mut pods = Vec::new();
        for (i, pod) in topology.pods().into_iter().enumerate() {
            let node = nodes
                .iter()
                .find(|n| n.name == pod.workload.node)
                .expect("validated");
            let on_node = pods
                .iter()
                .filter(|p: &&PodAddress| p.node == node.name)
                .count();
            if on_node >= MAX_PODS_PER_NODE {
                return Err(too_big(format!(
                    "node {} would hold more than {MAX_PODS_PER_NODE} pods",
                    node.name
                )));
            }
            let mut octets = node.ip.octets();
            octets[3] = (2 + on_node) as u8;
            pods.push(PodAddress {
                name: pod.name,
                node: node.name.clone(),
                ip: octets.into(),
                index: (i + 1) as u16,
            });
        }
        let mut services = Vec::new();
        for (i, s) in topology.services.iter().enumerate() {
            let pod = topology.first_pod(&s.workload).expect("validated");
            let pod_ip = pods
                .iter()
                .find(|p| p.name == pod.name)
                .expect("planned")
                .ip;
            let endpoint = SocketAddr::from((pod_ip, s.target_port));
            let addr = if cluster_ips {
                SocketAddr::from(([10, 96, 0, 10 + i as u8], s.port))
            } else {
                endpoint
            };
            services.push(ServiceAddress {
                name: s.name.clone(),
                namespace: s.namespace.clone(),
                addr,
                endpoint,
            });
        }
        Ok(AddressPlan {
            nodes,
            pods,
            services,
        })
    }

    pub fn node(&self, name: &str) -> Result<&NodeAddress, Error> {
        named(&self.nodes, "node", name, |n| &n.name)
    }

    pub fn pod(&self, name: &str) -> Result<&PodAddress, Error> {
        named(&self.pods, "pod", name, |p| &p.name)
    }

    pub fn service(&self, name: &str) -> Result<&ServiceAddress, Error> {
        named(&self.services, "service", name, |s| &s.name)
    }

    /// The hosts file of a pod: every service by short, namespaced and cluster-local name.
    pub fn hosts_file(&self) -> String {
        let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
        for s in &self.services {
            text.push_str(&format!(
                "{} {name} {name}.{ns} {name}.{ns}.svc {name}.{ns}.svc.cluster.local\n",
                s.addr.ip(),
                name = s.name,
                ns = s.namespace
            ));
        }
        text
    }
}

/// The item called `name`, or the error naming the `kind` of thing that is not in the plan.
fn named<'a, T>(
    items: &'a [T],
    kind: &'static str,
    name: &str,
    name_of: impl Fn(&T) -> &String,
) -> Result<&'a T, Error> {
    items
        .iter()
        .find(|item| name_of(item) == name)
        .ok_or_else(|| Error::Unknown {
            kind,
            name: name.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology() -> Topology {
        let mut t =
            Topology::client_server("default", ("client", "server"), "node-2", "echo", 8080);
        let mut peer = t.workloads[0].clone();
        peer.name = "peer".into();
        t.workloads.push(peer);
        t
    }

    #[test]
    fn netns_plan_gives_each_node_a_subnet_and_each_service_a_cluster_ip() {
        let plan = AddressPlan::netns(&topology()).unwrap();
        assert_eq!(
            plan.node("node-2").unwrap().ip,
            Ipv4Addr::new(10, 244, 2, 1)
        );
        assert_eq!(
            plan.pod("client-1").unwrap().ip,
            Ipv4Addr::new(10, 244, 1, 2)
        );
        assert_eq!(plan.pod("peer-1").unwrap().ip, Ipv4Addr::new(10, 244, 1, 3));
        assert_eq!(
            plan.pod("server-1").unwrap().ip,
            Ipv4Addr::new(10, 244, 2, 2)
        );
        let echo = plan.service("echo").unwrap();
        assert_eq!(echo.addr, "10.96.0.10:80".parse().unwrap());
        assert_eq!(echo.endpoint, "10.244.2.2:8080".parse().unwrap());
        assert!(plan
            .hosts_file()
            .contains("10.96.0.10 echo echo.default echo.default.svc"));
    }

    #[test]
    fn loopback_services_are_their_pods() {
        let plan = AddressPlan::loopback(&topology(), 77).unwrap();
        assert_eq!(
            plan.pod("server-1").unwrap().ip,
            Ipv4Addr::new(127, 77, 2, 2)
        );
        assert_eq!(
            plan.service("echo").unwrap().addr,
            "127.77.2.2:8080".parse().unwrap()
        );
    }
}
