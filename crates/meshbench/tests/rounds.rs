//! Rounds until decided as a user runs them on the loopback lab: the run stops once its
//! finding is decided, with one background per round, and says so in its report and the
//! terminal; within a budget shorter than a round it stops after one, and says why. One test,
//! on a quiet machine (`scripts/test` runs it before the test cluster starts): a disturbed
//! round is left out of the verdict, so a busy machine only makes the run longer.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use meshbench_results::{read_json, RunResult, RunStatus, StopReason};
use meshbench_testkit::run_ok;

/// Our sidecar pair adds tens of microseconds to every request's median on loopback: a
/// difference a few rounds decide.
const SPEC: &str = "\
name: rounds
scenarios: [baseline, meshbench-sidecar]
placements: [intra-node]
load:
  model: constant-rate
  points:
    - { rps: 200, connections: 4 }
repetitions: { until: decided, max: 6 }
duration: 2s
warmup: 500ms
findings:
  - study: E1
    statement: A sidecar pair adds to the median
    check: { kind: ordering, metric: p50, order: [baseline, meshbench-sidecar] }
";

/// How long to try for a run whose rounds the machine left undisturbed enough to decide.
const DECIDED_WITHIN: Duration = Duration::from_secs(300);

fn run(spec: &Path, out: &Path, extra: &[&str]) -> (RunResult, String, String) {
    let output = run_ok(
        Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(["run", "--backend", "loopback", "--spec"])
            .arg(spec)
            .args(extra)
            .arg("--out")
            .arg(out),
    );
    let result: RunResult = read_json(&out.join("results.json")).unwrap();
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    (
        result,
        report,
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn a_run_until_decided_stops_once_its_finding_is_decided_or_its_budget_is_spent() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("rounds.yaml");
    std::fs::write(&spec, SPEC).unwrap();

    let began = Instant::now();
    let mut attempt = 0;
    let (result, report, terminal) = loop {
        attempt += 1;
        let (result, report, terminal) =
            run(&spec, &dir.path().join(format!("decided-{attempt}")), &[]);
        assert_eq!(result.status, RunStatus::Complete);
        let stopped = result.stopped.expect("why the rounds stopped");
        if stopped.reason == StopReason::Decided {
            break (result, report, terminal);
        }
        // Undecided only because the machine disturbed the rounds: noise left them out.
        assert!(report.contains("left out: noise"), "{stopped:?}: {report}");
        assert!(
            began.elapsed() < DECIDED_WITHIN,
            "no run decided in {attempt} tries: the machine disturbed every round"
        );
    };
    let stopped = result.stopped.unwrap();
    assert!((2..6).contains(&stopped.rounds), "{stopped:?}");
    assert_eq!(result.cells.len() as u32, 2 * stopped.rounds);
    let rounds = result.cells.iter().map(|c| c.repetition).max().unwrap();
    assert_eq!(rounds, stopped.rounds);
    let before: Vec<u32> = result.backgrounds.iter().map(|b| b.before_cell).collect();
    let expected: Vec<u32> = (0..stopped.rounds).map(|r| 2 * r).collect();
    assert_eq!(before, expected, "one background before each round");
    let said = format!("Rounds until decided: {rounds} rounds ran (at most 6)");
    assert!(report.contains(&said), "{report}");
    assert!(report.contains("it stopped because every finding was decided"));
    assert!(report.contains("valid over a look after each of at most 6"));
    assert!(terminal.contains(&said), "{terminal}");

    // The same spec within a budget shorter than a round: one round, and why.
    let (result, report, _) = run(
        &spec,
        &dir.path().join("budget"),
        &["--until-decided", "--budget", "1s"],
    );
    let stopped = result.stopped.unwrap();
    assert_eq!(stopped.reason, StopReason::Budget);
    assert_eq!(stopped.rounds, 1);
    let rule = result.config.until_decided.unwrap();
    assert_eq!((rule.max_rounds, rule.budget_seconds), (6, Some(1.0)));
    assert!(
        report.contains("another round would not have fitted in the time budget"),
        "{report}"
    );
    assert!(report.contains("Still undecided: E1"), "{report}");
}
