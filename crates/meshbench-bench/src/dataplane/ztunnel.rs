//! The `ztunnel-loop` plane: Istio's ztunnel as released (the build the test cluster runs),
//! measured as ztunnel measures itself and as `node-agent-loop` is: one ztunnel, one worker
//! thread, the client's connections to the app taken into its outbound port, tunneled over
//! HBONE (HTTP/2 CONNECT over mTLS) into its own port 15008 and handed on to the echo app.
//!
//! - **Dedicated mode** (`PROXY_MODE=dedicated`), ztunnel's mode for one workload outside a
//!   cluster: a local configuration (`LOCAL_XDS_PATH`) names the workload, no istiod. Source
//!   and destination are that one workload, so one SVID serves both ends.
//! - **Its own network namespace**, as in a pod: its ports are fixed, and its capture is the
//!   iptables REDIRECT ztunnel's own scripts install (connections to the app's port, except
//!   ztunnel's own, marked 0x539, go to 15001). The echo app and the load generator run there
//!   too, on that namespace's loopback.
//! - **Its SVID from meshbench's CA answering Istio's certificate API** (`meshbench ca
//!   istio`), authenticated by a bearer token, as ztunnel gets it from istiod: no test-only
//!   build, no fake CA.
//!
//! Everything else stays at ztunnel's defaults, as the issue asks: never handicapped.

use std::net::SocketAddr;
use std::process::Stdio;

use meshbench_identity::{IstioCaCallerFile, IstioCaFile};
use meshbench_netlab::ScratchNetns;
use meshbench_role::RoleConfig;

use super::pair::{io, log_appending, token, wait_http_ok, Pair, PairContext, Pki, NAMESPACE};
use crate::process::{command_in, start_echo, Daemon};
use crate::Error;

/// The mark ztunnel puts on its own sockets (its in-pod default, 1337), which the capture
/// lets pass.
const ZTUNNEL_MARK: &str = "0x539/0xfff";
const OUTBOUND_PORT: u16 = 15001;
const READINESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 15021);
/// The one workload ztunnel proxies for: the server's identity.
const WORKLOAD: &str = "server";

/// ztunnel's version for the report, from the first line `ztunnel version` prints
/// (`version.BuildInfo{Version:"<commit>", ..., BuildProfile:"release", ...,
/// CryptoProvider:"tls-aws-lc"}`): `<commit, 12> (release, tls-aws-lc)`; the line as it is
/// where it has another shape.
pub(crate) fn short_version(line: &str) -> String {
    let field = |name: &str| {
        let start = line.find(&format!("{name}:\""))? + name.len() + 2;
        let len = line[start..].find('"')?;
        Some(&line[start..start + len])
    };
    match (
        field("Version"),
        field("BuildProfile"),
        field("CryptoProvider"),
    ) {
        (Some(version), Some(profile), Some(crypto)) => {
            let short = version.get(..12).unwrap_or(version);
            format!("{short} ({profile}, {crypto})")
        }
        _ => line.to_owned(),
    }
}

/// ztunnel's local configuration: the one workload, on the namespace's loopback, reached over
/// HBONE.
fn local_config() -> String {
    format!(
        "workloads:\n\
         - uid: Kubernetes//Pod/{NAMESPACE}/{WORKLOAD}\n  \
           name: {WORKLOAD}\n  \
           namespace: {NAMESPACE}\n  \
           serviceAccount: {WORKLOAD}\n  \
           trustDomain: cluster.local\n  \
           workloadIps: [\"127.0.0.1\"]\n  \
           protocol: HBONE\n  \
           node: bench\n  \
           network: \"\"\n  \
           services: {{}}\n\
         policies: []\n\
         services: []\n"
    )
}

