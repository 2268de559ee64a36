//! The benchmark report as Markdown: measurements per case and tool, then the ratios.

use std::fmt::Write;

use meshbench_results::BenchReport;

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
    out.push_str("\n## Measurements\n\n| case | tool | version | requests | rps | CPU s | CPU us/request | p50 us |\n|---|---|---|---|---|---|---|---|\n");
    for m in &report.measurements {
        let p50 = m
            .p50_us
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.3} | {:.2} | {p50} |",
            m.case,
            m.tool,
            m.tool_version,
            m.requests,
            m.requests_per_second,
            m.cpu_seconds,
            m.cpu_us_per_request
        );
    }
    out.push_str("\n## Ratios (meshbench / peer)\n\n| case | metric | peer | meshbench | peer | ratio | target | met |\n|---|---|---|---|---|---|---|---|\n");
    for r in &report.ratios {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {met} |",
            r.case,
            r.metric,
            r.peer,
            r.ours,
            r.theirs,
            r.ratio,
            r.target.as_deref().unwrap_or("-")
        );
    }
    out
}
