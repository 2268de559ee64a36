//! Each study's finding, checked on this run: the claims a profile declares (results'
//! `config.findings`) judged held, did not hold, or inconclusive, each with the statistic
//! behind the verdict, never a bare number.
//!
//! Every check reduces to a linear combination of figures of scenarios at one point (a
//! difference, a difference of differences) compared with a threshold. Its uncertainty, in
//! order of preference:
//! - repetitions: with two or more repetitions of every group, the combination is formed per
//!   repetition (the scenarios of one repetition ran back to back) and gets a Student-t
//!   interval of its mean;
//! - seconds: for a latency quantile of a single repetition, each group's per-second series
//!   gets a moving block bootstrap and the standard errors add (Welch-Satterthwaite);
//! - none (one repetition of a CPU or memory figure): the estimate must clear the threshold
//!   by [`MARGIN`] of the figures' size, or the verdict is inconclusive;
//! - capacity: the search's bracket (the highest rate that met the objective and the lowest
//!   that missed; over repeated searches, the lowest met and the highest missed), combined by
//!   interval arithmetic.
//!
//! In a run of rounds until decided (results' `config.until_decided`), the interval across
//! rounds is one that stays valid when looked at after every round (alpha spent across the
//! most rounds' looks, `meshbench_stats::sequential_interval`), a round whose cells at the
//! point carry a noise flag is left out of it rather than making the point inconclusive, no
//! estimate is judged without an interval, and an undecided point says how many more rounds
//! would decide it at its current mean and spread.
//!
//! A verdict is "held" when the whole interval is on the claim's side of the threshold, "did
//! not hold" when it is wholly on the other, and inconclusive otherwise. A point where any
//! cell involved carries a noise flag (see `trust`) is inconclusive whatever its interval:
//! the run cannot tell the system from the disturbance there (a spread across repetitions
//! excepted where the interval is itself across repetitions: it already carries it). A claim holds when it held at
//! every point its scenarios were measured together; one point where it clearly did not
//! hold makes it "did not hold".

use meshbench_results::{Cell, Claim, ClaimAxis, ClaimCheck, ClaimMetric, RunResult};
use meshbench_stats::{
    block_bootstrap_estimate, combined_interval, mean_confidence_interval, sequential_interval,
    BlockEstimate, Interval,
};

use crate::analysis::{
    fmt_num, Analysis, Group, Point, BOOTSTRAP_ITERATIONS, BOOTSTRAP_SEED, LEVEL, MESH_ROLES,
};
use crate::capacity::Combined;
use crate::cell::{mesh_side, side, Side};
use crate::table::Table;

/// How the findings' tables' titles start.
pub const TITLE: &str = "Findings";

/// Without an interval, an estimate must clear the threshold by this share of the largest
/// figure in the combination.
pub const MARGIN: f64 = 0.10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Held,
    DidNotHold,
    Inconclusive,
    /// The run has no point where the claim's scenarios were measured together.
    NotChecked,
}

impl Verdict {
    pub fn describe(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::DidNotHold => "did not hold",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotChecked => "not checked",
        }
    }
}

/// One claim's verdict on this run.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub claim: Claim,
    pub verdict: Verdict,
    /// The statistic behind the verdict, point by point, as sentences, then why a claim was
    /// not checked or what it left out.
    pub evidence: Vec<String>,
    /// The same points in parts, for the verdict matrix and the detail table.
    pub points: Vec<PointVerdict>,
}

/// Every declared claim, judged.
pub fn findings(result: &RunResult, analysis: &Analysis) -> Vec<Finding> {
    result
        .config
        .findings
        .iter()
        .map(|claim| judge(result, analysis, claim))
        .collect()
}

/// How many of `result`'s findings are inconclusive: what a run until decided waits for
/// between rounds (its `Decide`). A finding that cannot be checked at all (its scenarios
/// were not measured) waits for nothing.
pub fn undecided_findings(result: &RunResult) -> usize {
    let analysis = Analysis::of(result);
    findings(result, &analysis)
        .iter()
        .filter(|f| f.verdict == Verdict::Inconclusive)
        .count()
}

