//! The netns backend: nodes and pods as network namespaces, built with `ip` and torn down on
//! drop. Pods have /32 addresses routed through their node (as Calico does), so every packet
//! between pods, also on one node, passes the node's IP stack where service DNAT and the
//! node agent's capture apply. Nodes reach each other through one fabric bridge in a namespace
//! of its own; each node's `uplink` is the inter-node link a capture watches.

use std::path::PathBuf;

use meshbench_lab::Launch;
use meshbench_topology::Topology;

use crate::command::{has_tool, run, run_in};
use crate::plan::AddressPlan;
use crate::{Error, LAB_PREFIX};

/// The interface on each node that carries its inter-node traffic.
pub const UPLINK: &str = "uplink";

#[derive(Debug)]
pub struct NetnsLab {
    id: String,
    topology: Topology,
    plan: AddressPlan,
    /// Namespaces created so far, in creation order (torn down in reverse).
    created: Vec<String>,
    torn_down: bool,
}

impl NetnsLab {
    /// Whether this machine can build netns labs: root and the tools. The error says what is
    /// missing.
    pub fn check_permitted() -> Result<(), Error> {
        if !rustix::process::geteuid().is_root() {
            return Err(Error::NotPermitted);
        }
        for (tool, package) in [
            ("ip", "iproute2"),
            ("iptables", "iptables"),
            ("sysctl", "procps"),
        ] {
            if !has_tool(tool) {
                return Err(Error::MissingTool {
                    tool: tool.into(),
                    install: format!("apt-get install -y {package}"),
                });
            }
        }
        Ok(())
    }

