//! Rounds until decided, judged as a run judges them between rounds: on simulated equal
//! scenarios the false "held" rate of a run that looks after every round and stops at the
//! first decision stays within 5%; a clear difference is decided in a few rounds; a disturbed
//! round is left out instead of keeping a point undecided; an undecided point says how many
//! more rounds it needs.

use meshbench_report::findings::{findings, MoreRounds, Verdict};
use meshbench_report::{glance, undecided_findings, Analysis};
use meshbench_results::{
    read_json, Claim, ClaimCheck, ClaimMetric, LoadPoint, MachineCpu, RoundsStop, RunResult,
    ScenarioConfig, StopReason, UntilDecided,
};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

fn example() -> RunResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../meshbench-results/schema/example-results-v1.json"
    );
    read_json(std::path::Path::new(path)).unwrap()
}

const MAX_ROUNDS: u32 = 8;

/// A run until decided of baseline and a mesh at one point, with the claim that the mesh adds
/// to p99, and `p99_ms(scenario, round)` as each cell's p99.
fn rounds(rounds: u32, mut p99_ms: impl FnMut(&str, u32) -> f64) -> RunResult {
    let mut result = example();
    let template = result.cells[0].clone();
    let scenario = result.config.scenarios[0].clone();
    let scenarios = ["baseline", "mesh"];
    result.config.scenarios = scenarios
        .iter()
        .map(|name| ScenarioConfig {
            name: (*name).to_owned(),
            ..scenario.clone()
        })
        .collect();
    let point = LoadPoint {
        rps: 500.0,
        connections: 8,
        ..LoadPoint::default()
    };
    result.config.load_points = vec![point];
    result.config.repetitions = MAX_ROUNDS;
    result.config.until_decided = Some(UntilDecided {
        max_rounds: MAX_ROUNDS,
        budget_seconds: None,
    });
    result.config.findings = vec![Claim {
        study: "E1".into(),
        statement: "the mesh adds to p99".into(),
        published: None,
        check: ClaimCheck::Ordering {
            metric: ClaimMetric::P99,
            order: vec!["baseline".into(), "mesh".into()],
        },
    }];
    result.cells.clear();
    for round in 1..=rounds {
        for name in scenarios {
            let mut cell = template.clone();
            cell.scenario = name.to_owned();
            cell.repetition = round;
            cell.load_point = point;
            cell.load.time_series.clear();
            cell.load.latency.p99_us = (p99_ms(name, round) * 1e3).max(1.0) as u64;
            result.cells.push(cell);
        }
    }
    result
}

/// The run's only finding, which must be inconclusive: what its one point says more rounds
/// would do.
fn undecided(all: &RunResult) -> MoreRounds {
    let analysis = Analysis::of(all);
    let finding = &findings(all, &analysis)[0];
    assert_eq!(finding.verdict, Verdict::Inconclusive);
    finding.points[0]
        .more_rounds
        .clone()
        .expect("an undecided point says what more rounds would do")
}

/// A run's rounds as the runner looks at them: after each from the second, stop at the first
/// where nothing is undecided. The verdict it stopped with.
fn run_until_decided(all: &RunResult) -> (Verdict, u32) {
    for round in 2..=MAX_ROUNDS {
        let mut seen = all.clone();
        seen.cells.retain(|c| c.repetition <= round);
        if undecided_findings(&seen) == 0 || round == MAX_ROUNDS {
            let analysis = Analysis::of(&seen);
            return (findings(&seen, &analysis)[0].verdict, round);
        }
    }
    unreachable!("the last round returns")
}

#[test]
fn on_equal_scenarios_a_run_that_looks_after_every_round_rarely_claims_a_difference() {
    // Baseline and mesh drawn from one distribution: p99 10 ms, 1 ms of spread per round.
    let normal = Normal::new(10.0, 1.0).unwrap();
    let mut rng = StdRng::seed_from_u64(56);
    let runs = 300;
    let mut held = 0;
    for _ in 0..runs {
        let all = rounds(MAX_ROUNDS, |_, _| normal.sample(&mut rng));
        if run_until_decided(&all).0 == Verdict::Held {
            held += 1;
        }
    }
    let rate = f64::from(held) / f64::from(runs);
    eprintln!("false held in {held} of {runs} simulated equal runs");
    assert!(rate <= 0.05, "false held in {held} of {runs} runs");
}

