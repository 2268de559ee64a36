//! The capacity model's report: searches replayed from the cells give each scenario's
//! capacity, its bracket, the comparison with the baseline in a sentence, and a chart.

use meshbench_report::{charts, render_markdown, Analysis};
use meshbench_results::{read_json, CapacityConfig, Cell, LoadPoint, RunResult};
use meshbench_stats::capacity::{next_step, to_config, trial_of, Next, SearchSettings, Slo};

fn example() -> RunResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../meshbench-results/schema/example-results-v1.json"
    );
    read_json(std::path::Path::new(path)).unwrap()
}

/// p99 flat until `capacity` rps, then steep.
fn p99_ms(rps: f64, capacity: f64) -> f64 {
    if rps <= capacity {
        1.0 + rps / capacity
    } else {
        2.0 + 40.0 * (rps / capacity - 1.0)
    }
}

/// A capacity run of baseline (capacity 3000) and baseline-mtls (2000), the searches taking
/// turns as the runner has them.
fn capacity_run() -> (RunResult, CapacityConfig) {
    capacity_runs(&[("baseline", &[3000.0]), ("baseline-mtls", &[2000.0])])
}

/// A capacity run where each scenario is searched once per capacity given: a system whose
/// capacity moves between searches, as one does between runs.
fn capacity_runs(scenarios: &[(&str, &[f64])]) -> (RunResult, CapacityConfig) {
    let mut result = example();
    let template: Cell = result.cells[0].clone();
    let slo = Slo {
        p99_ms: 5.0,
        error_rate: 0.001,
    };
    let searches = scenarios.iter().map(|(_, c)| c.len()).max().unwrap() as u32;
    let config = to_config(&slo, &SearchSettings::default(), searches);
    result.config.capacity = Some(config);
    result.config.load_points.clear();
    result.cells.clear();
    loop {
        let mut measured = false;
        for (scenario, capacities) in scenarios {
            for (i, &capacity) in capacities.iter().enumerate() {
                let search = i as u32 + 1;
                let history: Vec<_> = result
                    .cells
                    .iter()
                    .filter(|c| c.scenario == *scenario && c.search.unwrap_or(1) == search)
                    .map(trial_of)
                    .collect();
                let Next::Measure { rps, attempt } =
                    next_step(&slo, &SearchSettings::default(), &history).0
                else {
                    continue;
                };
                let mut cell = template.clone();
                cell.scenario = scenario.to_string();
                cell.repetition = attempt;
                cell.search = (searches > 1).then_some(search);
                cell.load_point = LoadPoint {
                    rps,
                    connections: 16,
                    ..LoadPoint::default()
                };
                cell.load.latency.p99_us = (p99_ms(rps, capacity) * 1e3) as u64;
                cell.load.achieved_rps = rps.min(capacity * 1.05);
                cell.load.scheduled = rps as u64;
                cell.load.sent = rps as u64;
                cell.load.unsent = 0;
                cell.load.outcomes = [("http_200".to_owned(), rps as u64)].into();
                if !result.config.load_points.contains(&cell.load_point) {
                    result.config.load_points.push(cell.load_point);
                }
                result.cells.push(cell);
                measured = true;
            }
        }
        if !measured {
            break;
        }
    }
    (result, config)
}

#[test]
fn repeated_searches_give_a_range_that_holds_each_of_them() {
    // The second search of baseline-mtls finds 30% more: one search's bracket would not hold
    // the other's capacity, the range over both does.
    let (result, _) = capacity_runs(&[
        ("baseline", &[3000.0, 3000.0]),
        ("baseline-mtls", &[2000.0, 2600.0]),
    ]);
    let analysis = Analysis::of(&result);
    assert_eq!(analysis.searches.len(), 4);
    let mtls: Vec<_> = analysis
        .searches
        .iter()
        .filter(|s| s.scenario == "baseline-mtls")
        .collect();
    assert_eq!(mtls.iter().map(|s| s.search).collect::<Vec<_>>(), [1, 2]);
    let (first, second) = (&mtls[0].capacity, &mtls[1].capacity);
    assert!(
        second.meets_at.unwrap() >= first.misses_at.unwrap(),
        "{first:?} {second:?}"
    );

    let all = meshbench_report::capacity::combined(&analysis.searches);
    let combined = all.iter().find(|c| c.scenario == "baseline-mtls").unwrap();
    let (low, high) = combined.range().unwrap();
    let high = high.unwrap();
    for s in &mtls {
        assert!(low <= s.capacity.meets_at.unwrap() && s.capacity.misses_at.unwrap() <= high);
    }
    let median = combined.capacity().unwrap();
    assert!(low < median && median < high, "{low} {median} {high}");

    let report = render_markdown(&result, &analysis, None);
    let sentence = report
        .lines()
        .find(|l| l.contains("baseline-mtls sustains"))
        .unwrap();
    assert!(sentence.contains("over 2 searches each"), "{sentence}");
    assert!(report.contains("each search's bracket"), "{report}");
    assert!(report.contains("baseline-mtls (search 2)"), "{report}");
}

#[test]
fn each_scenarios_capacity_is_found_and_compared_with_the_baseline() {
    let (result, _) = capacity_run();
    let analysis = Analysis::of(&result);
    assert_eq!(analysis.searches.len(), 2);
    let bracket = |scenario: &str| {
        let s = analysis
            .searches
            .iter()
            .find(|s| s.scenario == scenario)
            .unwrap();
        (s.capacity.meets_at.unwrap(), s.capacity.misses_at.unwrap())
    };
    // p99 reaches 5 ms at 1.075 x capacity.
    let (low, high) = bracket("baseline");
    assert!(low <= 3225.0 && 3225.0 < high, "{low} {high}");
    let (low, high) = bracket("baseline-mtls");
    assert!(low <= 2150.0 && 2150.0 < high, "{low} {high}");

    let report = render_markdown(&result, &analysis, None);
    assert!(report.contains("## Capacity, in a sentence"), "{report}");
    // 2000 / 3000: a third less, within what the brackets allow.
    let sentence = report
        .lines()
        .find(|l| l.contains("baseline-mtls sustains"))
        .unwrap();
    assert!(
        sentence.contains("% less than baseline at p99 <= 5 ms"),
        "{sentence}"
    );
    let percent: f64 = sentence
        .split("sustains ")
        .nth(1)
        .and_then(|rest| rest.split('%').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!((25.0..=42.0).contains(&percent), "{sentence}");
    assert!(report.contains("Capacity search, step by step"));
    assert!(report.contains("missed (p99"), "{report}");

    let drawn = charts(&analysis);
    let curve = drawn
        .iter()
        .find(|c| {
            c.title
                .starts_with("p99 against offered load, capacity search")
        })
        .expect("a latency-against-load chart of the searches");
    assert!(
        curve.svg.contains("objective: p99 5 ms"),
        "the objective is drawn"
    );
}

#[test]
fn a_run_cut_short_shows_its_searches_unfinished() {
    let (mut result, _) = capacity_run();
    result.cells.truncate(3);
    let analysis = Analysis::of(&result);
    let report = render_markdown(&result, &analysis, None);
    assert!(report.contains("unfinished"), "{report}");
}
