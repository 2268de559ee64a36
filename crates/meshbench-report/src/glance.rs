//! The report's first section, read at a glance: what the run found in a few plain sentences,
//! then one verdict per finding and point with the number that decided it. The statistics
//! behind each verdict are in the findings' detail table (`findings::findings_table`); the
//! Markdown report, the HTML report, the terminal and the web UI's run page all open with
//! this, so they say the same thing.

use std::collections::BTreeMap;

use meshbench_results::{RunResult, RunStatus};

use crate::analysis::Analysis;
use crate::cell::error_count;
use crate::findings::{Finding, Verdict};
use crate::table::Table;
use crate::tables::Figures;

/// The section's heading.
pub const TITLE: &str = "At a glance";

/// The matrix's heading.
pub const MATRIX_TITLE: &str = "Findings, one verdict per point";

/// The sentences and the verdict matrix (none for a run whose spec declares no findings).
#[derive(Debug, Clone, PartialEq)]
pub struct Glance {
    pub sentences: Vec<String>,
    pub matrix: Option<Table>,
}

pub fn glance(result: &RunResult, analysis: &Analysis) -> Glance {
    let findings = crate::findings::findings(result, analysis);
    let figures = crate::tables::figures(analysis);
    let mut sentences = vec![];
    if result.status != RunStatus::Complete {
        let why = result
            .status_reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        sentences.push(format!(
            "This run is {}{why}: {} cells finished, and only they are counted.",
            match result.status {
                RunStatus::Running => "still running",
                _ => "partial",
            },
            result.cells.len()
        ));
    }
    sentences.extend(findings_sentence(&findings));
    sentences.extend(rounds_sentences(result, &findings));
    sentences.extend(overhead_sentences(&figures));
    sentences.extend(noise_sentence(result));
    sentences.extend(delay_sentence(result));
    sentences.extend(outcome_sentence(result));
    Glance {
        sentences,
        matrix: matrix(&findings),
    }
}

/// The undecided points a run until decided lists by name; the rest are counted.
const UNDECIDED_LISTED: usize = 6;

/// In a run until decided: how many rounds ran and why it stopped, then each point still
/// undecided with its interval and how many more rounds would decide it.
fn rounds_sentences(result: &RunResult, findings: &[Finding]) -> Vec<String> {
    let Some(rule) = result.config.until_decided else {
        return vec![];
    };
    let rounds = result.cells.iter().map(|c| c.repetition).max().unwrap_or(0);
    let budget = rule
        .budget_seconds
        .and_then(|b| std::time::Duration::try_from_secs_f64(b).ok())
        .map(|b| format!(", budget {}", humantime::format_duration(b)))
        .unwrap_or_default();
    let mut out = vec![match &result.stopped {
        Some(stop) => format!(
            "Rounds until decided: {} round{} ran (at most {}{budget}) in {}; it stopped because {}.",
            stop.rounds,
            if stop.rounds == 1 { "" } else { "s" },
            rule.max_rounds,
            humantime::format_duration(std::time::Duration::from_secs(stop.seconds as u64)),
            stop.reason.describe()
        ),
        None => format!(
            "Rounds until decided: {rounds} round{} so far (at most {}{budget}).",
            if rounds == 1 { "" } else { "s" },
            rule.max_rounds
        ),
    }];
    let undecided: Vec<String> = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Inconclusive)
        .flat_map(|f| {
            f.points
                .iter()
                .filter(|p| p.verdict == Verdict::Inconclusive)
                .map(move |p| {
                    let why = match (&p.more_rounds, p.noise.is_empty()) {
                        (Some(more), _) => more.describe(),
                        (None, false) => format!("noise: {}", p.noise.join(", ")),
                        (None, true) => "no interval yet".to_owned(),
                    };
                    format!(
                        "{} \"{}\" at {}: {} ({why})",
                        f.claim.study, f.claim.statement, p.site, p.parts.key
                    )
                })
        })
        .collect();
    if !undecided.is_empty() {
        let listed = undecided.len().min(UNDECIDED_LISTED);
        let mut sentence = format!("Still undecided: {}", undecided[..listed].join("; "));
        if undecided.len() > listed {
            sentence.push_str(&format!("; and {} more points", undecided.len() - listed));
        }
        sentence.push('.');
        out.push(sentence);
    }
    out
}

