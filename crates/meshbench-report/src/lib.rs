//! Reports from a run's results. [`tables`] turns a `RunResult` into table models (absolute
//! figures per load point; overhead of every scenario relative to `baseline`, as E1's Table I);
//! [`markdown`] and [`html`] render the same tables, so both reports always agree.

mod html;
mod markdown;
mod summary;
pub mod tables;

use std::path::Path;

use meshbench_results::RunResult;

pub use html::render_html;
pub use markdown::render_markdown;
pub use summary::{load_summary, run_summary};

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct Error {
    path: String,
    source: std::io::Error,
}

/// Writes `report.md` and `report.html` into `dir`.
pub fn write_reports(dir: &Path, result: &RunResult) -> Result<(), Error> {
    for (name, text) in [
        ("report.md", render_markdown(result)),
        ("report.html", render_html(result)),
    ] {
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