/// The findings' statistics, one row per claim and point (the verdict matrix in `glance`
/// leads with the verdicts); `None` for a run whose spec declares none.
pub fn findings_table(result: &RunResult, analysis: &Analysis) -> Option<Table> {
    let findings = findings(result, analysis);
    if findings.is_empty() {
        return None;
    }
    let mut rows = vec![];
    for f in findings {
        let finding = format!("{}: {}", f.claim.study, f.claim.statement);
        // What the points do not say: why the claim was not checked, what it left out.
        let remarks = &f.evidence[f.points.len().min(f.evidence.len())..];
        for p in &f.points {
            rows.push(vec![
                finding.clone(),
                p.site.clone(),
                p.verdict.describe().to_owned(),
                p.parts.figures.clone(),
                p.parts.key.clone(),
                p.parts.basis.clone(),
                p.noise.join("; "),
            ]);
        }
        for remark in remarks {
            rows.push(vec![
                finding.clone(),
                String::new(),
                f.verdict.describe().to_owned(),
                String::new(),
                String::new(),
                String::new(),
                remark.clone(),
            ]);
        }
    }
    Some(Table {
        title: format!("{TITLE}, the statistics"),
        note: format!(
            "{:.0}% intervals. A claim held at a point when the interval is on its side there, \
             and holds when it held at every point; a point with a noise flag is inconclusive.",
            LEVEL * 100.0
        ),
        headers: [
            "finding",
            "at",
            "verdict",
            "figures",
            "decided by",
            "interval from",
            "noise, notes",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

/// A claim's verdict at one point (a load point, a pair of neighbouring points, a fit or a
/// capacity search), in parts a table can show side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct PointVerdict {
    pub verdict: Verdict,
    /// Where it was judged.
    pub site: String,
    pub parts: Parts,
    /// Noise that made the point inconclusive: each kind of flag with the scenarios it touched.
    pub noise: Vec<String>,
    /// All of it in one sentence.
    pub evidence: String,
    /// In a run until decided, an inconclusive point: how many more rounds would decide it.
    pub more_rounds: Option<MoreRounds>,
}

/// What a point's verdict rests on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parts {
    /// The figures compared, e.g. "baseline-mtls 1.234 ms vs baseline 1.200 ms".
    pub figures: String,
    /// The number that decides, with its interval where there is one.
    pub key: String,
    /// How the interval was made.
    pub basis: String,
}

fn judge(result: &RunResult, analysis: &Analysis, claim: &Claim) -> Finding {
    let measured: Vec<&str> = result
        .config
        .scenarios
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    let missing: Vec<&str> = claim
        .check
        .scenarios()
        .into_iter()
        .filter(|s| !measured.contains(s))
        .collect();
    let points: Vec<PointVerdict> = match &claim.check {
        ClaimCheck::AtMost {
            metric,
            scenario,
            against,
            max_percent,
        } => per_site(analysis, *metric, |site| {
            let difference = site.combine(&[(-1.0, against), (1.0, scenario)])?;
            let (a, b) = (difference.sides[0], difference.sides[1]);
            let allowed = a * max_percent / 100.0;
            let parts = Parts {
                figures: format!(
                    "{scenario} {} vs {against} {}",
                    show(*metric, b),
                    show(*metric, a)
                ),
                key: format!(
                    "{} (at most {max_percent}%)",
                    signed_percent(&difference, a)
                ),
                basis: difference.basis.clone(),
            };
            Some(site.verdict(
                at_most(&difference, allowed, a.abs().max(b.abs())),
                parts,
                format!(
                    "{}: {scenario} {} vs {against} {}, {} ({}; at most {max_percent}%: +{})",
                    site.label,
                    show(*metric, b),
                    show(*metric, a),
                    signed_percent(&difference, a),
                    difference.basis,
                    show(*metric, allowed)
                ),
                &[scenario, against],
                Judged::of(&difference, allowed),
            ))
        }),
        ClaimCheck::Ordering { metric, order } => {
            let present: Vec<&String> = order
                .iter()
                .filter(|s| measured.contains(&s.as_str()))
                .collect();
            let pairs: Vec<(&String, &String)> = present.windows(2).map(|w| (w[0], w[1])).collect();
            if present.len() < 2 {
                vec![]
            } else {
                per_site(analysis, *metric, |site| ranked(site, *metric, &pairs))
            }
        }
        ClaimCheck::LargerStep {
            metric,
            larger,
            smaller,
        } => per_site(analysis, *metric, |site| {
            let step = |pair: &[String; 2]| -> Option<f64> {
                Some(site.value(&pair[1])? - site.value(&pair[0])?)
            };
            let (big, small) = (step(larger)?, step(smaller)?);
            // |big| - |small|, with each step's sign taken from its estimate.
            let (sb, ss) = (big.signum(), small.signum());
            let combination = site.combine(&[
                (-sb, &larger[0]),
                (sb, &larger[1]),
                (ss, &smaller[0]),
                (-ss, &smaller[1]),
            ])?;
            let size = [&larger[0], &larger[1], &smaller[0], &smaller[1]]
                .iter()
                .filter_map(|s| site.value(s))
                .fold(0.0, |m: f64, v| m.max(v.abs()));
            let parts = Parts {
                figures: format!(
                    "{} -> {} {}, {} -> {} {}",
                    larger[0],
                    larger[1],
                    show_signed(*metric, big),
                    smaller[0],
                    smaller[1],
                    show_signed(*metric, small)
                ),
                key: show_interval(*metric, &combination),
                basis: combination.basis.clone(),
            };
            Some(site.verdict(
                greater(&combination, 0.0, size),
                parts,
                format!(
                    "{}: {} -> {} changes {} by {}, {} -> {} by {}; difference of the sizes {} ({})",
                    site.label,
                    larger[0],
                    larger[1],
                    metric.name(),
                    show_signed(*metric, big),
                    smaller[0],
                    smaller[1],
                    show_signed(*metric, small),
                    show_interval(*metric, &combination),
                    combination.basis
                ),
                &[&larger[0], &larger[1], &smaller[0], &smaller[1]],
                Judged::of(&combination, 0.0),
            ))
        }),
        ClaimCheck::Linear {
            scenarios,
            min_r_squared,
        } => linear(analysis, scenarios, *min_r_squared),
        ClaimCheck::Grows {
            metric,
            scenario,
            against,
            axis,
        } => grows(analysis, *metric, scenario, against, *axis),
    };
    let mut verdict = combine_verdicts(&points);
    let mut evidence: Vec<String> = points.iter().map(|p| p.evidence.clone()).collect();
    if verdict == Verdict::NotChecked {
        let per_side_mesh = matches!(
            &claim.check,
            ClaimCheck::Ordering { metric, .. } | ClaimCheck::AtMost { metric, .. }
                if matches!(
                    metric,
                    ClaimMetric::ClientMeshCpu
                        | ClaimMetric::ServerMeshCpu
                        | ClaimMetric::ClientMeshMemory
                        | ClaimMetric::ServerMeshMemory
                )
        );
        evidence.push(if missing.is_empty() && per_side_mesh {
            "the run does not name the node of each component (the local lab records none), \
             so the node agents cannot be told apart by side"
                .to_owned()
        } else if missing.is_empty() {
            "no point where its scenarios were measured together".to_owned()
        } else {
            format!("this run did not measure {}", missing.join(", "))
        });
    } else if !missing.is_empty() && matches!(claim.check, ClaimCheck::Ordering { .. }) {
        evidence.push(format!("{} not measured, left out", missing.join(", ")));
    }
    if result.cells.is_empty() {
        verdict = Verdict::NotChecked;
    }
    Finding {
        claim: claim.clone(),
        verdict,
        evidence,
        points,
    }
}

fn combine_verdicts(points: &[PointVerdict]) -> Verdict {
    if points.is_empty() {
        Verdict::NotChecked
    } else if points.iter().any(|p| p.verdict == Verdict::DidNotHold) {
        Verdict::DidNotHold
    } else if points.iter().all(|p| p.verdict == Verdict::Held) {
        Verdict::Held
    } else {
        Verdict::Inconclusive
    }
}

/// Each consecutive pair must rise: `pairs[i].1` above `pairs[i].0`.
fn ranked(site: &Site, metric: ClaimMetric, pairs: &[(&String, &String)]) -> Option<PointVerdict> {
    let mut verdicts = vec![];
    let mut parts = vec![];
    let mut involved: Vec<&str> = vec![];
    let mut judged = Judged {
        spread_in_interval: true,
        ..Judged::default()
    };
    let (mut figures, mut keys, mut basis) = (vec![], vec![], String::new());
    for (i, (low, high)) in pairs.iter().enumerate() {
        let difference = site.combine(&[(-1.0, low), (1.0, high)])?;
        let (a, b) = (difference.sides[0], difference.sides[1]);
        let pair = greater(&difference, 0.0, a.abs().max(b.abs()));
        verdicts.push(pair);
        let this = Judged::of(&difference, 0.0);
        judged.spread_in_interval &= this.spread_in_interval;
        for round in this.left_out {
            if !judged.left_out.contains(&round) {
                judged.left_out.push(round);
            }
        }
        // The undecided pair that needs the most rounds says how many the point needs.
        if pair == Verdict::Inconclusive {
            judged.more_rounds = judged.more_rounds.clone().max(this.more_rounds);
        }
        if i == 0 {
            figures.push(format!("{low} {}", show(metric, a)));
            basis = difference.basis.clone();
        }
        figures.push(format!("{high} {}", show(metric, b)));
        keys.push(show_interval(metric, &difference));
        parts.push(format!(
            "{low} {} < {high} {} ({}, {})",
            show(metric, a),
            show(metric, b),
            show_interval(metric, &difference),
            difference.basis
        ));
        involved.extend([low.as_str(), high.as_str()]);
    }
    let verdict = if verdicts.contains(&Verdict::DidNotHold) {
        Verdict::DidNotHold
    } else if verdicts.iter().all(|v| *v == Verdict::Held) {
        Verdict::Held
    } else {
        Verdict::Inconclusive
    };
    let summary = Parts {
        figures: figures.join(" < "),
        key: keys.join("; "),
        basis,
    };
    Some(site.verdict(
        verdict,
        summary,
        format!("{}: {}", site.label, parts.join(", ")),
        &involved,
        judged,
    ))
}

/// A linear combination's estimate and the interval its basis allows.
#[derive(Debug, Clone)]
struct Estimate {
    estimate: f64,
    interval: Option<Interval>,
    basis: String,
    /// Each term's figure on the same basis (before its coefficient), so the figures shown
    /// beside an interval are the ones it was made from.
    sides: Vec<f64>,
    /// The interval is across repetitions, so it already carries their spread (a spread
    /// flag then says nothing the interval does not).
    across_repetitions: bool,
    /// In a run until decided: the per-round values the interval was made from, the most
    /// rounds (to tell how many more would decide it) and the metric (to show their spread).
    rounds: Option<(Vec<f64>, usize, ClaimMetric)>,
    /// In a run until decided: rounds left out of this point because a cell of theirs carries
    /// a noise flag.
    left_out: Vec<u32>,
    /// Whether an estimate without an interval may be judged by [`MARGIN`] (one repetition of
    /// a CPU figure); a run until decided decides on intervals only.
    margin: bool,
}

impl Estimate {
    /// Where more rounds of a run until decided could settle the estimate against
    /// `threshold`, how many.
    fn more_rounds(&self, threshold: f64) -> Option<MoreRounds> {
        let (values, max_rounds, metric) = self.rounds.as_ref()?;
        let max = *max_rounds;
        if let Some(n) = meshbench_stats::rounds_to_decide(values, threshold, LEVEL, max) {
            return Some(MoreRounds::About(n));
        }
        let planned = match meshbench_stats::rounds_planned_to_decide(
            values,
            threshold,
            LEVEL,
            max + 1,
            PLANNING_CAP,
        ) {
            Some(rounds) => Planned::Rounds(rounds),
            None => Planned::Beyond(PLANNING_CAP),
        };
        let rounds = meshbench_stats::Summary::of(values)?;
        Some(MoreRounds::NoneWithin {
            max,
            planned,
            difference: show_signed(*metric, rounds.mean - threshold),
            spread: show(*metric, rounds.std_dev),
        })
    }
}

/// The most rounds a planning figure looks at: beyond it a difference is, for this machine,
/// no difference.
const PLANNING_CAP: usize = 1000;

/// How many more rounds of a run until decided would decide an inconclusive point, if the
/// per-round values kept their mean and spread.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum MoreRounds {
    About(usize),
    /// Not within the run's most rounds: what limits it, with the figures.
    NoneWithin {
        /// The run's most rounds.
        max: usize,
        /// The most rounds a run would have to allow to decide it.
        planned: Planned,
        /// The mean per-round difference from the claim's threshold, shown in its unit.
        difference: String,
        /// The per-round values' standard deviation, shown in its unit.
        spread: String,
    },
}

/// The most rounds a run would have to allow to decide a point at its mean and spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Planned {
    Rounds(usize),
    /// Not within this many.
    Beyond(usize),
}

