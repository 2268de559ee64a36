//! `meshbench wire capture|reach|mark|exchange` and `meshbench call`: what the Kubernetes
//! backend and the verifier run inside pods, through the API server's exec. `capture` records
//! an interface as a pcap on stdout (no tcpdump in the image) until `mark` creates its stop
//! file; `reach` waits until services are routed; `exchange` is one of the verifier's identity
//! checks against the proxy guarding E3's calculator; `call` makes one HTTP request from where
//! it runs (a pod's own app on loopback) and prints the answer.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use meshbench_netlab::CaptureLimits;

use super::args;

#[derive(Debug, Subcommand)]
pub enum WireCommand {
    /// Capture every frame of an interface as a pcap on stdout ("listening on IF" on stderr
    /// once it is), until the stop file exists or a budget runs out.
    Capture(CaptureArgs),
    /// Wait until a TCP connection to each address is no longer refused: a Service's routes
    /// are in place on this node (kube-proxy refuses a Service without them).
    Reach {
        addresses: Vec<std::net::SocketAddr>,
        /// How long to wait for all of them.
        #[arg(long, default_value = "60s", value_parser = args::positive_duration)]
        within: Duration,
    },
    /// Create a file another process waits for: a capture's `--stop-file`, or a load
    /// generator's `start_gate`.
    Mark { file: PathBuf },
    /// One mTLS exchange (`POST /add`) with the proxy guarding E3's calculator, as the
    /// verifier's identity checks make it; prints the outcome, the SPIFFE ID and the
    /// certificate the proxy presented, as JSON.
    Exchange(ExchangeArgs),
}

#[derive(Debug, Args)]
pub struct ExchangeArgs {
    /// The calculator's pod address, guarded by its sidecar.
    #[arg(
        long,
        required_unless_present = "node_agent",
        conflicts_with = "node_agent"
    )]
    sidecar: Option<std::net::SocketAddr>,
    /// The HBONE address of the calculator's node agent (with --app).
    #[arg(long, requires = "app")]
    node_agent: Option<std::net::SocketAddr>,
    /// The calculator's app, tunnelled to through the node agent.
    #[arg(long)]
    app: Option<std::net::SocketAddr>,
    /// The trust bundle the proxy's certificate must chain to.
    #[arg(long)]
    ca: PathBuf,
    /// The client certificate to present (with --key; none without).
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Accept only a proxy presenting this SPIFFE ID.
    #[arg(
        long,
        required_unless_present = "expect_server_name",
        conflicts_with = "expect_server_name"
    )]
    expect_server_id: Option<String>,
    /// With --sidecar: ask for this identity by SNI and accept only a proxy whose certificate
    /// carries it as a DNS name (Linkerd's identities), without ALPN, as linkerd2-proxy does.
    #[arg(long, requires = "sidecar")]
    expect_server_name: Option<String>,
    /// A request header, `name: value` (repeatable).
    #[arg(long)]
    header: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// The interface to record.
    #[arg(long, required_unless_present = "toward", conflicts_with = "toward")]
    interface: Option<String>,
    /// Record the interface packets to this address leave by (`lo` for a local address).
    #[arg(long)]
    toward: Option<std::net::IpAddr>,
    /// The capture ends once this file exists.
    #[arg(long)]
    stop_file: PathBuf,
    /// How long it captures at most.
    #[arg(long, default_value = "120s", value_parser = args::positive_duration)]
    max_duration: Duration,
    /// How many bytes of frames it writes at most.
    #[arg(long, default_value = "256MiB", value_parser = args::size)]
    max_bytes: u64,
    /// Write only IP packets whose source and destination are both among these addresses
    /// (repeatable; every frame when none is given).
    #[arg(long = "between", value_name = "ADDRESS")]
    between: Vec<std::net::IpAddr>,
}

