//! `meshbench proxy sidecar|node-agent`: the reference data plane as lab components.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use meshbench_dataplane::{
    bind_admin, run_node_agent, run_sidecar, serve_admin, IdentityFiles, InboundListener, Limits,
    MeshedDestination, Mode as SidecarMode, NodeAgentConfig, NodeAgentFile, ProxyMetrics,
    SidecarFile, SidecarOutbound, TlsChoice, TransparentListener,
};
use meshbench_identity::{
    rotate_forever, CaClient, CertAgentFile, CipherSuite, KeyExchange, PublishedSvid, SpiffeId,
    SvidStore, TlsOptions, DEFAULT_ROTATE_FRACTION,
};
use meshbench_lab::ReadyEvent;
use meshbench_policy::Policy;
use meshbench_role::RoleConfig;

use super::BadInput;

#[derive(Debug, Subcommand)]
pub enum ProxyCommand {
    /// A sidecar in front of one workload: inbound mTLS + policy, outbound mTLS.
    Sidecar(Box<SidecarArgs>),
    /// A per-node agent (ztunnel-like) serving every workload of its node: HBONE tunnels
    /// (HTTP/2 CONNECT over pooled mTLS) between nodes, L4 policy.
    NodeAgent(NodeAgentArgs),
    /// A certificate agent beside a proxy that reads its SVID from files (Envoy), as
    /// istio-agent is: renews the SVID through the CA service and publishes each version
    /// into a directory, swapped atomically for Envoy's `watched_directory`.
    CertAgent(CertAgentArgs),
    /// A node agent's capture on a cluster node (run in a pod on the node's network): installs
    /// the rules that send the node's enrolled pods' connections to the agent, and takes them
    /// out again when stopped.
    NodeCapture(NodeCaptureArgs),
}

#[derive(Debug, Args)]
pub struct NodeCaptureArgs {
    /// The capture (YAML, `NodeCaptureFile`).
    #[arg(long)]
    config: PathBuf,
    /// Only check that the capture is installed (exit 0) or not (exit 1): a readiness probe.
    #[arg(long)]
    check: bool,
}

#[derive(Debug, Args)]
pub struct CertAgentArgs {
    /// The whole configuration as a file (YAML, `CertAgentFile`); no other flag then.
    #[arg(long, conflicts_with_all = ["cert", "key", "ca", "ca_endpoint", "rotate_at", "dir"])]
    config: Option<PathBuf>,
    /// The workload's current SVID (leaf first).
    #[arg(long, required_unless_present = "config")]
    cert: Option<PathBuf>,
    #[arg(long, required_unless_present = "config")]
    key: Option<PathBuf>,
    /// Trust bundle of the CA service.
    #[arg(long, required_unless_present = "config")]
    ca: Option<PathBuf>,
    /// The CA service that renews the SVID.
    #[arg(long, required_unless_present = "config")]
    ca_endpoint: Option<SocketAddr>,
    /// Renew when this fraction of the SVID's remaining lifetime has passed.
    #[arg(long, default_value_t = DEFAULT_ROTATE_FRACTION)]
    rotate_at: f64,
    /// Where to publish `cert.pem` and `key.pem` (links through `..data`).
    #[arg(long, required_unless_present = "config")]
    dir: Option<PathBuf>,
    /// Only check that the SVID is published in the directory (exit 0) or not yet (exit 1):
    /// the startup probe that holds the proxy reading it back until it is there.
    #[arg(long)]
    check: bool,
}

impl CertAgentArgs {
    /// The configuration, from the file or from the flags (clap requires every flag the
    /// file would have set).
    fn into_file(self) -> anyhow::Result<CertAgentFile> {
        if let Some(path) = &self.config {
            return Ok(CertAgentFile::load(path)?);
        }
        let missing = || BadInput("--cert, --key, --ca, --ca-endpoint and --dir".into());
        let file = CertAgentFile {
            cert: self.cert.ok_or_else(missing)?,
            key: self.key.ok_or_else(missing)?,
            ca: self.ca.ok_or_else(missing)?,
            ca_endpoint: self.ca_endpoint.ok_or_else(missing)?,
            rotate_at: self.rotate_at,
            dir: self.dir.ok_or_else(missing)?,
        };
        file.validate().map_err(|_| {
            BadInput(format!(
                "--rotate-at: {} is not a fraction between 0 and 1",
                self.rotate_at
            ))
        })?;
        Ok(file)
    }
}