impl MoreRounds {
    pub fn describe(&self) -> String {
        match self {
            MoreRounds::About(1) => {
                "about 1 more round would decide it at this mean and spread".to_owned()
            }
            MoreRounds::About(n) => {
                format!("about {n} more rounds would decide it at this mean and spread")
            }
            MoreRounds::NoneWithin {
                max,
                planned,
                difference,
                spread,
            } => {
                let limit = format!(
                    "no more rounds within the most ({max}) would decide it: the rounds' mean \
                     is {difference} from the claim's threshold, against a spread (sd) of \
                     {spread} from round to round"
                );
                match planned {
                    Planned::Rounds(rounds) => format!(
                        "{limit}; a run of at most {rounds} rounds would decide it at this mean \
                         and spread"
                    ),
                    Planned::Beyond(cap) => format!(
                        "{limit}; not even {cap} rounds would decide it at this mean and spread"
                    ),
                }
            }
        }
    }

    /// The most rounds a run would need to allow, where the run's own were not enough.
    pub fn planned_rounds(&self) -> Option<usize> {
        match self {
            MoreRounds::NoneWithin {
                planned: Planned::Rounds(rounds),
                ..
            } => Some(*rounds),
            _ => None,
        }
    }
}

/// Held when the combination is surely above `threshold`.
fn greater(e: &Estimate, threshold: f64, size: f64) -> Verdict {
    match &e.interval {
        Some(i) if i.low > threshold => Verdict::Held,
        Some(i) if i.high <= threshold => Verdict::DidNotHold,
        Some(_) => Verdict::Inconclusive,
        None if !e.margin => Verdict::Inconclusive,
        None if e.estimate > threshold + MARGIN * size => Verdict::Held,
        None if e.estimate < threshold - MARGIN * size => Verdict::DidNotHold,
        None => Verdict::Inconclusive,
    }
}

