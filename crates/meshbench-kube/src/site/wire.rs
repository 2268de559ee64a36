//! A cell's wire on a cluster (`run --capture-link`): `meshbench wire capture` exec'd, through
//! the API server, where the cell's protected hop arrives, recording while the instrument
//! runs, its pcap judged for the request marker and for TLS.
//!
//! Where that is: the server pod's own interface, which every byte to the pod crosses. A
//! sidecar's mTLS, the app's own TLS and ambient's HBONE (in-pod redirection brings ztunnel's
//! tunnel to the pod's interface) all arrive there, from another node or from the same one.
//! Our node agent is the exception: it tunnels between nodes and hands the pod plaintext on
//! its own node, so its cells are recorded in the client node's agent pod, on the link toward
//! the server's node (its loopback when both are on one node), writing only the packets
//! between the cell's addresses.
//!
//! The capture is bounded in bytes: the handshakes come first and every request carries the
//! marker, so its first megabytes are the evidence, and a longer capture would only load the
//! server's node (and the API server) during the measurement.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use meshbench_experiment::platform::WireRecording;
use meshbench_results::WireObservation;
use meshbench_topology::Pod as TopologyPod;

use super::{node_agent_pod, KubeSite};
use crate::exec::RunningExec;
use crate::Error;

/// The interface of a pod on every CNI.
pub const POD_INTERFACE: &str = "eth0";
/// How long a capture may take to start listening, and to finish once stopped.
pub const CAPTURE_WAIT: Duration = Duration::from_secs(30);
/// The most of a cell's traffic kept: the handshakes and thousands of requests.
const CAPTURE_BYTES: &str = "8MiB";
/// Whether a connection captured at the server pod's interface is the cell's: one from
/// another of the cell's pods to the server pod. What else reaches the pod is not the cell's:
/// the kubelet's probes (from the node's address, from the pod network's gateway on a bridge
/// CNI such as the test cluster's, from ambient's link-local 169.254.7.127; Linkerd's proxy
/// answers its own readiness probe in plaintext), or a control plane's calls.
fn the_cells(flow: (IpAddr, IpAddr), server: IpAddr, peers: &[IpAddr]) -> bool {
    let (from, to) = flow;
    to == server && peers.contains(&from)
}

/// `meshbench wire capture`'s arguments for a node's link toward `toward`, writing only the
/// packets between `between`: the link also carries the node's own traffic, the capture's
/// own output to the API server among it, which would otherwise spend the byte budget.
pub fn node_link_capture(toward: IpAddr, between: &[IpAddr]) -> Vec<String> {
    let mut args = vec!["--toward".to_owned(), toward.to_string()];
    for address in between {
        args.extend(["--between".to_owned(), address.to_string()]);
    }
    args
}

/// Where a cell's wire is recorded, and which of its connections are the cell's.
pub(super) struct WirePlace {
    /// The topology pod (or node agent pod) the capture is exec'd in.
    pod: String,
    /// How `meshbench wire capture` picks its interface.
    args: Vec<String>,
    /// Where, in words, for the results.
    description: String,
    /// Which captured connections are the cell's.
    judged: Judged,
}

/// Which of a capture's connections are the cell's.
enum Judged {
    /// Those from the cell's other pods (`peers`) to the server pod's address.
    ToServer { server: IpAddr, peers: Vec<IpAddr> },
    /// Every one: the capture wrote only packets between the cell's addresses (a node's link,
    /// `wire capture --between`).
    All,
}

/// A capture running while the instrument does.
pub(super) struct RunningCapture {
    place: WirePlace,
    exec: RunningExec,
    stop_file: String,
    marker: String,
}