#[derive(Debug, Args)]
pub struct NodeAgentArgs {
    /// The agent's configuration (YAML): workloads, destinations, outbound listeners.
    #[arg(long)]
    config: PathBuf,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    process: ProcessArgs,
}

/// What both proxies' processes take besides their data plane: metrics and threads.
#[derive(Debug, Args)]
struct ProcessArgs {
    /// Serve Prometheus metrics on this address (GET /metrics).
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Record no metrics at all (part of E1's throughput decomposition).
    #[arg(long, conflicts_with = "admin")]
    no_metrics: bool,
    /// Write the metrics (Prometheus text) to this file when stopping: how the lab's runner
    /// reads a proxy's handshake times without reaching into its network namespace.
    #[arg(long)]
    metrics_file: Option<PathBuf>,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

/// Every listener's timeouts and caps (SECURITY.md lists them; the defaults are
/// `meshbench_dataplane::Limits::default()`).
#[derive(Debug, Args)]
struct LimitArgs {
    /// From accept to a finished TLS handshake (and protocol detection).
    #[arg(long, value_parser = super::args::positive_duration, default_value = "10s")]
    handshake_timeout: Duration,
    /// From the first byte of an HTTP/1.1 request head to its end (L7).
    #[arg(long, value_parser = super::args::positive_duration, default_value = "10s")]
    header_read_timeout: Duration,
    /// A connection that moves no byte for this long is closed.
    #[arg(long, value_parser = super::args::positive_duration, default_value = "300s")]
    idle_timeout: Duration,
    /// Connecting to an upstream, TLS handshake included.
    #[arg(long, value_parser = super::args::positive_duration, default_value = "10s")]
    connect_timeout: Duration,
    /// Connections served at once per listener; more wait in the accept queue.
    #[arg(long, value_parser = super::args::at_least_one, default_value = "10000")]
    max_connections: usize,
    /// Connections open at once to one upstream (node agent: tunnels into one local app, over
    /// all peers); past it a request or tunnel gets a 503.
    #[arg(long, value_parser = super::args::at_least_one, default_value = "1024")]
    max_upstream_connections: usize,
    /// Concurrent HTTP/2 streams per L7 downstream connection.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), default_value = "100")]
    max_streams_per_connection: u32,
    /// Concurrent HBONE tunnels per connection between node agents.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), default_value = "1000")]
    max_tunnels_per_connection: u32,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            handshake_timeout: self.handshake_timeout,
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            connect_timeout: self.connect_timeout,
            max_connections: self.max_connections,
            max_upstream_connections: self.max_upstream_connections,
            max_streams_per_connection: self.max_streams_per_connection,
            max_tunnels_per_connection: self.max_tunnels_per_connection,
        }
    }
}

#[derive(Debug, Args)]
struct TlsArgs {
    /// TLS 1.3 cipher suites to offer, in order: aes128gcm, aes256gcm, chacha20poly1305.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "aes256gcm,aes128gcm,chacha20poly1305"
    )]
    cipher_suites: Vec<CipherSuite>,
    /// Key exchange groups to offer, in order: x25519, x25519mlkem768.
    #[arg(long, value_delimiter = ',', default_value = "x25519")]
    key_exchange: Vec<KeyExchange>,
}

impl TlsArgs {
    fn choice(&self) -> TlsChoice {
        TlsChoice {
            cipher_suites: self
                .cipher_suites
                .iter()
                .map(|c| c.name().to_owned())
                .collect(),
            key_exchange: self
                .key_exchange
                .iter()
                .map(|k| k.name().to_owned())
                .collect(),
        }
    }

    fn options(self) -> TlsOptions {
        TlsOptions {
            cipher_suites: self.cipher_suites,
            key_exchange: self.key_exchange,
        }
    }
}

