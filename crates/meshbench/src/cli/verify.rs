//! `meshbench verify`: E3's reachability matrix, wire evidence and identity checks for each
//! mesh, written as `verify.json`, `verify.md` and `verify.html`; exit code 1 when any
//! verdict fails, so it can gate a pipeline.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::Args;
use meshbench_meshes::{enrollable, unenforceable, Scenario};
use meshbench_netlab::Backend;
use meshbench_results::VerifyReport;
use meshbench_verify::{verify, VerifyOptions};
#[cfg(feature = "kubernetes")]
use meshbench_verify::{verify_on_cluster, ClusterVerifyOptions};

use super::args::RunBackend;

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
    /// Where the meshes run: `netns` (the local lab, default) or `kubernetes` (a cluster;
    /// see --kubeconfig, --context, --image).
    #[arg(long, value_parser = super::args::backend)]
    backend: Option<super::args::RunBackend>,
    /// A policy over E3's application to verify instead of E3's own (the YAML of `mesh
    /// render --policy`: its namespaces `app` and `external`, its workloads calculator,
    /// experimenter, security-checker and external-checker), e.g. with L7 rules that a
    /// mesh enforces at a waypoint. Each probe's expectation follows it.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    #[command(flatten)]
    kube: super::args::KubeTarget,
}

/// Some verdict failed; the report says which.
#[derive(Debug, thiserror::Error)]
#[error("verification failed; see {0}")]
pub(super) struct Failed(pub(super) String);

pub fn run(a: VerifyArgs) -> anyhow::Result<()> {
    let on_cluster = match a.backend {
        None | Some(RunBackend::Lab(Backend::Netns)) => false,
        Some(RunBackend::Kubernetes) => true,
        Some(RunBackend::Lab(other)) => {
            return Err(BadInput(format!(
                "--backend: verify cannot run on {} (verification needs transparent capture: netns or kubernetes)",
                other.name()
            ))
            .into())
        }
    };
    // `baseline` enrolls nothing: the negative control, where every rule that needs a mesh
    // must fail.
    let mut verifiable = data_planes();
    if on_cluster {
        // A mesh the cluster runs is verified as installed (whether it is, the cluster says).
        verifiable.extend(Scenario::all().filter(|m| m.installed().is_some()));
    }
    verifiable.push(Scenario::baseline());
    let supported: Vec<&str> = verifiable.iter().map(|m| m.name()).collect();
    let meshes = if a.mesh.is_empty() && on_cluster {
        cluster_data_planes()
    } else if a.mesh.is_empty() {
        data_planes()
    } else {
        a.mesh
            .iter()
            .map(|name| match Scenario::parse(name) {
                Some(mesh) if verifiable.contains(&mesh) => Ok(mesh),
                _ => Err(BadInput(format!(
                    "--mesh: cannot verify {name:?} (verify supports: {})",
                    supported.join(", ")
                ))),
            })
            .collect::<Result<_, _>>()?
    };
    let policy = match &a.policy {
        None => meshbench_verify::zero_trust_policy(),
        Some(path) => {
            let yaml = std::fs::read_to_string(path)
                .map_err(|e| BadInput(format!("--policy: cannot read {}: {e}", path.display())))?;
            meshbench_policy::Policy::from_yaml(&yaml).map_err(|e| {
                BadInput(format!(
                    "--policy: {} is not a valid policy: {e}",
                    path.display()
                ))
            })?;
            yaml
        }
    };
    let out_dir = a.out.unwrap_or_else(|| {
        let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .replace(':', "");
        PathBuf::from("meshbench-results").join(format!("verify-{stamp}"))
    });
    let report = if on_cluster {
        verify_on_cluster_into(meshes, policy, &out_dir, &a.kube)?
    } else {
        verify_into(meshes, policy, &out_dir)?
    };
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
pub(super) fn data_planes() -> Vec<Scenario> {
    enrollable().into_iter().chain(unenforceable()).collect()
}

/// The data planes that enroll E3's application on a cluster.
fn cluster_data_planes() -> Vec<Scenario> {
    data_planes()
        .into_iter()
        .filter(|m| m.enrolls_on_cluster())
        .collect()
}

#[cfg(not(feature = "kubernetes"))]
fn verify_on_cluster_into(
    _: Vec<Scenario>,
    _: String,
    _: &Path,
    _: &super::args::KubeTarget,
) -> anyhow::Result<VerifyReport> {
    Err(super::args::without_kubernetes(
        "verify --backend kubernetes",
    ))
}

/// Verifies `meshes` on the cluster of `kube` into `out_dir`, as [`verify_into`] does on
/// the local lab. Ctrl-C deletes what the verification created on the cluster.
#[cfg(feature = "kubernetes")]
fn verify_on_cluster_into(
    meshes: Vec<Scenario>,
    policy: String,
    out_dir: &Path,
    kube: &super::args::KubeTarget,
) -> anyhow::Result<VerifyReport> {
    std::fs::create_dir_all(out_dir)?;
    let run = meshbench_netlab::new_lab_id();
    let options = ClusterVerifyOptions {
        meshes,
        out_dir: out_dir.to_owned(),
        kube: kube.options(out_dir),
        build: super::build_info(),
        run,
        policy,
    };
    announce(&options.meshes, out_dir);
    let progress = |line: &str| eprintln!("  {line}");
    let report = until_interrupted(out_dir, verify_on_cluster(&options, &progress))?;
    write_report(out_dir, report)
}

/// Runs `verification` to its end, or until Ctrl-C drops it; dropping it tears down what
/// it made (the lab's namespaces and processes, or the cluster's objects).
fn until_interrupted(
    out_dir: &Path,
    verification: impl std::future::Future<Output = Result<VerifyReport, meshbench_verify::Error>>,
) -> anyhow::Result<VerifyReport> {
    tokio::runtime::Runtime::new()?.block_on(async {
        tokio::select! {
            report = verification => report.map_err(anyhow::Error::from),
            () = super::workload::shutdown_signal() => {
                Err(Interrupted(out_dir.display().to_string()).into())
            }
        }
    })
}

fn announce(meshes: &[Scenario], out_dir: &Path) {
    eprintln!(
        "meshbench verify: {} x {} cases, results in {}",
        meshes
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", "),
        meshbench_verify::CASES.len(),
        out_dir.display()
    );
}

/// Writes `verify.json`, `verify.md` and `verify.html` and prints a line per table.
fn write_report(out_dir: &Path, report: VerifyReport) -> anyhow::Result<VerifyReport> {
    meshbench_results::write_json_atomic(&out_dir.join("verify.json"), &report)?;
    meshbench_report::write_verify_reports(out_dir, &report)?;
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

/// Verifies `meshes` into `out_dir` (`verify.json`, `verify.md`, `verify.html`), printing a
/// line per finished case and per table. Ctrl-C tears the lab down and reports interruption.
pub(super) fn verify_into(
    meshes: Vec<Scenario>,
    policy: String,
    out_dir: &Path,
) -> anyhow::Result<VerifyReport> {
    let out_dir = out_dir.to_owned();
    std::fs::create_dir_all(&out_dir)?;
    let options = VerifyOptions {
        meshes,
        out_dir: out_dir.clone(),
        exe: std::env::current_exe()?,
        build: super::build_info(),
        policy,
    };
    announce(&options.meshes, &out_dir);
    let progress = |line: &str| eprintln!("  {line}");
    let report = until_interrupted(&out_dir, verify(&options, &progress))?;
    write_report(&out_dir, report)
}