/// "Of the study's 3 findings, 2 held and 1 was inconclusive (noise at 1 point)."
fn findings_sentence(findings: &[Finding]) -> Option<String> {
    if findings.is_empty() {
        return None;
    }
    let count = |v: Verdict| findings.iter().filter(|f| f.verdict == v).count();
    let mut parts = vec![];
    for (verdict, one, many) in [
        (Verdict::Held, "held", "held"),
        (Verdict::DidNotHold, "did not hold", "did not hold"),
        (
            Verdict::Inconclusive,
            "was inconclusive",
            "were inconclusive",
        ),
        (Verdict::NotChecked, "was not checked", "were not checked"),
    ] {
        match count(verdict) {
            0 => {}
            1 => parts.push(format!("1 {one}")),
            n => parts.push(format!("{n} {many}")),
        }
    }
    let noisy_points = findings
        .iter()
        .flat_map(|f| &f.points)
        .filter(|p| !p.noise.is_empty())
        .count();
    let noise = match noisy_points {
        0 => String::new(),
        1 => " (noise made 1 point inconclusive)".to_owned(),
        n => format!(" (noise made {n} points inconclusive)"),
    };
    let failed: Vec<&str> = findings
        .iter()
        .filter(|f| f.verdict == Verdict::DidNotHold)
        .map(|f| f.claim.statement.as_str())
        .collect();
    let failed = match failed.as_slice() {
        [] => String::new(),
        [one] => format!(" Did not hold: \"{one}\"."),
        _ => format!(" Did not hold: {} of them, see the matrix.", failed.len()),
    };
    Some(format!(
        "Of the study's {} findings, {}{noise}.{failed}",
        findings.len(),
        join_and(&parts)
    ))
}

/// What a scenario added over the baseline at one load.
struct Added {
    p50_ms: f64,
    p99_ms: f64,
    /// Its CPU (every process) over the baseline's, less one; none without baseline CPU.
    cpu_ratio: Option<f64>,
}

/// Per scenario and placement, what it added over the baseline at p50 and p99 and its CPU
/// against the baseline's, as a range over the load points.
fn overhead_sentences(figures: &[Figures]) -> Vec<String> {
    let placements: Vec<&str> = {
        let mut p: Vec<&str> = figures.iter().map(|f| f.placement.as_str()).collect();
        p.dedup();
        p.sort_unstable();
        p.dedup();
        p
    };
    // (scenario's first appearance, scenario, placement) -> each load's additions.
    let mut added: BTreeMap<(usize, &str, &str), Vec<Added>> = BTreeMap::new();
    let order = |s: &str| figures.iter().position(|f| f.scenario == s).unwrap_or(0);
    for (f, base) in crate::tables::against_baseline(figures) {
        let cpu = |x: &Figures| x.client_cpu + x.server_cpu + x.shared_cpu;
        let ratio = (cpu(base) > 0.0).then(|| cpu(f) / cpu(base) - 1.0);
        added
            .entry((order(&f.scenario), &f.scenario, &f.placement))
            .or_default()
            .push(Added {
                p50_ms: f.p50_ms - base.p50_ms,
                p99_ms: f.p99_ms - base.p99_ms,
                cpu_ratio: ratio,
            });
    }
    added
        .into_iter()
        .map(|((_, scenario, placement), points)| {
            let who = match placements.len() {
                0 | 1 => scenario.to_owned(),
                _ => format!("{scenario} ({placement})"),
            };
            let p50: Vec<f64> = points.iter().map(|p| p.p50_ms).collect();
            let p99: Vec<f64> = points.iter().map(|p| p.p99_ms).collect();
            let loads = match points.len() {
                1 => "at its one load".to_owned(),
                n if same(&p50, 0.01) && same(&p99, 0.01) => format!("at every load ({n})"),
                n => format!("across {n} loads"),
            };
            let mut sentence = format!(
                "{who} added {} at p50 and {} at p99 over baseline {loads}",
                range_ms(&p50),
                range_ms(&p99)
            );
            let cpu: Vec<f64> = points.iter().filter_map(|p| p.cpu_ratio).collect();
            if cpu.len() == points.len() && !cpu.is_empty() {
                let cpu = match range_percent(&cpu).as_str() {
                    "0% more" | "0% less" => "as much CPU as baseline".to_owned(),
                    more => format!("{more} CPU"),
                };
                sentence.push_str(&format!(", and used {cpu} (all its processes)"));
            }
            sentence.push('.');
            sentence
        })
        .collect()
}

