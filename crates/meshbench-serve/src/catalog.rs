//! The results directory as the server sees it: runs (directories with a `results.json`),
//! verifications (with a `verify.json`), and the files each offers. A run id or a file name
//! from a request is only ever looked up among these, never joined to a path as given, and
//! every file is read through [`crate::untrusted`]: no link under the results directory is
//! followed, and a run whose files cannot be read is listed as unreadable, with the reason.

use std::path::{Path, PathBuf};

use meshbench_report::export::{cell_stem, export_cell, ExportFormat};
use meshbench_results::{RunResult, RunStatus, VerifyReport};
use serde::Serialize;

use crate::untrusted;

/// Longest run id accepted (a directory name).
const MAX_ID_LEN: usize = 128;

/// A directory name the server will look up: letters, digits, `.`, `_` and `-`, not starting
/// with a dot.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A run's (or a verification's) directory: `id` under the results root, its files read
/// only through [`crate::untrusted`].
#[derive(Debug, Clone)]
pub struct RunDir {
    root: PathBuf,
    id: String,
}

impl RunDir {
    fn relative(&self, name: &str) -> String {
        format!("{}/{name}", self.id)
    }

    pub fn read(&self, name: &str) -> Result<Vec<u8>, untrusted::Refused> {
        untrusted::read(&self.root, &self.relative(name))
    }

    pub fn json<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<T, String> {
        untrusted::read_json(&self.root, &self.relative(name))
    }

    pub fn has(&self, name: &str) -> bool {
        untrusted::exists(&self.root, &self.relative(name))
    }
}

/// The directory of run `id`, if the results directory has one (a link there is one: it is
/// refused when read, and says so).
pub fn run_dir(results: &Path, id: &str) -> Option<RunDir> {
    dir_with(results, id, "results.json")
}

/// The directory of verification `id`, if the results directory has one.
pub fn verify_dir(results: &Path, id: &str) -> Option<RunDir> {
    dir_with(results, id, "verify.json")
}

fn dir_with(results: &Path, id: &str, file: &str) -> Option<RunDir> {
    let dir = RunDir {
        root: results.to_owned(),
        id: id.to_owned(),
    };
    (valid_id(id) && (dir.has(file) || is_link(results, id))).then_some(dir)
}

/// Whether `id` in the results directory is itself a symbolic link.
fn is_link(results: &Path, id: &str) -> bool {
    std::fs::symlink_metadata(results.join(id)).is_ok_and(|m| m.file_type().is_symlink())
}

/// A run as the list shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub id: String,
    pub profile: String,
    pub description: String,
    /// Where its cells ran: `local lab (netns)`, `kubernetes`, ...
    pub platform: String,
    /// `complete`, `partial`, `running`, `queued`, or `unreadable`.
    pub status: String,
    pub status_reason: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub scenarios: Vec<String>,
    pub placements: Vec<String>,
    pub cells_done: usize,
    pub cells_total: Option<usize>,
    /// `passed` or `failed` when the run was verified (`run --verify`).
    pub verify: Option<String>,
}

impl RunSummary {
    pub fn of(id: &str, result: &RunResult, dir: &RunDir) -> RunSummary {
        let status = match result.status {
            RunStatus::Complete => "complete",
            RunStatus::Partial => "partial",
            RunStatus::Running => "running",
        };
        let verify = dir
            .json::<VerifyReport>(&format!("{}/verify.json", meshbench_report::RUN_VERIFY_DIR))
            .ok()
            .map(|v| if v.passed { "passed" } else { "failed" }.to_owned());
        RunSummary {
            id: id.to_owned(),
            profile: result.config.profile.clone(),
            description: result.config.description.clone(),
            platform: result.config.platform.clone(),
            status: status.to_owned(),
            status_reason: result.status_reason.clone(),
            started_at: result.started_at.clone(),
            finished_at: result.finished_at.clone(),
            scenarios: result
                .config
                .scenarios
                .iter()
                .map(|s| s.name.clone())
                .collect(),
            placements: result.config.placements.clone(),
            cells_done: result.cells.len(),
            cells_total: meshbench_experiment::Profile::from_run_config(&result.config)
                .ok()
                .map(|p| {
                    p.cells() / p.scenarios.len().max(1)
                        * p.scenarios
                            .len()
                            .saturating_sub(result.config.unavailable.len())
                }),
            verify,
        }
    }