pub fn run(command: WireCommand) -> anyhow::Result<()> {
    match command {
        WireCommand::Capture(a) => {
            let interface = match (a.interface.clone(), a.toward) {
                (Some(interface), _) => interface,
                (None, Some(ip)) => meshbench_netlab::interface_toward(ip)?,
                (None, None) => {
                    return Err(
                        super::BadInput("--interface or --toward is required".into()).into(),
                    )
                }
            };
            let stdout = std::io::stdout().lock();
            let limits = CaptureLimits {
                max_bytes: a.max_bytes,
                max_duration: a.max_duration,
            };
            let summary = meshbench_netlab::capture(
                &interface,
                std::io::BufWriter::new(stdout),
                || a.stop_file.exists(),
                limits,
                &meshbench_netlab::FrameFilter::between(a.between.clone()),
                || eprintln!("listening on {interface}"),
            )?;
            let _ = std::fs::remove_file(&a.stop_file);
            match summary.cut_short_by {
                Some(budget) => eprintln!(
                    "captured {} packets ({} bytes); ended by its {budget} budget",
                    summary.packets, summary.bytes
                ),
                None => eprintln!(
                    "captured {} packets ({} bytes)",
                    summary.packets, summary.bytes
                ),
            }
            Ok(())
        }
        WireCommand::Reach { addresses, within } => {
            let deadline = std::time::Instant::now() + within;
            for address in addresses {
                let refused = || {
                    std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1))
                        .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
                };
                while refused() {
                    if std::time::Instant::now() >= deadline {
                        anyhow::bail!("{address}: still refused after {within:?}");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                eprintln!("reached {address}");
            }
            Ok(())
        }
        WireCommand::Mark { file } => {
            std::fs::write(&file, b"marked\n")
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            Ok(())
        }
        WireCommand::Exchange(a) => exchange(a),
    }
}

fn exchange(a: ExchangeArgs) -> anyhow::Result<()> {
    use meshbench_verify::Guard;
    let guard = match (a.sidecar, a.node_agent, a.app) {
        (Some(pod), _, _) => match a.expect_server_name {
            Some(server_name) => Guard::NamedSidecar { pod, server_name },
            None => Guard::Sidecar { pod },
        },
        (None, Some(agent), Some(app)) => Guard::NodeAgent { agent, app },
        _ => {
            return Err(super::BadInput(
                "--sidecar, or --node-agent with --app, is required".into(),
            )
            .into())
        }
    };
    let expect_server_id = a
        .expect_server_id
        .as_deref()
        .map(|id| {
            meshbench_identity::SpiffeId::parse(id)
                .map_err(|e| super::BadInput(format!("--expect-server-id {id:?}: {e}")))
        })
        .transpose()?;
    let headers = a
        .header
        .iter()
        .map(|h| match h.split_once(':') {
            Some((name, value)) if !name.trim().is_empty() => {
                Ok((name.trim().to_owned(), value.trim().to_owned()))
            }
            _ => Err(super::BadInput(format!(
                "--header {h:?}: expected `name: value`"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let files = meshbench_identity::ClientTlsFiles {
        cert: a.cert,
        key: a.key,
        ca: a.ca,
        expect_server_id,
    };
    let report = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(meshbench_verify::exchange(guard, &files, &headers))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The URL to call (http only).
    url: http::Uri,
    /// POST this JSON body (default: GET).
    #[arg(long)]
    json: Option<String>,
    /// Bound on the whole call.
    #[arg(long, default_value = "60s", value_parser = args::positive_duration)]
    timeout: Duration,
}

/// The answer did not come, or was not a 2xx.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {outcome}{}", .detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
struct CallFailed {
    url: String,
    outcome: String,
    detail: Option<String>,
}

pub fn call(a: CallArgs) -> anyhow::Result<()> {
    let body = match &a.json {
        Some(text) => Some(
            serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| super::BadInput(format!("--json: not JSON ({e}): {text:?}")))?,
        ),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let caller = meshbench_workload::Caller::new(a.timeout);
    let answer = runtime.block_on(async {
        match &body {
            Some(body) => caller.post_json(&a.url, body).await,
            None => caller.get(&a.url).await,
        }
    });
    if !answer.is_success() {
        return Err(CallFailed {
            url: a.url.to_string(),
            outcome: answer.outcome.to_string(),
            detail: answer
                .error
                .or_else(|| Some(String::from_utf8_lossy(&answer.body).into_owned()))
                .filter(|d| !d.is_empty()),
        }
        .into());
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&answer.body)?;
    stdout.flush()?;
    Ok(())
}