/// "3 of 9 cells were flagged noisy: other processes took up to 1.90 cores."
fn noise_sentence(result: &RunResult) -> Option<String> {
    if result.cells.is_empty() {
        return None;
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let (mut flagged, mut other, mut steal) = (0, 0.0_f64, 0.0_f64);
    for cell in &result.cells {
        let flags = crate::trust::cell_flags(result, cell);
        if flags.is_empty() {
            continue;
        }
        flagged += 1;
        for flag in &flags {
            let kind = flag.split(':').next().unwrap_or_default().to_owned();
            *kinds.entry(kind).or_default() += 1;
        }
        if let Some(share) = crate::trust::machine_share(cell) {
            other = other.max(share.other_cores);
            steal = steal.max(share.steal_cores / f64::from(share.cpus.max(1)));
        }
    }
    let total = result.cells.len();
    if flagged == 0 {
        return Some(format!(
            "No cell of {total} was flagged noisy (no other process, steal or generator limit \
             crossed its threshold)."
        ));
    }
    let reasons: Vec<String> = kinds
        .into_iter()
        .map(|(kind, n)| match kind.as_str() {
            "other processes" => format!("other processes took up to {other:.2} cores ({n})"),
            "steal" => format!("the hypervisor took up to {:.1}% ({n})", steal * 100.0),
            _ => format!("{kind} ({n})"),
        })
        .collect();
    Some(format!(
        "{flagged} of {total} cells {} flagged noisy: {}; findings are inconclusive where \
         they touch them.",
        if flagged == 1 { "was" } else { "were" },
        join_and(&reasons)
    ))
}

/// "The load generator sent more than 1% of its requests late in 6 cells ...": lateness with
/// no outside cause, the baseline's (the machine's own) apart from what scenarios added to it
/// (their cost), never noise (`trust::generator_delay`).
fn delay_sentence(result: &RunResult) -> Option<String> {
    let delays: Vec<(&str, crate::trust::GeneratorDelay)> = (result.cells.iter())
        .filter_map(|c| {
            Some((
                c.scenario.as_str(),
                crate::trust::generator_delay(result, c)?,
            ))
        })
        .collect();
    if delays.is_empty() {
        return None;
    }
    let own = delays
        .iter()
        .filter(|(s, _)| *s == crate::cell::BASELINE)
        .map(|(_, d)| d.late_share)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    // Scenarios that added more than the threshold's share to the baseline's lateness.
    let mut added: Vec<&str> = vec![];
    let mut most_added = 0.0_f64;
    for (scenario, d) in &delays {
        if let Some(extra) = d.added().filter(|e| *e > crate::trust::LATE_SHARE) {
            most_added = most_added.max(extra);
            if !added.contains(scenario) {
                added.push(scenario);
            }
        }
    }
    added.sort_unstable();
    let mut parts = vec![];
    if let Some(own) = own {
        parts.push(format!(
            "up to {:.1}% in the baseline's own cells (this machine waking the generator late, \
             in every scenario's latency alike)",
            own * 100.0
        ));
    }
    if !added.is_empty() {
        parts.push(format!(
            "up to {:.1} points more than the baseline in {} (its CPU delaying the client: \
             counted as its cost)",
            most_added * 100.0,
            join_and(&added.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        ));
    }
    if parts.is_empty() {
        let most = delays.iter().map(|(_, d)| d.late_share).fold(0.0, f64::max);
        parts.push(format!("up to {:.1}%", most * 100.0));
    }
    Some(format!(
        "The load generator sent more than 1% of its requests late in {} cell{} with neither \
         steal nor other processes to explain it, not noise: {}.",
        delays.len(),
        if delays.len() == 1 { "" } else { "s" },
        parts.join(", and ")
    ))
}

/// "Every one of the 84,000 requests answered 2xx." or how many did not.
fn outcome_sentence(result: &RunResult) -> Option<String> {
    let sent: u64 = result.cells.iter().map(|c| c.load.sent).sum();
    if sent == 0 {
        return None;
    }
    let failed: u64 = result.cells.iter().map(error_count).sum();
    Some(match failed {
        0 => format!(
            "Every one of the {} requests answered 2xx.",
            thousands(sent)
        ),
        n => format!(
            "{} of the {} requests did not answer 2xx (see the outcomes by class).",
            thousands(n),
            thousands(sent)
        ),
    })
}

/// One row per finding: its overall verdict, then its verdict and key number at each point.
fn matrix(findings: &[Finding]) -> Option<Table> {
    if findings.is_empty() {
        return None;
    }
    let mut sites: Vec<&str> = vec![];
    for p in findings.iter().flat_map(|f| &f.points) {
        if !sites.contains(&p.site.as_str()) {
            sites.push(&p.site);
        }
    }
    let mut headers = vec!["finding".to_owned(), "overall".to_owned()];
    headers.extend(sites.iter().map(|s| (*s).to_owned()));
    let rows = findings
        .iter()
        .map(|f| {
            let mut row = vec![
                format!("{}: {}", f.claim.study, f.claim.statement),
                f.verdict.describe().to_owned(),
            ];
            for site in &sites {
                let at: Vec<String> = f
                    .points
                    .iter()
                    .filter(|p| p.site == *site)
                    .map(|p| {
                        let noise = if p.noise.is_empty() { "" } else { " (noise)" };
                        format!("{}{noise}: {}", p.verdict.describe(), p.parts.key)
                    })
                    .collect();
                row.push(at.join("; "));
            }
            row
        })
        .collect();
    Some(Table {
        title: MATRIX_TITLE.to_owned(),
        note: format!(
            "Each cell: the verdict at that point and the number that decided it, with its {:.0}% \
             interval. A finding holds when it held at every point; noise at a point makes it \
             inconclusive there. The statistics are in \"Findings, the statistics\".",
            crate::analysis::LEVEL * 100.0
        ),
        headers,
        rows,
    })
}

/// Whether every value is within `tolerance` of the others.
fn same(values: &[f64], tolerance: f64) -> bool {
    let (lo, hi) = min_max(values);
    hi - lo <= tolerance
}

fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        })
}