/// Held when the combination is surely at most `threshold`.
fn at_most(e: &Estimate, threshold: f64, size: f64) -> Verdict {
    match greater(e, threshold, size) {
        Verdict::Held => Verdict::DidNotHold,
        Verdict::DidNotHold => Verdict::Held,
        other => other,
    }
}

/// Where a claim is judged: one (placement, load point) of the analysis, or one capacity
/// search key (placement, connections).
struct Site<'r, 'a> {
    /// The run: its backgrounds judge the cells' noise.
    run: &'a RunResult,
    label: String,
    metric: ClaimMetric,
    groups: Vec<&'r Group<'a>>,
    searches: Vec<Combined<'r>>,
}

fn per_site(
    analysis: &Analysis,
    metric: ClaimMetric,
    judge: impl Fn(&Site) -> Option<PointVerdict>,
) -> Vec<PointVerdict> {
    sites(analysis, metric).iter().filter_map(judge).collect()
}

fn sites<'r, 'a>(analysis: &'r Analysis<'a>, metric: ClaimMetric) -> Vec<Site<'r, 'a>> {
    if metric == ClaimMetric::Capacity {
        let mut keys: Vec<(&str, u32)> = vec![];
        for s in &analysis.searches {
            if !keys.contains(&(s.placement.as_str(), s.connections)) {
                keys.push((s.placement.as_str(), s.connections));
            }
        }
        return keys
            .into_iter()
            .map(|(placement, connections)| Site {
                run: analysis.run,
                label: format!("{placement} {connections} conns").trim().to_owned(),
                metric,
                groups: vec![],
                searches: crate::capacity::combined(&analysis.searches)
                    .into_iter()
                    .filter(|s| s.placement == placement && s.connections == connections)
                    .collect(),
            })
            .collect();
    }
    analysis
        .points()
        .into_iter()
        .map(|point| Site {
            run: analysis.run,
            label: point.label(),
            metric,
            groups: analysis.at(point).collect(),
            searches: vec![],
        })
        .collect()
}