    /// Builds every namespace, link, route, service rule and hosts file of `topology`. On
    /// failure whatever was built is torn down again.
    pub fn create(id: &str, topology: &Topology) -> Result<Self, Error> {
        Self::check_permitted()?;
        let plan = AddressPlan::netns(topology)?;
        let mut lab = NetnsLab {
            id: id.to_owned(),
            topology: topology.clone(),
            plan,
            created: Vec::new(),
            torn_down: false,
        };
        // On error `lab` drops here and tears down what exists.
        lab.build()?;
        Ok(lab)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn plan(&self) -> &AddressPlan {
        &self.plan
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn fabric_netns(&self) -> String {
        format!("{LAB_PREFIX}{}-fabric", self.id)
    }

    pub fn node_netns(&self, node: &str) -> String {
        format!("{LAB_PREFIX}{}-{node}", self.id)
    }

    pub fn pod_netns(&self, pod: &str) -> String {
        format!("{LAB_PREFIX}{}-{pod}", self.id)
    }

    /// How to start a process in a pod.
    /// The node-side end of a pod's veth: where everything the pod sends or receives passes.
    pub fn pod_port(&self, pod: &str) -> Result<(String, String), Error> {
        let pod = self.plan.pod(pod)?;
        Ok((self.node_netns(&pod.node), format!("veth{}", pod.index)))
    }

    pub fn launch_in_pod(&self, pod: &str) -> Result<Launch, Error> {
        self.plan.pod(pod)?;
        Ok(Launch {
            netns: Some(self.pod_netns(pod)),
            ..Launch::default()
        })
    }

    /// How to start a process on a node (node agents, the control plane).
    pub fn launch_on_node(&self, node: &str) -> Result<Launch, Error> {
        self.plan.node(node)?;
        Ok(Launch {
            netns: Some(self.node_netns(node)),
            ..Launch::default()
        })
    }

    fn add_netns(&mut self, name: &str) -> Result<(), Error> {
        run("ip", &["netns", "add", name])?;
        self.created.push(name.to_owned());
        run("ip", &["-n", name, "link", "set", "lo", "up"])?;
        Ok(())
    }

    fn build(&mut self) -> Result<(), Error> {
        let fabric = self.fabric_netns();
        self.add_netns(&fabric)?;
        ip(&fabric, &["link", "add", "br0", "type", "bridge"])?;
        ip(&fabric, &["link", "set", "br0", "up"])?;
        // With br_netfilter loaded, bridged frames would pass this namespace's iptables and
        // conntrack, which drop the first packet of a flow on a fresh bridge. A switch
        // switches; the setting is absent where br_netfilter is not loaded.
        let _ = no_bridge_netfilter(&fabric);
        let nodes = self.plan.nodes.clone();
        for node in &nodes {
            let ns = self.node_netns(&node.name);
            self.add_netns(&ns)?;
            ip(&ns, &["link", "add", "br0", "type", "bridge"])?;
            ip(
                &ns,
                &["addr", "add", &format!("{}/24", node.ip), "dev", "br0"],
            )?;
            ip(&ns, &["link", "set", "br0", "up"])?;
            let _ = no_bridge_netfilter(&ns);
            let fabric_port = format!("n{}", node.index);
            run(
                "ip",
                &[
                    "link",
                    "add",
                    UPLINK,
                    "netns",
                    &ns,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &fabric_port,
                    "netns",
                    &fabric,
                ],
            )?;
            let uplink = node.uplink.expect("netns plans have uplinks");
            ip(
                &ns,
                &["addr", "add", &format!("{uplink}/24"), "dev", UPLINK],
            )?;
            ip(&ns, &["link", "set", UPLINK, "up"])?;
            ip(
                &fabric,
                &["link", "set", &fabric_port, "master", "br0", "up"],
            )?;
            // A node routes between its pods and the fabric; redirects would teach pods to
            // bypass it.
            run_in(
                &ns,
                "sysctl",
                &[
                    "-qw",
                    "net.ipv4.ip_forward=1",
                    "net.ipv4.conf.all.send_redirects=0",
                    "net.ipv4.conf.br0.send_redirects=0",
                ],
            )?;
        }
        for node in &nodes {
            let ns = self.node_netns(&node.name);
            for other in nodes.iter().filter(|o| o.name != node.name) {
                let subnet = format!("10.244.{}.0/24", other.index);
                let via = other.uplink.expect("netns plans have uplinks").to_string();
                ip(&ns, &["route", "add", &subnet, "via", &via])?;
            }
            for service in &self.plan.services {
                run_in(
                    &ns,
                    "iptables",
                    &[
                        "-t",
                        "nat",
                        "-A",
                        "PREROUTING",
                        "-d",
                        &service.addr.ip().to_string(),
                        "-p",
                        "tcp",
                        "--dport",
                        &service.addr.port().to_string(),
                        "-j",
                        "DNAT",
                        "--to-destination",
                        &service.endpoint.to_string(),
                    ],
                )?;
            }
        }
        // A pod calling its own service is DNATed back to itself; without masquerading it
        // would receive a packet from its own address and drop it (kube-proxy's hairpin
        // masquerade).
        for pod in &self.plan.pods {
            let ip = pod.ip.to_string();
            run_in(
                &self.node_netns(&pod.node),
                "iptables",
                &[
                    "-t",
                    "nat",
                    "-A",
                    "POSTROUTING",
                    "-s",
                    &ip,
                    "-d",
                    &ip,
                    "-j",
                    "MASQUERADE",
                ],
            )?;
        }
        let hosts = self.plan.hosts_file();
        for pod in self.plan.pods.clone() {
            let ns = self.pod_netns(&pod.name);
            self.add_netns(&ns)?;
            let node = self.plan.node(&pod.node)?.clone();
            let node_ns = self.node_netns(&node.name);
            let node_port = format!("veth{}", pod.index);
            run(
                "ip",
                &[
                    "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name",
                    &node_port, "netns", &node_ns,
                ],
            )?;
            ip(
                &ns,
                &["addr", "add", &format!("{}/32", pod.ip), "dev", "eth0"],
            )?;
            ip(&ns, &["link", "set", "eth0", "up"])?;
            ip(
                &ns,
                &[
                    "route",
                    "add",
                    &node.ip.to_string(),
                    "dev",
                    "eth0",
                    "scope",
                    "link",
                ],
            )?;
            ip(
                &ns,
                &[
                    "route",
                    "add",
                    "default",
                    "via",
                    &node.ip.to_string(),
                    "dev",
                    "eth0",
                ],
            )?;
            ip(
                &node_ns,
                &["link", "set", &node_port, "master", "br0", "up"],
            )?;
            let etc = self.etc_dir(&ns);
            std::fs::create_dir_all(&etc).map_err(|source| Error::Io {
                path: etc.clone(),
                source,
            })?;
            let hosts_path = etc.join("hosts");
            std::fs::write(&hosts_path, &hosts).map_err(|source| Error::Io {
                path: hosts_path,
                source,
            })?;
        }
        self.wait_links_up()
    }

    /// Waits until every interface of the lab is operationally up. The kernel activates a
    /// new veth's queue only when its link-watch event fires, up to a second later; until
    /// then it drops what it should send, and the first connection across it would wait for
    /// TCP's one-second SYN retry.
    fn wait_links_up(&self) -> Result<(), Error> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for ns in &self.created {
            loop {
                let brief = ip(ns, &["-br", "link"])?;
                let down: Vec<&str> = brief
                    .lines()
                    .filter(|l| !l.starts_with("lo "))
                    .filter(|l| {
                        let mut fields = l.split_whitespace();
                        let (name, state) = (fields.next(), fields.next());
                        // A bridge without ports (a node with no pods) stays UNKNOWN.
                        !(state == Some("UP") || (name == Some("br0") && state == Some("UNKNOWN")))
                    })
                    .collect();
                if down.is_empty() {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(Error::Command {
                        command: format!("ip -n {ns} -br link"),
                        status: "interfaces not up after 10 s".into(),
                        stderr: down.join("; "),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// `ip netns exec` mounts the files of this directory over `/etc` for its child.
    fn etc_dir(&self, netns: &str) -> PathBuf {
        PathBuf::from("/etc/netns").join(netns)
    }

    /// Kills every process still in the lab's namespaces and deletes them, pods first.
    /// Idempotent; also runs on drop.
    pub fn teardown(&mut self) -> Result<(), Error> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut first_error = None;
        for ns in self.created.drain(..).rev() {
            if let Err(e) = delete_netns(&ns) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for NetnsLab {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!(lab = %self.id, error = %e, "netns lab teardown incomplete; run `meshbench lab clean`");
        }
    }
}

fn no_bridge_netfilter(netns: &str) -> Result<String, Error> {
    run_in(
        netns,
        "sysctl",
        &[
            "-qw",
            "net.bridge.bridge-nf-call-iptables=0",
            "net.bridge.bridge-nf-call-ip6tables=0",
            "net.bridge.bridge-nf-call-arptables=0",
        ],
    )
}

fn ip(netns: &str, args: &[&str]) -> Result<String, Error> {
    let mut full = vec!["-n", netns];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// Kills a namespace's processes, deletes it and its `/etc/netns` files.
pub(crate) fn delete_netns(ns: &str) -> Result<Vec<u32>, Error> {
    let mut killed = Vec::new();
    let pids = run("ip", &["netns", "pids", ns]).unwrap_or_default();
    for pid in pids.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            if rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok() {
                killed.push(pid as u32);
            }
        }
    }
    run("ip", &["netns", "del", ns])?;
    let etc = PathBuf::from("/etc/netns").join(ns);
    if etc.exists() {
        std::fs::remove_dir_all(&etc).map_err(|source| Error::Io { path: etc, source })?;
    }
    Ok(killed)
}
