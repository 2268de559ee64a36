//! `meshbench compare A B` and `meshbench cost DIR`: analyses across and on top of result
//! directories, printed as Markdown tables.

use std::path::{Path, PathBuf};

use clap::Args;
use meshbench_report::{compare_runs, cost_table, render_tables, Prices};
use meshbench_results::RunResult;

use super::BadInput;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The reference result directory (or its results.json).
    a: PathBuf,
    /// The result directory compared with it.
    b: PathBuf,
}

#[derive(Debug, Args)]
pub struct CostArgs {
    /// A result directory (or its results.json).
    dir: PathBuf,
    /// Pods the mesh would serve.
    #[arg(long)]
    pods: u64,
    /// Price of one CPU core for a month.
    #[arg(long, value_parser = super::args::non_negative)]
    cpu_price: f64,
    /// Price of one GiB of memory for a month.
    #[arg(long, value_parser = super::args::non_negative)]
    mem_price: f64,
}

pub(super) fn load(path: &Path) -> anyhow::Result<RunResult> {
    let file = if path.is_dir() {
        path.join("results.json")
    } else {
        path.to_owned()
    };
    meshbench_results::read_json(&file).map_err(|e| BadInput(e.to_string()).into())
}

pub fn compare(a: CompareArgs) -> anyhow::Result<()> {
    let (first, second) = (load(&a.a)?, load(&a.b)?);
    println!(
        "A: {} ({} {}, {})\nB: {} ({} {}, {})\n",
        a.a.display(),
        first.config.profile,
        first.started_at,
        first.environment.git_commit,
        a.b.display(),
        second.config.profile,
        second.started_at,
        second.environment.git_commit
    );
    print!("{}", render_tables(&compare_runs(&first, &second)));
    Ok(())
}

pub fn cost(a: CostArgs) -> anyhow::Result<()> {
    let result = load(&a.dir)?;
    let prices = Prices {
        pods: a.pods,
        cpu_per_core_month: a.cpu_price,
        memory_per_gib_month: a.mem_price,
    };
    print!("{}", render_tables(&[cost_table(&result, prices)]));
    Ok(())
}