impl Site<'_, '_> {
    fn group(&self, scenario: &str) -> Option<&Group<'_>> {
        self.groups.iter().find(|g| g.scenario == scenario).copied()
    }

    fn search(&self, scenario: &str) -> Option<&Combined<'_>> {
        self.searches.iter().find(|s| s.scenario == scenario)
    }

    /// The figure's point estimate (mean over the kept repetitions).
    fn value(&self, scenario: &str) -> Option<f64> {
        if self.metric == ClaimMetric::Capacity {
            let (low, high) = bracket(self.search(scenario)?)?;
            return Some(match high {
                Some(high) => (low * high).sqrt(),
                None => low,
            });
        }
        let g = self.group(scenario)?;
        Some(g.mean(|c| cell_value(c, self.metric)))
    }

    /// sum(coefficient x figure of scenario), with its interval.
    fn combine(&self, terms: &[(f64, &String)]) -> Option<Estimate> {
        if self.metric == ClaimMetric::Capacity {
            return self.combine_brackets(terms);
        }
        let groups: Vec<(f64, &Group)> = terms
            .iter()
            .map(|(c, s)| Some((*c, self.group(s)?)))
            .collect::<Option<_>>()?;
        // A figure the run cannot give for every cell (a side's agents without their nodes)
        // leaves the point unjudged rather than judged on NaN.
        let figures_known = groups
            .iter()
            .all(|(_, g)| g.cells.iter().all(|c| !cell_value(c, self.metric).is_nan()));
        if !figures_known {
            return None;
        }
        combine_groups(self.run, self.metric, &groups)
    }

    fn combine_brackets(&self, terms: &[(f64, &String)]) -> Option<Estimate> {
        let (mut low, mut high, mut estimate) = (0.0, 0.0, 0.0);
        let mut open = false;
        let mut sides = vec![];
        for (c, scenario) in terms {
            let (lo, hi) = bracket(self.search(scenario)?)?;
            let value = self.value(scenario)?;
            sides.push(value);
            estimate += c * value;
            let hi = hi.unwrap_or(f64::INFINITY);
            open |= hi.is_infinite();
            if *c >= 0.0 {
                low += c * lo;
                high += c * hi;
            } else {
                low += c * hi;
                high += c * lo;
            }
        }
        Some(Estimate {
            estimate,
            interval: Some(Interval {
                estimate,
                low,
                high,
                level: 1.0,
            }),
            basis: if open {
                "search brackets; a capacity at the search's maximum is a lower bound".to_owned()
            } else {
                "search brackets: highest rate met to lowest missed (over repeated searches, lowest met to highest missed)".to_owned()
            },
            sides,
            across_repetitions: false,
            rounds: None,
            left_out: vec![],
            margin: false,
        })
    }

    /// The site's verdict, unless a cell involved is flagged as noisy.
    fn verdict(
        &self,
        verdict: Verdict,
        parts: Parts,
        evidence: String,
        scenarios: &[&str],
        estimate: Judged,
    ) -> PointVerdict {
        let Judged {
            spread_in_interval,
            left_out,
            more_rounds,
        } = estimate;
        // Each kind of flag once, with the scenarios it touched (the noise table has the rest).
        let mut noise: Vec<(String, Vec<&str>)> = vec![];
        let mut note = |kind: String, scenario| match noise.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, touched)) if touched.contains(&scenario) => {}
            Some((_, touched)) => touched.push(scenario),
            None => noise.push((kind, vec![scenario])),
        };
        for scenario in scenarios {
            let Some(g) = self.group(scenario) else {
                continue;
            };
            for cell in g.cells.iter().filter(|c| !left_out.contains(&c.repetition)) {
                for flag in crate::trust::cell_flags(self.run, cell) {
                    let kind = flag.split(':').next().unwrap_or_default().to_owned();
                    note(kind, *scenario);
                }
            }
            if !spread_in_interval
                && crate::trust::p99_spread(g).is_some_and(|cv| cv > crate::trust::SPREAD_CV)
            {
                note("spread across repetitions".to_owned(), *scenario);
            }
        }
        let site = self.label.clone();
        let mut evidence = evidence;
        if !left_out.is_empty() {
            let rounds: Vec<String> = left_out.iter().map(u32::to_string).collect();
            evidence.push_str(&format!(
                " [round{} {} left out: noise]",
                if left_out.len() == 1 { "" } else { "s" },
                rounds.join(", ")
            ));
        }
        if noise.is_empty() {
            let more_rounds = more_rounds.filter(|_| verdict == Verdict::Inconclusive);
            return PointVerdict {
                verdict,
                site,
                parts,
                noise: vec![],
                evidence,
                more_rounds,
            };
        }
        let reasons: Vec<String> = noise
            .iter()
            .map(|(kind, touched)| format!("{kind} ({})", touched.join(", ")))
            .collect();
        PointVerdict {
            verdict: Verdict::Inconclusive,
            site,
            parts,
            evidence: format!(
                "{evidence} [inconclusive here, noise: {}]",
                reasons.join(", ")
            ),
            noise: reasons,
            more_rounds: None,
        }
    }
}

/// What a point's verdict rests on beyond the verdict: whether its interval already carries
/// the spread across repetitions, the rounds left out for noise, and, in a run until decided,
/// how many more rounds would decide it.
#[derive(Debug, Clone, Default)]
struct Judged {
    spread_in_interval: bool,
    left_out: Vec<u32>,
    more_rounds: Option<MoreRounds>,
}

impl Judged {
    fn of(e: &Estimate, threshold: f64) -> Self {
        Judged {
            spread_in_interval: e.across_repetitions,
            left_out: e.left_out.clone(),
            more_rounds: e.more_rounds(threshold),
        }
    }
}

/// The lowest rate the scenario's searches met the objective at and the highest they missed
/// it at (`None` when a search met it at its maximum); `None` when a search met it nowhere.
fn bracket(search: &Combined) -> Option<(f64, Option<f64>)> {
    search.range()
}

