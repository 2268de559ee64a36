//! `meshbench workload <role>`: the studies' applications (echo, calculator, experimenter,
//! analyzer, security checker, counter) and E3's nginx entry point.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use http::Uri;
use meshbench_identity::ServerTlsFiles;
use meshbench_lab::{Launch, ReadyEvent};
use meshbench_meshes::configs::GatewayRoute;
use meshbench_role::RoleConfig;
use meshbench_workload::{
    echo_config, grpc_echo_config, Analyzer, App, Calculator, Counter, Echo, ExperimentOnce,
    Experimenter, Mix, SecurityChecker, ServeOptions, WorkloadApp, WorkloadFile,
};

use super::{args, BadInput};

/// `meshbench workload --config FILE` (what the lab writes), or an app and its flags.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkloadArgs {
    /// Start the app described by this YAML file (a `WorkloadFile`).
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<WorkloadCommand>,
}

#[derive(Debug, Subcommand)]
pub enum WorkloadCommand {
    /// HTTP/1.1 and h2c echo server: waits a delay, then answers a status and a body of a
    /// size; each may be a mix (`503:10`) and overridden per request (`?delay=5ms&size=4KiB`).
    Echo(EchoArgs),
    /// Unary gRPC echo (Fortio's fgrpc.PingServer/Ping, plus grpc.health.v1), h2c or TLS.
    GrpcEcho(GrpcEchoArgs),
    /// E3's calculator: POST /add, /subtract, /multiply, /divide.
    Calculator(ServerArgs),
    /// E3's experimenter: POST /api/experimenter/experiment runs requests to the calculator.
    Experimenter(ExperimenterArgs),
    /// E3's analyzer: POST /api/analyzer/analyze turns an experiment into percentiles.
    Analyzer(ServerArgs),
    /// E3's security checker: POST /api/security-checker/check calls a target and reports
    /// the status or connection error it got.
    SecurityChecker(CheckerArgs),
    /// E4's counter: POST /count increments and forwards to --next until count == max_count.
    Counter(CounterArgs),
    /// E3's entry point: nginx routing path prefixes to the application's services.
    Gateway(GatewayArgs),
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    #[command(flatten)]
    tls: ServerTlsArgs,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Debug, Args)]
pub struct EchoArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Time to wait before answering, or a mix such as `1ms:90,50ms:10` (E1's server
    /// sleeps 200ms).
    #[arg(long, value_parser = delay_mix, default_value = "0s")]
    delay: String,
    /// Response body size, or a mix such as `1KiB:50,16KiB:50`.
    #[arg(long, value_parser = size_mix, default_value = "1KiB")]
    response_size: String,
    /// Response status, or a mix such as `503:10` (the rest get 200).
    #[arg(long, value_parser = status_mix, default_value = "200")]
    status: String,
}

#[derive(Debug, Args)]
pub struct GrpcEchoArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Time to wait before answering when the request sets no delayNanos; may be a mix.
    #[arg(long, value_parser = delay_mix, default_value = "0s")]
    delay: String,
    /// Reply payload size (default: echo the request's payload); may be a mix.
    #[arg(long, value_parser = size_mix)]
    response_size: Option<String>,
}

#[derive(Debug, Args)]
pub struct ExperimenterArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The calculator's base URL.
    #[arg(long, value_parser = base_uri)]
    calculator: Uri,
    /// Bound on each call to the calculator.
    #[arg(long, value_parser = args::duration, default_value = "10s")]
    timeout: Duration,
    /// Run this one experiment (E3's request body, e.g. '{"interactions": 10000, "batchSize":
    /// 100}') instead of serving, then exit: how the lab's runner uses the experimenter as
    /// its instrument.
    #[arg(long, requires = "json")]
    once: Option<String>,
    /// With --once: write the experiment as a meshbench load report (JSON).
    #[arg(long)]
    json: Option<PathBuf>,
    /// With --once: write E3's own answer (every RTT, failures by class).
    #[arg(long, requires = "once")]
    result: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckerArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// This checker's name in its reports.
    #[arg(long, default_value = "security-checker")]
    name: String,
    /// The namespace it runs in, for its reports.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Bound on each check's call.
    #[arg(long, value_parser = args::duration, default_value = "5s")]
    timeout: Duration,
}

#[derive(Debug, Args)]
pub struct CounterArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// This hop's name in the per-hop timing.
    #[arg(long, default_value = "counter")]
    name: String,
    /// The other deployment's base URL; without it, a request must end here.
    #[arg(long, value_parser = base_uri)]
    next: Option<Uri>,
    /// Bound on the call to the next hop (which includes the rest of the chain).
    #[arg(long, value_parser = args::duration, default_value = "30s")]
    timeout: Duration,
}

