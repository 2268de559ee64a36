//! Traffic capture by iptables REDIRECT, as meshes do it.
//!
//! In a pod (Istio's init container): outbound TCP from the app goes to the sidecar's
//! outbound port, inbound TCP to the sidecar's inbound port; the proxy itself runs as
//! [`PROXY_UID`] and its own connections are left alone, as is loopback traffic. On a node
//! (a node agent): connections from a meshed pod to a service are redirected to the agent's
//! listener for that pair, or, as ztunnel captures, everything the node's meshed pods send
//! and every connection to them; both ahead of the node's service DNAT.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::command::run_in;
use crate::Error;

/// The UID proxies run as; capture rules exempt it (Istio uses the same number).
pub const PROXY_UID: u32 = 1337;

const INBOUND_CHAIN: &str = "MESHBENCH_INBOUND";
const OUTBOUND_CHAIN: &str = "MESHBENCH_OUTPUT";
const NODE_CHAIN: &str = "MESHBENCH_NODE";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarCapture {
    pub outbound_port: u16,
    pub inbound_port: u16,
    /// Capture only connections to these destinations (proxies that cannot read the original
    /// destination need one listener per destination); `None`: every TCP destination.
    pub outbound_only: Option<Vec<(SocketAddr, u16)>>,
    /// Capture inbound connections only to these ports; `None`: every port except
    /// `inbound_ports_excluded`.
    pub inbound_only: Option<Vec<u16>>,
    /// Ports reachable without the proxy (admin endpoints).
    pub inbound_ports_excluded: Vec<u16>,
}

impl SidecarCapture {
    pub(crate) fn install(&self, netns: &str) -> Result<(), Error> {
        for rule in self.nat_rules() {
            let args: Vec<&str> = rule.iter().map(String::as_str).collect();
            nat(netns, &args)?;
        }
        Ok(())
    }

    /// The same rules as an `iptables-restore` file for the pod's own namespace, which a
    /// cluster's init container applies (as Istio's does).
    pub fn restore_file(&self) -> String {
        let mut file = String::from("*nat\n");
        let rules = self.nat_rules();
        for rule in &rules {
            if let [new, chain] = rule.as_slice() {
                if new == "-N" {
                    file.push_str(&format!(":{chain} - [0:0]\n"));
                }
            }
        }
        for rule in rules
            .iter()
            .filter(|r| r.first().is_some_and(|a| a != "-N"))
        {
            file.push_str(&rule.join(" "));
            file.push('\n');
        }
        file.push_str("COMMIT\n");
        file
    }

    /// Every command of the capture in the nat table, in order (`-N CHAIN` creates one).
    fn nat_rules(&self) -> Vec<Vec<String>> {
        let mut rules: Vec<Vec<String>> = vec![];
        let mut rule = |args: &[&str]| rules.push(args.iter().map(|a| (*a).to_owned()).collect());
        // `-A chain -p tcp [--dport port] -j jump...`
        let tcp =
            |rule: &mut dyn FnMut(&[&str]), chain: &str, dport: Option<u16>, jump: &[&str]| {
                let port = dport.map(|p| p.to_string());
                let mut args = vec!["-A", chain, "-p", "tcp"];
                if let Some(port) = &port {
                    args.extend(["--dport", port]);
                }
                args.push("-j");
                args.extend_from_slice(jump);
                rule(&args)
            };
        let inbound = self.inbound_port.to_string();
        let to_inbound = ["REDIRECT", "--to-ports", &inbound];
        rule(&["-N", INBOUND_CHAIN]);
        tcp(&mut rule, "PREROUTING", None, &[INBOUND_CHAIN]);
        for port in &self.inbound_ports_excluded {
            tcp(&mut rule, INBOUND_CHAIN, Some(*port), &["RETURN"]);
        }
        match &self.inbound_only {
            Some(ports) => {
                for port in ports {
                    tcp(&mut rule, INBOUND_CHAIN, Some(*port), &to_inbound);
                }
            }
            None => {
                tcp(
                    &mut rule,
                    INBOUND_CHAIN,
                    Some(self.inbound_port),
                    &["RETURN"],
                );
                tcp(&mut rule, INBOUND_CHAIN, None, &to_inbound);
            }
        }
        rule(&["-N", OUTBOUND_CHAIN]);
        tcp(&mut rule, "OUTPUT", None, &[OUTBOUND_CHAIN]);
        let uid = PROXY_UID.to_string();
        rule(&[
            "-A",
            OUTBOUND_CHAIN,
            "-m",
            "owner",
            "--uid-owner",
            &uid,
            "-j",
            "RETURN",
        ]);
        rule(&["-A", OUTBOUND_CHAIN, "-d", "127.0.0.0/8", "-j", "RETURN"]);
        match &self.outbound_only {
            Some(destinations) => {
                for (destination, to_port) in destinations {
                    let args = redirect_rule(&["-A", OUTBOUND_CHAIN], &[], *destination, *to_port);
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    rule(&args);
                }
            }
            None => {
                let outbound = self.outbound_port.to_string();
                tcp(
                    &mut rule,
                    OUTBOUND_CHAIN,
                    None,
                    &["REDIRECT", "--to-ports", &outbound],
                );
            }
        }
        rules
    }
}

