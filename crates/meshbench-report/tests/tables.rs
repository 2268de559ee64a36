//! The report's tables must show the results' own figures: absolute values per scenario and
//! the overhead of each scenario against baseline at the same load point.

use meshbench_report::tables::{absolute_table, figures, overhead_table};
use meshbench_report::{render_html, render_markdown};
use meshbench_results::{read_json, RunResult};

fn example() -> RunResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../meshbench-results/schema/example-results-v1.json"
    );
    read_json(std::path::Path::new(path)).unwrap()
}

#[test]
fn overhead_is_the_difference_to_baseline_at_the_same_load_point() {
    let result = example();
    let base = result
        .cells
        .iter()
        .find(|c| c.scenario == "baseline")
        .unwrap();
    let mtls = result
        .cells
        .iter()
        .find(|c| c.scenario == "baseline-mtls")
        .unwrap();
    let figs = figures(&result);
    assert_eq!(figs.len(), 2);

    let table = overhead_table(&figs);
    assert_eq!(table.rows.len(), 1, "one non-baseline scenario");
    let row = &table.rows[0];
    assert_eq!(row[1], "baseline-mtls");
    let p99_col = table.headers.iter().position(|h| h == "p99 ms").unwrap();
    let delta_ms = (mtls.load.latency.p99_us as f64 - base.load.latency.p99_us as f64) / 1e3;
    assert!(
        row[p99_col].starts_with(&format!("{delta_ms:+.3}")),
        "{} vs {delta_ms}",
        row[p99_col]
    );

    let absolute = absolute_table(&figs);
    assert_eq!(absolute.rows.len(), 2);
    let p50_col = absolute.headers.iter().position(|h| h == "p50 ms").unwrap();
    assert_eq!(
        absolute.rows[0][p50_col],
        format!("{:.3}", base.load.latency.p50_us as f64 / 1e3)
    );
}

#[test]
fn markdown_and_html_carry_the_same_tables_and_the_html_is_self_contained() {
    let mut result = example();
    result.config.profile = "<script>alert(1)</script>".to_owned();
    let md = render_markdown(&result);
    let html = render_html(&result);
    for title in [
        "Absolute figures",
        "Overhead relative to baseline",
        "Outcomes by class",
    ] {
        assert!(md.contains(title) && html.contains(title), "{title}");
    }
    assert!(!html.contains("<script>"), "profile name must be escaped");
    assert!(
        !html.contains("src=") && !html.contains("<link"),
        "no external resources"
    );
    assert!(md.contains(&result.environment.git_commit));
}
