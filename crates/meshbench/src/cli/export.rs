//! `meshbench export --format smp|fortio DIR`: a run's cells as other tools' documents, one
//! file per cell under `DIR/export/<format>/` (the files `meshbench serve` offers).

use std::path::PathBuf;

use clap::Args;
use meshbench_report::{write_exports, ExportFormat};

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// smp (Service Mesh Performance results, with each component's CPU and memory) or
    /// fortio (Fortio's result JSON, which Fortio's UI loads).
    #[arg(long, value_parser = format)]
    format: ExportFormat,
    /// A result directory written by `meshbench run`.
    dir: PathBuf,
}

fn format(value: &str) -> Result<ExportFormat, String> {
    ExportFormat::parse(value)
        .ok_or_else(|| format!("unknown format {value:?}; known: smp, fortio"))
}

pub fn run(a: ExportArgs) -> anyhow::Result<()> {
    let result = super::compare::load(&a.dir)?;
    let dir = if a.dir.is_dir() {
        a.dir.clone()
    } else {
        a.dir.parent().map(PathBuf::from).unwrap_or_default()
    };
    let written = write_exports(&dir, &result, a.format)?;
    for path in &written {
        println!("{}", path.display());
    }
    if written.len() < result.cells.len() {
        eprintln!(
            "meshbench export: {} of {} cells had no histogram meshbench wrote and were left out",
            result.cells.len() - written.len(),
            result.cells.len()
        );
    }
    Ok(())
}