/// One rule command in `netns`'s nat table.
fn nat(netns: &str, args: &[&str]) -> Result<(), Error> {
    let mut full = vec!["-t", "nat"];
    full.extend_from_slice(args);
    run_in(netns, "iptables", &full).map(|_| ())
}

/// A nat rule at `position` (`-A CHAIN`, `-I CHAIN 1`) that sends TCP to `destination`, also
/// matching `matches`, to local port `to_port`.
fn redirect_destination(
    netns: &str,
    position: &[&str],
    matches: &[&str],
    destination: SocketAddr,
    to_port: u16,
) -> Result<(), Error> {
    let rule = redirect_rule(position, matches, destination, to_port);
    let args: Vec<&str> = rule.iter().map(String::as_str).collect();
    nat(netns, &args)
}

/// The arguments of [`redirect_destination`]'s rule.
fn redirect_rule(
    position: &[&str],
    matches: &[&str],
    destination: SocketAddr,
    to_port: u16,
) -> Vec<String> {
    let (ip, port, to_port) = (
        destination.ip().to_string(),
        destination.port().to_string(),
        to_port.to_string(),
    );
    let rule = [
        "-d",
        &ip,
        "-p",
        "tcp",
        "--dport",
        &port,
        "-j",
        "REDIRECT",
        "--to-ports",
        &to_port,
    ];
    [position, matches, &rule]
        .concat()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Send one source pod's connections to one service to a node agent's listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRedirect {
    pub source: IpAddr,
    pub destination: SocketAddr,
    pub to_port: u16,
}

impl NodeRedirect {
    pub(crate) fn install(&self, netns: &str) -> Result<(), Error> {
        // Inserted first: it must win over the node's service DNAT.
        redirect_destination(
            netns,
            &["-I", "PREROUTING", "1"],
            &["-s", &self.source.to_string()],
            self.destination,
            self.to_port,
        )
    }
}

/// A node agent's capture of its node's meshed pods, in the node's namespace: every TCP
/// connection one of `sources` opens goes to `outbound_port`; every other connection to one
/// of `destinations` (a meshed workload's pod address or its service's) goes to
/// `inbound_port`. The agent's own connections start on the node and are never captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCapture {
    pub sources: Vec<IpAddr>,
    pub destinations: Vec<SocketAddr>,
    pub outbound_port: u16,
    pub inbound_port: u16,
}

impl NodeCapture {
    pub(crate) fn install(&self, netns: &str) -> Result<(), Error> {
        for rule in self.nat_rules() {
            let args: Vec<&str> = rule.iter().map(String::as_str).collect();
            nat(netns, &args)?;
        }
        Ok(())
    }

    /// Every command of the capture in the nat table, in order (`-N CHAIN` creates one).
    pub fn nat_rules(&self) -> Vec<Vec<String>> {
        let owned = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        let mut rules = vec![owned(&["-N", NODE_CHAIN])];
        let outbound = self.outbound_port.to_string();
        for source in &self.sources {
            rules.push(owned(&[
                "-A",
                NODE_CHAIN,
                "-s",
                &source.to_string(),
                "-p",
                "tcp",
                "-j",
                "REDIRECT",
                "--to-ports",
                &outbound,
            ]));
        }
        for destination in &self.destinations {
            rules.push(redirect_rule(
                &["-A", NODE_CHAIN],
                &[],
                *destination,
                self.inbound_port,
            ));
        }
        // The jump last, once the chain is whole (a check of it then means the capture is
        // in place); first in PREROUTING: the agent must see the address the app dialled,
        // before the node's service DNAT rewrites it.
        rules.push(owned(&[
            "-I",
            "PREROUTING",
            "1",
            "-p",
            "tcp",
            "-j",
            NODE_CHAIN,
        ]));
        rules
    }

