//! The findings section: each declared claim judged on a run, with the statistic behind
//! the verdict; noise makes a point inconclusive; a claim whose scenarios were not measured
//! is not checked; the report opens with the section.

use meshbench_report::findings::{findings, Verdict};
use meshbench_report::{render_html, render_markdown, Analysis};
use meshbench_results::{
    read_json, Cell, Claim, ClaimAxis, ClaimCheck, ClaimMetric, ComponentResources, LoadPoint,
    MachineCpu, RunResult, ScenarioConfig, SecondStats,
};

fn example() -> RunResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../meshbench-results/schema/example-results-v1.json"
    );
    read_json(std::path::Path::new(path)).unwrap()
}

/// A run of `scenarios` at `points`, `repetitions` each, whose cells `shape` fills in.
fn run(
    scenarios: &[&str],
    points: &[LoadPoint],
    repetitions: u32,
    shape: impl Fn(&str, &LoadPoint, u32, &mut Cell),
) -> RunResult {
    let mut result = example();
    let template = result.cells[0].clone();
    let scenario_template = result.config.scenarios[0].clone();
    result.config.scenarios = scenarios
        .iter()
        .map(|name| ScenarioConfig {
            name: (*name).to_owned(),
            ..scenario_template.clone()
        })
        .collect();
    result.config.load_points = points.to_vec();
    result.config.repetitions = repetitions;
    result.cells.clear();
    for repetition in 1..=repetitions {
        for point in points {
            for scenario in scenarios {
                let mut cell = template.clone();
                cell.scenario = (*scenario).to_owned();
                cell.repetition = repetition;
                cell.load_point = *point;
                shape(scenario, point, repetition, &mut cell);
                result.cells.push(cell);
            }
        }
    }
    result
}

fn point(rps: f64) -> LoadPoint {
    LoadPoint {
        rps,
        connections: 8,
        ..LoadPoint::default()
    }
}

fn claim(check: ClaimCheck) -> Claim {
    Claim {
        study: "E1".to_owned(),
        statement: "a claim".to_owned(),
        published: None,
        check,
    }
}

fn verdicts(result: &RunResult) -> Vec<(Verdict, String)> {
    let analysis = Analysis::of(result);
    findings(result, &analysis)
        .into_iter()
        .map(|f| (f.verdict, f.evidence.join("; ")))
        .collect()
}

/// A machine reading where the hypervisor took half of the 2 CPUs: a noisy cell.
fn hypervisor_took_half() -> MachineCpu {
    MachineCpu {
        source: "/proc/stat".into(),
        node: None,
        same_machine_nodes: vec![],
        cpus: 2,
        user_cores: Some(0.5),
        nice_cores: Some(0.0),
        system_cores: Some(0.2),
        irq_cores: Some(0.0),
        softirq_cores: Some(0.1),
        iowait_cores: Some(0.0),
        idle_cores: Some(0.2),
        steal_cores: Some(1.0),
        tasks_cores: None,
        interrupt_accounting: None,
        edge_gap_seconds: None,
        mhz_min: None,
        mhz_max: None,
    }
}

/// Repetition `r`'s small wobble, so repetitions differ as real ones do.
fn wobble(r: u32) -> f64 {
    [0.0, 0.01, -0.012, 0.006][r as usize % 4]
}

#[test]
fn at_most_is_held_missed_or_inconclusive_by_its_interval_over_repetitions() {
    // p99 1.0 ms for the baseline; +2% clearly under 5%, +12% clearly over, +5% on the line.
    let result = run(
        &["baseline", "near", "far", "edge"],
        &[point(500.0)],
        3,
        |scenario, _, r, cell| {
            let factor = match scenario {
                "near" => 1.02,
                "far" => 1.12,
                "edge" => 1.05,
                _ => 1.0,
            };
            cell.load.latency.p99_us = (1000.0 * factor * (1.0 + wobble(r))) as u64;
        },
    );
    let mut result = result;
    result.config.findings = ["near", "far", "edge"]
        .map(|scenario| {
            claim(ClaimCheck::AtMost {
                metric: ClaimMetric::P99,
                scenario: scenario.to_owned(),
                against: "baseline".to_owned(),
                max_percent: 5.0,
            })
        })
        .to_vec();
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::Held, "{v:?}");
    assert_eq!(v[1].0, Verdict::DidNotHold, "{v:?}");
    assert_eq!(v[2].0, Verdict::Inconclusive, "{v:?}");
    assert!(v[0].1.contains("t over 3 repetitions"), "{}", v[0].1);
    assert!(v[1].1.contains("+12"), "the statistic is given: {}", v[1].1);
}

