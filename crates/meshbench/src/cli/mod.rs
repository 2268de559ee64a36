//! Command-line interface. Errors are `anyhow` here and only here; exit code 2 means the input
//! was wrong (a bad argument, an unreadable certificate, a port in use), 1 a failure while
//! running, 130 an interrupted run whose finished cells were kept.

mod args;
mod bench;
mod ca;
mod compare;
mod doctor;
mod export;
mod harness;
mod image;
mod lab;
mod load;
mod mesh;
mod profiles;
mod proxy;
mod publish;
mod report;
mod run;
mod serve;
mod verify;
mod wire;
mod workload;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use meshbench_role::InputFault;

#[derive(Debug, Parser)]
#[command(
    name = "meshbench",
    version,
    about = "Measures what zero-trust service-to-service security costs, and checks that it protects"
)]
struct Cli {
    /// Log lines on stderr as text or as one JSON object per line (level from MESHBENCH_LOG,
    /// default warn).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an experiment on the local lab and write results and reports.
    Run(run::RunArgs),
    /// Compare two result directories: B against A, with significance.
    Compare(compare::CompareArgs),
    /// Turn a run's measured per-pod overhead into monthly and yearly cost (E5's model).
    Cost(compare::CostArgs),
    /// Write a run's cells as SMP or Fortio result documents, one per cell.
    Export(export::ExportArgs),
    /// The built-in experiment profiles: list them, or print one's spec.
    #[command(subcommand)]
    Profiles(profiles::ProfilesCommand),
    /// Regenerate report.md and report.html from a result directory.
    Report(report::ReportArgs),
    /// A study's published reproduction: keep runs' results compressed, and make the study's
    /// page (docs/results/E1.md) from them.
    #[command(subcommand)]
    Publish(publish::PublishCommand),
    /// Generate load against a URL (constant-rate open loop).
    Load(Box<load::LoadArgs>),
    /// Act as a mesh proxy (the reference data plane).
    #[command(subcommand)]
    Proxy(proxy::ProxyCommand),
    /// Act as a workload server.
    Workload(workload::WorkloadArgs),
    /// The built-in certificate authority (SPIFFE X.509 SVIDs).
    #[command(subcommand)]
    Ca(ca::CaCommand),
    /// Control-plane harnesses that run a third-party proxy outside its mesh, for the bench.
    #[command(subcommand)]
    Harness(harness::HarnessCommand),
    /// Local lab housekeeping.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// What this machine can run (the netns lab, each data plane, a cluster and its meshes,
    /// the web UI tests' browser), and how to get what is missing.
    Doctor(doctor::DoctorArgs),
    /// Verify zero trust: E3's reachability matrix, encryption on the wire, identity checks.
    Verify(verify::VerifyArgs),
    /// Benchmark a meshbench component against its peers, side by side.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Container images of meshbench, for the Kubernetes backend.
    #[command(subcommand)]
    Image(image::ImageCommand),
    /// Capture an interface's packets as pcap without tcpdump (what `verify` runs in pods).
    #[command(subcommand)]
    Wire(wire::WireCommand),
    /// Make one HTTP request and print the answer's body (what `verify` runs in pods).
    Call(wire::CallArgs),
    /// The meshes a cluster runs: detect them, render or check what meshbench applies.
    #[command(subcommand)]
    Mesh(mesh::MeshCommand),
    /// A web UI and REST API: run, watch, browse, compare, verify, and E3's experimenter.
    Serve(serve::ServeArgs),
}

/// Marks an error as the user's input, for exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadInput(pub String);

/// An interrupted run: its partial results are on disk.
#[derive(Debug, thiserror::Error)]
#[error("interrupted; partial results kept in {0}")]
pub(crate) struct Interrupted(pub String);

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let lab_events = meshbench_serve::LabEvents::new();
    init_logs(
        cli.log_format,
        matches!(cli.command, Command::Serve(_)).then_some(&lab_events),
    );
    let outcome = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Report(args) => report::run(args),
        Command::Publish(cmd) => publish::run(cmd),
        Command::Profiles(cmd) => profiles::run(cmd),
        Command::Compare(args) => compare::compare(args),
        Command::Cost(args) => compare::cost(args),
        Command::Export(args) => export::run(args),
        Command::Load(args) => load::run(*args),
        Command::Workload(cmd) => workload::run(cmd),
        Command::Proxy(cmd) => proxy::run(cmd),
        Command::Ca(cmd) => ca::run(cmd),
        Command::Harness(cmd) => harness::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Image(cmd) => image::run(cmd),
        Command::Lab(cmd) => lab::run(cmd),
        Command::Doctor(args) => doctor::run(args),
        Command::Mesh(cmd) => mesh::run(cmd),
        Command::Verify(args) => verify::run(args),
        Command::Wire(cmd) => wire::run(cmd),
        Command::Call(args) => wire::call(args),
        Command::Serve(args) => serve::run(args, lab_events),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("meshbench: {err:#}");
            ExitCode::from(exit_code(&err))
        }
    }
}

/// Log lines on stderr (level from MESHBENCH_LOG, default warn); `meshbench serve` also
/// receives the lab's events, whatever the level, to show them to watchers.
fn init_logs(format: LogFormat, lab_events: Option<&meshbench_serve::LabEvents>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("MESHBENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let text = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => text.with_filter(filter).boxed(),
        LogFormat::Json => text.json().with_filter(filter).boxed(),
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(lab_events.map(|events| events.layer()))
        .init();
}

fn exit_code(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<Interrupted>().is_some() {
        return 130;
    }
    if err.chain().any(bad_input) {
        2
    } else {
        1
    }
}

/// Whether `cause` is the input's fault, as its library's [`InputFault`] says.
fn bad_input(cause: &(dyn std::error::Error + 'static)) -> bool {
    fn says<E: InputFault>(cause: &(dyn std::error::Error + 'static)) -> bool {
        cause.downcast_ref::<E>().is_some_and(E::is_bad_input)
    }
    cause.is::<BadInput>()
        || says::<meshbench_role::Error>(cause)
        || says::<meshbench_identity::Error>(cause)
        || says::<meshbench_linkerd_harness::Error>(cause)
        || says::<meshbench_workload::Error>(cause)
        || says::<meshbench_loadgen::Error>(cause)
        || says::<meshbench_experiment::Error>(cause)
        || says::<meshbench_dataplane::Error>(cause)
        || says::<meshbench_lab::Error>(cause)
        || says::<meshbench_netlab::Error>(cause)
        || says::<meshbench_verify::Error>(cause)
        || says::<meshbench_image::Error>(cause)
        || says::<meshbench_registry::Error>(cause)
        || kube_says(cause)
        || says::<meshbench_serve::Error>(cause)
}

#[cfg(feature = "kubernetes")]
fn kube_says(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause
        .downcast_ref::<meshbench_kube::Error>()
        .is_some_and(InputFault::is_bad_input)
}

#[cfg(not(feature = "kubernetes"))]
fn kube_says(_: &(dyn std::error::Error + 'static)) -> bool {
    false
}

/// Facts about this build, recorded with every result.
pub(crate) fn build_info() -> meshbench_lab::BuildInfo {
    meshbench_lab::BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        git_commit: env!("MESHBENCH_GIT_COMMIT").to_owned(),
        profile: env!("MESHBENCH_BUILD_PROFILE").to_owned(),
    }
}
