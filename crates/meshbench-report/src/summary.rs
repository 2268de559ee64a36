//! Short plain-text summaries for the terminal: one load run, or a whole experiment.

use std::fmt::Write;

use meshbench_results::{LatencySummary, LoadReport, RunResult};

use crate::tables;

fn latency_line(l: &LatencySummary) -> String {
    let ms = |us: u64| us as f64 / 1e3;
    format!(
        "min {:.3}  mean {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3} ms (sd {:.3})",
        ms(l.min_us),
        l.mean_us / 1e3,
        ms(l.p50_us),
        ms(l.p90_us),
        ms(l.p99_us),
        ms(l.p99_9_us),
        ms(l.max_us),
        l.stddev_us / 1e3
    )
}

/// What `meshbench load` prints.
pub fn load_summary(r: &LoadReport) -> String {
    let mut out = String::new();
    let requested = r.requested_rps.map_or_else(
        || "as fast as possible".to_owned(),
        |rps| format!("{rps} rps"),
    );
    let model = serde_json::to_value(r.model)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let protocol = r.protocol.as_deref().unwrap_or("http/1.1");
    let _ = writeln!(out, "target      {} ({protocol})", r.target);
    let _ = writeln!(
        out,
        "load        {model}, {requested} over {} connections, {:.2} s measured after {:.1} s warm-up",
        r.connections, r.window.seconds, r.window.warmup_seconds
    );
    let _ = writeln!(
        out,
        "achieved    {:.1} rps; scheduled {}, sent {}, unsent {}, late {}",
        r.achieved_rps, r.scheduled, r.sent, r.unsent, r.late
    );
    let outcomes: Vec<String> = r.outcomes.iter().map(|(k, n)| format!("{k}={n}")).collect();
    let _ = writeln!(out, "outcomes    {}", outcomes.join(" "));
    let _ = writeln!(out, "latency     {}", latency_line(&r.latency));
    let _ = writeln!(out, "            (from each request's intended send time)");
    let _ = writeln!(out, "uncorrected {}", latency_line(&r.latency_uncorrected));
    if let Some(g) = &r.generator {
        let _ = writeln!(
            out,
            "generator   {} thread(s), {:.3} s CPU, {:.1} us CPU per request",
            g.threads, g.cpu_seconds, g.cpu_us_per_request
        );
        if g.untrusted_timestamps > 0 {
            let _ = writeln!(
                out,
                "warning     {} request(s) had out-of-order clock readings; their latency was re-read from the monotonic clock (an upper bound)",
                g.untrusted_timestamps
            );
        }
        if g.limited {
            let _ = writeln!(
                out,
                "warning     the generator itself was the bottleneck ({} sends late on idle connections): add --threads or lower the load",
                g.late_while_idle
            );
        }
    }
    if r.unsent > 0 || r.late * 100 > r.sent.max(1) {
        let _ = writeln!(
            out,
            "warning     the target did not keep up: {} requests unsent, {} sent late",
            r.unsent, r.late
        );
    }
    out
}

/// The line a finished cell gets while a run goes on (`meshbench run`'s progress, `serve`'s
/// event log): `[index/total] label: achieved ..., p50 ..., p99 ..., N not 2xx`, then one
/// indented `noisy: ...` line per noise flag of the cell.
pub fn cell_line(
    index: usize,
    total: usize,
    label: &str,
    cell: &meshbench_results::Cell,
    background: Option<&meshbench_results::Background>,
) -> String {
    let mut line = format!(
        "[{index}/{total}] {label}: achieved {:.1} rps, p50 {:.3} ms, p99 {:.3} ms, {} not 2xx",
        cell.load.achieved_rps,
        cell.load.latency.p50_us as f64 / 1e3,
        cell.load.latency.p99_us as f64 / 1e3,
        tables::error_count(cell),
    );
    let level = background.and_then(|b| crate::trust::level_of(b, cell));
    for flag in crate::trust::cell_flags_against(cell, level) {
        let _ = write!(line, "\n    noisy: {flag}");
    }
    line
}

/// What `meshbench run` prints at the end: the glance (sentences and the findings' verdict
/// matrix), the noise flags, if any, then the absolute, overhead, significance and fit
/// tables; the findings' statistics are in the report.
pub fn run_summary(result: &RunResult) -> String {
    let analysis = crate::Analysis::of(result);
    let figures = tables::figures(&analysis);
    let mut out = String::new();
    crate::markdown::write_glance(&mut out, &crate::glance::glance(result, &analysis));
    let tables = [
        crate::trust::noise_table(result, &analysis),
        tables::capacity_sentences(result, &analysis),
        crate::capacity::capacity_table(result, &analysis.searches),
        Some(tables::absolute_table(&figures)),
        Some(tables::overhead_table(&figures)),
        tables::significance_table(&analysis),
        tables::fit_table(&analysis),
    ];
    for table in tables.into_iter().flatten() {
        crate::markdown::write_table(&mut out, &table);
        out.push('\n');
    }
    out
}
