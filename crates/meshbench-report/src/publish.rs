//! A study's published reproduction: one Markdown page (`docs/results/E1.md`) and its charts,
//! made from the results a repository keeps (`meshbench publish keep`) and nothing else, so
//! that anyone can regenerate the page or rerun what it reports.
//!
//! The page puts each finding's verdict in every kept run beside the study's own figure (a
//! claim's `published`), says where each run ran (machine, versions, build, command, the
//! cluster's meshes, the background it was judged against, the rounds it took) and what could
//! not run there and why, then the runs' tables and main charts. Every figure comes from the
//! same analysis the run's own report makes ([`crate::Analysis`]); the page only chooses.

use std::fmt::Write;

use meshbench_results::{RunResult, VerifyReport};

use crate::findings::{findings, Finding, Verdict};
use crate::markdown::write_table;
use crate::table::Table;
use crate::Analysis;

/// The studies a page can reproduce, as `../shared/reference/experiments.md` names them.
pub const STUDIES: [(&str, &str, &str); 5] = [
    (
        "E1",
        "mTLS overhead across mesh architectures",
        "Tel Aviv University / Red Hat technical report: Fortio at 320 / 3200 / 12800 rps \
         (2 rps per connection) against a 200 ms server, on Kubernetes 1.24 (OpenShift), \
         8-vCPU nodes",
    ),
    (
        "E2",
        "Sustained-load harness",
        "the Kinvolk harness re-run on Linkerd 2.11 and Istio 1.12: wrk2 at 20 / 200 / 2000 \
         rps, 10-minute runs, 8 runs with the 3 of highest baseline maximum dropped",
    ),
    (
        "E3",
        "Zero-trust comparison with a purpose-built application",
        "UFPE master's thesis, 2024: an experimenter timing 10,000 calls to a calculator under \
         Istio and Linkerd, and who can reach whom in six enrollment cases",
    ),
    (
        "E4",
        "Scaling with the number of services and users",
        "University of Glasgow, 2023: a chain of counter services through Istio and Linkerd, \
         100 to 800 closed-loop users, 10 to 80 services",
    ),
    (
        "E5",
        "Vendor-style comparison with a cost model",
        "a 2024 blog post: Fortio with 1 KB payloads at 10k rps; its figures are claims, not \
         data",
    ),
];

/// A document kept for a page, named as the page refers to it (its file name).
pub enum Kept {
    Run {
        name: String,
        result: Box<RunResult>,
    },
    Verify {
        name: String,
        report: Box<VerifyReport>,
    },
}

impl Kept {
    fn name(&self) -> &str {
        match self {
            Kept::Run { name, .. } | Kept::Verify { name, .. } => name,
        }
    }
}

/// A page and the charts it links, each with the file name it is linked by (relative to
/// the page's chart directory).
pub struct Page {
    pub markdown: String,
    pub charts: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("study: {0:?} is not one of E1, E2, E3, E4, E5")]
    UnknownStudy(String),
    #[error("{0}: a page needs at least one kept run of the study")]
    NoRun(String),
    #[error("{name}: its findings are {found}'s, not {study}'s")]
    OtherStudy {
        name: String,
        found: String,
        study: String,
    },
}