#[test]
fn one_repetitions_latency_is_judged_on_blocks_of_its_per_second_series() {
    let seconds = |p50_us: u64, jitter: u64| -> Vec<SecondStats> {
        (0..30)
            .map(|s| SecondStats {
                second: s,
                responses: 500,
                failures: 0,
                p50_us: p50_us + (s as u64 * 7919) % jitter,
                p99_us: 3 * p50_us,
            })
            .collect()
    };
    let mut result = run(
        &["baseline", "meshbench-sidecar", "envoy-sidecar"],
        &[point(500.0)],
        1,
        |scenario, _, _, cell| {
            let p50 = match scenario {
                "baseline" => 100,
                "meshbench-sidecar" => 200,
                _ => 205,
            };
            cell.load.time_series = seconds(p50, 40);
            cell.load.latency.p50_us = p50;
        },
    );
    result.config.findings = vec![
        claim(ClaimCheck::Ordering {
            metric: ClaimMetric::P50,
            order: vec!["baseline".into(), "meshbench-sidecar".into()],
        }),
        claim(ClaimCheck::Ordering {
            metric: ClaimMetric::P50,
            order: vec!["meshbench-sidecar".into(), "envoy-sidecar".into()],
        }),
        claim(ClaimCheck::Ordering {
            metric: ClaimMetric::P50,
            order: vec!["meshbench-sidecar".into(), "baseline".into()],
        }),
    ];
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::Held, "{v:?}");
    assert!(v[0].1.contains("block bootstrap"), "{}", v[0].1);
    // 5 µs apart with 40 µs of jitter a second: the interval straddles zero.
    assert_eq!(v[1].0, Verdict::Inconclusive, "{v:?}");
    assert_eq!(v[2].0, Verdict::DidNotHold, "{v:?}");
}

#[test]
fn a_noisy_cell_makes_its_point_inconclusive_and_says_why() {
    let mut result = run(
        &["baseline", "baseline-mtls"],
        &[point(500.0)],
        3,
        |scenario, _, r, cell| {
            let p99 = if scenario == "baseline" {
                1000.0
            } else {
                3000.0
            };
            cell.load.latency.p99_us = (p99 * (1.0 + wobble(r))) as u64;
            if scenario == "baseline-mtls" && r == 2 {
                cell.machines = vec![hypervisor_took_half()];
            }
        },
    );
    result.config.findings = vec![claim(ClaimCheck::Ordering {
        metric: ClaimMetric::P99,
        order: vec!["baseline".into(), "baseline-mtls".into()],
    })];
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::Inconclusive, "{v:?}");
    assert!(
        v[0].1.contains("noise") && v[0].1.contains("steal"),
        "{}",
        v[0].1
    );
}

#[test]
fn cpu_of_one_repetition_needs_a_clear_margin() {
    let cpu = |cores: f64| ComponentResources {
        component: "client".into(),
        role: "load-generator".into(),
        source: "procfs".into(),
        samples: 10,
        cpu_cores_mean: cores,
        cpu_cores_max: cores,
        rss_mib_mean: 10.0,
        rss_mib_max: 10.0,
        working_set_mib_mean: None,
        working_set_mib_max: None,
        node: None,
    };
    let mut result = run(
        &["baseline", "baseline-mtls", "envoy-sidecar"],
        &[point(500.0)],
        1,
        |scenario, _, _, cell| {
            let cores = match scenario {
                "baseline" => 0.20,
                "baseline-mtls" => 0.30,
                _ => 0.21,
            };
            cell.resources = vec![cpu(cores)];
        },
    );
    result.config.findings = vec![
        claim(ClaimCheck::Ordering {
            metric: ClaimMetric::ClientCpu,
            order: vec!["baseline".into(), "baseline-mtls".into()],
        }),
        claim(ClaimCheck::Ordering {
            metric: ClaimMetric::ClientCpu,
            order: vec!["baseline".into(), "envoy-sidecar".into()],
        }),
    ];
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::Held, "{v:?}");
    assert!(v[0].1.contains("no interval"), "{}", v[0].1);
    assert_eq!(v[1].0, Verdict::Inconclusive, "within the margin: {v:?}");
}

