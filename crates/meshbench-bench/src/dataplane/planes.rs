//! Starting each data plane as a pair of proxies in front of the echo app: the client side
//! takes plaintext from the load generator, the server side hands plaintext to the app, and
//! between them runs mTLS with both SPIFFE identities. Every proxy is single-threaded and
//! pinned to the system-under-test CPU.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use super::pair::{Pair, PairContext, Pki, NAMESPACE};
use crate::process::{free_port, Daemon};
use crate::Error;
use meshbench_dataplane::{
    IdentityFiles, InboundListener, LocalWorkload, Mode, NodeAgentFile, OutboundListener,
    RemoteWorkload, SidecarFile, SidecarOutbound,
};
use meshbench_meshes::configs::{self, ProxyMode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plane {
    /// No proxies: the load generator talks to the app.
    Direct,
    SidecarL4,
    SidecarL7,
    NodeAgent,
    /// One node agent with the client and the server on its node, same-node encryption on:
    /// the connection leaves through the agent, comes back over HBONE mTLS into the same
    /// agent and goes on to the app (ztunnel's own harness).
    NodeAgentLoop,
    /// HAProxy `mode http`, pooled upstream connections.
    Haproxy,
    /// Envoy's HTTP connection manager, pooled upstream connections.
    Envoy,
    /// HAProxy `mode tcp`: each client connection over an mTLS connection of its own, the L4
    /// sidecar's work.
    HaproxyTcp,
    /// Envoy's `tcp_proxy`, likewise.
    EnvoyTcp,
    /// Istio's ztunnel looping a connection through its own HBONE port, as
    /// `NodeAgentLoop` does: the peer of our node agent (see `ztunnel.rs`).
    ZtunnelLoop,
    /// Linkerd's proxy as a client-side outbound and a server-side inbound proxy, mTLS and
    /// its HTTP/2 upgrade between them: the peer of our sidecars (see `linkerd.rs`).
    Linkerd2Proxy,
}

impl Plane {
    pub const ALL: [Plane; 11] = [
        Plane::Direct,
        Plane::SidecarL4,
        Plane::SidecarL7,
        Plane::NodeAgent,
        Plane::NodeAgentLoop,
        Plane::Haproxy,
        Plane::Envoy,
        Plane::HaproxyTcp,
        Plane::EnvoyTcp,
        Plane::ZtunnelLoop,
        Plane::Linkerd2Proxy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Plane::Direct => "direct",
            Plane::SidecarL4 => "meshbench-sidecar-l4",
            Plane::SidecarL7 => "meshbench-sidecar-l7",
            Plane::NodeAgent => "meshbench-node-agent",
            Plane::NodeAgentLoop => "meshbench-node-agent-loop",
            Plane::Haproxy => "haproxy",
            Plane::Envoy => "envoy",
            Plane::HaproxyTcp => "haproxy-tcp",
            Plane::EnvoyTcp => "envoy-tcp",
            Plane::ZtunnelLoop => "ztunnel-loop",
            Plane::Linkerd2Proxy => "linkerd2-proxy",
        }
    }

    /// The name `bench dataplane --planes` takes: ours without the `meshbench-` prefix.
    pub fn flag_name(self) -> &'static str {
        self.name().trim_start_matches("meshbench-")
    }

    pub fn is_ours(self) -> bool {
        matches!(
            self,
            Plane::SidecarL4 | Plane::SidecarL7 | Plane::NodeAgent | Plane::NodeAgentLoop
        )
    }

    /// A plane that runs in a namespace of its own with its own echo app there.
    pub fn starts_its_own_app(self) -> bool {
        matches!(self, Plane::ZtunnelLoop | Plane::Linkerd2Proxy)
    }

    /// A node agent, whose own floor is the L4 sidecar pair (the same mTLS, without HBONE).
    pub fn is_node_agent(self) -> bool {
        matches!(self, Plane::NodeAgent | Plane::NodeAgentLoop)
    }

    /// A third-party proxy pair, and what it does with a client connection.
    pub fn peer_mode(self) -> Option<ProxyMode> {
        match self {
            Plane::Haproxy | Plane::Envoy => Some(ProxyMode::Http),
            Plane::HaproxyTcp | Plane::EnvoyTcp => Some(ProxyMode::Tcp),
            _ => None,
        }
    }
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn addr_field(ready: &serde_json::Value, pointer: &str, who: &str) -> Result<SocketAddr, Error> {
    ready
        .pointer(pointer)
        .and_then(|v| v.as_str())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Target(format!("{who}: no address at {pointer} in {ready}")))
}