/// One cell's figure.
fn cell_value(cell: &Cell, metric: ClaimMetric) -> f64 {
    let ms = |us: u64| us as f64 / 1e3;
    let mesh = |f: fn(&meshbench_results::ComponentResources) -> f64| {
        cell.resources
            .iter()
            .filter(|r| MESH_ROLES.contains(&r.role.as_str()))
            .map(f)
            .sum()
    };
    match metric {
        ClaimMetric::P50 => ms(cell.load.latency.p50_us),
        ClaimMetric::P99 => ms(cell.load.latency.p99_us),
        ClaimMetric::Max => ms(cell.load.latency.max_us),
        ClaimMetric::Throughput => cell.load.achieved_rps,
        ClaimMetric::ClientCpu => side(cell, Side::Client).0,
        ClaimMetric::TotalCpu => cell.resources.iter().map(|r| r.cpu_cores_mean).sum(),
        ClaimMetric::MeshCpu => mesh(|r| r.cpu_cores_mean),
        ClaimMetric::MeshMemory => mesh(|r| r.rss_mib_max),
        // NaN where the agents cannot be split by side: `Site::combine` then skips the point.
        ClaimMetric::ClientMeshCpu => mesh_side(cell, Side::Client).map_or(f64::NAN, |s| s.0),
        ClaimMetric::ServerMeshCpu => mesh_side(cell, Side::Server).map_or(f64::NAN, |s| s.0),
        ClaimMetric::ClientMeshMemory => mesh_side(cell, Side::Client).map_or(f64::NAN, |s| s.1),
        ClaimMetric::ServerMeshMemory => mesh_side(cell, Side::Server).map_or(f64::NAN, |s| s.1),
        // Judged from the searches, never from one cell.
        ClaimMetric::Capacity => f64::NAN,
    }
}

/// sum(coefficient x group's figure), with the best interval the groups allow (see the
/// module's header).
fn combine_groups(
    run: &RunResult,
    metric: ClaimMetric,
    terms: &[(f64, &Group)],
) -> Option<Estimate> {
    let estimate: f64 = terms
        .iter()
        .map(|(c, g)| c * g.mean(|cell| cell_value(cell, metric)))
        .sum();
    // Repetitions every group has, each combined on its own, in the order they ran.
    let mut repetitions: Vec<u32> = terms[0].1.cells.iter().map(|c| c.repetition).collect();
    repetitions.retain(|r| {
        terms
            .iter()
            .all(|(_, g)| g.cells.iter().any(|c| c.repetition == *r))
    });
    repetitions.sort_unstable();
    repetitions.dedup();
    let until_decided = run.config.until_decided;
    // A run until decided leaves a round whose cells here carry a noise flag out of this
    // point (the flags come from outside the system: steal, other processes, the generator),
    // so that one disturbed round does not keep the point undecided for good.
    let mut left_out = vec![];
    if until_decided.is_some() {
        repetitions.retain(|r| {
            let noisy = terms.iter().any(|(_, g)| {
                (g.cells.iter().filter(|c| c.repetition == *r))
                    .any(|c| !crate::trust::cell_flags(run, c).is_empty())
            });
            if noisy {
                left_out.push(*r);
            }
            !noisy
        });
    }
    if until_decided.is_some() && repetitions.len() < 2 {
        return Some(Estimate {
            estimate,
            interval: None,
            basis: "fewer than two rounds without noise: no interval yet".to_owned(),
            sides: terms
                .iter()
                .map(|(_, g)| g.mean(|cell| cell_value(cell, metric)))
                .collect(),
            across_repetitions: true,
            rounds: None,
            left_out,
            margin: false,
        });
    }
    if repetitions.len() >= 2 {
        let per_repetition: Vec<f64> = repetitions
            .iter()
            .map(|r| {
                terms
                    .iter()
                    .map(|(c, g)| {
                        let cell = g.cells.iter().find(|cell| cell.repetition == *r);
                        c * cell.map_or(f64::NAN, |cell| cell_value(cell, metric))
                    })
                    .sum()
            })
            .collect();
        let interval = match until_decided {
            Some(rule) => sequential_interval(&per_repetition, LEVEL, rule.max_rounds as usize),
            None => mean_confidence_interval(&per_repetition, LEVEL),
        };
        let sides = terms
            .iter()
            .map(|(_, g)| {
                let kept: Vec<f64> = g
                    .cells
                    .iter()
                    .filter(|c| repetitions.contains(&c.repetition))
                    .map(|c| cell_value(c, metric))
                    .collect();
                kept.iter().sum::<f64>() / kept.len() as f64
            })
            .collect();
        let basis = match until_decided {
            Some(rule) => format!(
                "t over {} rounds, valid over a look after each of at most {} (alpha spending)",
                per_repetition.len(),
                rule.max_rounds
            ),
            None => format!("t over {} repetitions", per_repetition.len()),
        };
        return Some(Estimate {
            estimate: interval.as_ref().map_or(estimate, |i| i.estimate),
            interval,
            basis,
            sides,
            across_repetitions: true,
            rounds: until_decided.map(|rule| (per_repetition, rule.max_rounds as usize, metric)),
            left_out,
            margin: false,
        });
    }
    let quantile: Option<fn(&meshbench_results::SecondStats) -> u64> = match metric {
        ClaimMetric::P50 => Some(|s| s.p50_us),
        ClaimMetric::P99 => Some(|s| s.p99_us),
        _ => None,
    };
    // A per-second series that disagrees with the cell's own histogram is not used (older
    // generators clamped it at 2 ms).
    let series_agree = terms.iter().all(|(_, g)| g.series_trusted());
    if let Some(quantile) = quantile.filter(|_| series_agree) {
        let sides: Option<Vec<(f64, BlockEstimate)>> = terms
            .iter()
            .map(|(c, g)| {
                let mut e = block_bootstrap_estimate(
                    &g.seconds(quantile),
                    BOOTSTRAP_ITERATIONS,
                    BOOTSTRAP_SEED,
                )?;
                // The series is in µs; the figures in ms.
                e.estimate /= 1e3;
                e.standard_error /= 1e3;
                Some((*c, e))
            })
            .collect();
        if let Some(sides) = sides {
            let interval = combined_interval(&sides, LEVEL)?;
            let block = sides
                .iter()
                .map(|(_, e)| e.block_seconds)
                .max()
                .unwrap_or(1);
            return Some(Estimate {
                estimate: interval.estimate,
                interval: Some(interval),
                basis: format!(
                    "per-second {} averaged over seconds, block bootstrap ({block}-s blocks)",
                    metric.name()
                ),
                sides: sides.iter().map(|(_, e)| e.estimate).collect(),
                across_repetitions: false,
                rounds: None,
                left_out: vec![],
                margin: true,
            });
        }
    }
    Some(Estimate {
        estimate,
        interval: None,
        basis: format!(
            "one repetition, no interval: judged with a {:.0}% margin",
            MARGIN * 100.0
        ),
        sides: terms
            .iter()
            .map(|(_, g)| g.mean(|cell| cell_value(cell, metric)))
            .collect(),
        across_repetitions: false,
        rounds: None,
        left_out: vec![],
        margin: true,
    })
}

