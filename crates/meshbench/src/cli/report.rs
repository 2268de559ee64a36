//! `meshbench report DIR`: regenerate the reports from `DIR/results.json`.

use std::path::PathBuf;

use clap::Args;
use meshbench_results::RunResult;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A result directory written by `meshbench run`.
    dir: PathBuf,
}

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    let result: RunResult = meshbench_results::read_json(&a.dir.join("results.json"))
        .map_err(|e| super::BadInput(e.to_string()))?;
    meshbench_report::write_reports(&a.dir, &result)?;
    println!(
        "wrote {} and {}",
        a.dir.join("report.md").display(),
        a.dir.join("report.html").display()
    );
    Ok(())
}