pub(crate) fn start(plane: Plane, ctx: &PairContext<'_>) -> Result<Pair, Error> {
    match plane {
        Plane::Direct => Ok(Pair::on_loopback(ctx.app, vec![])),
        Plane::SidecarL4 => sidecar_pair(ctx, Mode::L4),
        Plane::SidecarL7 => sidecar_pair(ctx, Mode::L7),
        Plane::NodeAgent => node_agent_pair(ctx),
        Plane::NodeAgentLoop => node_agent_loop(ctx),
        Plane::Haproxy => haproxy_pair(ctx, plane, ProxyMode::Http),
        Plane::Envoy => envoy_pair(ctx, plane, ProxyMode::Http),
        Plane::HaproxyTcp => haproxy_pair(ctx, plane, ProxyMode::Tcp),
        Plane::EnvoyTcp => envoy_pair(ctx, plane, ProxyMode::Tcp),
        Plane::ZtunnelLoop => super::ztunnel::ztunnel_loop(ctx),
        Plane::Linkerd2Proxy => super::linkerd::linkerd_pair(ctx),
    }
}

/// One of the pair's sidecars, single-threaded, with its workload's SVID.
fn sidecar_file(ctx: &PairContext<'_>, sa: &str, mode: Mode) -> SidecarFile {
    let pki = ctx.pki;
    let mut file = SidecarFile::new(NAMESPACE, sa);
    file.threads = Some(1);
    file.mode = mode;
    file.identity = Some(IdentityFiles {
        cert: pki.file(&format!("{sa}.pem")),
        key: pki.file(&format!("{sa}.key")),
        ca: pki.file("ca.pem"),
        ca_endpoint: None,
        rotate_at: meshbench_identity::DEFAULT_ROTATE_FRACTION,
    });
    file
}

fn sidecar_pair(ctx: &PairContext<'_>, mode: Mode) -> Result<Pair, Error> {
    let label = match mode {
        Mode::L4 => "l4",
        Mode::L7 => "l7",
    };
    let mut server = sidecar_file(ctx, "server", mode);
    server.inbound = Some(InboundListener {
        listen: local(0),
        app: ctx.app,
        transparent: false,
    });
    let (server, ready) = ctx.meshbench(&format!("sidecar-{label}-server"), &server)?;
    let inbound = addr_field(&ready, "/addr", "server sidecar")?;
    let mut client = sidecar_file(ctx, "client", mode);
    client.outbound.push(SidecarOutbound {
        listen: local(0),
        upstream: inbound,
        upstream_id: Some(Pki::id("server")),
    });
    let (client, ready) = ctx.meshbench(&format!("sidecar-{label}-client"), &client)?;
    Ok(Pair::on_loopback(
        addr_field(&ready, "/outbound/0", "client sidecar")?,
        vec![client, server],
    ))
}

/// A workload on a node agent's node, with its SVID.
fn node_workload(pki: &Pki, sa: &str, address: SocketAddr) -> LocalWorkload {
    LocalWorkload {
        namespace: NAMESPACE.into(),
        name: sa.into(),
        service_account: sa.into(),
        cert: pki.file(&format!("{sa}.pem")),
        key: pki.file(&format!("{sa}.key")),
        address,
    }
}

/// A single-threaded node agent holding `workloads`.
fn node_agent_file(pki: &Pki, node: &str, workloads: Vec<LocalWorkload>) -> NodeAgentFile {
    let mut file = NodeAgentFile::new(node, pki.file("ca.pem"), local(0));
    file.workloads = workloads;
    file.threads = Some(1);
    file
}

/// The client app has no listener of its own; its address only names it in the directory.
const CLIENT_APP: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1)),
    1,
);

/// The client's outbound listener: its connections go to the app's address.
fn client_outbound(app: SocketAddr) -> OutboundListener {
    OutboundListener {
        listen: local(0),
        source: format!("{NAMESPACE}/client"),
        destination: app,
    }
}

fn node_agent_loop(ctx: &PairContext<'_>) -> Result<Pair, Error> {
    let pki = ctx.pki;
    let mut file = node_agent_file(
        pki,
        "node-a",
        vec![
            node_workload(pki, "client", CLIENT_APP),
            node_workload(pki, "server", ctx.app),
        ],
    );
    file.same_node_encryption = true;
    file.outbound = vec![client_outbound(ctx.app)];
    let (agent, ready) = ctx.meshbench("node-agent-loop", &file)?;
    Ok(Pair::on_loopback(
        addr_field(&ready, "/outbound/0", "node agent")?,
        vec![agent],
    ))
}