#[test]
fn a_clear_difference_is_decided_in_a_few_rounds_with_its_interval_valid_over_the_looks() {
    let normal = Normal::new(0.0, 0.2).unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let all = rounds(MAX_ROUNDS, |scenario, _| {
        normal.sample(&mut rng) + if scenario == "mesh" { 12.0 } else { 10.0 }
    });
    let (verdict, at) = run_until_decided(&all);
    assert_eq!(verdict, Verdict::Held);
    assert!(at <= 4, "decided after {at} rounds");
    let mut seen = all.clone();
    seen.cells.retain(|c| c.repetition <= at);
    seen.stopped = Some(RoundsStop {
        rounds: at,
        reason: StopReason::Decided,
        seconds: 95.0,
    });
    let analysis = Analysis::of(&seen);
    let finding = &findings(&seen, &analysis)[0];
    let evidence = finding.evidence.join("; ");
    assert!(
        evidence.contains(&format!(
            "t over {at} rounds, valid over a look after each of at most 8"
        )),
        "{evidence}"
    );
    let sentences = glance(&seen, &analysis).sentences.join(" ");
    assert!(
        sentences.contains(&format!("Rounds until decided: {at} rounds ran (at most 8) in 1m 35s; it stopped because every finding was decided")),
        "{sentences}"
    );
}

#[test]
fn a_disturbed_round_is_left_out_rather_than_keeping_the_point_undecided() {
    let normal = Normal::new(0.0, 0.2).unwrap();
    let mut rng = StdRng::seed_from_u64(2);
    let mut all = rounds(4, |scenario, _| {
        normal.sample(&mut rng) + if scenario == "mesh" { 12.0 } else { 10.0 }
    });
    // Round 2's mesh cell ran while the hypervisor took half the machine.
    for cell in all
        .cells
        .iter_mut()
        .filter(|c| c.repetition == 2 && c.scenario == "mesh")
    {
        cell.machines = vec![MachineCpu {
            steal_cores: Some(1.0),
            ..MachineCpu::tasks_only("/proc/stat", "x", 2, 0.5)
        }];
        cell.machines[0].node = None;
    }
    let analysis = Analysis::of(&all);
    let finding = &findings(&all, &analysis)[0];
    assert_eq!(finding.verdict, Verdict::Held, "{:?}", finding.evidence);
    let evidence = finding.evidence.join("; ");
    assert!(evidence.contains("t over 3 rounds"), "{evidence}");
    assert!(evidence.contains("[round 2 left out: noise]"), "{evidence}");
}

#[test]
fn an_undecided_point_says_how_many_more_rounds_would_decide_it() {
    // The mesh adds 0.5 ms with 1 ms of spread: three rounds cannot tell.
    let spread = [0.9, -0.8, 0.6];
    let all = rounds(3, |scenario, round| {
        10.0 + if scenario == "mesh" {
            0.5 + spread[round as usize - 1]
        } else {
            0.0
        }
    });
    let more = undecided(&all);
    assert!(
        matches!(
            more,
            MoreRounds::NoneWithin { max: 8, .. } | MoreRounds::About(_)
        ),
        "{more:?}"
    );
    let sentences = glance(&all, &Analysis::of(&all)).sentences.join(" ");
    assert!(
        sentences.contains("Rounds until decided: 3 rounds so far (at most 8)."),
        "{sentences}"
    );
    assert!(
        sentences.contains("Still undecided: E1 \"the mesh adds to p99\" at "),
        "{sentences}"
    );
    assert!(sentences.contains(&more.describe()), "{sentences}");
    // One round has no interval at all: nothing is decided on a point estimate.
    let one = rounds(
        1,
        |scenario, _| if scenario == "mesh" { 20.0 } else { 10.0 },
    );
    assert_eq!(undecided_findings(&one), 1);
}

#[test]
fn a_point_the_most_rounds_cannot_decide_says_what_limits_it_with_its_figures() {
    // Every round ran: the mesh adds 0.3 ms on average, and a round moves it by about 2 ms.
    let all = rounds(MAX_ROUNDS, |scenario, round| {
        let swing = if round % 2 == 0 { 2.0 } else { -2.0 };
        10.0 + if scenario == "mesh" { 0.3 + swing } else { 0.0 }
    });
    let more = undecided(&all);
    let MoreRounds::NoneWithin {
        max,
        difference,
        spread,
        ..
    } = &more
    else {
        panic!("the most rounds ran, so none within them would decide it: {more:?}");
    };
    assert_eq!(*max, MAX_ROUNDS as usize);
    assert_eq!(difference, "+0.300 ms");
    assert_eq!(spread, "2.138 ms");
    // At that mean and spread a run needs far more rounds: about (2 x 2.1 / 0.3)^2 and some
    // for the looks.
    let planned = more.planned_rounds().expect("within the planning cap");
    assert!((150..1000).contains(&planned), "{planned}");
    let text = more.describe();
    assert!(
        text.contains(
            "mean is +0.300 ms from the claim's threshold, against a spread (sd) of 2.138 ms"
        ) && text.contains(&format!(
            "a run of at most {planned} rounds would decide it"
        )),
        "{text}"
    );
}