/// E1's memory against connections: R^2 of each fit the run has.
fn linear(analysis: &Analysis, scenarios: &[String], min_r_squared: f64) -> Vec<PointVerdict> {
    analysis
        .fits
        .iter()
        .filter(|f| scenarios.contains(&f.scenario))
        .map(|f| {
            let verdict = if f.fit.n < 3 {
                Verdict::Inconclusive
            } else if f.fit.r_squared >= min_r_squared {
                Verdict::Held
            } else {
                Verdict::DidNotHold
            };
            PointVerdict {
                verdict,
                site: format!("{} {}", f.scenario, f.placement),
                parts: Parts {
                    figures: format!(
                        "{} MiB per 1000 connections, {} connection counts",
                        fmt_num(f.fit.slope * 1000.0),
                        f.fit.n
                    ),
                    key: format!("R^2 {:.3} (at least {min_r_squared})", f.fit.r_squared),
                    basis: if f.fit.n < 3 {
                        "least squares; two points make any line".to_owned()
                    } else {
                        "least squares".to_owned()
                    },
                },
                noise: vec![],
                evidence: format!(
                    "{} {}: R^2 {:.3} over {} connection counts (at least {min_r_squared}), {} MiB per 1000 connections{}",
                    f.scenario,
                    f.placement,
                    f.fit.r_squared,
                    f.fit.n,
                    fmt_num(f.fit.slope * 1000.0),
                    if f.fit.n < 3 { "; two points make any line" } else { "" }
                ),
                more_rounds: None,
            }
        })
        .collect()
}

fn axis_value(point: &Point, axis: ClaimAxis) -> Option<f64> {
    let load = &point.load;
    match axis {
        ClaimAxis::Rps => (load.rps > 0.0).then_some(load.rps),
        ClaimAxis::Connections | ClaimAxis::Users => Some(f64::from(load.connections)),
        ClaimAxis::Services => load.services.map(f64::from),
    }
}

