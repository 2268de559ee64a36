//! `meshbench compare A B`: the same (placement, load point, scenario) in two result sets, B
//! against A: latency tested by a block bootstrap over the per-second series (described on
//! every request too: Mann-Whitney U, Cliff's delta, the pooled median difference),
//! throughput and resources side by side. For a new
//! version against the last, or this machine against another.

use meshbench_results::RunResult;

use crate::analysis::{compare, Analysis};
use crate::tables::{figures, Table};

fn signed(interval: &meshbench_stats::Interval) -> String {
    format!(
        "{:+.3} [{:+.3}, {:+.3}]",
        interval.estimate, interval.low, interval.high
    )
}

/// Tables comparing `b` with `a`; groups present in only one are listed, not dropped silently.
pub fn compare_runs(a: &RunResult, b: &RunResult) -> Vec<Table> {
    let (analysis_a, analysis_b) = (Analysis::of(a), Analysis::of(b));
    let (figures_a, figures_b) = (figures(&analysis_a), figures(&analysis_b));
    let mut latency = vec![];
    let mut resources = vec![];
    let mut unmatched = vec![];
    for group_b in &analysis_b.groups {
        let Some(group_a) = analysis_a
            .groups
            .iter()
            .find(|g| g.point == group_b.point && g.scenario == group_b.scenario)
        else {
            unmatched.push(vec![
                group_b.point.label(),
                group_b.scenario.clone(),
                "B only".into(),
            ]);
            continue;
        };
        let label = group_b.point.label();
        if let Some(c) = compare(group_a, group_b) {
            latency.push(vec![
                label.clone(),
                c.scenario.clone(),
                format!("{:.3}", group_a.latency.quantile(0.5).unwrap_or(0.0) / 1e3),
                format!("{:.3}", group_b.latency.quantile(0.5).unwrap_or(0.0) / 1e3),
                signed(&c.median_difference_ms),
                c.per_second_median_ms
                    .map_or("-".to_owned(), |b| signed(&b.interval)),
                c.per_second_p99_ms
                    .map_or("-".to_owned(), |b| signed(&b.interval)),
                crate::tables::p_value(c.test.p_value),
                format!("{:+.3} ({})", c.test.cliffs_delta, c.test.magnitude()),
                {
                    let (significant, basis) = c.significance();
                    format!(
                        "{} ({})",
                        if significant { "yes" } else { "no" },
                        basis.describe()
                    )
                },
            ]);
        }
        let find = |figures: &[crate::tables::Figures]| {
            figures
                .iter()
                .find(|f| {
                    f.scenario == group_b.scenario
                        && f.placement == group_b.point.placement
                        && f.load == group_b.point.load
                })
                .cloned()
        };
        if let (Some(fa), Some(fb)) = (find(&figures_a), find(&figures_b)) {
            let pair =
                |x: f64, y: f64, decimals: usize| format!("{x:.decimals$} -> {y:.decimals$}");
            resources.push(vec![
                label,
                fb.scenario.clone(),
                pair(fa.achieved_rps, fb.achieved_rps, 1),
                pair(fa.p99_ms, fb.p99_ms, 3),
                pair(
                    fa.client_cpu + fa.server_cpu + fa.shared_cpu,
                    fb.client_cpu + fb.server_cpu + fb.shared_cpu,
                    3,
                ),
                pair(
                    fa.client_mib + fa.server_mib + fa.shared_mib,
                    fb.client_mib + fb.server_mib + fb.shared_mib,
                    1,
                ),
                pair(fa.errors, fb.errors, 0),
            ]);
        }
    }
    for group_a in &analysis_a.groups {
        if !analysis_b
            .groups
            .iter()
            .any(|g| g.point == group_a.point && g.scenario == group_a.scenario)
        {
            unmatched.push(vec![
                group_a.point.label(),
                group_a.scenario.clone(),
                "A only".into(),
            ]);
        }
    }
    let mut tables = vec![
        Table {
            title: "Latency, B against A".into(),
            note: "Significant when the block bootstrap's 95% interval of the per-second median \
                   difference excludes zero (seconds resampled in blocks, as requests within a \
                   run are not independent); the pooled difference, Mann-Whitney U and Cliff's \
                   delta (> 0: B slower) describe every request."
                .into(),
            headers: [
                "load",
                "scenario",
                "A median ms",
                "B median ms",
                "B - A pooled median ms [95% i.i.d. CI]",
                "B - A per-second median ms [95% block CI]",
                "B - A per-second p99 ms [95% block CI]",
                "p (Mann-Whitney)",
                "Cliff's delta",
                "significant",
            ]
            .map(String::from)
            .to_vec(),
            rows: latency,
        },
        Table {
            title: "Throughput and resources, A -> B".into(),
            note: "Means over the kept repetitions.".into(),
            headers: [
                "load",
                "scenario",
                "achieved rps",
                "p99 ms",
                "CPU, all sides (cores)",
                "memory, all sides (MiB)",
                "errors",
            ]
            .map(String::from)
            .to_vec(),
            rows: resources,
        },
    ];
    if !unmatched.is_empty() {
        tables.push(Table {
            title: "Not in both result sets".into(),
            note: String::new(),
            headers: ["load", "scenario", "present in"]
                .map(String::from)
                .to_vec(),
            rows: unmatched,
        });
    }
    tables
}
