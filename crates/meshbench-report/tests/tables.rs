//! The report's tables must show the results' own figures: absolute values per scenario and
//! the overhead of each scenario against baseline at the same load point.

use meshbench_report::tables::{
    absolute_table, figures, fit_table, overhead_table, significance_table,
};
use meshbench_report::Basis;
use meshbench_report::{render_html, render_markdown, Analysis};
use meshbench_results::{read_json, ComponentResources, LoadPoint, RunResult, SecondStats};
use meshbench_stats::PositiveMethod;

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
    let analysis = Analysis::of(&result);
    let figs = figures(&analysis);
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
    let analysis = Analysis::of(&result);
    let md = render_markdown(&result, &analysis, None);
    let html = render_html(&result, &analysis, None);
    for title in [
        "Absolute figures",
        "Overhead relative to baseline",
        "Latency against baseline: significant?",
        "Requests within a run are not independent",
        "Latency distribution, every request (ms)",
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

#[test]
fn the_html_draws_the_charts_inline() {
    let result = example();
    let analysis = Analysis::of(&result);
    let html = render_html(&result, &analysis, None);
    for caption in [
        "Latency CDF",
        "Latency box plot",
        "Latency histogram",
        "CPU by component",
        "Memory by component",
    ] {
        assert!(
            html.contains(&format!("<figcaption>{caption}")),
            "{caption}"
        );
    }
    assert!(html.matches("<svg").count() >= 5);
    assert!(!html.contains("href=\"http"), "no external resources");
}

#[test]
fn every_scenario_is_tested_against_the_baseline_on_all_its_requests() {
    let result = example();
    let analysis = Analysis::of(&result);
    let c = &analysis.comparisons[0];
    assert_eq!(c.scenario, "baseline-mtls");
    let count = |name: &str| {
        result
            .cells
            .iter()
            .find(|cell| cell.scenario == name)
            .unwrap()
            .load
            .latency
            .count
    };
    assert_eq!(
        (c.test.n_a, c.test.n_b),
        (count("baseline"), count("baseline-mtls"))
    );
    assert!(c.median_difference_ms.low <= c.median_difference_ms.estimate);
    assert!(c.median_difference_ms.estimate <= c.median_difference_ms.high);
}

/// Four repetitions of the example; baseline's maximum is highest in repetition 3.
fn repeated(drop: u32) -> RunResult {
    let mut result = example();
    let first = result.cells.clone();
    result.cells.clear();
    for rep in 1..=4u32 {
        for cell in &first {
            let mut cell = cell.clone();
            cell.repetition = rep;
            if cell.scenario == "baseline" {
                cell.load.latency.max_us = if rep == 3 {
                    900_000
                } else {
                    1_000 + u64::from(rep)
                };
                cell.load.achieved_rps = if rep == 3 { 1.0 } else { 100.0 };
            }
            result.cells.push(cell);
        }
    }
    result.config.repetitions = 4;
    result.config.outliers.drop_highest_baseline_max = drop;
    result
}

#[test]
fn the_outlier_policy_drops_the_repetitions_with_the_highest_baseline_maximum() {
    let kept_all = repeated(0);
    let analysis = Analysis::of(&kept_all);
    assert!(analysis
        .groups
        .iter()
        .all(|g| g.cells.len() == 4 && g.dropped.is_empty()));

    let result = repeated(1);
    let analysis = Analysis::of(&result);
    for g in &analysis.groups {
        assert_eq!(g.dropped, vec![3], "{}", g.scenario);
        assert!(g.cells.iter().all(|c| c.repetition != 3));
    }
    let baseline = figures(&analysis)
        .into_iter()
        .find(|f| f.scenario == "baseline")
        .unwrap();
    assert_eq!(
        baseline.achieved_rps, 100.0,
        "the dropped repetition is left out"
    );
    let md = render_markdown(&result, &analysis, None);
    assert!(md.contains("## Repetitions dropped as outliers"));
    assert!(md.contains("highest baseline maximum latency"));
    assert!(md.contains("## Across repetitions\n\nGeometric mean [95% log-scale t interval]."));
}

#[test]
fn memory_against_connections_is_fitted_per_scenario() {
    let mut result = example();
    let template = result
        .cells
        .iter()
        .find(|c| c.scenario == "baseline-mtls")
        .unwrap()
        .clone();
    result.cells.clear();
    result.config.load_points.clear();
    for (connections, mib) in [(100, 20.0), (200, 22.0), (400, 26.0), (800, 34.0)] {
        let point = LoadPoint {
            rps: 500.0,
            connections,
            ..LoadPoint::default()
        };
        result.config.load_points.push(point);
        let mut cell = template.clone();
        cell.load_point = point;
        cell.resources.push(ComponentResources {
            component: "echo-server-1-sidecar".into(),
            role: "sidecar".into(),
            source: "procfs".into(),
            samples: 10,
            cpu_cores_mean: 0.1,
            cpu_cores_max: 0.2,
            rss_mib_mean: mib,
            rss_mib_max: mib,
            working_set_mib_mean: None,
            working_set_mib_max: None,
            node: None,
        });
        result.cells.push(cell);
    }
    let analysis = Analysis::of(&result);
    let table = fit_table(&analysis).expect("four connection counts at one rate");
    assert_eq!(table.rows.len(), 1);
    assert_eq!(table.rows[0][0], "baseline-mtls");
    assert_eq!(table.rows[0][3], "20.00", "20 MiB per 1000 connections");
    assert_eq!(table.rows[0][5], "1.000");
    let html = render_html(&result, &analysis, None);
    assert!(html.contains("Mesh memory (sidecars, agents, control plane) against open connections"));
}

#[test]
fn cost_uses_the_measured_overhead_per_pod() {
    let result = example();
    let analysis = Analysis::of(&result);
    let figs = figures(&analysis);
    let (base, mtls) = (&figs[0], &figs[1]);
    let prices = meshbench_report::Prices {
        pods: 1000,
        cpu_per_core_month: 20.0,
        memory_per_gib_month: 4.0,
    };
    let table = meshbench_report::cost_table(&result, prices);
    assert_eq!(table.rows.len(), 1);
    let cpu = (mtls.client_cpu + mtls.server_cpu + mtls.shared_cpu
        - base.client_cpu
        - base.server_cpu
        - base.shared_cpu)
        / 2.0;
    let mib = (mtls.client_mib + mtls.server_mib + mtls.shared_mib
        - base.client_mib
        - base.server_mib
        - base.shared_mib)
        / 2.0;
    let monthly = 1000.0 * (cpu * 20.0 + mib / 1024.0 * 4.0);
    assert_eq!(table.rows[0][5], format!("{monthly:.2}"));
    assert_eq!(table.rows[0][6], format!("{:.2}", monthly * 12.0));
    assert_eq!(table.rows[0][7], "difference to baseline, all components");
}

#[test]
fn comparing_a_run_with_itself_finds_no_difference() {
    let result = example();
    let tables = meshbench_report::compare_runs(&result, &result);
    assert_eq!(tables.len(), 2, "every group is in both");
    for row in &tables[0].rows {
        assert!(row.last().unwrap().starts_with("no ("), "{row:?}");
    }
}

/// Per-second series that wander a little around `p50_us` (the same pattern for every cell,
/// shifted), as a run's seconds do.
fn seconds(p50_us: u64) -> Vec<SecondStats> {
    let wander = [
        0, 30, 55, 20, -10, -35, -20, 5, 40, 60, 25, -5, -30, -45, -15, 10,
    ];
    wander
        .iter()
        .cycle()
        .take(30)
        .enumerate()
        .map(|(second, w)| SecondStats {
            second: second as u32,
            responses: 400,
            failures: 0,
            p50_us: (p50_us as i64 + w) as u64,
            p99_us: (3 * p50_us as i64 + 3 * w) as u64,
        })
        .collect()
}

/// A cell whose histogram and per-second series agree, around `p50_us`.
fn with_seconds(cell: &mut meshbench_results::Cell, p50_us: u64) {
    cell.load.latency.p50_us = p50_us;
    cell.load.latency.p99_us = 3 * p50_us;
    cell.load.time_series = seconds(p50_us);
}

#[test]
fn significance_rests_on_the_per_second_series_not_on_every_request() {
    let mut result = example();
    // The same seconds for both scenarios: whatever their pooled requests say, the block
    // bootstrap finds nothing.
    for cell in &mut result.cells {
        with_seconds(cell, 500);
    }
    let analysis = Analysis::of(&result);
    let c = &analysis.comparisons[0];
    let blocks = c.per_second_median_ms.expect("30 seconds a side");
    assert_eq!(blocks.interval.estimate, 0.0);
    assert_eq!(
        c.significance(),
        (
            false,
            Basis::Blocks {
                block_seconds: blocks.block_seconds
            }
        )
    );

    // 200 µs slower every second: significant, by about that much.
    for cell in &mut result.cells {
        if cell.scenario != "baseline" {
            with_seconds(cell, 700);
        }
    }
    let analysis = Analysis::of(&result);
    let c = &analysis.comparisons[0];
    let median = c.per_second_median_ms.unwrap().interval;
    assert!((median.estimate - 0.2).abs() < 1e-9, "{median:?}");
    assert!(median.low > 0.0, "{median:?}");
    assert!(c.significant());
    let p99 = c.per_second_p99_ms.unwrap().interval;
    assert!((p99.estimate - 0.6).abs() < 1e-9, "{p99:?}");
    let table = significance_table(&analysis).unwrap();
    assert!(
        table.rows[0]
            .last()
            .unwrap()
            .starts_with("yes (block bootstrap"),
        "{:?}",
        table.rows[0]
    );

    // Results without per-second series (older ones) fall back, and say so.
    let older = example();
    let analysis = Analysis::of(&older);
    let (_, basis) = analysis.comparisons[0].significance();
    assert_eq!(basis, Basis::Independent);
}

#[test]
fn a_per_second_series_clamped_by_an_older_generator_is_not_used() {
    // Generators before the per-second recorder's fix clamped every second at 2048 us: behind
    // a 200 ms server the series read 2 ms while the histogram read 200 ms. Its block
    // bootstrap would judge a difference the requests never had.
    let mut result = example();
    for cell in &mut result.cells {
        cell.load.latency.p50_us = 200_000;
        cell.load.latency.p99_us = 201_000;
        cell.load.time_series = seconds(2_000)
            .into_iter()
            .map(|s| SecondStats {
                p50_us: s.p50_us.min(2_048),
                p99_us: s.p99_us.min(2_048),
                ..s
            })
            .collect();
    }
    let analysis = Analysis::of(&result);
    let c = &analysis.comparisons[0];
    assert!(c.per_second_median_ms.is_none() && c.per_second_p99_ms.is_none());
    assert_eq!(c.significance().1, Basis::SeriesUntrusted);
    let table = significance_table(&analysis).unwrap();
    let verdict = table.rows[0].last().unwrap();
    assert!(
        verdict.contains("disagrees with the histogram"),
        "{verdict}"
    );
}

#[test]
fn no_interval_across_repetitions_reaches_below_zero() {
    // Three repetitions, one with a slow tail: a Student-t interval of the p99 would go
    // below zero here.
    let mut result = repeated(0);
    result.cells.retain(|c| c.repetition <= 3);
    for cell in &mut result.cells {
        cell.load.latency.p99_us = [900, 1_000, 4_000][cell.repetition as usize - 1];
        cell.load.achieved_rps = [0.0, 10.0, 12.0][cell.repetition as usize - 1];
    }
    let analysis = Analysis::of(&result);
    for g in &analysis.groups {
        for (interval, _) in [&g.p50_ms, &g.p99_ms, &g.achieved_rps]
            .into_iter()
            .flatten()
        {
            assert!(interval.low >= 0.0, "{}: {interval:?}", g.scenario);
        }
        let (p99, method) = g.p99_ms.unwrap();
        assert_eq!(method, PositiveMethod::LogScaleT);
        assert!(p99.low > 0.0 && p99.high > 4.0, "{p99:?}");
        assert_eq!(g.achieved_rps.unwrap().1, PositiveMethod::BootstrapMean);
    }
}

#[test]
fn on_a_cluster_each_machine_counts_the_components_of_the_nodes_it_runs() {
    // Two nodes on one kernel (one machine, read once through node-1's kubelet) and a third
    // node not read: only the first two's components count against the machine, and the
    // kubelet's reading has no interrupts to show.
    let mut result = example();
    for cell in &mut result.cells {
        let template = cell.resources[0].clone();
        let on = |node: &str, cores: f64| ComponentResources {
            node: Some(node.to_owned()),
            cpu_cores_mean: cores,
            ..template.clone()
        };
        cell.resources = vec![on("node-1", 0.3), on("node-2", 0.2), on("node-3", 0.1)];
        cell.machines = vec![meshbench_results::MachineCpu {
            same_machine_nodes: vec!["node-2".into()],
            edge_gap_seconds: Some(1.0),
            ..meshbench_results::MachineCpu::tasks_only("kubelet-summary", "node-1", 2, 0.9)
        }];
    }
    let share = meshbench_report::trust::machine_share(&result.cells[0]).unwrap();
    assert!((share.attributed_cores - 0.5).abs() < 1e-9, "{share:?}");
    assert!((share.unattributed_cores() - 0.4).abs() < 1e-9, "{share:?}");
    assert_eq!(
        share.interrupts,
        meshbench_report::trust::Interrupts::NotRead
    );
    let analysis = Analysis::of(&result);
    let table = meshbench_report::trust::unattributed_table(&analysis);
    let row = &table.rows[0];
    assert_eq!(row[2], "0.900");
    assert!(row[4].starts_with("0.400 (44%)"), "{row:?}");
    assert!(row[5].starts_with("not read"), "{row:?}");
    // 0.4 cores beside the cell's pods is noise worth a flag, said in a cluster's words.
    let flags = meshbench_report::trust::cell_flags(&result, &result.cells[0]);
    assert!(
        flags.iter().any(|f| f.contains("outside the cell's pods")),
        "{flags:?}"
    );
}

#[test]
fn a_cluster_mesh_without_encryption_is_named_as_such_in_the_header() {
    let mut result = example();
    let mesh = |mode: &str| meshbench_results::MeshInstallation {
        scenario: "baseline-mtls".into(),
        usable: true,
        version: Some("1.20.2".into()),
        mode: Some(mode.into()),
        namespace: None,
        revision: None,
        reason: None,
    };
    result.environment.cluster_meshes = vec![mesh(
        "encryption: none; mutual authentication: off; L7 proxy: off",
    )];
    let lines = meshbench_report::tables::header_lines(&result);
    let (_, said) = lines
        .iter()
        .find(|(k, _)| k == "not encrypted: baseline-mtls")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        said.contains("encrypts nothing on this cluster")
            && said.contains("not even between nodes")
    );
    // Encrypting (or not measured in this run): nothing to say.
    result.environment.cluster_meshes = vec![mesh("encryption: wireguard")];
    let lines = meshbench_report::tables::header_lines(&result);
    assert!(!lines.iter().any(|(k, _)| k.starts_with("not encrypted")));
}