/// What `scenario` adds over `against` grows along `axis`: at each pair of neighbouring
/// values of the axis with every other coordinate of the point the same, the added figure
/// at the higher value minus at the lower.
fn grows(
    analysis: &Analysis,
    metric: ClaimMetric,
    scenario: &str,
    against: &str,
    axis: ClaimAxis,
) -> Vec<PointVerdict> {
    let points = analysis.points();
    // The point with the axis's coordinate blanked: points sharing it differ only there.
    let others = |p: &Point| {
        let mut load = p.load;
        match axis {
            // Studies scale connections with the rate (E1: 2 rps per connection): the offered
            // load is the axis, whatever connections come with it.
            ClaimAxis::Rps => {
                load.rps = 0.0;
                load.connections = 0;
            }
            ClaimAxis::Connections | ClaimAxis::Users => load.connections = 0,
            ClaimAxis::Services => load.services = None,
        }
        (p.placement.clone(), format!("{load:?}"))
    };
    let mut lines: Vec<((String, String), Vec<&Point>)> = vec![];
    for p in points {
        if axis_value(p, axis).is_none() {
            continue;
        }
        let key = others(p);
        match lines.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ps)) => ps.push(p),
            None => lines.push((key, vec![p])),
        }
    }
    let mut out = vec![];
    for (_, mut line) in lines {
        line.sort_by(|a, b| {
            axis_value(a, axis)
                .partial_cmp(&axis_value(b, axis))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        for pair in line.windows(2) {
            let (lo, hi) = (pair[0], pair[1]);
            let group = |p: &Point, s: &str| analysis.at(p).find(|g| g.scenario == s);
            let (Some(a1), Some(b1), Some(a2), Some(b2)) = (
                group(lo, against),
                group(lo, scenario),
                group(hi, against),
                group(hi, scenario),
            ) else {
                continue;
            };
            let added = |a: &Group, b: &Group| {
                b.mean(|c| cell_value(c, metric)) - a.mean(|c| cell_value(c, metric))
            };
            let (added_lo, added_hi) = (added(a1, b1), added(a2, b2));
            // Repetitions pair within a point, not across points: the points' combinations
            // are independent, so their per-second or per-repetition spreads add.
            let change = if analysis.run.config.until_decided.is_some() {
                // Every round ran both points: the change is formed round by round, so its
                // interval is one sequence's, valid over the looks.
                let joint = [(1.0, b2), (-1.0, a2), (-1.0, b1), (1.0, a1)];
                let Some(change) = combine_groups(analysis.run, metric, &joint) else {
                    continue;
                };
                change
            } else {
                let (Some(at_lo), Some(at_hi)) = (
                    combine_groups(analysis.run, metric, &[(-1.0, a1), (1.0, b1)]),
                    combine_groups(analysis.run, metric, &[(-1.0, a2), (1.0, b2)]),
                ) else {
                    continue;
                };
                difference_of(&at_hi, &at_lo)
            };
            let size = [a1, b1, a2, b2]
                .iter()
                .map(|g| g.mean(|c| cell_value(c, metric)).abs())
                .fold(0.0, f64::max);
            let site = Site {
                run: analysis.run,
                label: format!("{} -> {}", lo.label(), hi.label()),
                metric,
                groups: vec![a1, b1, a2, b2],
                searches: vec![],
            };
            let parts = Parts {
                figures: format!(
                    "{scenario} adds {} then {}",
                    show_signed(metric, added_lo),
                    show_signed(metric, added_hi)
                ),
                key: show_interval(metric, &change),
                basis: change.basis.clone(),
            };
            out.push(site.verdict(
                greater(&change, 0.0, size),
                parts,
                format!(
                    "{} -> {}: {scenario} adds {} then {} ({}, {})",
                    lo.label(),
                    hi.label(),
                    show_signed(metric, added_lo),
                    show_signed(metric, added_hi),
                    show_interval(metric, &change),
                    change.basis
                ),
                &[scenario, against],
                Judged::of(&change, 0.0),
            ));
        }
    }
    out
}

/// `a - b` of two independent estimates: the intervals' half-widths add in quadrature (each
/// read as a normal standard error at its level).
fn difference_of(a: &Estimate, b: &Estimate) -> Estimate {
    let estimate = a.estimate - b.estimate;
    let interval = match (&a.interval, &b.interval) {
        (Some(x), Some(y)) => {
            let half = (((x.high - x.low) / 2.0).powi(2) + ((y.high - y.low) / 2.0).powi(2)).sqrt();
            Some(Interval {
                estimate,
                low: estimate - half,
                high: estimate + half,
                level: LEVEL,
            })
        }
        _ => None,
    };
    let basis = if interval.is_some() {
        format!("{}; two points' intervals added in quadrature", a.basis)
    } else {
        a.basis.clone()
    };
    Estimate {
        estimate,
        interval,
        basis,
        sides: a.sides.iter().chain(&b.sides).copied().collect(),
        across_repetitions: a.across_repetitions && b.across_repetitions,
        rounds: None,
        left_out: vec![],
        margin: a.margin && b.margin,
    }
}

fn unit(metric: ClaimMetric) -> &'static str {
    match metric {
        ClaimMetric::P50 | ClaimMetric::P99 | ClaimMetric::Max => " ms",
        ClaimMetric::Throughput | ClaimMetric::Capacity => " rps",
        ClaimMetric::ClientCpu
        | ClaimMetric::TotalCpu
        | ClaimMetric::MeshCpu
        | ClaimMetric::ClientMeshCpu
        | ClaimMetric::ServerMeshCpu => " cores",
        ClaimMetric::MeshMemory | ClaimMetric::ClientMeshMemory | ClaimMetric::ServerMeshMemory => {
            " MiB"
        }
    }
}

/// A figure at the precision its unit needs (a sidecar's CPU is a few hundredths of a core).
fn number(metric: ClaimMetric, value: f64) -> String {
    match metric {
        ClaimMetric::P50 | ClaimMetric::P99 | ClaimMetric::Max => format!("{value:.3}"),
        ClaimMetric::ClientCpu
        | ClaimMetric::TotalCpu
        | ClaimMetric::MeshCpu
        | ClaimMetric::ClientMeshCpu
        | ClaimMetric::ServerMeshCpu => format!("{value:.3}"),
        ClaimMetric::MeshMemory | ClaimMetric::ClientMeshMemory | ClaimMetric::ServerMeshMemory => {
            format!("{value:.1}")
        }
        ClaimMetric::Throughput | ClaimMetric::Capacity => format!("{value:.0}"),
    }
}

fn show(metric: ClaimMetric, value: f64) -> String {
    format!("{}{}", number(metric, value), unit(metric))
}

fn show_signed(metric: ClaimMetric, value: f64) -> String {
    let sign = if value >= 0.0 { "+" } else { "" };
    format!("{sign}{}", show(metric, value))
}

fn show_interval(metric: ClaimMetric, e: &Estimate) -> String {
    match &e.interval {
        Some(i) if i.high.is_infinite() => format!(
            "{} [{}, no upper bound]",
            show_signed(metric, e.estimate),
            number(metric, i.low)
        ),
        Some(i) => format!(
            "{} [{}, {}]",
            show_signed(metric, e.estimate),
            number(metric, i.low),
            number(metric, i.high)
        ),
        None => show_signed(metric, e.estimate),
    }
}

/// The difference as a share of the reference, with the interval's ends alike.
fn signed_percent(e: &Estimate, reference: f64) -> String {
    if reference == 0.0 {
        return "no reference".to_owned();
    }
    let pct = |v: f64| format!("{:+.1}%", v / reference * 100.0);
    match &e.interval {
        Some(i) => format!("{} [{}, {}]", pct(e.estimate), pct(i.low), pct(i.high)),
        None => pct(e.estimate),
    }
}
