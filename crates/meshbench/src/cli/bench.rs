//! `meshbench bench <component>`: our component and its peers side by side, with ratios.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use meshbench_bench::{
    bench_dataplane, bench_loadgen, render_markdown, DataplaneBenchOptions, LoadgenBenchOptions,
    Plane,
};
use meshbench_results::BenchReport;

use super::args;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The load generator against wrk and Fortio (closed loop, fixed rate, latency floor).
    Loadgen(LoadgenArgs),
    /// The reference sidecar (L4, L7) and node agent against HAProxy and Envoy mTLS sidecar
    /// pairs: added latency, throughput, proxy CPU per request, proxy memory.
    Dataplane(DataplaneArgs),
}

#[derive(Debug, Args)]
pub struct DataplaneArgs {
    /// Length of each load run (latency, throughput) per data plane.
    #[arg(long, value_parser = args::duration, default_value = "5s")]
    duration: Duration,
    /// Rounds over every data plane (each pair started afresh); the ratios compare medians.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
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
            })?;
            write_report(&report, &a.out)
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