fn node_agent_pair(ctx: &PairContext<'_>) -> Result<Pair, Error> {
    let pki = ctx.pki;
    let workload = |sa: &str, address| node_workload(pki, sa, address);
    let file = |node: &str, workloads| node_agent_file(pki, node, workloads);
    let server_file = file("node-b", vec![workload("server", ctx.app)]);
    let (server, ready) = ctx.meshbench("node-agent-server", &server_file)?;
    let hbone = addr_field(&ready, "/addr", "server node agent")?;
    let mut client_file = file("node-a", vec![workload("client", CLIENT_APP)]);
    client_file.destinations = vec![RemoteWorkload {
        namespace: NAMESPACE.into(),
        name: "server".into(),
        service_account: "server".into(),
        address: ctx.app,
        node_agent: hbone,
    }];
    client_file.outbound = vec![client_outbound(ctx.app)];
    let (client, ready) = ctx.meshbench("node-agent-client", &client_file)?;
    Ok(Pair::on_loopback(
        addr_field(&ready, "/outbound/0", "client node agent")?,
        vec![client, server],
    ))
}

fn haproxy_pair(ctx: &PairContext<'_>, plane: Plane, mode: ProxyMode) -> Result<Pair, Error> {
    let pki = ctx.pki;
    let (inbound, outbound) = (free_port()?, free_port()?);
    let server = configs::haproxy_inbound(
        local(inbound),
        ctx.app,
        &pki.file("server.combined.pem"),
        &pki.file("ca.pem"),
        mode,
    );
    let client = configs::haproxy_outbound(
        local(outbound),
        local(inbound),
        &Pki::dns_name("server"),
        &pki.file("client.combined.pem"),
        &pki.file("ca.pem"),
        mode,
    );
    let haproxy = ThirdParty {
        program: &ctx.tools.haproxy,
        args: configs::haproxy_args,
        config_extension: "cfg",
    };
    haproxy.start_pair(ctx, plane, [(server, inbound), (client, outbound)])
}

/// A third-party proxy: its binary, its command line for a configuration file, and that
/// file's extension.
struct ThirdParty<'a> {
    program: &'a Path,
    args: fn(&Path) -> Vec<String>,
    config_extension: &'static str,
}

impl ThirdParty<'_> {
    /// The server's proxy from its configuration, listening on its port, then the client's,
    /// each on the proxies' CPU; the client's port is the pair's entry.
    fn start_pair(
        &self,
        ctx: &PairContext<'_>,
        plane: Plane,
        [server, client]: [(String, u16); 2],
    ) -> Result<Pair, Error> {
        let start = |side: &str, (config, port): (String, u16)| -> Result<Daemon, Error> {
            let name = format!("{}-{side}", plane.name());
            let config = ctx.write(&format!("{name}.{}", self.config_extension), &config)?;
            let mut command = Command::new(self.program);
            command.args((self.args)(&config)).stdout(Stdio::null());
            let mut daemon = Daemon::spawn(&mut command, ctx.cpu, &name, &ctx.log(&name))?;
            daemon.wait_listening(local(port))?;
            Ok(daemon)
        };
        let outbound = client.1;
        let server = start("server", server)?;
        let client = start("client", client)?;
        Ok(Pair::on_loopback(local(outbound), vec![client, server]))
    }
}

fn envoy_pair(ctx: &PairContext<'_>, plane: Plane, mode: ProxyMode) -> Result<Pair, Error> {
    let pki = ctx.pki;
    let (inbound, outbound) = (free_port()?, free_port()?);
    let (ca, server_cert, server_key, client_cert, client_key) = (
        pki.file("ca.pem"),
        pki.file("server.pem"),
        pki.file("server.key"),
        pki.file("client.pem"),
        pki.file("client.key"),
    );
    let server = configs::envoy_inbound(
        local(inbound),
        ctx.app,
        &configs::EnvoyTls {
            cert: &server_cert,
            key: &server_key,
            ca: &ca,
            peer_id: &Pki::id("client"),
        },
        mode,
    );
    let client = configs::envoy_outbound(
        local(outbound),
        local(inbound),
        &configs::EnvoyTls {
            cert: &client_cert,
            key: &client_key,
            ca: &ca,
            peer_id: &Pki::id("server"),
        },
        mode,
    );
    let envoy = ThirdParty {
        program: &ctx.tools.envoy,
        args: configs::envoy_args,
        config_extension: "yaml",
    };
    envoy.start_pair(ctx, plane, [(server, inbound), (client, outbound)])
}
