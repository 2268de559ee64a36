//! Reports from a run's results. [`Analysis`] computes the statistics once (outlier policy,
//! pooled distributions, tests against the baseline, fits); [`glance`] opens every report with
//! plain sentences and the findings' verdict matrix; [`tables`] turns it into table
//! models (absolute figures, overhead relative to `baseline` as E1's Table I, significance,
//! distributions); [`markdown`] and [`html`] render the same tables, so both reports always
//! agree; the HTML adds SVG charts; CSV files export the same figures for other tools, and
//! [`export`] writes each cell as Fortio and SMP documents.

mod analysis;
mod background;
pub mod capacity;
mod cell;
mod charts;
mod compare;
mod cost;
mod csv;
pub mod export;
pub mod findings;
pub mod glance;
mod html;
mod markdown;
pub mod publish;
mod summary;
mod table;
pub mod tables;
pub mod trust;
mod verify;

use std::path::Path;

use meshbench_results::{RunResult, VerifyReport};

pub use analysis::{Analysis, Basis, Comparison, Group, Point};
pub use charts::{charts, Chart};
pub use compare::compare_runs;
pub use cost::{cost_table, Prices};
pub use export::{write_exports, ExportFormat};
pub use findings::undecided_findings;
pub use glance::{glance, Glance};
pub use html::{escape as html_escape, glance_html, render_html, table_html};
pub use markdown::{render_markdown, render_tables};
pub use summary::{cell_line, load_summary, run_summary};
pub use verify::{verify_header, verify_tables};

#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct Error {
    path: String,
    source: std::io::Error,
}

/// Where a run directory keeps the verification of its meshes (`meshbench run --verify`):
/// `<run>/verify/verify.json`, with its own `verify.md` and `verify.html`.
pub const RUN_VERIFY_DIR: &str = "verify";

/// The verification kept with a run, if there is one.
pub fn run_verification(dir: &Path) -> Result<Option<VerifyReport>, Error> {
    let path = dir.join(RUN_VERIFY_DIR).join("verify.json");
    if !path.is_file() {
        return Ok(None);
    }
    meshbench_results::read_json(&path)
        .map(Some)
        .map_err(|e| Error {
            path: path.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })
}

/// Writes `report.md`, `report.html` and the CSV exports (`figures.csv`, `comparisons.csv`,
/// `cells.csv`) into `dir`; the run's verification, if it has one, becomes a section of both
/// reports.
pub fn write_reports(dir: &Path, result: &RunResult) -> Result<(), Error> {
    let analysis = Analysis::of(result);
    let figures = tables::figures(&analysis);
    let verification = run_verification(dir)?;
    let verification = verification.as_ref();
    write_files(
        dir,
        [
            (
                "report.md",
                render_markdown(result, &analysis, verification),
            ),
            ("report.html", render_html(result, &analysis, verification)),
            ("figures.csv", csv::figures(&figures)),
            ("comparisons.csv", csv::comparisons(&analysis)),
            ("cells.csv", csv::cells(result, &analysis)),
        ],
    )
}

/// Writes `verify.md` and `verify.html` into `dir`.
pub fn write_verify_reports(dir: &Path, report: &VerifyReport) -> Result<(), Error> {
    let (header, tables) = (verify_header(report), verify_tables(report));
    let title = "meshbench verification";
    write_files(
        dir,
        [
            ("verify.md", markdown::page(title, &header, &tables)),
            ("verify.html", html::page(title, title, &header, &tables)),
        ],
    )
}

fn write_files<const N: usize>(dir: &Path, files: [(&str, String); N]) -> Result<(), Error> {
    for (name, text) in files {
        let path = dir.join(name);
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| Error {
                path: path.display().to_string(),
                source,
            })?;
    }
    Ok(())
}