    pub fn unreadable(id: &str, why: String) -> RunSummary {
        RunSummary {
            id: id.to_owned(),
            profile: String::new(),
            description: String::new(),
            platform: String::new(),
            status: "unreadable".to_owned(),
            status_reason: Some(why),
            started_at: String::new(),
            finished_at: None,
            scenarios: vec![],
            placements: vec![],
            cells_done: 0,
            cells_total: None,
            verify: None,
        }
    }
}

/// A run's results, or why they cannot be read.
pub fn read_run(dir: &RunDir) -> Result<RunResult, String> {
    dir.json("results.json")
}

/// Every run in the results directory, newest first.
pub fn list_runs(results: &Path) -> Vec<RunSummary> {
    let mut runs: Vec<RunSummary> = subdirs(results)
        .filter_map(|id| run_dir(results, &id).map(|dir| (id, dir)))
        .map(|(id, dir)| match read_run(&dir) {
            Ok(result) => RunSummary::of(&id, &result, &dir),
            Err(why) => RunSummary::unreadable(&id, why),
        })
        .collect();
    runs.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(b.id.cmp(&a.id)));
    runs
}

/// A verification as its list shows it.
#[derive(Debug, Clone, Serialize)]
pub struct VerifySummary {
    pub id: String,
    pub started_at: String,
    pub meshes: Vec<String>,
    pub passed: bool,
}

pub fn read_verification(dir: &RunDir) -> Result<VerifyReport, String> {
    dir.json("verify.json")
}

/// Every verification in the results directory, newest first.
pub fn list_verifications(results: &Path) -> Vec<VerifySummary> {
    let mut list: Vec<VerifySummary> = subdirs(results)
        .filter_map(|id| {
            let report = read_verification(&verify_dir(results, &id)?).ok()?;
            Some(VerifySummary {
                id,
                started_at: report.started_at,
                meshes: report.meshes.iter().map(|m| m.mesh.clone()).collect(),
                passed: report.passed,
            })
        })
        .collect();
    list.sort_by(|a, b| b.started_at.cmp(&a.started_at));
    list
}

/// The names of the results directory's directories, and of its links (listed so that they
/// can be shown as refused).
fn subdirs(results: &Path) -> impl Iterator<Item = String> {
    std::fs::read_dir(results)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir() || t.is_symlink()))
        .filter_map(|e| {
            let id = e.file_name().into_string().ok()?;
            valid_id(&id).then_some(id)
        })
}

/// A file a run offers for download.
#[derive(Debug, Clone, Serialize)]
pub struct RunFile {
    /// Relative to the run directory; what `GET /api/runs/{id}/files/{name}` takes.
    pub name: String,
    pub description: String,
}

/// Files a run writes, with what they hold.
const WRITTEN: [(&str, &str); 9] = [
    (
        "results.json",
        "every cell's measurements (meshbench's result schema)",
    ),
    ("report.html", "the report, with its charts"),
    ("report.md", "the report as Markdown"),
    ("figures.csv", "figures per scenario and load point"),
    ("comparisons.csv", "each scenario against the baseline"),
    ("cells.csv", "one row per cell"),
    ("verify/verify.json", "the run's verification"),
    ("verify/verify.html", "the run's verification report"),
    (
        "verify/verify.md",
        "the run's verification report as Markdown",
    ),
];

/// What a run offers: the files it wrote, and each cell as a Fortio and an SMP document.
pub fn run_files(dir: &RunDir, result: &RunResult) -> Vec<RunFile> {
    let mut files: Vec<RunFile> = WRITTEN
        .iter()
        .filter(|(name, _)| dir.has(name))
        .map(|(name, description)| RunFile {
            name: (*name).to_owned(),
            description: (*description).to_owned(),
        })
        .collect();
    for format in ExportFormat::ALL {
        for (position, cell) in result.cells.iter().enumerate() {
            let what = match format {
                ExportFormat::Fortio => "Fortio result (loads in Fortio's UI)",
                ExportFormat::Smp => "Service Mesh Performance result",
            };
            files.push(RunFile {
                name: export_name(format, position, cell),
                description: format!("{what}: {}", cell_label(cell)),
            });
        }
    }
    files
}

fn export_name(format: ExportFormat, position: usize, cell: &meshbench_results::Cell) -> String {
    format!(
        "{}/{}/{}.json",
        meshbench_report::export::EXPORT_DIR,
        format.name(),
        cell_stem(position, cell)
    )
}