/// The page of `study` from `kept`; `notes` (Markdown kept beside the results) says what the
/// results cannot, such as a mesh left out of the runs and why; `command` is how the page was
/// made (shown on it so that it can be made again) and `chart_dir` where the charts go,
/// relative to the page.
pub fn study_page(
    study: &str,
    kept: &[Kept],
    notes: Option<&str>,
    command: &str,
    chart_dir: &str,
) -> Result<Page, PublishError> {
    let (id, title, source) = STUDIES
        .iter()
        .find(|(id, _, _)| id.eq_ignore_ascii_case(study))
        .copied()
        .ok_or_else(|| PublishError::UnknownStudy(study.to_owned()))?;
    let runs: Vec<(&str, &RunResult)> = kept
        .iter()
        .filter_map(|k| match k {
            Kept::Run { name, result } => Some((name.as_str(), result.as_ref())),
            Kept::Verify { .. } => None,
        })
        .collect();
    if runs.is_empty() {
        return Err(PublishError::NoRun(id.to_owned()));
    }
    for (name, run) in &runs {
        if let Some(other) = run
            .config
            .findings
            .iter()
            .map(|c| c.study.as_str())
            .find(|s| !s.eq_ignore_ascii_case(id))
        {
            return Err(PublishError::OtherStudy {
                name: (*name).to_owned(),
                found: other.to_owned(),
                study: id.to_owned(),
            });
        }
    }
    let judged: Vec<Judged> = runs
        .iter()
        .map(|(name, result)| {
            let analysis = Analysis::of(result);
            let findings = findings(result, &analysis);
            Judged {
                name,
                result,
                analysis,
                findings,
            }
        })
        .collect();

    let mut out = format!("# {id}: {title}\n\n");
    let _ = writeln!(
        out,
        "<!-- Generated by meshbench from the results kept beside this page; edit those, not \
         this page. -->\n"
    );
    let _ = writeln!(out, "The study: {source}.\n");
    let _ = writeln!(
        out,
        "This page reproduces it with meshbench. It was made, and is made again, by\n\n    \
         {command}\n\nfrom the kept results ({}), which also hold every cell's raw figures \
         (`gunzip -c FILE > DIR/results.json && meshbench report DIR` gives a run's full \
         report). Each finding's verdict is judged as in every meshbench report \
         ([methodology](../methodology.md)).\n",
        kept.iter()
            .map(|k| format!("`{}`", k.name()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    write_table(&mut out, &verdict_table(&judged));
    out.push('\n');
    write_table(&mut out, &runs_table(&judged));
    out.push('\n');
    let missing = what_could_not_run(&judged);
    let notes = notes.map(str::trim).filter(|n| !n.is_empty());
    if !missing.is_empty() || notes.is_some() {
        let _ = writeln!(
            out,
            "## What could not run here, and what limits the verdicts\n"
        );
        if let Some(notes) = notes {
            let _ = writeln!(out, "{notes}\n");
        }
        for line in missing {
            let _ = writeln!(out, "- {line}");
        }
        out.push('\n');
    }

    let mut charts = vec![];
    for j in &judged {
        let _ = writeln!(out, "## {}, in detail\n", j.name);
        for sentence in crate::glance(j.result, &j.analysis).sentences {
            let _ = writeln!(out, "- {sentence}");
        }
        out.push('\n');
        for mut table in detail_tables(j) {
            table.title = format!("{}: {}", j.name, table.title);
            write_table(&mut out, &table);
            out.push('\n');
        }
        for chart in main_charts(&j.analysis) {
            let file = format!("{}-{}.svg", stem(j.name), slug(&chart.title));
            let _ = writeln!(out, "![{}]({chart_dir}/{file})\n", chart.title);
            charts.push((file, chart.svg));
        }
    }
    for k in kept {
        if let Kept::Verify { name, report } = k {
            let _ = writeln!(out, "## Verification, {name}\n");
            for (key, value) in crate::verify_header(report) {
                let _ = writeln!(out, "- **{key}**: {value}");
            }
            out.push('\n');
            for table in crate::verify_tables(report) {
                write_table(&mut out, &table);
                out.push('\n');
            }
        }
    }
    Ok(Page {
        markdown: out.trim_end().to_owned() + "\n",
        charts,
    })
}

struct Judged<'a> {
    name: &'a str,
    result: &'a RunResult,
    analysis: Analysis<'a>,
    findings: Vec<Finding>,
}

/// Each finding, the study's figure, and its verdict in every run with what decided it.
fn verdict_table(judged: &[Judged]) -> Table {
    let mut headers = vec!["finding".to_owned(), "the study's figure".to_owned()];
    headers.extend(judged.iter().map(|j| j.name.to_owned()));
    let claims = &judged[0].result.config.findings;
    let mut rows = vec![];
    for (i, claim) in claims.iter().enumerate() {
        let mut row = vec![
            claim.statement.clone(),
            claim.published.clone().unwrap_or_else(|| "-".to_owned()),
        ];
        for j in judged {
            // Runs of one study may declare its findings differently (an older profile);
            // each is matched by its statement, never by position alone.
            let finding = j
                .findings
                .iter()
                .find(|f| f.claim.statement == claim.statement)
                .or_else(|| j.findings.get(i).filter(|f| f.claim.check == claim.check));
            let pace = round_pace(j.result);
            row.push(
                finding.map_or_else(|| "not in this run".to_owned(), |f| verdict_cell(f, pace)),
            );
        }
        rows.push(row);
    }
    Table {
        title: "Findings: the study's figure, and the verdict in each run".to_owned(),
        note: "A verdict holds at every point where its scenarios ran together (each load \
               and placement); the points that did not hold or stayed undecided are named with \
               their statistic and 95% interval. The study's figures come from clusters much \
               larger than this machine: the shape (orderings, growth) is what is compared."
            .to_owned(),
        headers,
        rows,
    }
}

/// How long one round of a run until decided took, on average: the pace at which a planned
/// number of rounds is turned into hours.
fn round_pace(result: &RunResult) -> Option<std::time::Duration> {
    let stop = result.stopped.as_ref()?;
    if stop.rounds == 0 || !stop.seconds.is_finite() || stop.seconds <= 0.0 {
        return None;
    }
    // A kept file is input: a pace no Duration holds is no pace, not a panic.
    std::time::Duration::try_from_secs_f64(stop.seconds / f64::from(stop.rounds)).ok()
}

fn verdict_cell(finding: &Finding, pace: Option<std::time::Duration>) -> String {
    let count = |v: Verdict| finding.points.iter().filter(|p| p.verdict == v).count();
    let total = finding.points.len();
    let mut cell = format!("**{}**", finding.verdict.describe());
    match finding.verdict {
        Verdict::Held => {
            let _ = write!(cell, " at {} of {total} points", count(Verdict::Held));
            if let Some(p) = finding.points.last() {
                let _ = write!(cell, "; {}: {}", p.site, p.parts.key);
            }
        }
        Verdict::DidNotHold | Verdict::Inconclusive => {
            let _ = write!(
                cell,
                " ({} held, {} did not hold, {} undecided of {total})",
                count(Verdict::Held),
                count(Verdict::DidNotHold),
                count(Verdict::Inconclusive)
            );
            let telling = finding
                .points
                .iter()
                .filter(|p| p.verdict == finding.verdict);
            for p in telling.take(3) {
                let _ = write!(cell, "; {}: {}", p.site, p.parts.key);
                if let Some(more) = &p.more_rounds {
                    let _ = write!(cell, " ({}", more.describe());
                    if let (Some(rounds), Some(pace)) = (more.planned_rounds(), pace) {
                        let hours = pace.as_secs_f64() * rounds as f64 / 3600.0;
                        let _ = write!(cell, ", about {hours:.1} h at this run's pace");
                    }
                    cell.push(')');
                } else if !p.noise.is_empty() {
                    let _ = write!(cell, " (noise: {})", p.noise.join(", "));
                }
            }
        }
        Verdict::NotChecked => {
            if let Some(why) = finding.evidence.first() {
                let _ = write!(cell, ": {why}");
            }
        }
    }
    cell.replace('|', "\\|").replace('\n', " ")
}

/// Where and how each run ran.
fn runs_table(judged: &[Judged]) -> Table {
    let mut headers = vec![String::new()];
    headers.extend(judged.iter().map(|j| j.name.to_owned()));
    let lines: Vec<Vec<(String, String)>> = judged
        .iter()
        .map(|j| {
            let mut lines = vec![("findings".to_owned(), verdict_counts(&j.findings))];
            lines.extend(run_lines(j.result));
            lines
        })
        .collect();
    let mut keys: Vec<String> = vec![];
    for key in lines.iter().flatten().map(|(k, _)| k) {
        if !keys.contains(key) {
            keys.push(key.clone());
        }
    }
    let rows = keys
        .into_iter()
        .map(|key| {
            let mut row = vec![key.clone()];
            for run in &lines {
                let value = run
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map_or("-", |(_, v)| v.as_str());
                row.push(value.replace('|', "\\|").replace('\n', " "));
            }
            row
        })
        .collect();
    Table {
        title: "The runs".to_owned(),
        note: String::new(),
        headers,
        rows,
    }
}

/// "12 held, 2 did not hold, 3 inconclusive": the verdicts of a run's findings.
fn verdict_counts(findings: &[Finding]) -> String {
    let counts: Vec<String> = [
        Verdict::Held,
        Verdict::DidNotHold,
        Verdict::Inconclusive,
        Verdict::NotChecked,
    ]
    .into_iter()
    .filter_map(|v| {
        let n = findings.iter().filter(|f| f.verdict == v).count();
        (n > 0).then(|| format!("{n} {}", v.describe()))
    })
    .collect();
    format!("{} of {}", counts.join(", "), findings.len())
}

fn run_lines(result: &RunResult) -> Vec<(String, String)> {
    let mut lines: Vec<(String, String)> = crate::tables::header_lines(result)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("unavailable: ") && k != "experiment")
        .collect();
    lines.push((
        "command".to_owned(),
        format!("`{}`", result.environment.command_line.join(" ")),
    ));
    let meshes: Vec<String> = result
        .environment
        .cluster_meshes
        .iter()
        .filter(|m| m.usable)
        .map(|m| {
            format!(
                "{} {} ({})",
                m.scenario,
                m.version.as_deref().unwrap_or("version unknown"),
                m.mode.as_deref().unwrap_or("-")
            )
        })
        .collect();
    if !meshes.is_empty() {
        lines.push(("the cluster's meshes".to_owned(), meshes.join("; ")));
    }
    if let Some(stop) = &result.stopped {
        lines.push((
            "rounds".to_owned(),
            format!(
                "{} in {}; it stopped because {}",
                stop.rounds,
                humantime::format_duration(std::time::Duration::from_secs(stop.seconds as u64)),
                stop.reason.describe()
            ),
        ));
    } else {
        let rounds = result.cells.iter().map(|c| c.repetition).max().unwrap_or(0);
        lines.push(("rounds".to_owned(), rounds.to_string()));
    }
    lines.push(("cells".to_owned(), result.cells.len().to_string()));
    if let Some(background) = background_line(result) {
        lines.push(("background (no cell running)".to_owned(), background));
    }
    lines
}

/// Each machine's busy cores at rest, over the run's readings: what its cells' CPU outside
/// them was judged against.
fn background_line(result: &RunResult) -> Option<String> {
    let mut per_machine: Vec<(String, Vec<f64>)> = vec![];
    for background in &result.backgrounds {
        for machine in &background.machines {
            let name = machine
                .node
                .clone()
                .unwrap_or_else(|| machine.source.clone());
            if machine.cores.is_empty() {
                continue;
            }
            let mean = machine.cores.iter().sum::<f64>() / machine.cores.len() as f64;
            match per_machine.iter_mut().find(|(n, _)| *n == name) {
                Some((_, means)) => means.push(mean),
                None => per_machine.push((name, vec![mean])),
            }
        }
    }
    (!per_machine.is_empty()).then(|| {
        per_machine
            .iter()
            .map(|(name, means)| {
                let lo = means.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!(
                    "{name}: {lo:.2}-{hi:.2} cores over {} reading{}",
                    means.len(),
                    if means.len() == 1 { "" } else { "s" }
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// The scenarios no run could measure and the findings left unchecked, each with its reason.
fn what_could_not_run(judged: &[Judged]) -> Vec<String> {
    let mut lines: Vec<String> = vec![];
    for j in judged {
        for missing in &j.result.config.unavailable {
            let line = format!("**{}**: {}", missing.name, missing.reason);
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
        for f in j
            .findings
            .iter()
            .filter(|f| f.verdict == Verdict::NotChecked)
        {
            let line = format!(
                "not checked: \"{}\": {}",
                f.claim.statement,
                f.evidence.join(" ")
            );
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    lines
}

/// The tables a reader of the study looks for: the findings point by point, the overhead
/// against no mesh (E1's Table I), the tests between scenarios, and what was flagged as noise
/// against the background.
fn detail_tables(j: &Judged) -> Vec<Table> {
    let figures = crate::tables::figures(&j.analysis);
    let mut tables: Vec<Table> = crate::findings::findings_table(j.result, &j.analysis)
        .into_iter()
        .collect();
    tables.push(crate::tables::overhead_table(&figures));
    tables.extend(crate::tables::significance_table(&j.analysis));
    tables.extend(crate::trust::noise_table(j.result, &j.analysis));
    tables
}

/// Latency against the load axis and, at the highest load, CPU and memory by component; box
/// plots where a run has no load axis (E3's sequential experimenter).
fn main_charts(analysis: &Analysis) -> Vec<crate::Chart> {
    let all = crate::charts(analysis);
    let against = |c: &crate::Chart| c.title.contains(" latency against ");
    let has_axis = all.iter().any(against);
    all.into_iter()
        .filter(|c| {
            against(c)
                || c.title.starts_with("CPU by component")
                || c.title.starts_with("Memory by component")
                || (!has_axis && c.title.starts_with("Latency box plot"))
        })
        .collect()
}

fn stem(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

/// A file name from a chart's title: lowercase letters and digits, words joined by '-'.
fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_file_names_are_plain() {
        assert_eq!(
            slug("p99 latency against load (rps), intra-node"),
            "p99-latency-against-load-rps-intra-node"
        );
        assert_eq!(stem("run-1.json.gz"), "run-1");
    }

    #[test]
    fn a_page_needs_a_known_study_and_a_run_of_it() {
        let page = |study: &str| study_page(study, &[], None, "meshbench publish page", "E1");
        assert!(matches!(page("E9"), Err(PublishError::UnknownStudy(s)) if s == "E9"));
        assert!(matches!(page("e1"), Err(PublishError::NoRun(s)) if s == "E1"));
    }
}
