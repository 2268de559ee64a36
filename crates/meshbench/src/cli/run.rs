//! `meshbench run`: an experiment on the local lab, with progress, a summary, results and
//! reports. Ctrl-C (or SIGTERM) stops every lab process and keeps the finished cells.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use meshbench_experiment::{CellId, Profile, Progress, RunOptions, Runner, Scale};
use meshbench_local::{LocalLab, LocalOptions};
use meshbench_meshes::Scenario;
use meshbench_netlab::Backend;
use meshbench_results::{Background, Cell, RunResult, RunStatus, UnavailableScenario};

use super::args::RunBackend;
use super::{BadInput, Interrupted};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Built-in experiment profile (`meshbench profiles` lists them); default quick.
    #[arg(long, conflicts_with = "spec")]
    profile: Option<String>,
    /// An experiment spec (YAML) of your own; `meshbench profiles show NAME` prints one to
    /// start from.
    #[arg(long)]
    spec: Option<PathBuf>,
    /// local (sized for this machine) or original (the study's loads, durations and
    /// repetitions, from the spec's `original:` section).
    #[arg(long, default_value = "local", value_parser = scale)]
    scale: Scale,
    /// Where the cells run: netns (the local lab, nodes and pods as network namespaces;
    /// needs root), loopback (the local lab, pods on 127.x addresses) or kubernetes (a
    /// cluster, see --kubeconfig). Default: netns where permitted.
    #[arg(long, value_parser = super::args::backend)]
    backend: Option<RunBackend>,
    #[command(flatten)]
    kube: super::args::KubeArgs,
    /// Pin the load generator to CPU 0 and the system under test to the other CPUs.
    #[arg(long)]
    pin: bool,
    /// Record the traffic and whether it was TLS and the request marker leaked: tcpdump on the
    /// link between nodes during inter-node cells (netns backend), recording relays in the
    /// path (loopback backend; they add their own latency), or, on a cluster, a capture in
    /// the server pod (our node agent's link in its agent pod) during every cell, its first
    /// 8 MiB kept.
    #[arg(long)]
    capture_link: bool,
    /// Measured duration of every cell, instead of the profile's.
    #[arg(long, value_parser = super::args::duration)]
    duration: Option<std::time::Duration>,
    /// Only these scenarios of the profile (comma-separated mesh names, e.g.
    /// baseline,meshbench-sidecar).
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Only these placements of the profile: intra-node, inter-node.
    #[arg(long, value_delimiter = ',')]
    placements: Vec<String>,
    /// Only the profile's load points at these rates (requests per second, comma-separated,
    /// e.g. 400): a run aimed at the study's own load spends its rounds there.
    #[arg(long, value_delimiter = ',')]
    rates: Vec<f64>,
    /// Rounds until every finding of the profile is decided (held or did not hold): after each
    /// round from the second, stop once all are, with intervals valid over every look. The
    /// spec's `repetitions: {until: decided, max: N, budget: 2h}` does the same.
    #[arg(long)]
    until_decided: bool,
    /// With --until-decided: the most rounds (default 10).
    #[arg(long, requires = "until_decided")]
    max_rounds: Option<u32>,
    /// With --until-decided: the time the rounds may take, e.g. 2h; a round that would not
    /// fit is not started (default: none).
    #[arg(long, requires = "until_decided", value_parser = super::args::duration)]
    budget: Option<std::time::Duration>,
    /// Warm-up of every cell, instead of the profile's.
    #[arg(long, value_parser = super::args::duration)]
    warmup: Option<std::time::Duration>,
    /// Result directory (default: meshbench-results/<profile>-<timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue an interrupted run in this directory: the same spec and settings, finished
    /// cells kept, the missing ones run and appended.
    #[arg(long, conflicts_with_all = ["profile", "spec", "out", "duration", "warmup", "scenarios", "placements", "rates", "until_decided"])]
    resume: Option<PathBuf>,
    /// After the cells, verify the run's meshes that can be verified (`meshbench verify`:
    /// E3's zero-trust matrix, wire evidence, identity checks) into `<out>/verify/`; the
    /// reports get a verification section, and a failed verdict makes the exit code 1
    /// (netns backend).
    #[arg(long)]
    verify: bool,
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let target = a.backend.unwrap_or_else(|| {
        let (backend, why_not_netns) = Backend::default_here_and_why();
        // The user did not choose the loopback backend: say why it is used and what it
        // cannot show, once, before anything runs.
        if let Some(why) = why_not_netns {
            eprintln!(
                "meshbench run: {}.",
                Backend::loopback_fallback_notice(&why)
            );
        }
        RunBackend::Lab(backend)
    });
    #[cfg(not(feature = "kubernetes"))]
    if target == RunBackend::Kubernetes {
        return Err(super::args::without_kubernetes("--backend kubernetes"));
    }
    // The local lab's network backend; a cluster has its own network.
    let backend = match target {
        RunBackend::Lab(backend) => backend,
        RunBackend::Kubernetes => Backend::default_here(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let options = |out_dir: &Path| RunOptions {
        out_dir: out_dir.to_owned(),
        build: super::build_info(),
    };
    let local_lab = |out_dir: &Path| -> anyhow::Result<Box<LocalLab>> {
        Ok(Box::new(LocalLab::new(LocalOptions {
            backend,
            exe: std::env::current_exe()?,
            out_dir: out_dir.to_owned(),
            pin: a.pin,
            capture_link: a.capture_link,
        })?))
    };
    if let Some(dir) = &a.resume {
        let runner = match target {
            RunBackend::Lab(_) => Runner::resume_on(local_lab(dir)?, options(dir))?,
            RunBackend::Kubernetes => {
                let platform = runtime.block_on(a.kube.connect(
                    &meshbench_netlab::new_lab_id(),
                    dir,
                    a.capture_link,
                ))?;
                Runner::resume_on(platform, options(dir))?
            }
        };
        let verify = verified_meshes(a.verify, runner.profile(), target)?;
        return execute(runtime, runner, dir, target, "resuming", verify);
    }
    let mut profile = match (&a.spec, &a.profile) {
        (Some(path), _) => Profile::from_file(path, a.scale)?,
        (None, name) => Profile::builtin(name.as_deref().unwrap_or("quick"), a.scale)?,
    };
    if let Some(duration) = a.duration {
        profile.set_duration(duration)?;
    }
    if let Some(warmup) = a.warmup {
        profile.set_warmup(warmup)?;
    }
    profile.select(&a.scenarios, &a.placements)?;
    profile.select_rates(&a.rates)?;
    if a.until_decided {
        let max_rounds = a
            .max_rounds
            .or(profile.until_decided.map(|u| u.max_rounds))
            .unwrap_or(DEFAULT_MAX_ROUNDS);
        let budget = a.budget.or(profile.until_decided.and_then(|u| u.budget));
        profile.set_until_decided(max_rounds, budget)?;
    }
    let out_dir = a
        .out
        .clone()
        .unwrap_or_else(|| default_out_dir(&profile.name));
    let verify = verified_meshes(a.verify, &profile, target)?;
    let runner = match target {
        RunBackend::Lab(_) => Runner::on(local_lab(&out_dir)?, profile, options(&out_dir))?,
        RunBackend::Kubernetes => {
            std::fs::create_dir_all(&out_dir)?;
            let platform = runtime.block_on(a.kube.connect(
                &meshbench_netlab::new_lab_id(),
                &out_dir,
                a.capture_link,
            ))?;
            Runner::on(platform, profile, options(&out_dir))?
        }
    };
    execute(runtime, runner, &out_dir, target, "running", verify)
}

/// The meshes `--verify` verifies: the run's scenarios that can enroll E3's application.
fn verified_meshes(
    requested: bool,
    profile: &Profile,
    target: RunBackend,
) -> Result<Option<Vec<Scenario>>, BadInput> {
    if !requested {
        return Ok(None);
    }
    if target != RunBackend::Lab(Backend::Netns) {
        return Err(BadInput(
            "--verify: verification needs the netns backend (transparent capture)".into(),
        ));
    }
    let data_planes = super::verify::data_planes();
    let meshes: Vec<Scenario> = profile
        .scenarios
        .iter()
        .copied()
        .filter(|m| data_planes.contains(m))
        .collect();
    if meshes.is_empty() {
        let names = |ms: &[Scenario]| ms.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ");
        return Err(BadInput(format!(
            "--verify: none of this run's scenarios ({}) can be verified (verify supports {})",
            names(&profile.scenarios),
            names(&data_planes)
        )));
    }
    Ok(Some(meshes))
}

/// `--until-decided` without `--max-rounds` or a spec's own.
const DEFAULT_MAX_ROUNDS: u32 = 10;

fn execute(
    runtime: tokio::runtime::Runtime,
    runner: Runner,
    out_dir: &Path,
    target: RunBackend,
    verb: &str,
    verify: Option<Vec<Scenario>>,
) -> anyhow::Result<()> {
    let profile = runner.profile();
    let remaining = profile.cells() - runner.finished_cells();
    eprintln!(
        "meshbench run: {verb} profile {} ({} scale) on the {} backend ({remaining} of {} cells to run, about {}), results in {}",
        profile.name,
        profile.scale.name(),
        target.name(),
        profile.cells(),
        humantime::format_duration(std::time::Duration::from_secs(
            profile.estimated_duration().as_secs() * remaining as u64 / profile.cells().max(1) as u64
        )),
        out_dir.display()
    );
    let out_dir = out_dir.to_owned();
    let runner = runner.deciding_with(Box::new(meshbench_report::undecided_findings));
    let progress = CellProgress::new(remaining);
    let outcome = runtime.block_on(runner.run(&progress, super::workload::shutdown_signal()));
    progress.bar.finish_and_clear();
    let result = match outcome {
        Ok(result) => result,
        Err(e) => {
            // The partial document is on disk; report what was finished before failing.
            if let Ok(partial) =
                meshbench_results::read_json::<RunResult>(&out_dir.join("results.json"))
            {
                meshbench_report::write_reports(&out_dir, &partial)?;
            }
            return Err(e.into());
        }
    };
    meshbench_report::write_reports(&out_dir, &result)?;
    let mut verification_failed = false;
    if let (Some(meshes), RunStatus::Complete) = (verify, result.status) {
        // The run's reports are already written: an interrupted verification loses nothing.
        let report = super::verify::verify_into(
            meshes,
            meshbench_verify::zero_trust_policy(),
            &out_dir.join(meshbench_report::RUN_VERIFY_DIR),
        )?;
        verification_failed = !report.passed;
        meshbench_report::write_reports(&out_dir, &result)?;
    }
    println!("{}", meshbench_report::run_summary(&result));
    println!(
        "results: {}\nreports: {} {}",
        out_dir.join("results.json").display(),
        out_dir.join("report.md").display(),
        out_dir.join("report.html").display()
    );
    if result.status == RunStatus::Partial {
        return Err(Interrupted(out_dir.display().to_string()).into());
    }
    if verification_failed {
        return Err(super::verify::Failed(out_dir.join("report.md").display().to_string()).into());
    }
    Ok(())
}

fn scale(value: &str) -> Result<Scale, String> {
    Scale::parse(value).ok_or_else(|| format!("unknown scale {value:?}; known: local, original"))
}

fn default_out_dir(profile: &str) -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "");
    PathBuf::from("meshbench-results").join(format!("{profile}-{stamp}"))
}

struct CellProgress {
    bar: ProgressBar,
    interactive: bool,
}

impl CellProgress {
    fn new(cells: usize) -> Self {
        let bar = ProgressBar::new(cells as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} cells, ETA {eta} | {msg}")
                .expect("static template is valid"),
        );
        CellProgress {
            bar,
            interactive: std::io::stderr().is_terminal(),
        }
    }
}

impl Progress for CellProgress {
    fn scenario_unavailable(&self, scenario: &UnavailableScenario) {
        self.bar
            .println(format!("skipping {}: {}", scenario.name, scenario.reason));
        if !self.interactive {
            eprintln!("skipping {}: {}", scenario.name, scenario.reason);
        }
    }

    fn cell_started(&self, cell: &CellId) {
        self.bar.set_message(cell.label());
    }

    fn cell_finished(&self, cell: &CellId, result: &Cell, background: Option<&Background>) {
        let line =
            meshbench_report::cell_line(cell.index, cell.total, &cell.label(), result, background);
        if self.interactive {
            self.bar.println(line);
        } else {
            eprintln!("{line}");
        }
        self.bar.inc(1);
    }
}
