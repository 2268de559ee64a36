//! The `linkerd2-proxy` plane: two linkerd2-proxy processes as Linkerd runs them beside two
//! pods, the client's outbound proxy and the server's inbound proxy, with mTLS between them
//! and Linkerd's own HTTP/1-to-HTTP/2 upgrade between the proxies, in front of the echo app.
//!
//! - **Built from its pinned source** by `scripts/linkerd-build` (the build the test cluster
//!   runs), found on PATH or in that script's cache.
//! - **A control-plane harness** (`meshbench harness linkerd`) answers what the proxy
//!   requires: Certify signed by meshbench's CA (each proxy's own key and CSR, its token),
//!   the outbound policy Linkerd's policy controller gives a Service (a balancer fed by
//!   `Destination.Get`, whose endpoint carries the server proxy's identity and the HTTP/2
//!   hint), and an inbound policy admitting the certified workloads over mesh TLS.
//! - **Its own network namespace**, with the two pods' addresses (10.200.0.1 and .2) on its
//!   loopback device: the proxy never connects out to a 127/8 address, and both its listeners read `SO_ORIGINAL_DST`, so
//!   traffic reaches it by iptables REDIRECT, loops avoided by the proxies' uids, as
//!   `linkerd2-proxy-init` writes the rules (outbound into 4140; here inbound into the
//!   server proxy's port by the client proxy's uid, since both pods share one namespace).
//!   The echo app, the harness and the load generator run there too.
//! - **Upstream defaults** apart from one core (`LINKERD2_PROXY_CORES=1`, as every plane has
//!   one worker) and the settings Linkerd's chart gives every proxy (log level, detect
//!   timeouts, keepalives, cluster networks).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use meshbench_identity::write_secret;
use meshbench_linkerd_harness::{linkerd_name, LinkerdHarnessFile, ServiceFile, WorkloadFile};
use meshbench_netlab::ScratchNetns;
use meshbench_role::RoleConfig;

use super::pair::{http_get_in, io, log_appending, token, wait_http_ok, Pair, PairContext, Pki};
use crate::process::{command_in, start_echo_on, Daemon};
use crate::Error;

/// The Linkerd release `scripts/linkerd-build` builds (linkerd2-proxy v2.366.0).
pub(crate) const LINKERD_VERSION: &str = "edge-26.8.3";
pub(crate) const LINKERD_INSTALL: &str = "build it from its pinned source with `./scripts/linkerd-build` (about 50 minutes the first time)";

/// The plane's files (configurations, logs, the proxies' metrics) under the bench's raw
/// directory.
const PLANE_DIR: &str = "linkerd2-proxy";
const CLIENT_POD: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
const SERVER_POD: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// The server's Service, as its name resolves in a cluster.
const SERVICE_NAME: &str = "server.bench.svc.cluster.local";
/// The chart's `clusterNetworks`: the addresses the proxies look up policy for.
const CLUSTER_NETWORKS: &str = "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8";
/// The chart's `proxy.logLevel`.
const LOG_LEVEL: &str = "warn,linkerd=info,hickory=error";

/// One of the pair's proxies: its workload, its uid (the capture tells the proxies apart by
/// it) and its ports (both share the namespace, so each has its own).
struct Side {
    workload: &'static str,
    uid: u32,
    outbound: u16,
    inbound: u16,
    admin: u16,
    control: u16,
}

const CLIENT: Side = Side {
    workload: "client",
    uid: 2102,
    outbound: 4140,
    inbound: 4143,
    admin: 4191,
    control: 4190,
};
const SERVER: Side = Side {
    workload: "server",
    uid: 2103,
    outbound: 5140,
    inbound: 5143,
    admin: 5191,
    control: 5190,
};