#[test]
fn per_side_mesh_figures_count_each_sides_proxies_and_its_nodes_agent() {
    let component = |name: &str, role: &str, node: Option<&str>, cores: f64| ComponentResources {
        component: name.into(),
        role: role.into(),
        source: "kubelet-summary".into(),
        samples: 10,
        cpu_cores_mean: cores,
        cpu_cores_max: cores,
        rss_mib_mean: cores * 100.0,
        rss_mib_max: cores * 100.0,
        working_set_mib_mean: None,
        working_set_mib_max: None,
        node: node.map(str::to_owned),
    };
    // Inter-node: the agent on the client's node serves the client side only, the other
    // node's agent the server side; sidecars go with their pods; the control plane with
    // neither side.
    let mut result = run(
        &["agent-mesh", "sidecar-mesh", "unplaced-agent-mesh"],
        &[point(500.0)],
        1,
        |scenario, _, _, cell| {
            let mut resources = vec![
                component("load-generator-1", "load-generator", Some("node-1"), 0.5),
                component("echo-server-1", "app", Some("node-2"), 0.5),
                component("control", "control-plane", Some("node-3"), 5.0),
            ];
            match scenario {
                "agent-mesh" => resources.extend([
                    component("agent-node-1", "node-agent", Some("node-1"), 0.1),
                    component("agent-node-2", "node-agent", Some("node-2"), 0.4),
                ]),
                "sidecar-mesh" => resources.extend([
                    component("load-generator-1-proxy", "sidecar", Some("node-1"), 0.2),
                    component("echo-server-1-proxy", "sidecar", Some("node-2"), 0.3),
                ]),
                _ => {
                    for r in &mut resources {
                        r.node = None;
                    }
                    resources.push(component("node-1-agent", "node-agent", None, 0.1));
                }
            }
            cell.resources = resources;
        },
    );
    let order = |metric, low: &str, high: &str| {
        claim(ClaimCheck::Ordering {
            metric,
            order: vec![low.into(), high.into()],
        })
    };
    result.config.findings = vec![
        order(ClaimMetric::ClientMeshCpu, "agent-mesh", "sidecar-mesh"),
        order(ClaimMetric::ServerMeshCpu, "sidecar-mesh", "agent-mesh"),
        order(ClaimMetric::ClientMeshMemory, "agent-mesh", "sidecar-mesh"),
        order(
            ClaimMetric::ClientMeshCpu,
            "unplaced-agent-mesh",
            "sidecar-mesh",
        ),
    ];
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::Held, "{v:?}");
    assert!(
        v[0].1
            .contains("agent-mesh 0.100 cores < sidecar-mesh 0.200 cores"),
        "{}",
        v[0].1
    );
    assert_eq!(v[1].0, Verdict::Held, "{v:?}");
    assert!(
        v[1].1
            .contains("sidecar-mesh 0.300 cores < agent-mesh 0.400 cores"),
        "{}",
        v[1].1
    );
    assert_eq!(v[2].0, Verdict::Held, "{v:?}");
    assert!(
        v[2].1.contains("10.0 MiB < sidecar-mesh 20.0 MiB"),
        "{}",
        v[2].1
    );
    // Without the nodes the agents cannot be split by side: not judged, never judged on NaN.
    assert_eq!(v[3].0, Verdict::NotChecked, "{v:?}");
    assert!(
        v[3].1.contains("cannot be told apart by side"),
        "{}",
        v[3].1
    );
}

#[test]
fn dropping_http_parsing_gains_more_than_dropping_mtls() {
    let rps = |scenario: &str| match scenario {
        "meshbench-sidecar-l7" => 3000.0,
        "meshbench-sidecar-l7-plaintext" => 3300.0,
        "meshbench-sidecar-l4-plaintext" => 9000.0,
        _ => 20000.0,
    };
    let mut result = run(
        &[
            "baseline",
            "meshbench-sidecar-l7",
            "meshbench-sidecar-l7-plaintext",
            "meshbench-sidecar-l4-plaintext",
        ],
        &[LoadPoint {
            rps: 0.0,
            connections: 16,
            ..LoadPoint::default()
        }],
        3,
        |scenario, _, r, cell| cell.load.achieved_rps = rps(scenario) * (1.0 + wobble(r)),
    );
    let check = |larger: [&str; 2], smaller: [&str; 2]| {
        claim(ClaimCheck::LargerStep {
            metric: ClaimMetric::Throughput,
            larger: larger.map(String::from),
            smaller: smaller.map(String::from),
        })
    };
    result.config.findings = vec![
        check(
            [
                "meshbench-sidecar-l7-plaintext",
                "meshbench-sidecar-l4-plaintext",
            ],
            ["meshbench-sidecar-l7", "meshbench-sidecar-l7-plaintext"],
        ),
        check(
            ["meshbench-sidecar-l7", "meshbench-sidecar-l7-plaintext"],
            [
                "meshbench-sidecar-l7-plaintext",
                "meshbench-sidecar-l4-plaintext",
            ],
        ),
    ];
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::Held, "{v:?}");
    assert!(v[0].1.contains("by +57"), "{}", v[0].1);
    assert_eq!(v[1].0, Verdict::DidNotHold, "{v:?}");
}