pub(crate) fn ztunnel_loop(ctx: &PairContext<'_>) -> Result<Pair, Error> {
    let ns = ScratchNetns::create("ztunnel").map_err(Error::Netns)?;
    let pki = ctx.pki;
    let dir = ctx.work_dir.join("ztunnel-loop");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;

    // The echo app, in the namespace, on the proxies' CPU like the shared one.
    let (app, app_addr) = start_echo(
        &ctx.tools.meshbench,
        ctx.cpu,
        ctx.response_bytes,
        &dir.join("app.log"),
        Some(&ns),
    )?;

    // The CA, answering Istio's certificate API for the workload's token only.
    let token_file = dir.join("server.token");
    meshbench_identity::write_secret(&token_file, token()?.as_bytes())
        .map_err(|e| Error::Target(format!("ztunnel's token: {e}")))?;
    let ca_file = IstioCaFile {
        dir: pki.dir.clone(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ttl: meshbench_identity::DEFAULT_SVID_TTL,
        handshake_timeout: meshbench_identity::CA_HANDSHAKE_TIMEOUT,
        callers: vec![IstioCaCallerFile {
            identity: Pki::id(WORKLOAD),
            token_file: token_file.clone(),
        }],
        dns_names: vec![],
        ip_addresses: vec![std::net::Ipv4Addr::LOCALHOST.into()],
    };
    let ca_config = dir.join("istio-ca.yaml");
    std::fs::write(&ca_config, ca_file.to_yaml()).map_err(io(&ca_config))?;
    let mut command = command_in(
        Some(&ns),
        &ctx.tools.meshbench,
        IstioCaFile::command_line(&ca_config),
    );
    command.stdout(Stdio::piped());
    let mut ca = Daemon::spawn(&mut command, ctx.cpu, "istio-ca", &dir.join("istio-ca.log"))?;
    let ca_addr: SocketAddr = ca
        .ready_line()?
        .get("addr")
        .and_then(|a| a.as_str()?.parse().ok())
        .ok_or_else(|| Error::Target("istio-ca: no address in its ready line".into()))?;

    // The capture ztunnel's own scripts install, for the app's port only.
    let port = app_addr.port().to_string();
    ns.run(
        "iptables",
        &[
            "-w",
            "-t",
            "nat",
            "-A",
            "OUTPUT",
            "-p",
            "tcp",
            "-d",
            "127.0.0.1",
            "--dport",
            &port,
            "-m",
            "mark",
            "!",
            "--mark",
            ZTUNNEL_MARK,
            "-j",
            "REDIRECT",
            "--to-ports",
            &OUTBOUND_PORT.to_string(),
        ],
    )
    .map_err(Error::Netns)?;

    let config = dir.join("local.yaml");
    std::fs::write(&config, local_config()).map_err(io(&config))?;
    let mut command = command_in(Some(&ns), &ctx.tools.ztunnel, vec![]);
    command
        .env("PROXY_MODE", "dedicated")
        .env(
            "PROXY_WORKLOAD_INFO",
            format!("{NAMESPACE}/{WORKLOAD}/{WORKLOAD}"),
        )
        .env("XDS_ADDRESS", "")
        .env("LOCAL_XDS_PATH", &config)
        .env("CA_ADDRESS", format!("https://{ca_addr}"))
        .env("CA_ROOT_CA", pki.file("ca.pem"))
        .env("AUTH_TOKEN", &token_file)
        .env("PACKET_MARK", "1337")
        .env("ZTUNNEL_WORKER_THREADS", "1")
        .stdout(log_appending(&dir.join("ztunnel.stdout.log"))?);
    let mut ztunnel = Daemon::spawn(&mut command, ctx.cpu, "ztunnel", &dir.join("ztunnel.log"))?;
    wait_http_ok(&ns, READINESS, "/healthz/ready", &mut ztunnel)?;
    Ok(Pair {
        entry: app_addr,
        proxies: vec![ztunnel],
        _support: vec![ca, app],
        netns: Some(ns),
        _files: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ztunnel_s_build_info_is_shortened_and_anything_else_kept() {
        let line = r#"version.BuildInfo{Version:"62d826530e5ce85764e309170205b293efcbc80b", GitRevision:"unknown", RustVersion:"1.95.0", BuildProfile:"release", BuildStatus:"Clean", IstioVersion:"unknown", CryptoProvider:"tls-aws-lc"}"#;
        assert_eq!(short_version(line), "62d826530e5c (release, tls-aws-lc)");
        assert_eq!(short_version("unknown"), "unknown");
        assert_eq!(short_version(r#"Version:"ab""#), r#"Version:"ab""#);
    }
}
