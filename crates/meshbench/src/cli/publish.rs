//! `meshbench publish keep|page`: keep a run's results (or a verification) compressed where a
//! repository can hold them, and make a study's page (`docs/results/E1.md`) and its charts
//! from what is kept, so that the page can always be made again from its results.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use meshbench_report::publish::{study_page, Kept};
use meshbench_results::RunStatus;

use super::BadInput;

#[derive(Debug, Subcommand)]
pub enum PublishCommand {
    /// Keep a run's results (or a verification's report) gzip-compressed, for a study's page:
    /// `publish keep meshbench-results/mtls-... docs/results/E1/run-1.json.gz`.
    Keep(KeepArgs),
    /// Make a study's page and its charts from kept results:
    /// `publish page E1 --out docs/results/E1.md docs/results/E1/*.json.gz`.
    Page(PageArgs),
}

#[derive(Debug, Args)]
pub struct KeepArgs {
    /// A result directory (its results.json, or verify.json for a verification), or the
    /// document itself.
    from: PathBuf,
    /// The compressed copy to write (e.g. docs/results/E1/run-1.json.gz).
    to: PathBuf,
}

#[derive(Debug, Args)]
pub struct PageArgs {
    /// The study: E1, E2, E3, E4 or E5.
    study: String,
    /// The page to write; its charts go into the directory of the same name without `.md`.
    #[arg(long)]
    out: PathBuf,
    /// Markdown kept beside the results that the page shows under "What could not run here,
    /// and what limits the verdicts": what the results cannot say themselves (a mesh left
    /// out of the runs and why, what kept a finding undecided).
    #[arg(long)]
    notes: Option<PathBuf>,
    /// Kept results (from `publish keep`, or plain results.json / verify.json), in the order
    /// the page shows them.
    #[arg(required = true)]
    kept: Vec<PathBuf>,
}

pub fn run(command: PublishCommand) -> anyhow::Result<()> {
    match command {
        PublishCommand::Keep(args) => keep(args),
        PublishCommand::Page(args) => page(args),
    }
}

fn keep(args: KeepArgs) -> anyhow::Result<()> {
    let source = if args.from.is_dir() {
        ["results.json", "verify.json"]
            .iter()
            .map(|name| args.from.join(name))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                BadInput(format!(
                    "from: {} has neither results.json nor verify.json",
                    args.from.display()
                ))
            })?
    } else {
        args.from.clone()
    };
    let document = read(&source)?;
    if let Kept::Run { result, .. } = &document {
        if result.status == RunStatus::Running {
            return Err(BadInput(format!(
                "from: {} is a run still going (status running); keep it once it has finished \
                 or been stopped",
                source.display()
            ))
            .into());
        }
    }
    match &document {
        Kept::Run { result, .. } => meshbench_results::write_json_gz_atomic(&args.to, result),
        Kept::Verify { report, .. } => meshbench_results::write_json_gz_atomic(&args.to, report),
    }?;
    let size = std::fs::metadata(&args.to).map(|m| m.len()).unwrap_or(0);
    println!(
        "kept {} as {} ({:.1} MiB)",
        source.display(),
        args.to.display(),
        size as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn page(args: PageArgs) -> anyhow::Result<()> {
    let Some(name) = args.out.file_name().and_then(|n| n.to_str()) else {
        return Err(BadInput(format!("out: {} names no file", args.out.display())).into());
    };
    let Some(chart_dir_name) = name.strip_suffix(".md") else {
        return Err(BadInput(format!("out: {} is not a .md page", args.out.display())).into());
    };
    let kept = args
        .kept
        .iter()
        .map(|path| read(path))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let notes = args
        .notes
        .as_ref()
        .map(|path| read_notes(path))
        .transpose()?;
    let command = format!(
        "meshbench publish page {} --out {}{} {}",
        args.study,
        args.out.display(),
        args.notes
            .as_ref()
            .map(|n| format!(" --notes {}", n.display()))
            .unwrap_or_default(),
        args.kept
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let page = study_page(
        &args.study,
        &kept,
        notes.as_deref(),
        &command,
        chart_dir_name,
    )
    .map_err(|e| BadInput(e.to_string()))?;
    let chart_dir = args.out.with_file_name(chart_dir_name);
    std::fs::create_dir_all(&chart_dir)
        .with_context(|| format!("cannot make {}", chart_dir.display()))?;
    for (file, svg) in &page.charts {
        write_atomic(&chart_dir.join(file), svg)?;
    }
    write_atomic(&args.out, &page.markdown)?;
    println!(
        "wrote {} and {} chart(s) in {}",
        args.out.display(),
        page.charts.len(),
        chart_dir.display()
    );
    Ok(())
}

/// The most a page's notes may be: they are a few paragraphs, not a document.
const MAX_NOTES_BYTES: u64 = 64 << 10;

fn read_notes(path: &Path) -> anyhow::Result<String> {
    let bad = |what: String| BadInput(format!("notes: {}: {what}", path.display()));
    let size = std::fs::metadata(path)
        .map_err(|e| bad(e.to_string()))?
        .len();
    if size > MAX_NOTES_BYTES {
        return Err(bad(format!(
            "{size} bytes, more than the {MAX_NOTES_BYTES} notes may be"
        ))
        .into());
    }
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".to_owned()).into())
}

/// A run's results or a verification's report, told apart by its `kind`.
fn read(path: &Path) -> anyhow::Result<Kept> {
    let bad = |e: &dyn std::fmt::Display| BadInput(format!("kept: {e}"));
    let value: serde_json::Value = meshbench_results::read_json_any(path).map_err(|e| bad(&e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    match kind {
        "meshbench.run" => Ok(Kept::Run {
            name,
            result: Box::new(parsed(path, value)?),
        }),
        "meshbench.verify" => Ok(Kept::Verify {
            name,
            report: Box::new(parsed(path, value)?),
        }),
        other => Err(bad(&format!(
            "{}: kind {other:?} is neither a run (meshbench.run) nor a verification \
             (meshbench.verify)",
            path.display()
        ))
        .into()),
    }
}

/// A kept document as the type its `kind` names.
fn parsed<T: serde::de::DeserializeOwned>(
    path: &Path,
    value: serde_json::Value,
) -> Result<T, BadInput> {
    serde_json::from_value(value).map_err(|e| BadInput(format!("kept: {}: {e}", path.display())))
}

fn write_atomic(path: &Path, text: &str) -> anyhow::Result<()> {
    Ok(meshbench_results::write_bytes_atomic(
        path,
        text.as_bytes(),
    )?)
}