#[test]
fn added_latency_grows_along_an_axis_with_the_others_fixed() {
    let users = |users: u32, services: u32| LoadPoint {
        rps: 0.0,
        connections: users,
        requests: Some(10),
        services: Some(services),
        ..LoadPoint::default()
    };
    let points = [users(10, 4), users(40, 4), users(10, 16), users(40, 16)];
    let mut result = run(
        &["baseline", "envoy-sidecar"],
        &points,
        3,
        |scenario, point, r, cell| {
            let base = 1000.0 * f64::from(point.services.unwrap());
            // The mesh adds 10% per hop at 10 users, 30% at 40; the same at every length.
            let added = if scenario == "baseline" {
                0.0
            } else {
                base * if point.connections == 40 { 0.3 } else { 0.1 }
            };
            cell.load.latency.p50_us = ((base + added) * (1.0 + wobble(r))) as u64;
        },
    );
    let grows = |axis| {
        claim(ClaimCheck::Grows {
            metric: ClaimMetric::P50,
            scenario: "envoy-sidecar".into(),
            against: "baseline".into(),
            axis,
        })
    };
    result.config.findings = vec![grows(ClaimAxis::Users), grows(ClaimAxis::Services)];
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::Held, "{v:?}");
    // Along the chain the added latency grows too (10% of a longer chain).
    assert_eq!(v[1].0, Verdict::Held, "{v:?}");
    assert!(
        v[0].1.contains("10 users") || v[0].1.contains("users"),
        "{}",
        v[0].1
    );
}

#[test]
fn a_claim_on_scenarios_the_run_lacks_is_not_checked_and_the_report_opens_with_findings() {
    let mut result = run(
        &["baseline", "baseline-mtls"],
        &[point(500.0)],
        1,
        |_, _, _, _| {},
    );
    result.config.findings = vec![
        Claim {
            study: "E3".into(),
            statement: "Median RTT orders no mesh < Linkerd < Istio".into(),
            published: None,
            check: ClaimCheck::Ordering {
                metric: ClaimMetric::P50,
                order: vec!["baseline".into(), "linkerd".into(), "istio".into()],
            },
        },
        claim(ClaimCheck::Linear {
            scenarios: vec!["meshbench-sidecar".into()],
            min_r_squared: 0.9,
        }),
    ];
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::NotChecked, "{v:?}");
    assert!(v[0].1.contains("linkerd, istio"), "{}", v[0].1);
    assert_eq!(v[1].0, Verdict::NotChecked, "{v:?}");

    let analysis = Analysis::of(&result);
    let report = render_markdown(&result, &analysis, None);
    // The report opens with the glance: sentences, then one verdict per finding.
    let sections: Vec<&str> = report.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        sections[..2],
        ["## At a glance", "## Findings, one verdict per point"],
        "{report}"
    );
    assert!(
        report.contains("- Of the study's 2 findings, 2 were not checked."),
        "{report}"
    );
    assert!(
        report.contains("| E3: Median RTT orders no mesh < Linkerd < Istio | not checked |"),
        "{report}"
    );
    // The statistics, further down, say why.
    assert!(report.contains("## Findings, the statistics"), "{report}");
    assert!(report.contains("linkerd, istio"), "{report}");

    // The HTML report too: the glance comes before the charts, verdicts coloured.
    let html = render_html(&result, &analysis, None);
    let glance_at = html.find("<h2>At a glance</h2>").expect("glance in HTML");
    let matrix_at = html
        .find("<h2>Findings, one verdict per point</h2>")
        .expect("matrix in HTML");
    let charts_at = html.find("<h2>Charts</h2>").expect("charts in HTML");
    assert!(glance_at < matrix_at && matrix_at < charts_at, "{html}");
    assert!(
        html.contains("<td class=\"text\">E3: Median RTT orders no mesh"),
        "prose is text"
    );
}

