//! One interface over both backends, for the runner and the mesh adapters: where pods, nodes
//! and services are, how to start a process in a pod or on a node, and (netns only) how a
//! mesh captures traffic.

use std::net::{IpAddr, SocketAddr};

use meshbench_lab::Launch;
use meshbench_topology::Topology;

use crate::capture::{NodeCapture, NodeRedirect, SidecarCapture};
use crate::loopback::LoopbackLab;
use crate::netns::NetnsLab;
use crate::plan::AddressPlan;
use crate::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Netns,
    Loopback,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Netns => "netns",
            Backend::Loopback => "loopback",
        }
    }

    /// netns where this process may build it, loopback otherwise.
    pub fn default_here() -> Backend {
        Self::default_here_and_why().0
    }

    /// [`Backend::default_here`], and on loopback why the netns lab cannot be built here
    /// (not root, or which tool is missing and the command that installs it).
    pub fn default_here_and_why() -> (Backend, Option<Error>) {
        match NetnsLab::check_permitted() {
            Ok(()) => (Backend::Netns, None),
            Err(why) => (Backend::Loopback, Some(why)),
        }
    }

    /// What a user who did not choose the loopback backend is told when it is used: why the
    /// netns lab cannot be built here (`why`: not root, or the missing tool and the command
    /// that installs it) and what the loopback backend cannot show.
    pub fn loopback_fallback_notice(why: &Error) -> String {
        format!(
            "the netns lab (nodes as network namespaces) is not available here: {why}. Running \
             on the loopback backend instead, which puts every pod on this host's loopback: \
             there is no link between nodes (inter-node cells cross no network device, and \
             --capture-link records relays, not a link) and no transparent capture (clients \
             dial the proxies' ports; nothing is redirected by iptables), so its figures are \
             not the netns lab's. Pass --backend loopback to choose it and silence this"
        )
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "netns" => Ok(Backend::Netns),
            "loopback" => Ok(Backend::Loopback),
            other => Err(format!(
                "unknown backend {other:?} (expected netns or loopback)"
            )),
        }
    }
}