#[derive(Debug, Args)]
pub struct GatewayArgs {
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// `PREFIX=http://HOST:PORT[/PATH]`, repeated: requests under PREFIX go to that upstream
    /// (with /PATH, nginx replaces PREFIX by it).
    #[arg(long = "route", value_parser = GatewayRoute::parse, required = true)]
    routes: Vec<GatewayRoute>,
    /// Where nginx's configuration, pid and logs go (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ServerTlsArgs {
    /// Serve TLS 1.3 with this certificate (PEM).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates issued by this CA (mTLS).
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<PathBuf>,
}

impl ServerTlsArgs {
    fn files(&self) -> Option<ServerTlsFiles> {
        Some(ServerTlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.client_ca.clone(),
        })
    }
}

/// Flags' mixes are checked when parsed, so clap names the flag; they stay text, as in the
/// file they are turned into.
fn delay_mix(value: &str) -> Result<String, String> {
    checked_mix("delay", value, meshbench_workload::parse_delay)
}

fn size_mix(value: &str) -> Result<String, String> {
    checked_mix("size", value, meshbench_workload::parse_size)
}

fn status_mix(value: &str) -> Result<String, String> {
    checked_mix("status", value, meshbench_workload::parse_status)
}

fn checked_mix<T: Copy>(
    knob: &'static str,
    value: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<String, String> {
    Mix::parse(knob, value, parse)
        .map(|_| value.to_owned())
        .map_err(|e| e.to_string())
}

fn base_uri(value: &str) -> Result<Uri, String> {
    let uri: Uri = value
        .parse()
        .map_err(|e| format!("{e} (expected a URL such as http://calculator:8080)"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err("expected an http:// URL with a host, such as http://calculator:8080".into());
    }
    Ok(uri)
}

pub fn run(args: WorkloadArgs) -> anyhow::Result<()> {
    let file = match (args.config, args.command) {
        (Some(path), _) => WorkloadFile::load(&path)?,
        (None, Some(WorkloadCommand::Gateway(a))) => return gateway(a),
        (None, Some(command)) => command.into_file()?,
        (None, None) => {
            return Err(
                BadInput("give --config FILE or an app (meshbench workload --help)".into()).into(),
            )
        }
    };
    run_file(file)
}

impl ServerArgs {
    fn into_file(self, app: WorkloadApp) -> WorkloadFile {
        let mut file = WorkloadFile::new(self.listen, app);
        file.tls = self.tls.files();
        file.threads = self.threads;
        file
    }
}

impl WorkloadCommand {
    /// The flags as the file the lab would have written.
    fn into_file(self) -> anyhow::Result<WorkloadFile> {
        Ok(match self {
            WorkloadCommand::Echo(a) => a.server.into_file(WorkloadApp::Echo {
                delay: a.delay,
                response_size: a.response_size,
                status: a.status,
            }),
            WorkloadCommand::GrpcEcho(a) => a.server.into_file(WorkloadApp::GrpcEcho {
                delay: a.delay,
                response_size: a.response_size,
            }),
            WorkloadCommand::Calculator(a) => a.into_file(WorkloadApp::Calculator),
            WorkloadCommand::Analyzer(a) => a.into_file(WorkloadApp::Analyzer),
            WorkloadCommand::Experimenter(a) => {
                let once = match a.once {
                    Some(body) => Some(ExperimentOnce {
                        experiment: serde_json::from_str(&body)
                            .map_err(|e| BadInput(format!("--once: not a JSON object: {e}")))?,
                        json: a.json.expect("clap requires --json with --once"),
                        result: a.result,
                        start_gate: None,
                        wait_for_calculator: None,
                    }),
                    None => None,
                };
                a.server.into_file(WorkloadApp::Experimenter {
                    calculator: a.calculator.to_string(),
                    timeout: a.timeout,
                    once,
                })
            }
            WorkloadCommand::SecurityChecker(a) => {
                a.server.into_file(WorkloadApp::SecurityChecker {
                    name: a.name,
                    namespace: a.namespace,
                    timeout: a.timeout,
                })
            }
            WorkloadCommand::Counter(a) => a.server.into_file(WorkloadApp::Counter {
                name: a.name,
                next: a.next.map(|uri| uri.to_string()),
                timeout: a.timeout,
            }),
            WorkloadCommand::Gateway(_) => {
                unreachable!("the gateway runs nginx, not a workload file")
            }
        })
    }
}

fn run_file(file: WorkloadFile) -> anyhow::Result<()> {
    let uri = |field: &str, value: &str| {
        base_uri(value).map_err(|e| BadInput(format!("{field} {value:?}: {e}")))
    };
    match &file.app {
        WorkloadApp::Echo {
            delay,
            response_size,
            status,
        } => {
            let config = echo_config(delay, response_size, status).map_err(BadInput)?;
            serve(&file, App::Echo(Echo::new(&config)))
        }
        WorkloadApp::GrpcEcho {
            delay,
            response_size,
        } => {
            let config = grpc_echo_config(delay, response_size.as_deref()).map_err(BadInput)?;
            serve(&file, App::GrpcEcho(config))
        }
        WorkloadApp::Calculator => serve(&file, App::Calculator(Calculator)),
        WorkloadApp::Analyzer => serve(&file, App::Analyzer(Analyzer)),
        WorkloadApp::Experimenter {
            calculator,
            timeout,
            once,
        } => {
            let calculator = uri("calculator", calculator)?;
            let role = Experimenter::new(&calculator, *timeout)?;
            match once {
                Some(once) => experiment_once(once, &calculator, &role),
                None => serve(&file, App::Experimenter(role)),
            }
        }
        WorkloadApp::SecurityChecker {
            name,
            namespace,
            timeout,
        } => serve(
            &file,
            App::SecurityChecker(SecurityChecker::new(name, namespace, *timeout)),
        ),
        WorkloadApp::Counter {
            name,
            next,
            timeout,
        } => {
            let next = next.as_deref().map(|n| uri("next", n)).transpose()?;
            serve(
                &file,
                App::Counter(Counter::new(name, next.as_ref(), *timeout)?),
            )
        }
    }
}

/// Runs one experiment from this process and writes its results.
fn experiment_once(
    once: &ExperimentOnce,
    calculator: &Uri,
    role: &Experimenter,
) -> anyhow::Result<()> {
    let workload = meshbench_workload::Workload::parse(&once.experiment)
        .map_err(|problem| BadInput(format!("--once: {problem}")))?;
    if let Some(gate) = &once.start_gate {
        super::load::wait_at_gate(gate)?;
    }
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    if let Some(limit) = once.wait_for_calculator {
        runtime.block_on(wait_for_calculator(calculator, limit))?;
    }
    let result = runtime.block_on(role.run(&workload));
    write_json_or_print(&once.json, &result.load_report(&calculator.to_string()))?;
    if let Some(path) = &once.result {
        write_json_or_print(path, &result)?;
    }
    Ok(())
}

/// Writes `value` to `path` atomically, or prints it as one line for `-`.
fn write_json_or_print(
    path: &std::path::Path,
    value: &impl serde::Serialize,
) -> anyhow::Result<()> {
    if path.as_os_str() == meshbench_workload::STDOUT {
        println!("{}", serde_json::to_string(value)?);
    } else {
        meshbench_results::write_json_atomic(path, value)?;
    }
    Ok(())
}

/// Asks the calculator until it answers over HTTP (any status), for at most `limit`.
async fn wait_for_calculator(calculator: &Uri, limit: Duration) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + limit;
    let caller = meshbench_workload::Caller::new(Duration::from_secs(2));
    loop {
        let answer = caller.get(calculator).await;
        if matches!(answer.outcome, meshbench_loadgen::Outcome::Http(_)) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            anyhow::bail!(
                "wait_for_calculator: {calculator} gave no HTTP answer within {} (last: {})",
                humantime::format_duration(limit),
                answer.outcome
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Binds, prints the ready line, then serves `app` until SIGTERM or Ctrl-C, and drains.
fn serve(server: &WorkloadFile, app: App) -> anyhow::Result<()> {
    if server.threads == Some(0) {
        return Err(BadInput("--threads must be at least 1".into()).into());
    }
    let options = ServeOptions {
        listen: server.listen,
        tls: server.tls.clone(),
        drain_timeout: Duration::from_secs(5),
    };
    let runtime = meshbench_workload::role_runtime(server.threads)?;
    runtime.block_on(async move {
        let bound = meshbench_workload::bind(&options).await?;
        let address = bound.local_addr();
        let ready = ReadyEvent::ready(Some(address.to_string()));
        println!("{}", serde_json::to_string(&ready)?);
        let role = app.name();
        tracing::info!(role, %address, tls = options.tls.is_some(), "serving");
        bound.serve_app(app, Box::pin(shutdown_signal())).await;
        tracing::info!(role, "stopped");
        Ok(())
    })
}

fn gateway(a: GatewayArgs) -> anyhow::Result<()> {
    let scratch;
    let dir = match a.dir {
        Some(dir) => dir,
        None => {
            scratch = tempfile::tempdir()?;
            scratch.path().to_owned()
        }
    };
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    runtime.block_on(async move {
        let mut gateway =
            meshbench_meshes::start_gateway(&dir, a.listen, &a.routes, &Launch::default()).await?;
        let ready = ReadyEvent::ready(Some(a.listen.to_string()));
        println!("{}", serde_json::to_string(&ready)?);
        tracing::info!(address = %a.listen, routes = a.routes.len(), "gateway serving");
        let exited = async {
            loop {
                if let Some(e) = gateway.process.exited().await {
                    return e;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        let nginx_failed = tokio::select! {
            () = shutdown_signal() => None,
            e = exited => Some(e),
        };
        match nginx_failed {
            Some(e) => Err(anyhow::Error::new(e).context("nginx stopped")),
            None => {
                gateway.stop(Duration::from_secs(5)).await;
                Ok(())
            }
        }
    })
}

/// Resolves on SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