#[test]
fn a_spread_across_repetitions_is_no_noise_to_an_interval_across_them() {
    // p99 swings by a factor of three between repetitions (flagged as spread), while the
    // medians stay far apart: the interval over repetitions carries the spread already.
    let mut result = run(
        &["baseline", "envoy-sidecar"],
        &[point(500.0)],
        3,
        |scenario, _, r, cell| {
            let p50 = if scenario == "baseline" { 100.0 } else { 300.0 };
            cell.load.latency.p50_us = (p50 * (1.0 + wobble(r))) as u64;
            cell.load.latency.p99_us = [1000, 3000, 1500][r as usize - 1];
        },
    );
    result.config.findings = vec![claim(ClaimCheck::Ordering {
        metric: ClaimMetric::P50,
        order: vec!["baseline".into(), "envoy-sidecar".into()],
    })];
    let analysis = Analysis::of(&result);
    let spread = meshbench_report::trust::noise_flags(&analysis);
    assert!(
        spread.iter().any(|f| f.reason.starts_with("spread")),
        "{spread:?}"
    );
    let v = verdicts(&result);
    assert_eq!(v[0].0, Verdict::Held, "{v:?}");
}

/// The quick profile's three claims over three loads, one cell noisy: the report opens with
/// sentences and one verdict per claim and point, and no cell of any table of it runs past
/// what a reader takes in (about 200 characters), however long the statistics behind it.
#[test]
fn the_report_opens_with_sentences_and_a_verdict_matrix_of_short_cells() {
    let loads = [point(500.0), point(2000.0), point(4000.0)];
    let mut result = run(
        &["baseline", "baseline-mtls", "meshbench-sidecar"],
        &loads,
        3,
        |scenario, load, r, cell| {
            let (p50, p99) = match scenario {
                "baseline" => (100, 1000),
                "baseline-mtls" => (200, 1020),
                _ => (300, 2000),
            };
            cell.load.latency.p50_us = p50;
            cell.load.latency.p99_us = (p99 as f64 * (1.0 + wobble(r))) as u64;
            cell.load.sent = load.rps as u64 * 10;
            if scenario == "meshbench-sidecar" && load.rps > 3000.0 && r == 2 {
                cell.machines = vec![hypervisor_took_half()];
            }
        },
    );
    result.config.findings = vec![
        Claim {
            study: "E1".into(),
            statement: "App-level mTLS adds at most 5% to p99 latency (E1 saw about 3%, behind a \
                        200 ms server)"
                .into(),
            published: None,
            check: ClaimCheck::AtMost {
                metric: ClaimMetric::P99,
                scenario: "baseline-mtls".into(),
                against: "baseline".into(),
                max_percent: 5.0,
            },
        },
        Claim {
            study: "E1".into(),
            statement: "A sidecar pair adds more to p99 latency than app-level mTLS does".into(),
            published: None,
            check: ClaimCheck::Ordering {
                metric: ClaimMetric::P99,
                order: vec!["baseline-mtls".into(), "meshbench-sidecar".into()],
            },
        },
    ];
    let analysis = Analysis::of(&result);
    let glance = meshbench_report::glance(&result, &analysis);
    let text = glance.sentences.join("\n");
    assert!(
        text.contains("Of the study's 2 findings, 1 held and 1 was inconclusive"),
        "{text}"
    );
    assert!(
        text.contains("baseline-mtls added 0.10 ms at p50 and 0.02 ms at p99 over baseline"),
        "{text}"
    );
    assert!(
        text.contains("meshbench-sidecar added 0.20 ms at p50 and 1.00 ms at p99"),
        "{text}"
    );
    assert!(
        text.contains("1 of 27 cells was flagged noisy: ") && text.contains("took up to 50.0% (1)"),
        "{text}"
    );
    let matrix = glance.matrix.expect("a matrix");
    assert_eq!(
        matrix.headers.len(),
        2 + loads.len(),
        "{:?}",
        matrix.headers
    );
    assert_eq!(matrix.rows[0][1], "held");
    assert!(
        matrix.rows[0][2].starts_with("held: +2.0% ["),
        "{:?}",
        matrix.rows[0]
    );
    assert!(
        matrix.rows[1][4].starts_with("inconclusive (noise): "),
        "{:?}",
        matrix.rows[1]
    );

    let report = render_markdown(&result, &analysis, None);
    let sections: Vec<&str> = report.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        sections[..3],
        [
            "## At a glance",
            "## Findings, one verdict per point",
            "## The run"
        ],
        "{report}"
    );
    for line in report.lines().filter(|l| l.starts_with('|')) {
        for cell in line.trim_matches('|').split(" | ") {
            assert!(
                cell.chars().count() <= 200,
                "{} characters: {cell}",
                cell.len()
            );
        }
    }
    for heading in report.lines().filter(|l| l.starts_with("## ")) {
        assert!(heading.len() <= 80, "a heading is a few words: {heading}");
    }
}