pub fn cell_label(cell: &meshbench_results::Cell) -> String {
    format!(
        "{} {} @ {} rps, {} connections (rep {})",
        cell.scenario,
        cell.placement.as_deref().unwrap_or(""),
        cell.load_point.rps,
        cell.load_point.connections,
        cell.repetition
    )
}

/// A file's body and content type, if `name` is one the run offers; `Err` when it is offered
/// but refused (a link, not a regular file, too large).
pub fn read_file(
    dir: &RunDir,
    result: &RunResult,
    name: &str,
) -> Option<Result<(Vec<u8>, &'static str), untrusted::Refused>> {
    if let Some((_, _)) = WRITTEN.iter().find(|(n, _)| *n == name) {
        return match dir.read(name) {
            Ok(body) => Some(Ok((body, content_type(name)))),
            Err(untrusted::Refused::Missing(_)) => None,
            Err(refused) => Some(Err(refused)),
        };
    }
    for format in ExportFormat::ALL {
        for (position, cell) in result.cells.iter().enumerate() {
            if export_name(format, position, cell) == name {
                let document = export_cell(format, result, position, cell)?;
                let body = serde_json::to_vec_pretty(&document).ok()?;
                return Some(Ok((body, "application/json")));
            }
        }
    }
    None
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("json") => "application/json",
        Some("html") => "text/html; charset=utf-8",
        Some("md") => "text/markdown; charset=utf-8",
        Some("csv") => "text/csv; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A results root with one run directory, `run`.
    fn run_in_tempdir() -> (tempfile::TempDir, RunDir) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("run")).unwrap();
        let dir = RunDir {
            root: root.path().to_owned(),
            id: "run".into(),
        };
        (root, dir)
    }

    #[test]
    fn ids_cannot_climb_out_of_the_results_directory() {
        for bad in [
            "", "..", ".hidden", "a/b", "a\\b", "../etc", "run%2F..", "a b", "é",
        ] {
            assert!(!valid_id(bad), "{bad:?}");
        }
        assert!(!valid_id(&"a".repeat(MAX_ID_LEN + 1)));
        for good in ["smoke-2026-11-25T025000Z", "verify-1", "a.b_c"] {
            assert!(valid_id(good), "{good:?}");
        }
    }

    #[test]
    fn only_listed_files_are_served() {
        let (_root, dir) = run_in_tempdir();
        std::fs::write(dir.root.join("run/report.html"), "<p>report</p>").unwrap();
        std::fs::write(dir.root.join("run/secret.txt"), "no").unwrap();
        let example: RunResult = meshbench_results::read_json(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../meshbench-results/schema/example-results-v1.json"
        )))
        .unwrap();
        assert!(read_file(&dir, &example, "report.html").is_some_and(|r| r.is_ok()));
        for name in [
            "secret.txt",
            "../results.json",
            "/etc/passwd",
            "report.html/..",
            "",
        ] {
            assert!(read_file(&dir, &example, name).is_none(), "{name:?}");
        }
        let files = run_files(&dir, &example);
        let smp = files
            .iter()
            .find(|f| f.name.starts_with("export/smp/"))
            .unwrap();
        let (body, kind) = read_file(&dir, &example, &smp.name).unwrap().unwrap();
        assert_eq!(kind, "application/json");
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(doc["result"]["latenciesMs"]["p99"].is_number());
    }

    proptest::proptest! {
        /// Whatever a request names, a file is served only if the run lists it.
        #[test]
        fn a_name_is_served_only_if_listed(name in "(\\.\\./|/|%2[Ff]|results\\.json|report\\.html|export/(smp|fortio)/|[a-z0-9.-]{0,12}){0,4}") {
            let (_root, dir) = run_in_tempdir();
            for written in ["results.json", "report.html", "secret.txt"] {
                std::fs::write(dir.root.join("run").join(written), "x").unwrap();
            }
            let example: RunResult = meshbench_results::read_json(Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../meshbench-results/schema/example-results-v1.json"
            )))
            .unwrap();
            let listed = run_files(&dir, &example).iter().any(|f| f.name == name);
            proptest::prop_assert_eq!(read_file(&dir, &example, &name).is_some(), listed);
        }

        #[test]
        fn a_valid_id_is_one_directory_below(id in "\\PC{0,20}") {
            if valid_id(&id) {
                proptest::prop_assert!(!id.contains('/') && !id.contains('\\') && !id.starts_with('.'));
                proptest::prop_assert_eq!(Path::new(&id).components().count(), 1);
            }
        }
    }
}
