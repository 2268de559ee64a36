//! Whether a bench's intervals hold from one run to the next: for each ratio reported by
//! several runs, how often one run's 95% interval holds another run's estimate, against how
//! often it should if the interval covered all that varies between runs
//! ([`meshbench_stats::expected_cross_coverage`]: about 83-86%, not 95%, since the other
//! estimate has an error of its own). Far less means the interval leaves out something that
//! changes between runs.

use std::collections::BTreeMap;

use meshbench_results::BenchReport;

/// One ratio (ours, metric, peer) over the runs that report it.
#[derive(Debug, Clone)]
pub struct CoverageRow {
    pub case: String,
    pub metric: String,
    pub peer: String,
    /// Each run's estimate and interval (`None`: that run had none).
    pub runs: Vec<(f64, Option<(f64, f64)>)>,
    /// Ordered pairs of runs (i, j), i with an interval: how many held j's estimate.
    pub covered: usize,
    pub pairs: usize,
    /// The fewest rounds behind any run's ratio.
    pub rounds: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct Coverage {
    pub rows: Vec<CoverageRow>,
    pub covered: usize,
    pub pairs: usize,
    /// The rate to expect, from the fewest rounds of any row.
    pub expected: Option<f64>,
}

/// The cross-coverage of `reports`' ratios (each a `bench dataplane` run of the same planes).
pub fn cross_coverage(reports: &[BenchReport]) -> Coverage {
    let mut by_ratio: BTreeMap<(String, String, String), CoverageRow> = BTreeMap::new();
    for report in reports {
        for r in &report.ratios {
            let row = by_ratio
                .entry((r.case.clone(), r.metric.clone(), r.peer.clone()))
                .or_insert_with(|| CoverageRow {
                    case: r.case.clone(),
                    metric: r.metric.clone(),
                    peer: r.peer.clone(),
                    runs: vec![],
                    covered: 0,
                    pairs: 0,
                    rounds: r.repetitions,
                });
            row.runs
                .push((r.ratio, r.interval.map(|i| (i.low, i.high))));
            row.rounds = row.rounds.min(r.repetitions);
        }
    }
    let mut rows: Vec<CoverageRow> = by_ratio.into_values().collect();
    for row in &mut rows {
        for (i, (_, interval)) in row.runs.iter().enumerate() {
            let Some((low, high)) = interval else {
                continue;
            };
            for (j, (estimate, _)) in row.runs.iter().enumerate() {
                if i != j {
                    row.pairs += 1;
                    row.covered += usize::from(low <= estimate && estimate <= high);
                }
            }
        }
    }
    let rounds = rows.iter().filter_map(|r| r.rounds).min();
    Coverage {
        covered: rows.iter().map(|r| r.covered).sum(),
        pairs: rows.iter().map(|r| r.pairs).sum(),
        expected: rounds.and_then(|n| meshbench_stats::expected_cross_coverage(n as usize, 0.95)),
        rows,
    }
}

/// The coverage as a Markdown table with its summary line first.
pub fn render_coverage_markdown(coverage: &Coverage, runs: usize) -> String {
    let rate = |covered: usize, pairs: usize| {
        if pairs == 0 {
            "-".to_owned()
        } else {
            format!("{:.0}%", 100.0 * covered as f64 / pairs as f64)
        }
    };
    let mut md = format!(
        "# Do one run's intervals hold the others' estimates?\n\n{runs} runs; over every ratio, a run's 95% interval held another run's estimate in {} of {} pairs ({}); expected about {} if the intervals cover what varies between runs.\n\n",
        coverage.covered,
        coverage.pairs,
        rate(coverage.covered, coverage.pairs),
        coverage
            .expected
            .map_or("-".to_owned(), |e| format!("{:.0}%", 100.0 * e)),
    );
    md.push_str("| case | metric | peer | rounds | each run: ratio [95% interval] | held |\n|---|---|---|---|---|---|\n");
    for row in &coverage.rows {
        let runs: Vec<String> = row
            .runs
            .iter()
            .map(|(estimate, interval)| match interval {
                Some((low, high)) => format!("{estimate:.3} [{low:.3}, {high:.3}]"),
                None => format!("{estimate:.3} [-]"),
            })
            .collect();
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} of {} |\n",
            row.case,
            row.metric,
            row.peer,
            row.rounds.map_or("-".to_owned(), |n| n.to_string()),
            runs.join("; "),
            row.covered,
            row.pairs
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_results::{BenchRatio, RatioInterval};

    fn report(ratio: f64, low: f64, high: f64) -> BenchReport {
        let build = meshbench_lab::BuildInfo {
            version: "0".into(),
            git_commit: "0".into(),
            profile: "test".into(),
        };
        let mut report = BenchReport {
            schema_version: meshbench_results::SCHEMA_VERSION,
            kind: "meshbench.bench".into(),
            bench: "dataplane".into(),
            environment: meshbench_lab::describe_environment(&build),
            setup: vec![],
            measurements: vec![],
            ratios: vec![],
            notes: vec![],
        };
        report.ratios.push(BenchRatio {
            case: "ours".into(),
            repetitions: Some(10),
            metric: "m".into(),
            peer: "peer".into(),
            ours: ratio,
            theirs: 1.0,
            ratio,
            interval: Some(RatioInterval {
                low,
                high,
                level: 0.95,
            }),
            target: None,
            met: None,
            verdict: None,
        });
        report
    }

    #[test]
    fn each_run_s_interval_is_tried_on_every_other_run_s_estimate() {
        let reports = [
            report(1.0, 0.9, 1.1),
            report(1.05, 0.95, 1.15),
            report(1.3, 1.2, 1.4),
        ];
        let coverage = cross_coverage(&reports);
        assert_eq!(coverage.rows.len(), 1);
        // 1 holds 2's; 2 holds 1's; nobody holds 3's, 3 holds nobody's.
        assert_eq!((coverage.covered, coverage.pairs), (2, 6));
        assert!(coverage.expected.unwrap() > 0.83);
        let md = render_coverage_markdown(&coverage, 3);
        assert!(md.contains("2 of 6 pairs (33%)"), "{md}");
    }
}
