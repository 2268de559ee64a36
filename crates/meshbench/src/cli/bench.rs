//! `meshbench bench <component>`: our component and its peers side by side, with ratios.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use meshbench_bench::{
    bench_dataplane, bench_loadgen, render_markdown, DataplaneBenchOptions, LoadgenBenchOptions,
    LoadgenPeer, Plane,
};
use meshbench_results::BenchReport;

use super::args;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The load generator against wrk and Fortio (closed loop, fixed rate, latency floor).
    Loadgen(LoadgenArgs),
    /// The reference sidecar (L4, L7) and node agent against HAProxy, Envoy and linkerd2-proxy
    /// mTLS sidecar pairs and ztunnel: added latency, throughput, proxy CPU per request, proxy
    /// memory, each ratio with its 95% interval over the rounds.
    Dataplane(DataplaneArgs),
    /// Whether runs of a bench agree: for each ratio that several runs (their bench.json)
    /// report, how often one run's 95% interval holds another run's estimate, against how
    /// often it should (about 83-86%, the other estimate having an error of its own).
    Coverage(CoverageArgs),
}

#[derive(Debug, Args)]
pub struct CoverageArgs {
    /// Two or more bench.json files of runs of the same bench.
    #[arg(required = true, num_args = 2..)]
    runs: Vec<PathBuf>,
    /// Also write the table here (Markdown).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DataplaneArgs {
    /// Length of each load run (latency, throughput) per data plane and round.
    #[arg(long, value_parser = args::duration, default_value = "3s")]
    duration: Duration,
    /// Rounds over every data plane (each pair started afresh with an echo app of its own,
    /// the planes' order reversed every other round): the unit of the ratios' intervals, so
    /// at least 3 for one.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    repetitions: u32,
    /// Request rate of the latency case.
    #[arg(long, default_value_t = 1000)]
    rps: u32,
    #[arg(long, default_value_t = 16)]
    connections: u32,
    /// Connections held open through each pair for the memory case.
    #[arg(long, default_value_t = 1000)]
    open_connections: u32,
    /// Data planes to measure (default: all).
    #[arg(long, value_delimiter = ',', value_parser = plane_names())]
    planes: Vec<Plane>,
    /// CPU the load generator is pinned to.
    #[arg(long, default_value_t = 0)]
    generator_cpu: usize,
    /// CPU the app and every proxy are pinned to.
    #[arg(long, default_value_t = 1)]
    proxy_cpu: usize,
    #[arg(long, value_parser = args::size, default_value = "1KiB")]
    response_size: u64,
    /// Directory for the report (bench.json, bench.md), configs, logs and raw load results.
    #[arg(long, default_value = "meshbench-results/bench-dataplane")]
    out: PathBuf,
}

/// `--planes` takes each plane by its name without the `meshbench-` prefix.
fn plane_names() -> impl TypedValueParser<Value = Plane> {
    PossibleValuesParser::new(Plane::ALL.map(Plane::flag_name)).map(|name| {
        let named = Plane::ALL.into_iter().find(|p| p.flag_name() == name);
        named.unwrap_or(Plane::Direct)
    })
}

#[derive(Debug, Args)]
pub struct LoadgenArgs {
    /// Length of each tool's run in each case.
    #[arg(long, value_parser = args::duration, default_value = "5s")]
    duration: Duration,
    /// Rounds of every case and tool, interleaved so that a slow minute of the machine hits
    /// every tool alike; the ratios compare medians.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    repetitions: u32,
    /// CPU the generators are pinned to.
    #[arg(long, default_value_t = 0)]
    generator_cpu: usize,
    /// CPU the target server is pinned to.
    #[arg(long, default_value_t = 1)]
    target_cpu: usize,
    #[arg(long, value_parser = args::size, default_value = "1KiB")]
    response_size: u64,
    /// Directory for the report (bench.json, bench.md) and each tool's raw output.
    #[arg(long, default_value = "meshbench-results/bench-loadgen")]
    out: PathBuf,
    /// A peer not to run (repeatable): wrk, fortio or oha. The report says it was left out
    /// and which targets against it went unjudged; a peer neither installed nor left out is an
    /// error.
    #[arg(long, value_name = "PEER", value_parser = loadgen_peer_names())]
    without: Vec<LoadgenPeer>,
}

/// `--without` takes a peer by its binary's name; clap lists the names when one is wrong.
fn loadgen_peer_names() -> impl TypedValueParser<Value = LoadgenPeer> {
    PossibleValuesParser::new(LoadgenPeer::ALL.map(LoadgenPeer::name))
        .map(|name| name.parse().unwrap_or(LoadgenPeer::Oha))
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Loadgen(a) => {
            let report = bench_loadgen(&LoadgenBenchOptions {
                meshbench: std::env::current_exe()?,
                duration: a.duration,
                repetitions: a.repetitions,
                generator_cpu: a.generator_cpu,
                target_cpu: a.target_cpu,
                response_bytes: a.response_size,
                work_dir: a.out.join("raw"),
                build: super::build_info(),
                without: a.without,
            })?;
            write_report(&report, &a.out)
        }
        BenchCommand::Coverage(a) => {
            let reports = a
                .runs
                .iter()
                .map(|path| {
                    // A file that is not a bench report is the input's fault.
                    meshbench_results::read_json::<BenchReport>(path)
                        .map_err(|e| super::BadInput(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let markdown = meshbench_bench::render_coverage_markdown(
                &meshbench_bench::cross_coverage(&reports),
                reports.len(),
            );
            if let Some(out) = &a.out {
                meshbench_results::write_bytes_atomic(out, markdown.as_bytes())?;
            }
            print!("{markdown}");
            Ok(())
        }
        BenchCommand::Dataplane(a) => {
            let mut planes = a.planes;
            if planes.is_empty() {
                planes = Plane::ALL.to_vec();
            }
            // Every figure is relative to direct.
            if !planes.contains(&Plane::Direct) {
                planes.insert(0, Plane::Direct);
            }
            let report = bench_dataplane(&DataplaneBenchOptions {
                meshbench: std::env::current_exe()?,
                duration: a.duration,
                repetitions: a.repetitions,
                rps: a.rps,
                connections: a.connections,
                open_connections: a.open_connections,
                generator_cpu: a.generator_cpu,
                proxy_cpu: a.proxy_cpu,
                response_bytes: a.response_size,
                planes,
                work_dir: a.out.join("raw"),
                build: super::build_info(),
            })?;
            write_report(&report, &a.out)
        }
    }
}

fn write_report(report: &BenchReport, out: &std::path::Path) -> anyhow::Result<()> {
    let markdown = render_markdown(report);
    meshbench_results::write_json_atomic(&out.join("bench.json"), report)?;
    std::fs::write(out.join("bench.md"), &markdown)?;
    print!("{markdown}");
    println!("\nwritten: {}", out.join("bench.json").display());
    Ok(())
}
