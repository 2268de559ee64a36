//! `meshbench verify`: E3's reachability matrix, wire evidence and identity checks for each
//! mesh, written as `verify.json`, `verify.md` and `verify.html`; exit code 1 when any
//! verdict fails, so it can gate a pipeline.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::Args;
use meshbench_meshes::{enrollable, unenforceable, Mesh};
use meshbench_results::VerifyReport;
use meshbench_verify::{verify, VerifyOptions};

use super::{BadInput, Interrupted};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Meshes to verify, comma-separated (default: every data plane of the local lab; HAProxy
    /// and nginx cannot enforce identity rules, so they are reported not verified, which
    /// fails; `baseline`, which enrolls nothing, is the negative control and fails).
    #[arg(long, value_delimiter = ',')]
    mesh: Vec<String>,
    /// Where results go (default: meshbench-results/verify-<time>).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Some verdict failed; the report says which.
#[derive(Debug, thiserror::Error)]
#[error("verification failed; see {0}")]
pub(super) struct Failed(pub(super) String);

pub fn run(a: VerifyArgs) -> anyhow::Result<()> {
    // `baseline` enrolls nothing: the negative control, where every rule that needs a mesh
    // must fail.
    let mut verifiable = data_planes();
    verifiable.push(Mesh::baseline());
    let supported: Vec<&str> = verifiable.iter().map(|m| m.name()).collect();
    let meshes = if a.mesh.is_empty() {
        data_planes()
    } else {
        a.mesh
            .iter()
            .map(|name| match Mesh::parse(name) {
                Some(mesh) if verifiable.contains(&mesh) => Ok(mesh),
                _ => Err(BadInput(format!(
                    "--mesh: cannot verify {name:?} (verify supports: {})",
                    supported.join(", ")
                ))),
            })
            .collect::<Result<_, _>>()?
    };
    let out_dir = a.out.unwrap_or_else(|| {
        let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .replace(':', "");
        PathBuf::from("meshbench-results").join(format!("verify-{stamp}"))
    });
    let report = verify_into(meshes, &out_dir)?;
    if report.passed {
        eprintln!(
            "verification passed; report in {}",
            out_dir.join("verify.md").display()
        );
        Ok(())
    } else {
        Err(Failed(out_dir.join("verify.md").display().to_string()).into())
    }
}

/// Every data plane of the local lab, in the order verify reports them.
pub(super) fn data_planes() -> Vec<Mesh> {
    enrollable().into_iter().chain(unenforceable()).collect()
}

/// Verifies `meshes` into `out_dir` (`verify.json`, `verify.md`, `verify.html`), printing a
/// line per finished case and per table. Ctrl-C tears the lab down and reports interruption.
pub(super) fn verify_into(meshes: Vec<Mesh>, out_dir: &Path) -> anyhow::Result<VerifyReport> {
    let out_dir = out_dir.to_owned();
    std::fs::create_dir_all(&out_dir)?;
    let options = VerifyOptions {
        meshes,
        out_dir: out_dir.clone(),
        exe: std::env::current_exe()?,
        build: super::build_info(),
    };
    eprintln!(
        "meshbench verify: {} x {} cases, results in {}",
        options
            .meshes
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", "),
        meshbench_verify::CASES.len(),
        out_dir.display()
    );
    let runtime = tokio::runtime::Runtime::new()?;
    let progress = |line: &str| eprintln!("  {line}");
    // Dropping the verification on Ctrl-C tears down its lab (namespaces, processes).
    let report = runtime.block_on(async {
        tokio::select! {
            report = verify(&options, &progress) => report.map_err(anyhow::Error::from),
            () = super::workload::shutdown_signal() => {
                Err(Interrupted(out_dir.display().to_string()).into())
            }
        }
    })?;
    meshbench_results::write_json_atomic(&out_dir.join("verify.json"), &report)?;
    meshbench_report::write_verify_reports(&out_dir, &report)?;
    for table in meshbench_report::verify_tables(&report) {
        let failed = table
            .rows
            .iter()
            .filter(|r| r.iter().any(|c| c == "FAIL"))
            .count();
        eprintln!(
            "  {}: {} rows, {failed} failed",
            table.title,
            table.rows.len()
        );
    }
    Ok(report)
}