/// "0.10 ms", or "0.10 to 0.25 ms" (signed when a value is negative).
fn range_ms(values: &[f64]) -> String {
    let (lo, hi) = min_max(values);
    let ms = |v: f64| match v.abs() {
        a if a >= 10.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    };
    if ms(lo) == ms(hi) {
        format!("{} ms", ms(lo))
    } else {
        format!("{} to {} ms", ms(lo), ms(hi))
    }
}

/// "66% more", "66-84% more", "5% less to 12% more".
fn range_percent(values: &[f64]) -> String {
    let (lo, hi) = min_max(values);
    let pct = |v: f64| format!("{:.0}%", (v * 100.0).abs());
    let word = |v: f64| if v < 0.0 { "less" } else { "more" };
    if pct(lo) == pct(hi) && word(lo) == word(hi) {
        format!("{} {}", pct(lo), word(lo))
    } else if word(lo) == word(hi) {
        let (a, b) = if lo < 0.0 { (hi, lo) } else { (lo, hi) };
        format!("{}-{} {}", pct(a).trim_end_matches('%'), pct(b), word(lo))
    } else {
        format!("{} {} to {} {}", pct(lo), word(lo), pct(hi), word(hi))
    }
}

/// "a", "a and b", "a, b and c".
fn join_and(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// 1234567 -> "1,234,567".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_as_words() {
        assert_eq!(range_ms(&[0.1, 0.1004]), "0.10 ms");
        assert_eq!(range_ms(&[0.1, 0.25]), "0.10 to 0.25 ms");
        assert_eq!(range_ms(&[12.0, 20.1]), "12.0 to 20.1 ms");
        assert_eq!(range_percent(&[0.66, 0.84]), "66-84% more");
        assert_eq!(range_percent(&[-0.12, -0.05]), "5-12% less");
        assert_eq!(range_percent(&[-0.05, 0.12]), "5% less to 12% more");
        assert_eq!(range_percent(&[0.3]), "30% more");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(
            join_and(&["a".into(), "b".into(), "c".into()]),
            "a, b and c"
        );
    }
}