/// linkerd2-proxy: on PATH, or where `scripts/linkerd-build` caches it.
pub(crate) fn find_linkerd2_proxy() -> Option<PathBuf> {
    meshbench_netlab::which("linkerd2-proxy").or_else(|| {
        let cache = std::env::var_os("MESHBENCH_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/meshbench")))?;
        let path = cache.join(format!("linkerd/{LINKERD_VERSION}/bin/linkerd2-proxy"));
        path.is_file().then_some(path)
    })
}

/// The proxy's version from the first line it logs (`... linkerd2_proxy: release 2.366.0
/// (...) by ...`): `2.366.0`; the line as it is where it has another shape.
pub(crate) fn short_version(line: &str) -> String {
    line.split_once("release ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map_or_else(|| line.to_owned(), |v| format!("v{v}"))
}

/// A proxy's identity documents, as Linkerd's `proxy-identity` writes them: a fresh P-256 key
/// (`key.p8`, PKCS#8 DER) and a CSR for its name (`csr.der`), and its token; all owned by
/// the proxy's uid and readable by it alone.
fn identity_documents(dir: &Path, side: &Side, token: &str) -> Result<(), Error> {
    let name = local_name(side)?;
    let (key, csr) = meshbench_identity::linkerd_key_and_csr(&name)
        .map_err(|e| Error::Target(format!("{}'s key and CSR: {e}", side.workload)))?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let secret = |name: &str, bytes: &[u8]| -> Result<(), Error> {
        let path = dir.join(name);
        write_secret(&path, bytes).map_err(|e| Error::Target(e.to_string()))?;
        std::os::unix::fs::chown(&path, Some(side.uid), Some(side.uid)).map_err(io(&path))
    };
    secret("key.p8", &key)?;
    secret("csr.der", &csr)?;
    secret("token", token.as_bytes())?;
    std::os::unix::fs::chown(dir, Some(side.uid), Some(side.uid)).map_err(io(dir))
}

/// A side's Linkerd identity (`<sa>.bench.serviceaccount.identity.linkerd.cluster.local`).
fn local_name(side: &Side) -> Result<String, Error> {
    meshbench_identity::SpiffeId::parse(&Pki::id(side.workload))
        .ok()
        .as_ref()
        .and_then(linkerd_name)
        .ok_or_else(|| Error::Target(format!("{} has no Linkerd name", side.workload)))
}

/// The proxy's environment: the chart's settings for every proxy, this side's ports and
/// identity, the harness for identity, policy and destination.
fn proxy_env(
    side: &Side,
    dir: &Path,
    harness: SocketAddr,
    anchors: &str,
) -> Result<Vec<(String, String)>, Error> {
    let name = local_name(side)?;
    let harness = harness.to_string();
    let local = |port: u16| format!("127.0.0.1:{port}");
    [
        ("LINKERD2_PROXY_CORES", "1".to_owned()),
        ("LINKERD2_PROXY_LOG", LOG_LEVEL.to_owned()),
        ("LINKERD2_PROXY_LOG_FORMAT", "plain".to_owned()),
        ("LINKERD2_PROXY_DESTINATION_SVC_ADDR", harness.clone()),
        ("LINKERD2_PROXY_POLICY_SVC_ADDR", harness.clone()),
        (
            "LINKERD2_PROXY_POLICY_WORKLOAD",
            format!(r#"{{"ns":"bench","pod":"{}"}}"#, side.workload),
        ),
        (
            "LINKERD2_PROXY_INBOUND_DEFAULT_POLICY",
            "all-unauthenticated".to_owned(),
        ),
        (
            "LINKERD2_PROXY_POLICY_CLUSTER_NETWORKS",
            CLUSTER_NETWORKS.to_owned(),
        ),
        ("LINKERD2_PROXY_OUTBOUND_DETECT_TIMEOUT", "365d".to_owned()),
        ("LINKERD2_PROXY_INBOUND_DETECT_TIMEOUT", "365d".to_owned()),
        ("LINKERD2_PROXY_CONTROL_LISTEN_ADDR", local(side.control)),
        ("LINKERD2_PROXY_ADMIN_LISTEN_ADDR", local(side.admin)),
        ("LINKERD2_PROXY_OUTBOUND_LISTEN_ADDR", local(side.outbound)),
        ("LINKERD2_PROXY_OUTBOUND_LISTEN_ADDRS", local(side.outbound)),
        (
            "LINKERD2_PROXY_INBOUND_LISTEN_ADDR",
            format!("0.0.0.0:{}", side.inbound),
        ),
        (
            "LINKERD2_PROXY_INBOUND_ACCEPT_KEEPALIVE",
            "10000ms".to_owned(),
        ),
        (
            "LINKERD2_PROXY_OUTBOUND_CONNECT_KEEPALIVE",
            "10000ms".to_owned(),
        ),
        (
            "LINKERD2_PROXY_INBOUND_ACCEPT_USER_TIMEOUT",
            "30s".to_owned(),
        ),
        (
            "LINKERD2_PROXY_OUTBOUND_CONNECT_USER_TIMEOUT",
            "30s".to_owned(),
        ),
        ("LINKERD2_PROXY_IDENTITY_DIR", dir.display().to_string()),
        ("LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS", anchors.to_owned()),
        (
            "LINKERD2_PROXY_IDENTITY_TOKEN_FILE",
            dir.join("token").display().to_string(),
        ),
        ("LINKERD2_PROXY_IDENTITY_SVC_ADDR", harness),
        ("LINKERD2_PROXY_IDENTITY_LOCAL_NAME", name),
    ]
    .into_iter()
    .map(|(k, v)| Ok((k.to_owned(), v)))
    .collect()
}

/// The capture: the app's connections to the server's address go into the client proxy's
/// outbound port; the client proxy's (by its uid) into the server proxy's inbound port; the
/// server proxy's pass to the app.
fn capture(ns: &ScratchNetns, app: SocketAddr) -> Result<(), Error> {
    let (ip, port) = (app.ip().to_string(), app.port().to_string());
    let rule = |owner: Option<u32>, target: &[&str]| -> Result<(), Error> {
        let mut args = vec![
            "-w", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", &ip, "--dport", &port,
        ];
        let uid = owner.map(|u| u.to_string());
        if let Some(uid) = &uid {
            args.extend(["-m", "owner", "--uid-owner", uid]);
        }
        args.extend(target);
        ns.run("iptables", &args).map(drop).map_err(Error::Netns)
    };
    let to = |port: u16| port.to_string();
    rule(Some(SERVER.uid), &["-j", "RETURN"])?;
    rule(
        Some(CLIENT.uid),
        &["-j", "REDIRECT", "--to-ports", &to(SERVER.inbound)],
    )?;
    rule(
        None,
        &["-j", "REDIRECT", "--to-ports", &to(CLIENT.outbound)],
    )
}

pub(crate) fn linkerd_pair(ctx: &PairContext<'_>) -> Result<Pair, Error> {
    let ns = ScratchNetns::create("linkerd").map_err(Error::Netns)?;
    for pod in [CLIENT_POD, SERVER_POD] {
        ns.run("ip", &["addr", "add", &format!("{pod}/32"), "dev", "lo"])
            .map_err(Error::Netns)?;
    }
    let dir = ctx.work_dir.join(PLANE_DIR);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let (app, app_addr) = start_echo_on(
        &ctx.tools.meshbench,
        ctx.cpu,
        ctx.response_bytes,
        &dir.join("app.log"),
        Some(&ns),
        SocketAddr::new(IpAddr::V4(SERVER_POD), 0),
    )?;

    // The proxies' documents live where their uids can reach them: a directory of their own
    // under the system's temporary directory (the bench's work directory may be private).
    let private = tempfile::Builder::new()
        .prefix("meshbench-linkerd2-proxy-")
        .tempdir()
        .map_err(io(Path::new("/tmp")))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o711))
        .map_err(io(private.path()))?;
    let mut workloads = Vec::new();
    for side in [&CLIENT, &SERVER] {
        let token = token()?;
        identity_documents(&private.path().join(side.workload), side, &token)?;
        let token_file = dir.join(format!("{}.token", side.workload));
        write_secret(&token_file, token.as_bytes()).map_err(|e| Error::Target(e.to_string()))?;
        workloads.push(WorkloadFile {
            identity: Pki::id(side.workload),
            token_file,
        });
    }

    let harness_file = LinkerdHarnessFile {
        dir: ctx.pki.dir.clone(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ttl: meshbench_identity::DEFAULT_SVID_TTL,
        workloads,
        services: vec![ServiceFile {
            address: app_addr,
            name: SERVICE_NAME.into(),
            endpoint: app_addr,
            identity: Pki::id(SERVER.workload),
        }],
    };
    let config = dir.join("harness.yaml");
    std::fs::write(&config, harness_file.to_yaml()).map_err(io(&config))?;
    let mut command = command_in(
        Some(&ns),
        &ctx.tools.meshbench,
        LinkerdHarnessFile::command_line(&config),
    );
    command.stdout(Stdio::piped());
    let mut harness = Daemon::spawn(&mut command, ctx.cpu, "harness", &dir.join("harness.log"))?;
    let harness_addr: SocketAddr = harness
        .ready_line()?
        .get("addr")
        .and_then(|a| a.as_str()?.parse().ok())
        .ok_or_else(|| Error::Target("linkerd harness: no address in its ready line".into()))?;

    capture(&ns, app_addr)?;
    let anchors = std::fs::read_to_string(ctx.pki.file("ca.pem")).map_err(io(&ctx.pki.dir))?;
    let mut proxies = Vec::new();
    for side in [&SERVER, &CLIENT] {
        let setpriv = vec![
            format!("--reuid={}", side.uid),
            format!("--regid={}", side.uid),
            "--clear-groups".to_owned(),
            "--".to_owned(),
            ctx.tools.linkerd2_proxy.display().to_string(),
        ];
        let mut command = command_in(Some(&ns), Path::new("setpriv"), setpriv);
        let identity_dir = private.path().join(side.workload);
        command
            .env_clear()
            .envs(proxy_env(side, &identity_dir, harness_addr, &anchors)?)
            .stdout(log_appending(
                &dir.join(format!("{}.stdout.log", side.workload)),
            )?);
        let name = format!("linkerd2-proxy-{}", side.workload);
        let mut proxy = Daemon::spawn(
            &mut command,
            ctx.cpu,
            &name,
            &dir.join(format!("{name}.log")),
        )?;
        let admin = SocketAddr::from(([127, 0, 0, 1], side.admin));
        wait_http_ok(&ns, admin, "/ready", &mut proxy)?;
        proxies.push(proxy);
    }
    proxies.reverse();
    Ok(Pair {
        entry: app_addr,
        proxies,
        _support: vec![harness, app],
        netns: Some(ns),
        _files: Some(private),
    })
}

/// The proof the pair's traffic was mesh TLS with the expected identities, from both
/// proxies' own metrics: the server proxy's inbound connections accepted over TLS from the
/// client's identity and none without TLS, the client proxy's outbound connections to the
/// server's identity. Both pages are kept in the plane's directory (`client.metrics.txt`,
/// `server.metrics.txt`). A line for the report, or an error saying what was missing.
pub(crate) fn mtls_evidence(
    pair: &Pair,
    work_dir: &Path,
    client_connections: u32,
) -> Result<String, Error> {
    let ns = pair
        .netns
        .as_ref()
        .ok_or_else(|| Error::Target("linkerd2-proxy: no namespace".into()))?;
    let metrics = |side: &Side| -> Result<String, Error> {
        match http_get_in(
            ns,
            SocketAddr::from(([127, 0, 0, 1], side.admin)),
            "/metrics",
        )? {
            Some((200, body)) => Ok(body),
            other => Err(Error::Target(format!(
                "linkerd2-proxy-{}: /metrics answered {other:?}",
                side.workload
            ))),
        }
    };
    let (server, client) = (metrics(&SERVER)?, metrics(&CLIENT)?);
    for (side, page) in [(&SERVER, &server), (&CLIENT, &client)] {
        let path = work_dir
            .join(PLANE_DIR)
            .join(format!("{}.metrics.txt", side.workload));
        std::fs::write(&path, page).map_err(io(&path))?;
    }
    let (client_id, server_id) = (local_name(&CLIENT)?, local_name(&SERVER)?);
    let app_port = format!(r#"target_port="{}""#, pair.entry.port());
    let inbound = |labels: &[&str]| -> u64 {
        let mut all = vec![r#"direction="inbound""#, app_port.as_str()];
        all.extend(labels);
        sum_of(&server, "tcp_open_total", &all)
    };
    let client_label = format!(r#"client_id="{client_id}""#);
    let from_client = inbound(&[r#"tls="true""#, &client_label]);
    let all_inbound = inbound(&[]);
    let denied = sum_of(&server, "inbound_http_authz_deny_total", &[&app_port])
        + sum_of(&server, "inbound_tcp_authz_deny_total", &[&app_port]);
    let allowed = sum_of(
        &server,
        "inbound_http_authz_allow_total",
        &[&app_port, &client_label],
    );
    let to_server = sum_of(
        &client,
        "tcp_open_total",
        &[
            r#"direction="outbound""#,
            r#"tls="true""#,
            &format!(r#"server_id="{server_id}""#),
        ],
    );
    if from_client == 0 || from_client != all_inbound || to_server == 0 || denied > 0 {
        return Err(Error::Target(format!(
            "linkerd2-proxy: the pair's traffic was not all mesh TLS between the expected identities: the server proxy counts {all_inbound} inbound connections to the app's port, {from_client} of them over TLS from {client_id}, {denied} requests denied; the client proxy {to_server} connections over TLS to {server_id}"
        )));
    }
    // Fewer connections between the proxies than the generator opened: their requests were
    // multiplexed, which only HTTP/2 does (Linkerd upgrades HTTP/1 between its proxies).
    let shared = if to_server < u64::from(client_connections) {
        format!(" (the latency case's {client_connections} client connections shared them: HTTP/2 between the proxies)")
    } else {
        String::new()
    };
    Ok(format!(
        "linkerd2-proxy: mesh TLS between the proxies, from their own metrics: the server proxy took {from_client} connection(s) to the app's port, all over TLS from {client_id}, and authorized {allowed} requests on them ({denied} denied); the client proxy opened {to_server} over TLS to {server_id}{shared}"
    ))
}

/// The sum of a Prometheus counter's samples whose labels contain all of `labels`.
fn sum_of(text: &str, metric: &str, labels: &[&str]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with('{'))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_s_release_is_read_from_its_first_log_line() {
        let line = "[     0.000945s]  INFO ThreadId(01) linkerd2_proxy: release 2.366.0 () by meshbench on 2026-11-28T20:34:19Z";
        assert_eq!(short_version(line), "v2.366.0");
        assert_eq!(short_version("unknown"), "unknown");
    }

    #[test]
    fn counters_are_summed_over_the_samples_with_every_label() {
        let text = "tcp_open_total{direction=\"inbound\",tls=\"true\",client_id=\"a\"} 3\n\
                    tcp_open_total{direction=\"inbound\",tls=\"true\",client_id=\"b\"} 4\n\
                    tcp_open_total{direction=\"outbound\",tls=\"true\",client_id=\"a\"} 5\n\
                    tcp_open_totals{direction=\"inbound\",client_id=\"a\"} 9\n";
        assert_eq!(
            sum_of(text, "tcp_open_total", &[r#"direction="inbound""#]),
            7
        );
        assert_eq!(
            sum_of(
                text,
                "tcp_open_total",
                &[r#"direction="inbound""#, r#"client_id="a""#]
            ),
            3
        );
    }
}