    /// The commands that take the capture out of the nat table again.
    pub fn removal_rules() -> Vec<Vec<String>> {
        [
            vec!["-D", "PREROUTING", "-p", "tcp", "-j", NODE_CHAIN],
            vec!["-F", NODE_CHAIN],
            vec!["-X", NODE_CHAIN],
        ]
        .into_iter()
        .map(|r| r.into_iter().map(str::to_owned).collect())
        .collect()
    }
}

/// A node agent's capture installed by a pod on a cluster node (`meshbench proxy
/// node-capture`): the rules go into the node's own nat table with `iptables`, and come out
/// again when the pod stops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeCaptureFile {
    pub sources: Vec<IpAddr>,
    pub destinations: Vec<SocketAddr>,
    pub outbound_port: u16,
    pub inbound_port: u16,
    /// The iptables program (a multi-call `xtables-nft-multi`, called as `iptables`).
    pub iptables: std::path::PathBuf,
}

impl meshbench_role::RoleConfig for NodeCaptureFile {
    const COMMAND: &'static [&'static str] = &["proxy", "node-capture"];
}

impl NodeCaptureFile {
    fn capture(&self) -> NodeCapture {
        NodeCapture {
            sources: self.sources.clone(),
            destinations: self.destinations.clone(),
            outbound_port: self.outbound_port,
            inbound_port: self.inbound_port,
        }
    }

    /// Installs the capture in this namespace's nat table, replacing one a crashed agent
    /// left behind.
    pub fn install(&self) -> Result<(), Error> {
        self.remove();
        for rule in self.capture().nat_rules() {
            self.iptables(&rule)?;
        }
        Ok(())
    }

    /// Takes the capture out (what is already gone is no error).
    pub fn remove(&self) {
        for rule in NodeCapture::removal_rules() {
            let _ = self.iptables(&rule);
        }
    }

    /// Whether the capture is installed.
    pub fn installed(&self) -> bool {
        self.iptables(&["-C", "PREROUTING", "-p", "tcp", "-j", NODE_CHAIN].map(str::to_owned))
            .is_ok()
    }

    fn iptables(&self, rule: &[String]) -> Result<(), Error> {
        let command = format!("iptables -t nat {}", rule.join(" "));
        let output = std::process::Command::new(&self.iptables)
            .args(["iptables", "-t", "nat"])
            .args(rule)
            .output()
            .map_err(|source| Error::Spawn {
                command: command.clone(),
                source,
            })?;
        if output.status.success() {
            return Ok(());
        }
        Err(Error::Command {
            command,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod restore_tests {
    use super::*;

    #[test]
    fn the_restore_file_declares_its_chains_then_holds_every_rule_in_order() {
        let capture = SidecarCapture {
            outbound_port: 15001,
            inbound_port: 15006,
            outbound_only: None,
            inbound_only: None,
            inbound_ports_excluded: vec![15090],
        };
        let file = capture.restore_file();
        assert!(
            file.starts_with("*nat\n:MESHBENCH_INBOUND - [0:0]\n:MESHBENCH_OUTPUT - [0:0]\n"),
            "{file}"
        );
        let rules: Vec<&str> = file.lines().filter(|l| l.starts_with("-A ")).collect();
        assert_eq!(
            rules,
            [
                "-A PREROUTING -p tcp -j MESHBENCH_INBOUND",
                "-A MESHBENCH_INBOUND -p tcp --dport 15090 -j RETURN",
                "-A MESHBENCH_INBOUND -p tcp --dport 15006 -j RETURN",
                "-A MESHBENCH_INBOUND -p tcp -j REDIRECT --to-ports 15006",
                "-A OUTPUT -p tcp -j MESHBENCH_OUTPUT",
                "-A MESHBENCH_OUTPUT -m owner --uid-owner 1337 -j RETURN",
                "-A MESHBENCH_OUTPUT -d 127.0.0.0/8 -j RETURN",
                "-A MESHBENCH_OUTPUT -p tcp -j REDIRECT --to-ports 15001",
            ]
        );
        assert!(file.ends_with("COMMIT\n"));
    }
}
