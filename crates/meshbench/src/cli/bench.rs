//! `meshbench bench <component>`: our component and its peers side by side, with ratios.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use meshbench_bench::{bench_loadgen, render_markdown, LoadgenBenchOptions};

use super::args;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The load generator against wrk and Fortio (closed loop, fixed rate, latency floor).
    Loadgen(LoadgenArgs),
}

#[derive(Debug, Args)]
pub struct LoadgenArgs {
    /// Length of each tool's run in each case.
    #[arg(long, value_parser = args::duration, default_value = "5s")]
    duration: Duration,
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
                generator_cpu: a.generator_cpu,
                target_cpu: a.target_cpu,
                response_bytes: a.response_size,
                work_dir: a.out.join("raw"),
                build: super::build_info(),
            })?;
            let markdown = render_markdown(&report);
            meshbench_results::write_json_atomic(&a.out.join("bench.json"), &report)?;
            std::fs::write(a.out.join("bench.md"), &markdown)?;
            print!("{markdown}");
            println!("\nwritten: {}", a.out.join("bench.json").display());
            Ok(())
        }
    }
}