impl KubeSite<'_> {
    /// Whether the cell's path is our node agents' tunnel between nodes.
    fn our_agents_carry(&self) -> bool {
        self.installed.is_none()
            && self
                .enrolled
                .as_ref()
                .is_some_and(|e| e.mesh.enrollment() == meshbench_meshes::Enrollment::AgentPerNode)
    }

    /// Where `wire` is recorded for a cell whose instrument runs in `client`'s workload; the
    /// server pod (and, for our node agent, its agent pods) must be running.
    pub(super) fn wire_place(
        &self,
        client: &TopologyPod,
        wire: &WireRecording<'_>,
    ) -> Result<WirePlace, Error> {
        let server = wire.server;
        let address = |what: &str, ip: Option<IpAddr>| {
            ip.ok_or_else(|| Error::Unsupported {
                what: format!("recording the wire of {what}"),
                why: "the cluster gave it no address".into(),
            })
        };
        let server_ip = address(&server.name, self.pod_ip(&server.name))?;
        let server_node = self.host_ip(&server.name);
        if self.our_agents_carry() {
            let node = &client.workload.node;
            let toward = address(&format!("{}'s node", server.name), server_node)?;
            let from_node = self.host_ip(&node_agent_pod(node));
            let loopback = client.workload.node == server.workload.node;
            let between: Vec<IpAddr> = [from_node, Some(toward), Some(server_ip)]
                .into_iter()
                .flatten()
                .collect();
            return Ok(WirePlace {
                pod: node_agent_pod(node),
                args: node_link_capture(toward, &between),
                description: match loopback {
                    true => format!(
                        "{node}'s loopback, where its node agent tunnels to itself (recorded \
                         in its agent's pod through the API server)"
                    ),
                    false => format!(
                        "{node}'s link toward {toward} (recorded in its node agent's pod \
                         through the API server)"
                    ),
                },
                judged: Judged::All,
            });
        }
        Ok(WirePlace {
            pod: server.name.clone(),
            args: vec!["--interface".into(), POD_INTERFACE.into()],
            description: format!(
                "{}'s pod interface ({POD_INTERFACE}, recorded inside the pod through the API \
                 server; the connections from the cell's other pods)",
                server.name
            ),
            judged: Judged::ToServer {
                server: server_ip,
                peers: self.pod_ips_but(&server.name),
            },
        })
    }

    /// Starts recording `place` for a cell whose requests carry `marker`, bounded by
    /// `budget` should it never be stopped.
    pub(super) async fn start_capture(
        &self,
        place: WirePlace,
        marker: &str,
        budget: Duration,
    ) -> Result<RunningCapture, Error> {
        let stop_file = format!("/tmp/meshbench-capture-{}.stop", self.id);
        let mut command: Vec<String> = ["meshbench", "wire", "capture", "--stop-file", &stop_file]
            .map(str::to_owned)
            .to_vec();
        command.extend(place.args.iter().cloned());
        command.extend([
            "--max-duration".into(),
            format!("{}s", budget.as_secs().max(1)),
            "--max-bytes".into(),
            CAPTURE_BYTES.into(),
        ]);
        let exec = self
            .start_exec(&place.pod, command, "listening on", CAPTURE_WAIT)
            .await?;
        Ok(RunningCapture {
            place,
            exec,
            stop_file,
            marker: marker.to_owned(),
        })
    }

    /// Stops `capture`, keeps its pcap as `wire.pcap` in the cell's directory and judges the
    /// cell's connections in it.
    /// Stops a capture and judges it; `instruments` are the addresses of the pods made after
    /// it began (the load generators), peers of the server like the cell's other pods.
    pub(super) async fn finish_capture(
        &self,
        capture: RunningCapture,
        instruments: &[IpAddr],
    ) -> Result<WireObservation, Error> {
        let RunningCapture {
            place,
            exec,
            stop_file,
            marker,
        } = capture;
        // A capture already ended by its byte budget is not waiting for the file: making it
        // is harmless (it goes with the pod).
        let mark = self
            .exec_ok(
                &place.pod,
                vec!["meshbench".into(), "wire".into(), "mark".into(), stop_file],
                CAPTURE_WAIT,
            )
            .await;
        let captured = exec.finish(CAPTURE_WAIT).await?;
        mark?;
        let captured = captured.succeeded(&place.pod, "meshbench wire capture")?;
        let pcap = self.cell_dir.join("wire.pcap");
        std::fs::write(&pcap, &captured.stdout).map_err(|source| Error::Io {
            path: pcap.clone(),
            source,
        })?;
        let mut report = meshbench_netlab::analyze_pcap(&pcap, marker.as_bytes())?;
        if let Judged::ToServer { server, peers } = &place.judged {
            let peers: Vec<IpAddr> = peers.iter().chain(instruments).copied().collect();
            report
                .flows
                .retain(|f| the_cells((f.client.ip(), f.server.ip()), *server, &peers));
        }
        let mut link = place.description;
        if captured.stderr.contains("ended by its bytes budget") {
            link.push_str(&format!("; its first {CAPTURE_BYTES}"));
        }
        Ok(report.observation(link, relative_to_results(&self.cell_dir, &pcap), &marker))
    }
}

/// `file` (in the cell's directory `cell_dir`, itself `<results>/cells/<cell>`) relative to
/// the result directory, as results name files.
fn relative_to_results(cell_dir: &Path, file: &Path) -> String {
    let results = cell_dir.ancestors().nth(2).unwrap_or(cell_dir);
    file.strip_prefix(results)
        .unwrap_or(file)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_cells_pods_calling_the_server_are_the_cells_traffic() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let (server, client) = (ip("10.244.2.11"), ip("10.244.1.16"));
        let peers = [client];
        assert!(the_cells((client, server), server, &peers));
        // The kubelet's probes: the node's address, the bridge's gateway, ambient's.
        for probe in ["10.77.0.12", "10.244.2.1", "169.254.7.127"] {
            assert!(!the_cells((ip(probe), server), server, &peers), "{probe}");
        }
        // The server's own calls out (to a control plane) are not to the server.
        assert!(!the_cells((server, ip("10.244.3.12")), server, &peers));
    }

    #[test]
    fn a_cells_pcap_is_named_from_the_result_directory() {
        let cell = Path::new("/r/run-1/cells/baseline-inter-node-1");
        assert_eq!(
            relative_to_results(cell, &cell.join("wire.pcap")),
            "cells/baseline-inter-node-1/wire.pcap"
        );
    }
}
