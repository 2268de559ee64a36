//! The benchmark report as Markdown: measurements per case and tool, then the ratios.

use std::fmt::Write;

use meshbench_results::{BenchReport, TargetVerdict};

pub fn render_markdown(report: &BenchReport) -> String {
    let mut out = format!("# meshbench bench {}\n\n", report.bench);
    let env = &report.environment;
    let _ = writeln!(
        out,
        "- machine: {} ({} cores), {} {}; meshbench {} ({}, {} build)",
        env.cpu_model,
        env.cpu_cores,
        env.os,
        env.kernel,
        env.meshbench_version,
        env.git_commit,
        env.build_profile
    );
    for line in &report.setup {
        let _ = writeln!(out, "- {line}");
    }
    out.push_str("\n## Measurements\n\n| case | tool | version | rep | requests | rps | CPU s | CPU us/request | p50 us | p99 us | errors | memory MiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    for m in &report.measurements {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {:.3} | {:.2} | {} | {} | {} | {} |",
            m.case,
            m.tool,
            m.tool_version,
            or_dash(m.repetition.map(|r| r.to_string())),
            m.requests,
            m.requests_per_second,
            m.cpu_seconds,
            m.cpu_us_per_request,
            or_dash(m.p50_us.map(|v| format!("{v:.1}"))),
            or_dash(m.p99_us.map(|v| format!("{v:.1}"))),
            or_dash(m.errors.map(|v| v.to_string())),
            or_dash(
                m.memory_bytes
                    .map(|v| format!("{:.1}", v as f64 / 1048576.0))
            ),
        );
    }
    let paced: Vec<_> = report
        .measurements
        .iter()
        .filter_map(|m| Some((m, m.pacing.as_ref()?)))
        .collect();
    if !paced.is_empty() {
        out.push_str("\n## Pacing on the wire (gaps between consecutive requests, all connections)\n\n| case | tool | requests | even gap us | p10 us | p50 us | p90 us | p99 us | bursts |\n|---|---|---|---|---|---|---|---|---|\n");
        for (m, p) in paced {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1}% |",
                m.case,
                m.tool,
                p.requests,
                p.even_gap_us,
                p.gap_p10_us,
                p.gap_p50_us,
                p.gap_p90_us,
                p.gap_p99_us,
                p.burst_share * 100.0
            );
        }
        out.push_str(
            "\nbursts: requests sent less than a quarter of the even gap after the previous one.\n",
        );
    }
    let repeated = report.ratios.iter().find_map(|r| r.repetitions);
    let intervals = report.ratios.iter().any(|r| r.interval.is_some());
    out.push_str(&match (repeated, intervals) {
        (Some(n), true) => {
            format!("\n## Ratios (ours / peer, over {n} repetitions, 95% intervals)\n\n")
        }
        (Some(n), false) => format!("\n## Ratios (ours / peer, medians of {n} repetitions)\n\n"),
        (None, _) => "\n## Ratios (ours / peer)\n\n".to_owned(),
    });
    out.push_str("| case | metric | peer | ours | peer | ratio | 95% interval | target | met |\n|---|---|---|---|---|---|---|---|---|\n");
    for r in &report.ratios {
        let met = match (r.verdict, r.met) {
            (Some(TargetVerdict::Inconclusive), _) => "inconclusive",
            (_, Some(true)) => "yes",
            (_, Some(false)) => "NO",
            (_, None) => "-",
        };
        let interval = r.interval.map_or_else(
            || "-".to_owned(),
            |i| format!("{:.2} to {:.2}", i.low, i.high),
        );
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {interval} | {} | {met} |",
            r.case,
            r.metric,
            r.peer,
            r.ours,
            r.theirs,
            r.ratio,
            r.target.as_deref().unwrap_or("-")
        );
    }
    if !report.notes.is_empty() {
        out.push_str("\nNot compared:\n\n");
        for note in &report.notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    out
}
