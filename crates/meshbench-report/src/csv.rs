//! CSV exports of the figures, the comparisons and every cell, for spreadsheets, pandas or R.
//! Plain RFC 4180: a header row, commas, fields quoted when they hold a comma or a quote.

use meshbench_results::RunResult;

use crate::analysis::Analysis;
use crate::tables::{error_count, Figures};

fn field(value: &str) -> String {
    if value.contains([',', '"', '\n']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_owned()
    }
}

fn rows(headers: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut out = headers.join(",");
    out.push('\n');
    for row in rows {
        out.push_str(&row.iter().map(|f| field(f)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

pub fn figures(figures: &[Figures]) -> String {
    rows(
        &[
            "scenario",
            "placement",
            "rps",
            "connections",
            "repetitions",
            "achieved_rps",
            "sent",
            "errors",
            "unsent",
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "p999_ms",
            "max_ms",
            "client_cpu_cores",
            "server_cpu_cores",
            "shared_cpu_cores",
            "client_mib",
            "server_mib",
            "shared_mib",
        ],
        figures.iter().map(|f| {
            vec![
                f.scenario.clone(),
                f.placement.clone(),
                f.load.rps.to_string(),
                f.load.connections.to_string(),
                f.repetitions.to_string(),
                f.achieved_rps.to_string(),
                f.sent.to_string(),
                f.errors.to_string(),
                f.unsent.to_string(),
                f.p50_ms.to_string(),
                f.p90_ms.to_string(),
                f.p99_ms.to_string(),
                f.p999_ms.to_string(),
                f.max_ms.to_string(),
                f.client_cpu.to_string(),
                f.server_cpu.to_string(),
                f.shared_cpu.to_string(),
                f.client_mib.to_string(),
                f.server_mib.to_string(),
                f.shared_mib.to_string(),
            ]
        }),
    )
}

pub fn comparisons(analysis: &Analysis) -> String {
    rows(
        &[
            "scenario",
            "placement",
            "rps",
            "connections",
            "median_difference_ms",
            "ci_low_ms",
            "ci_high_ms",
            "mann_whitney_u",
            "z",
            "p_value",
            "cliffs_delta",
            "magnitude",
            "n_baseline",
            "n_scenario",
            "per_second_median_difference_ms",
            "per_second_median_ci_low_ms",
            "per_second_median_ci_high_ms",
            "per_second_p99_difference_ms",
            "per_second_p99_ci_low_ms",
            "per_second_p99_ci_high_ms",
            "block_seconds",
            "significant",
            "significance_basis",
        ],
        analysis.comparisons.iter().map(|c| {
            let mut row = vec![
                c.scenario.clone(),
                c.point.placement.clone(),
                c.point.load.rps.to_string(),
                c.point.load.connections.to_string(),
                c.median_difference_ms.estimate.to_string(),
                c.median_difference_ms.low.to_string(),
                c.median_difference_ms.high.to_string(),
                c.test.u_b.to_string(),
                c.test.z.to_string(),
                c.test.p_value.to_string(),
                c.test.cliffs_delta.to_string(),
                c.test.magnitude().to_owned(),
                c.test.n_a.to_string(),
                c.test.n_b.to_string(),
            ];
            let blocks = |b: &Option<meshbench_stats::BlockInterval>| match b {
                Some(b) => [b.interval.estimate, b.interval.low, b.interval.high]
                    .map(|v| v.to_string())
                    .to_vec(),
                None => vec![String::new(); 3],
            };
            row.extend(blocks(&c.per_second_median_ms));
            row.extend(blocks(&c.per_second_p99_ms));
            let (significant, basis) = c.significance();
            row.push(
                c.per_second_median_ms
                    .map_or_else(String::new, |b| b.block_seconds.to_string()),
            );
            row.push(significant.to_string());
            row.push(basis.describe());
            row
        }),
    )
}

/// One row per cell, dropped repetitions included (marked), so nothing is hidden.
pub fn cells(result: &RunResult, analysis: &Analysis) -> String {
    rows(
        &[
            "scenario",
            "placement",
            "rps",
            "connections",
            "repetition",
            "kept",
            "achieved_rps",
            "sent",
            "errors",
            "unsent",
            "p50_us",
            "p99_us",
            "p999_us",
            "max_us",
        ],
        result.cells.iter().map(|c| {
            let placement = c.placement.clone().unwrap_or_default();
            let dropped = analysis.groups.iter().any(|g| {
                g.point.placement == placement
                    && g.point.load == c.load_point
                    && g.dropped.contains(&c.repetition)
            });
            vec![
                c.scenario.clone(),
                placement,
                c.load_point.rps.to_string(),
                c.load_point.connections.to_string(),
                c.repetition.to_string(),
                (!dropped).to_string(),
                c.load.achieved_rps.to_string(),
                c.load.sent.to_string(),
                error_count(c).to_string(),
                c.load.unsent.to_string(),
                c.load.latency.p50_us.to_string(),
                c.load.latency.p99_us.to_string(),
                c.load.latency.p99_9_us.to_string(),
                c.load.latency.max_us.to_string(),
            ]
        }),
    )
}