/// The sidecar's flags, for people; the lab and the bench write the same settings as a
/// file (`--config`, `meshbench_dataplane::SidecarFile`), and these flags are turned into
/// that file's struct before anything starts.
#[derive(Debug, Args)]
pub struct SidecarArgs {
    /// The whole configuration as a file (YAML, `SidecarFile`); no other flag then.
    #[arg(long, conflicts_with_all = [
        "namespace", "workload", "cert", "key", "ca", "ca_endpoint", "no_mtls", "mode",
        "policy", "inbound", "inbound_transparent", "outbound", "transparent_outbound",
        "destination", "admin", "no_metrics", "metrics_file", "threads",
    ])]
    config: Option<PathBuf>,
    /// Namespace of the workload the sidecar belongs to.
    #[arg(long, required_unless_present = "config")]
    namespace: Option<String>,
    /// The workload the sidecar belongs to (policy selectors use it).
    #[arg(long, required_unless_present = "config")]
    workload: Option<String>,
    /// The workload's SVID (PEM).
    #[arg(long, requires_all = ["key", "ca"])]
    cert: Option<PathBuf>,
    #[arg(long)]
    key: Option<PathBuf>,
    /// Trust bundle for peers.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Renew the SVID through this CA service (`meshbench ca serve`).
    #[arg(long, requires = "cert")]
    ca_endpoint: Option<SocketAddr>,
    /// Renew when this fraction of the SVID's remaining lifetime has passed.
    #[arg(long, value_parser = super::args::fraction, default_value_t = DEFAULT_ROTATE_FRACTION)]
    rotate_at: f64,
    /// Plaintext between sidecars (for measuring what mTLS itself costs).
    #[arg(long)]
    no_mtls: bool,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    limits: LimitArgs,
    /// l4: splice bytes, authorize by identity; l7: parse HTTP, authorize every request.
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Policy file (YAML); without one, PERMISSIVE and allow-all.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Inbound listener and the app behind it: LISTEN=APP, e.g. 127.0.0.1:15006=127.0.0.1:8080.
    #[arg(long, value_parser = parse_inbound)]
    inbound: Option<(SocketAddr, SocketAddr)>,
    /// The inbound listener receives connections REDIRECTed by iptables and forwards each to
    /// the app's address at the port it was originally sent to (L4).
    #[arg(long, requires = "inbound")]
    inbound_transparent: bool,
    /// Outbound route: LISTEN=UPSTREAM or LISTEN=UPSTREAM#SPIFFE_ID (repeatable).
    #[arg(long, value_parser = parse_outbound)]
    outbound: Vec<(SocketAddr, SocketAddr, Option<SpiffeId>)>,
    /// Listener for the app's connections REDIRECTed by iptables; each is routed by its
    /// original destination (SO_ORIGINAL_DST).
    #[arg(long)]
    transparent_outbound: Option<SocketAddr>,
    /// A meshed destination of the transparent listener: ADDR or ADDR#SPIFFE_ID
    /// (repeatable); other destinations pass through in plaintext.
    #[arg(long, value_parser = parse_destination, requires = "transparent_outbound")]
    destination: Vec<(SocketAddr, Option<SpiffeId>)>,
    #[command(flatten)]
    process: ProcessArgs,
}

impl SidecarArgs {
    /// The flags as the file they stand for.
    fn into_file(self) -> SidecarFile {
        let mut file = SidecarFile::new(
            &self.namespace.unwrap_or_default(),
            &self.workload.unwrap_or_default(),
        );
        let rotate_at = self.rotate_at;
        let ca_endpoint = self.ca_endpoint;
        file.identity = match (self.cert, self.key, self.ca) {
            (Some(cert), Some(key), Some(ca)) => Some(IdentityFiles {
                cert,
                key,
                ca,
                ca_endpoint,
                rotate_at,
            }),
            _ => None,
        };
        file.mtls = !self.no_mtls;
        file.tls = self.tls.choice();
        file.limits = self.limits.limits();
        file.mode = match self.mode.unwrap_or(Mode::L4) {
            Mode::L4 => SidecarMode::L4,
            Mode::L7 => SidecarMode::L7,
        };
        file.policy = self.policy;
        file.inbound = self.inbound.map(|(listen, app)| InboundListener {
            listen,
            app,
            transparent: self.inbound_transparent,
        });
        file.outbound = self
            .outbound
            .into_iter()
            .map(|(listen, upstream, id)| SidecarOutbound {
                listen,
                upstream,
                upstream_id: id.map(|id| id.to_string()),
            })
            .collect();
        file.transparent_outbound = self.transparent_outbound.map(|listen| TransparentListener {
            listen,
            destinations: self
                .destination
                .into_iter()
                .map(|(address, id)| MeshedDestination {
                    address,
                    id: id.map(|id| id.to_string()),
                })
                .collect(),
        });
        file.metrics = !self.process.no_metrics;
        file.admin = self.process.admin;
        file.metrics_file = self.process.metrics_file;
        file.threads = self.process.threads;
        file
    }
}