/// A pod or a node, by name.
#[derive(Debug, Clone, Copy)]
pub enum NetPlace<'a> {
    Pod(&'a str),
    Node(&'a str),
}

#[derive(Debug)]
pub enum LabNetwork {
    Netns(NetnsLab),
    Loopback(LoopbackLab),
}

impl LabNetwork {
    pub fn create(backend: Backend, id: &str, topology: &Topology) -> Result<Self, Error> {
        Ok(match backend {
            Backend::Netns => LabNetwork::Netns(NetnsLab::create(id, topology)?),
            Backend::Loopback => LabNetwork::Loopback(LoopbackLab::create(id, topology)?),
        })
    }

    /// [`LabNetwork::create`] on a blocking thread: building a netns lab runs `ip` and
    /// `iptables` for seconds, and the caller's runtime must keep polling meanwhile (a Ctrl-C
    /// is seen during set-up; an abandoned lab is torn down when dropped).
    pub async fn create_off_runtime(
        backend: Backend,
        id: &str,
        topology: &Topology,
    ) -> Result<Self, Error> {
        let (id, topology) = (id.to_owned(), topology.clone());
        tokio::task::spawn_blocking(move || LabNetwork::create(backend, &id, &topology))
            .await
            .map_err(|e| Error::Io {
                path: "lab set-up".into(),
                source: std::io::Error::other(e),
            })?
    }

    /// [`LabNetwork::teardown`] on a blocking thread, for the same reason.
    pub async fn teardown_off_runtime(mut self) -> Result<(), Error> {
        tokio::task::spawn_blocking(move || self.teardown())
            .await
            .map_err(|e| Error::Io {
                path: "lab teardown".into(),
                source: std::io::Error::other(e),
            })?
    }

    pub fn backend(&self) -> Backend {
        match self {
            LabNetwork::Netns(_) => Backend::Netns,
            LabNetwork::Loopback(_) => Backend::Loopback,
        }
    }

    pub fn plan(&self) -> &AddressPlan {
        match self {
            LabNetwork::Netns(l) => l.plan(),
            LabNetwork::Loopback(l) => &l.plan,
        }
    }

    pub fn topology(&self) -> &Topology {
        match self {
            LabNetwork::Netns(l) => l.topology(),
            LabNetwork::Loopback(l) => &l.topology,
        }
    }

    pub fn id(&self) -> &str {
        match self {
            LabNetwork::Netns(l) => l.id(),
            LabNetwork::Loopback(l) => &l.id,
        }
    }

    pub fn pod_ip(&self, pod: &str) -> Result<IpAddr, Error> {
        Ok(self.plan().pod(pod)?.ip.into())
    }

    pub fn node_ip(&self, node: &str) -> Result<IpAddr, Error> {
        Ok(self.plan().node(node)?.ip.into())
    }

    /// What a client dials for a service.
    pub fn service_addr(&self, service: &str) -> Result<SocketAddr, Error> {
        Ok(self.plan().service(service)?.addr)
    }

    /// The name a client can put in a URL for a service: its DNS-style name where pods have
    /// hosts files (netns), its address otherwise.
    pub fn service_host(&self, service: &str) -> Result<String, Error> {
        let s = self.plan().service(service)?;
        Ok(match self {
            LabNetwork::Netns(_) => format!("{}:{}", s.name, s.addr.port()),
            LabNetwork::Loopback(_) => s.addr.to_string(),
        })
    }

    /// The address a pod's processes bind to for others to reach them.
    pub fn pod_bind_ip(&self, pod: &str) -> Result<IpAddr, Error> {
        Ok(self.bind_ip(self.pod_ip(pod)?))
    }

    /// The address a node's processes bind to.
    pub fn node_bind_ip(&self, node: &str) -> Result<IpAddr, Error> {
        Ok(self.bind_ip(self.node_ip(node)?))
    }

    /// In a namespace, every address of its own; on loopback, only the place's.
    fn bind_ip(&self, own: IpAddr) -> IpAddr {
        match self {
            LabNetwork::Netns(_) => IpAddr::from([0, 0, 0, 0]),
            LabNetwork::Loopback(_) => own,
        }
    }

    pub fn launch_in_pod(&self, pod: &str) -> Result<Launch, Error> {
        match self {
            LabNetwork::Netns(l) => l.launch_in_pod(pod),
            LabNetwork::Loopback(l) => l.plan.pod(pod).map(|_| Launch::default()),
        }
    }

    pub fn launch_on_node(&self, node: &str) -> Result<Launch, Error> {
        match self {
            LabNetwork::Netns(l) => l.launch_on_node(node),
            LabNetwork::Loopback(l) => l.plan.node(node).map(|_| Launch::default()),
        }
    }

    /// Whether meshes capture traffic here (netns) or clients dial proxies (loopback).
    pub fn captures(&self) -> bool {
        matches!(self, LabNetwork::Netns(_))
    }

    pub fn capture_sidecar(&self, pod: &str, capture: &SidecarCapture) -> Result<(), Error> {
        capture.install(&self.netns("traffic capture")?.pod_netns(pod))
    }

    pub fn redirect_on_node(&self, node: &str, redirect: &NodeRedirect) -> Result<(), Error> {
        redirect.install(&self.netns("traffic capture")?.node_netns(node))
    }

    pub fn capture_on_node(&self, node: &str, capture: &NodeCapture) -> Result<(), Error> {
        capture.install(&self.netns("traffic capture")?.node_netns(node))
    }

    /// The namespace and interface that carry a node's inter-node traffic (netns only).
    pub fn uplink_of(&self, node: &str) -> Result<(String, &'static str), Error> {
        let lab = self.netns("an inter-node link")?;
        lab.plan().node(node)?;
        Ok((lab.node_netns(node), crate::netns::UPLINK))
    }

    /// The namespace and interface on a pod's node that carry all of the pod's traffic
    /// (netns only): where a capture sees a same-node path.
    pub fn pod_port(&self, pod: &str) -> Result<(String, String), Error> {
        self.netns("pod interfaces")?.pod_port(pod)
    }

    /// The network namespace of a pod or node (netns only).
    pub fn netns_of(&self, place: NetPlace<'_>) -> Result<String, Error> {
        let lab = self.netns("network namespaces")?;
        Ok(match place {
            NetPlace::Pod(pod) => {
                lab.plan().pod(pod)?;
                lab.pod_netns(pod)
            }
            NetPlace::Node(node) => {
                lab.plan().node(node)?;
                lab.node_netns(node)
            }
        })
    }

    /// The netns lab, or the error saying that `what` needs one.
    fn netns(&self, what: &'static str) -> Result<&NetnsLab, Error> {
        match self {
            LabNetwork::Netns(lab) => Ok(lab),
            LabNetwork::Loopback(_) => Err(Error::Unsupported {
                what,
                backend: "loopback",
            }),
        }
    }

    pub fn teardown(&mut self) -> Result<(), Error> {
        match self {
            LabNetwork::Netns(l) => l.teardown(),
            LabNetwork::Loopback(_) => Ok(()),
        }
    }
}

/// A fresh lab id: short (interface and namespace names stay readable), unlikely to repeat.
pub fn new_lab_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:06x}", h.finish() & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_fallback_says_why_how_to_get_the_netns_lab_and_what_it_cannot_show() {
        let missing = Error::MissingTool {
            tool: "iptables".into(),
            install: "apt-get install -y iptables".into(),
        };
        let notice = Backend::loopback_fallback_notice(&missing);
        for part in [
            "not available here",
            "`iptables`",
            "apt-get install -y iptables",
            "no link between nodes",
            "no transparent capture",
            "--backend loopback",
        ] {
            assert!(notice.contains(part), "{part:?} missing from: {notice}");
        }
        let notice = Backend::loopback_fallback_notice(&Error::NotPermitted);
        assert!(notice.contains("needs root"), "{notice}");
    }
}