/// A file's field named as the flag that sets it (`limits.idle_timeout` -> `--idle-timeout`).
fn as_flag(message: &str) -> String {
    match message.split_once(": ") {
        Some((field, problem)) => {
            let last = field.rsplit('.').next().unwrap_or(field);
            format!("--{}: {problem}", last.replace('_', "-"))
        }
        None => message.to_owned(),
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    L4,
    L7,
}

fn parse_inbound(value: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (listen, app) = value
        .split_once('=')
        .ok_or("expected LISTEN=APP, e.g. 127.0.0.1:15006=127.0.0.1:8080")?;
    Ok((
        listen
            .parse()
            .map_err(|e| format!("listen address {listen:?}: {e}"))?,
        app.parse()
            .map_err(|e| format!("app address {app:?}: {e}"))?,
    ))
}

fn parse_destination(value: &str) -> Result<(SocketAddr, Option<SpiffeId>), String> {
    let (addr, id) = match value.split_once('#') {
        Some((addr, id)) => (addr, Some(SpiffeId::parse(id).map_err(|e| e.to_string())?)),
        None => (value, None),
    };
    Ok((
        addr.parse()
            .map_err(|e| format!("destination address {addr:?}: {e}"))?,
        id,
    ))
}

fn parse_outbound(value: &str) -> Result<(SocketAddr, SocketAddr, Option<SpiffeId>), String> {
    let (listen, rest) = value
        .split_once('=')
        .ok_or("expected LISTEN=UPSTREAM[#SPIFFE_ID]")?;
    let (upstream, id) = match rest.split_once('#') {
        Some((upstream, id)) => (
            upstream,
            Some(SpiffeId::parse(id).map_err(|e| e.to_string())?),
        ),
        None => (rest, None),
    };
    Ok((
        listen
            .parse()
            .map_err(|e| format!("listen address {listen:?}: {e}"))?,
        upstream
            .parse()
            .map_err(|e| format!("upstream address {upstream:?}: {e}"))?,
        id,
    ))
}

pub fn run(command: ProxyCommand) -> anyhow::Result<()> {
    match command {
        ProxyCommand::Sidecar(a) => sidecar(*a),
        ProxyCommand::NodeAgent(a) => node_agent(a),
        ProxyCommand::CertAgent(a) => cert_agent(a),
        ProxyCommand::NodeCapture(a) => node_capture(a),
    }
}

fn node_capture(a: NodeCaptureArgs) -> anyhow::Result<()> {
    use meshbench_role::RoleConfig;
    let file = meshbench_netlab::NodeCaptureFile::load(&a.config)
        .map_err(|e| BadInput(format!("--config: {e}")))?;
    if a.check {
        anyhow::ensure!(file.installed(), "the node capture is not installed");
        return Ok(());
    }
    file.install()?;
    println!("{}", serde_json::to_string(&ReadyEvent::ready(None))?);
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    runtime.block_on(super::workload::shutdown_signal());
    file.remove();
    Ok(())
}

fn cert_agent(a: CertAgentArgs) -> anyhow::Result<()> {
    let check = a.check;
    let a = a.into_file()?;
    if check {
        let published = PublishedSvid::new(&a.dir);
        for path in [published.cert_path(), published.key_path()] {
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            anyhow::ensure!(size > 0, "{} is not published yet", path.display());
        }
        return Ok(());
    }
    let store = Arc::new(
        SvidStore::from_files(&a.cert, &a.key).map_err(|e| BadInput(format!("--cert: {e}")))?,
    );
    let published = Arc::new(PublishedSvid::new(&a.dir));
    meshbench_identity::create_private_dir(&a.dir)?;
    published.publish(&store.current_pem())?;
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    runtime.block_on(async move {
        let client = CaClient::new(a.ca_endpoint, store.clone(), &a.ca)?;
        let ready = ReadyEvent::ready(Some(published.cert_path().display().to_string()));
        println!("{}", serde_json::to_string(&ready)?);
        let publisher = published.clone();
        let rotation = rotate_forever(store, client, a.rotate_at, move |store| {
            if let Err(e) = publisher.publish(&store.current_pem()) {
                tracing::error!(error = %e, "cannot publish the renewed SVID");
            }
        });
        tokio::select! {
            () = rotation => {}
            () = super::workload::shutdown_signal() => {}
        }
        Ok(())
    })
}

fn sidecar(a: SidecarArgs) -> anyhow::Result<()> {
    let from_file = a.config.clone();
    let file = match &from_file {
        Some(path) => SidecarFile::load(path).map_err(|e| BadInput(format!("--config: {e}")))?,
        None => a.into_file(),
    };
    // A field at fault is named as the file spells it, or as the flag that set it.
    let config = file.to_config().map_err(|e| match &from_file {
        Some(path) => BadInput(format!("--config {}: {e}", path.display())),
        None => BadInput(as_flag(&e.to_string())),
    })?;
    let metrics = config.metrics.clone();
    let admin = file.admin;
    let (metrics_file, kept_metrics) = (file.metrics_file.clone(), metrics.clone());
    let runtime = meshbench_workload::role_runtime(file.threads)?;
    runtime.block_on(async move {
        let bound = run_sidecar(config).await?;
        announce(
            bound.inbound_addr(),
            &bound.outbound_addrs(),
            admin,
            metrics,
        )
        .await?;
        bound.serve(super::workload::shutdown_signal()).await;
        write_metrics_file(metrics_file.as_deref(), kept_metrics.as_deref())
    })
}

fn node_agent(a: NodeAgentArgs) -> anyhow::Result<()> {
    let mut file =
        NodeAgentFile::load(&a.config).map_err(|e| BadInput(format!("--config: {e}")))?;
    file.threads = a.process.threads.or(file.threads);
    file.metrics_file = a.process.metrics_file.or(file.metrics_file.take());
    let policy = match &file.policy {
        Some(path) => Policy::load(path).map_err(|e| BadInput(format!("policy: {e}")))?,
        None => Policy::from_yaml("{}").expect("the empty policy is valid"),
    };
    let metrics = (!a.process.no_metrics).then(|| Arc::new(ProxyMetrics::new()));
    let config = NodeAgentConfig {
        file,
        policy: Arc::new(policy),
        tls: a.tls.options(),
        metrics: metrics.clone(),
        limits: a.limits.limits(),
    };
    let admin = a.process.admin;
    let (metrics_file, kept_metrics) = (config.file.metrics_file.clone(), metrics.clone());
    let runtime = meshbench_workload::role_runtime(config.file.threads)?;
    runtime.block_on(async move {
        let bound = run_node_agent(config).await?;
        announce(bound.hbone_addr(), &bound.outbound_addrs(), admin, metrics).await?;
        bound.serve(super::workload::shutdown_signal()).await;
        write_metrics_file(metrics_file.as_deref(), kept_metrics.as_deref())
    })
}

/// The final metrics, written atomically, when asked for and when metrics are recorded.
fn write_metrics_file(path: Option<&Path>, metrics: Option<&ProxyMetrics>) -> anyhow::Result<()> {
    let (Some(path), Some(metrics)) = (path, metrics) else {
        return Ok(());
    };
    let partial = path.with_extension("partial");
    std::fs::write(&partial, metrics.encode_prometheus_text())?;
    std::fs::rename(&partial, path)?;
    Ok(())
}

/// Starts the admin endpoint when asked for, then prints the ready line the lab waits for.
async fn announce(
    main: Option<SocketAddr>,
    outbound: &[SocketAddr],
    admin: Option<SocketAddr>,
    metrics: Option<Arc<ProxyMetrics>>,
) -> anyhow::Result<()> {
    let mut ready = ReadyEvent::ready(main.map(|a| a.to_string()));
    ready.outbound = outbound.iter().map(|a| a.to_string()).collect();
    if let (Some(addr), Some(metrics)) = (admin, metrics) {
        let listener = bind_admin(addr).await?;
        ready.admin = Some(listener.local_addr()?.to_string());
        tokio::spawn(serve_admin(listener, metrics, std::future::pending()));
    }
    println!("{}", serde_json::to_string(&ready)?);
    Ok(())
}
