//! Table models computed from results: what the reports show, independent of format.
//! Repetitions of a (scenario, load point) are averaged, after the outlier policy; the
//! statistics come from [`Analysis`].

use meshbench_results::{Cell, HandshakeTimes, LoadPoint, RunResult};

use meshbench_stats::{BlockInterval, Interval, PositiveMethod};

use crate::analysis::{fmt_num, Analysis, Point};
pub use crate::cell::{error_count, BASELINE};
use crate::cell::{side, Side, SHARED_ROLES};
pub use crate::table::Table;

/// The figures of one (scenario, load point), averaged over repetitions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub scenario: String,
    /// `intra-node`, `inter-node`, or empty for results without placements.
    pub placement: String,
    pub load: LoadPoint,
    pub repetitions: u32,
    pub achieved_rps: f64,
    pub sent: f64,
    pub errors: f64,
    pub unsent: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub client_cpu: f64,
    pub server_cpu: f64,
    pub client_mib: f64,
    pub server_mib: f64,
    /// Node agents and the control plane: the mesh's shared components.
    pub shared_cpu: f64,
    pub shared_mib: f64,
}

impl Figures {
    /// The scenario, with its placement when the run has placements.
    pub fn label(&self) -> String {
        scenario_label(&self.scenario, &self.placement)
    }
}

fn scenario_label(scenario: &str, placement: &str) -> String {
    if placement.is_empty() {
        scenario.to_owned()
    } else {
        format!("{scenario} ({placement})")
    }
}

/// Figures per (load point, scenario), from the repetitions the outlier policy kept.
pub fn figures(analysis: &Analysis) -> Vec<Figures> {
    analysis
        .groups
        .iter()
        .map(|g| {
            let ms = |us: u64| us as f64 / 1e3;
            Figures {
                scenario: g.scenario.clone(),
                placement: g.point.placement.clone(),
                load: g.point.load,
                repetitions: g.cells.len() as u32,
                achieved_rps: g.mean(|c| c.load.achieved_rps),
                sent: g.mean(|c| c.load.sent as f64),
                errors: g.mean(|c| error_count(c) as f64),
                unsent: g.mean(|c| c.load.unsent as f64),
                p50_ms: g.mean(|c| ms(c.load.latency.p50_us)),
                p90_ms: g.mean(|c| ms(c.load.latency.p90_us)),
                p99_ms: g.mean(|c| ms(c.load.latency.p99_us)),
                p999_ms: g.mean(|c| ms(c.load.latency.p99_9_us)),
                max_ms: g.mean(|c| ms(c.load.latency.max_us)),
                client_cpu: g.mean(|c| side(c, Side::Client).0),
                server_cpu: g.mean(|c| side(c, Side::Server).0),
                client_mib: g.mean(|c| side(c, Side::Client).1),
                server_mib: g.mean(|c| side(c, Side::Server).1),
                shared_cpu: g.mean(|c| shared(c).0),
                shared_mib: g.mean(|c| shared(c).1),
            }
        })
        .collect()
}

/// CPU and memory of the mesh's shared components (node agents, control plane).
fn shared(cell: &Cell) -> (f64, f64) {
    cell.resources
        .iter()
        .filter(|r| SHARED_ROLES.contains(&r.role.as_str()))
        .fold((0.0, 0.0), |(cpu, mem), r| {
            (cpu + r.cpu_cores_mean, mem + r.rss_mib_max)
        })
}

/// Per-side resource columns (app + its proxy, then the mesh's shared components), shared by
/// the absolute and overhead tables.
const RESOURCE_HEADERS: [&str; 6] = [
    "client side CPU (cores)",
    "server side CPU (cores)",
    "agents + control plane CPU (cores)",
    "client side mem (MiB)",
    "server side mem (MiB)",
    "agents + control plane mem (MiB)",
];

fn headers(leading: &[&str]) -> Vec<String> {
    leading
        .iter()
        .chain(RESOURCE_HEADERS.iter())
        .map(|h| (*h).to_owned())
        .collect()
}

fn load_label(f: &Figures) -> String {
    Point {
        placement: String::new(),
        load: f.load,
    }
    .label()
}

fn workload_line(cfg: &meshbench_results::RunConfig) -> String {
    let w = &cfg.workload;
    match cfg.application.as_str() {
        "zero-trust-app" => format!(
            "E3's experimenter calling the calculator over {}: all four operations in turn, the experiment's first request discarded",
            w.protocol
        ),
        "counter-chain" => format!(
            "E4's counter chain over {}: POST /count bounces between counter-a and counter-b until it has crossed the point's services, no retries",
            w.protocol
        ),
        _ => {
            let request = if w.request_bytes > 0 {
                format!("POST with {} B bodies", w.request_bytes)
            } else {
                "GET".to_owned()
            };
            format!(
                "{} over {}, {request}, server delay {} ms, {} B responses",
                w.role, w.protocol, w.delay_ms, w.response_bytes
            )
        }
    }
}

fn load_line(cfg: &meshbench_results::RunConfig) -> String {
    use meshbench_results::LoadModel;
    let timed = |what: &str| {
        format!(
            "{what}, {} s measured after {} s warm-up",
            cfg.duration_seconds, cfg.warmup_seconds
        )
    };
    match cfg.model {
        LoadModel::ClosedLoop => timed("closed loop (every connection as fast as it can)"),
        LoadModel::Sequential => {
            "sequential (one request at a time, in groups with a pause between them; each cell ends after its requests)".to_owned()
        }
        LoadModel::Users => {
            "concurrent users (each sends its requests back to back on its own connection; each cell ends after them)".to_owned()
        }
        LoadModel::OpenLoopConstantRate => timed("constant-rate open loop (latency from the intended send time)"),
    }
}

fn cell_label(c: &Cell) -> String {
    Point {
        placement: String::new(),
        load: c.load_point,
    }
    .label()
}

/// Absolute figures: one row per (load point, scenario).
pub fn absolute_table(figures: &[Figures]) -> Table {
    Table {
        title: "Absolute figures".to_owned(),
        note: String::new(),
        headers: headers(&[
            "load",
            "scenario",
            "achieved rps",
            "errors",
            "unsent",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
        ]),
        rows: figures
            .iter()
            .map(|f| {
                vec![
                    load_label(f),
                    f.label(),
                    format!("{:.1}", f.achieved_rps),
                    fmt_num(f.errors),
                    fmt_num(f.unsent),
                    format!("{:.3}", f.p50_ms),
                    format!("{:.3}", f.p90_ms),
                    format!("{:.3}", f.p99_ms),
                    format!("{:.3}", f.p999_ms),
                    format!("{:.3}", f.max_ms),
                    format!("{:.3}", f.client_cpu),
                    format!("{:.3}", f.server_cpu),
                    format!("{:.3}", f.shared_cpu),
                    format!("{:.1}", f.client_mib),
                    format!("{:.1}", f.server_mib),
                    format!("{:.1}", f.shared_mib),
                ]
            })
            .collect(),
    }
}

fn delta(value: f64, base: f64, decimals: usize) -> String {
    let d = value - base;
    if base.abs() < f64::EPSILON {
        format!("{d:+.decimals$}")
    } else {
        format!("{d:+.decimals$} ({:+.0}%)", d / base * 100.0)
    }
}

/// Each scenario other than `baseline` with the baseline's figures at its placement and load
/// point (scenarios without one are left out).
pub(crate) fn against_baseline(figures: &[Figures]) -> impl Iterator<Item = (&Figures, &Figures)> {
    figures
        .iter()
        .filter(|f| f.scenario != BASELINE)
        .filter_map(|f| {
            let base = figures.iter().find(|b| {
                b.scenario == BASELINE && b.placement == f.placement && b.load == f.load
            })?;
            Some((f, base))
        })
}

/// Overhead of every other scenario relative to `baseline` at the same load point, as E1's
/// Table I: +delta and percentage.
pub fn overhead_table(figures: &[Figures]) -> Table {
    let mut rows = Vec::new();
    for (f, base) in against_baseline(figures) {
        rows.push(vec![
            load_label(f),
            f.label(),
            delta(f.achieved_rps, base.achieved_rps, 1),
            delta(f.p50_ms, base.p50_ms, 3),
            delta(f.p99_ms, base.p99_ms, 3),
            delta(f.client_cpu, base.client_cpu, 3),
            delta(f.server_cpu, base.server_cpu, 3),
            delta(f.shared_cpu, base.shared_cpu, 3),
            delta(f.client_mib, base.client_mib, 1),
            delta(f.server_mib, base.server_mib, 1),
            delta(f.shared_mib, base.shared_mib, 1),
        ]);
    }
    Table {
        title: "Overhead relative to baseline".to_owned(),
        note: String::new(),
        headers: headers(&["load", "scenario", "achieved rps", "p50 ms", "p99 ms"]),
        rows,
    }
}

/// Every measured process of every cell: which component costs what.
pub fn component_table(result: &RunResult) -> Table {
    let rows = result
        .cells
        .iter()
        .flat_map(|c| {
            c.resources.iter().map(move |r| {
                vec![
                    cell_label(c),
                    scenario_label(&c.scenario, c.placement.as_deref().unwrap_or("")),
                    c.repetition.to_string(),
                    r.component.clone(),
                    r.role.clone(),
                    format!("{:.3}", r.cpu_cores_mean),
                    format!("{:.3}", r.cpu_cores_max),
                    format!("{:.1}", r.rss_mib_mean),
                    format!("{:.1}", r.rss_mib_max),
                    r.working_set_mib_max
                        .map_or("-".to_owned(), |w| format!("{w:.1}")),
                    r.source.clone(),
                ]
            })
        })
        .collect();
    Table {
        title: "Resources by component".to_owned(),
        note: String::new(),
        headers: [
            "load",
            "scenario",
            "rep",
            "component",
            "role",
            "CPU mean (cores)",
            "CPU max (cores)",
            "RSS mean (MiB)",
            "RSS max (MiB)",
            "working set max (MiB)",
            "source",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// Every outcome class seen, per (load point, scenario): how requests ended.
pub fn outcome_table(result: &RunResult) -> Table {
    let mut keys: Vec<&String> = result
        .cells
        .iter()
        .flat_map(|c| c.load.outcomes.keys())
        .collect();
    keys.sort();
    keys.dedup();
    let mut headers = vec!["load".to_owned(), "scenario".to_owned(), "rep".to_owned()];
    headers.push("sent".to_owned());
    headers.extend(keys.iter().map(|k| k.to_string()));
    let rows = result
        .cells
        .iter()
        .map(|c| {
            let mut row = vec![
                cell_label(c),
                scenario_label(&c.scenario, c.placement.as_deref().unwrap_or("")),
                c.repetition.to_string(),
                c.load.sent.to_string(),
            ];
            row.extend(
                keys.iter()
                    .map(|k| c.load.outcomes.get(*k).copied().unwrap_or(0).to_string()),
            );
            row
        })
        .collect();
    Table {
        title: "Outcomes by class".to_owned(),
        note: String::new(),
        headers,
        rows,
    }
}

/// What each cell's capture saw, per cell that had one: the link between nodes (the local
/// lab) or where the server's traffic arrives, within a node too (a cluster).
pub fn wire_table(result: &RunResult) -> Option<Table> {
    let rows: Vec<Vec<String>> = result
        .cells
        .iter()
        .filter_map(|c| {
            let w = c.wire.as_ref()?;
            let verdict = if w.marker_seen {
                "PLAINTEXT: request marker visible"
            } else if w.connections > 0 && w.tls_connections == w.connections {
                "encrypted (TLS only)"
            } else {
                "not all TLS, marker not seen"
            };
            Some(vec![
                cell_label(c),
                scenario_label(&c.scenario, c.placement.as_deref().unwrap_or("")),
                w.link.clone(),
                if w.pcap.is_empty() {
                    "-".to_owned()
                } else {
                    w.packets.to_string()
                },
                format!("{}/{}", w.tls_connections, w.connections),
                w.tls_versions.join(", "),
                w.cipher_suites.join(", "),
                verdict.to_owned(),
            ])
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "On the wire".to_owned(),
        note: String::new(),
        headers: [
            "load",
            "scenario",
            "recorded at",
            "packets",
            "TLS connections",
            "TLS versions",
            "cipher suites",
            "verdict",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

/// Every table of a run's report, in report order: Markdown and HTML render this one list.
pub fn report_tables(result: &RunResult, analysis: &Analysis) -> Vec<Table> {
    let figures = figures(analysis);
    let mut tables: Vec<Table> = crate::findings::findings_table(result, analysis)
        .into_iter()
        .collect();
    tables.extend(disruption_table(result));
    tables.extend(crate::trust::noise_table(result, analysis));
    tables.extend(crate::trust::generator_delay_table(analysis));
    tables.extend(capacity_tables(result, analysis));
    tables.extend([absolute_table(&figures), overhead_table(&figures)]);
    tables.extend(significance_table(analysis));
    tables.extend(repetition_table(analysis));
    tables.push(distribution_table(analysis));
    tables.extend(fit_table(analysis));
    tables.extend(outlier_table(analysis));
    tables.extend([
        component_table(result),
        crate::trust::unattributed_table(analysis),
        outcome_table(result),
    ]);
    tables.extend(wire_table(result));
    tables.extend(handshake_table(analysis));
    tables
}

/// The capacity model's sentences, capacities and steps (none for other models).
pub fn capacity_tables(result: &RunResult, analysis: &Analysis) -> Vec<Table> {
    let searches = &analysis.searches;
    let mut tables: Vec<Table> = capacity_sentences(result, analysis).into_iter().collect();
    tables.extend(crate::capacity::capacity_table(result, searches));
    tables.extend(crate::capacity::steps_table(searches));
    tables
}

/// Each scenario's capacity against the baseline's, in a sentence.
pub fn capacity_sentences(result: &RunResult, analysis: &Analysis) -> Option<Table> {
    let sentences = crate::capacity::sentences(result, &analysis.searches);
    (!sentences.is_empty()).then(|| Table {
        title: "Capacity, in a sentence".to_owned(),
        note: String::new(),
        headers: vec!["finding".to_owned()],
        rows: sentences.into_iter().map(|s| vec![s]).collect(),
    })
}

/// Every component that stopped, or that meshbench lost sight of, during a cell, over all the
/// run's cells (kept or not: what happened is told either way), and every cell given up;
/// `None` when nothing was.
pub fn disruption_table(result: &RunResult) -> Option<Table> {
    let rows: Vec<Vec<String>> = result
        .cells
        .iter()
        .flat_map(|cell| cell.disruptions.iter().map(move |d| (cell, d)))
        .map(|(cell, d)| {
            vec![
                point_label(&cell.placement, cell.load_point),
                cell.scenario.clone(),
                cell.repetition.to_string(),
                format!("{} ({})", d.component, d.role),
                d.what(),
                d.into_window_secs
                    .map_or_else(|| d.at.clone(), |s| format!("{s:+.2}")),
                match &d.detail {
                    Some(detail) => format!("{} ({})", d.reason, first_line(detail)),
                    None => d.reason.clone(),
                },
            ]
        })
        .chain(result.failed_cells.iter().map(|failed| {
            vec![
                point_label(&failed.placement, failed.load_point),
                failed.scenario.clone(),
                failed.repetition.to_string(),
                "the whole cell".to_owned(),
                "given up".to_owned(),
                failed.failed_at.clone(),
                failed.error.clone(),
            ]
        }))
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "Disruptions: components that died or went out of reach during a cell".to_owned(),
        note: "These cells measured the fault as well as the mesh: their figures are flagged \
               as noise. Time is from the start of the load window (negative: before it). A \
               cell given up ended its run there; a resumed run ran it again."
            .to_owned(),
        headers: [
            "load",
            "scenario",
            "repetition",
            "component",
            "what",
            "when, s",
            "reason",
        ]
        .map(str::to_owned)
        .to_vec(),
        rows,
    })
}

/// "200 rps / 4 conns, intra-node": where a cell ran, as the groups' points say it.
fn point_label(placement: &Option<String>, load: meshbench_results::LoadPoint) -> String {
    crate::analysis::Point {
        placement: placement.clone().unwrap_or_default(),
        load,
    }
    .label()
}

/// A detail's first line, cut to a table cell's width.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(120) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_owned(),
    }
}

/// E5's TLS handshake time, per proxy and direction, from our proxies' own histograms over
/// the repetitions kept: how many handshakes, their mean, and the bucket bounds of the median
/// and p99 (the worst repetition's).
pub fn handshake_table(analysis: &Analysis) -> Option<Table> {
    let mut rows = vec![];
    for g in &analysis.groups {
        let mut keys: Vec<(&str, &str)> = g
            .cells
            .iter()
            .flat_map(|c| &c.handshakes)
            .map(|h| (h.component.as_str(), h.direction.as_str()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for (component, direction) in keys {
            let times: Vec<&HandshakeTimes> = g
                .cells
                .iter()
                .flat_map(|c| &c.handshakes)
                .filter(|h| h.component == component && h.direction == direction)
                .collect();
            let count: u64 = times.iter().map(|h| h.count).sum();
            let mean = times
                .iter()
                .map(|h| h.mean_ms * h.count as f64)
                .sum::<f64>()
                / count.max(1) as f64;
            let bound = |pick: fn(&HandshakeTimes) -> Option<f64>| {
                times
                    .iter()
                    .map(|h| pick(h))
                    .try_fold(0.0_f64, |worst, b| b.map(|b| worst.max(b)))
                    .map_or("> largest bucket".to_owned(), |b| format!("<= {b}"))
            };
            rows.push(vec![
                g.point.label(),
                g.scenario.clone(),
                component.to_owned(),
                direction.to_owned(),
                count.to_string(),
                format!("{mean:.3}"),
                bound(|h| h.p50_ms_at_most),
                bound(|h| h.p99_ms_at_most),
            ]);
        }
    }
    (!rows.is_empty()).then(|| Table {
        title: "TLS handshakes".to_owned(),
        note: "Our proxies' own histograms, over the whole life of each proxy in the cell; \
               outbound is the client side, from its ClientHello to the end of the handshake, \
               inbound the server side."
            .to_owned(),
        headers: [
            "load",
            "scenario",
            "proxy",
            "direction",
            "handshakes",
            "mean ms",
            "median ms",
            "p99 ms",
        ]
        .map(str::to_owned)
        .to_vec(),
        rows,
    })
}

fn ci(interval: &Interval, decimals: usize) -> String {
    format!(
        "{:.decimals$} [{:.decimals$}, {:.decimals$}]",
        interval.estimate, interval.low, interval.high
    )
}

/// Below what f64 can tell apart from zero, say so rather than print 0.
pub(crate) fn p_value(p: f64) -> String {
    if p < 1e-300 {
        "< 1e-300".to_owned()
    } else if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// Every scenario against the baseline at the same point. "Significant" rests on the block
/// bootstrap of the per-second series where there are enough seconds; the pooled figures
/// describe every request.
pub fn significance_table(analysis: &Analysis) -> Option<Table> {
    let blocks =
        |b: &Option<BlockInterval>| b.as_ref().map_or("-".to_owned(), |b| ci(&b.interval, 3));
    let rows: Vec<Vec<String>> = analysis
        .comparisons
        .iter()
        .map(|c| {
            let (significant, basis) = c.significance();
            vec![
                c.point.label(),
                c.scenario.clone(),
                blocks(&c.per_second_median_ms),
                blocks(&c.per_second_p99_ms),
                ci(&c.median_difference_ms, 3),
                p_value(c.test.p_value),
                format!("{:+.3} ({})", c.test.cliffs_delta, c.test.magnitude()),
                format!("{} / {}", c.test.n_a, c.test.n_b),
                format!(
                    "{} ({})",
                    if significant { "yes" } else { "no" },
                    basis.describe()
                ),
            ]
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "Latency against baseline: significant?".to_owned(),
        note: "Requests within a run are \
                not independent, so the test is a moving block bootstrap over the load generator's \
                per-second series (blocks of consecutive seconds, length chosen from the series, \
                Politis-White): the difference of the per-second median and p99, averaged over \
                seconds, with 95% intervals; significant when the median's interval excludes zero. \
                The pooled median difference (i.i.d. bootstrap), Mann-Whitney U and Cliff's delta \
                (> 0: slower than baseline) describe every request as if independent."
            .to_owned(),
        headers: [
            "load",
            "scenario",
            "per-second median difference ms [95% block CI]",
            "per-second p99 difference ms [95% block CI]",
            "pooled median difference ms [95% i.i.d. CI]",
            "p (Mann-Whitney)",
            "Cliff's delta",
            "requests (baseline / scenario)",
            "significant",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

/// Across repetitions, where there are two or more: geometric means with 95% log-scale
/// Student-t intervals, which stay above zero as latencies and rates do (the mean with a
/// percentile bootstrap where a value was zero, marked).
pub fn repetition_table(analysis: &Analysis) -> Option<Table> {
    let cell = |figure: &Option<(Interval, PositiveMethod)>, decimals: usize| {
        figure.as_ref().map(|(interval, method)| match method {
            PositiveMethod::LogScaleT => ci(interval, decimals),
            PositiveMethod::BootstrapMean => {
                format!("{} (mean, bootstrap)", ci(interval, decimals))
            }
        })
    };
    let rows: Vec<Vec<String>> = analysis
        .groups
        .iter()
        .filter_map(|g| {
            Some(vec![
                g.point.label(),
                g.scenario.clone(),
                g.cells.len().to_string(),
                cell(&g.achieved_rps, 1)?,
                cell(&g.p50_ms, 3)?,
                cell(&g.p99_ms, 3)?,
            ])
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "Across repetitions".to_owned(),
        note: "Geometric mean [95% log-scale t interval].".to_owned(),
        headers: [
            "load",
            "scenario",
            "repetitions",
            "achieved rps",
            "p50 ms",
            "p99 ms",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

/// E3's descriptive statistics of every request's latency, pooled over repetitions.
pub fn distribution_table(analysis: &Analysis) -> Table {
    let rows = analysis
        .groups
        .iter()
        .map(|g| {
            let d = &g.latency;
            let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.3}", v / 1e3));
            let q = |p: f64| ms(d.quantile(p));
            let ratio = match (d.quantile(1.0), d.quantile(0.99)) {
                (Some(max), Some(p99)) if p99 > 0.0 => format!("{:.1}", max / p99),
                _ => "-".to_owned(),
            };
            vec![
                g.point.label(),
                g.scenario.clone(),
                d.len().to_string(),
                ms(d.mean()),
                ms(d.std_dev()),
                q(0.0),
                q(0.25),
                q(0.5),
                q(0.75),
                q(0.90),
                q(0.95),
                q(0.99),
                q(0.999),
                q(1.0),
                ratio,
            ]
        })
        .collect();
    Table {
        title: "Latency distribution, every request (ms)".to_owned(),
        note: String::new(),
        headers: [
            "load",
            "scenario",
            "requests",
            "mean",
            "std dev",
            "min",
            "Q1",
            "median",
            "Q3",
            "RTT90",
            "RTT95",
            "RTT99",
            "p99.9",
            "max",
            "max / RTT99",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// E1's memory-vs-connections lines.
pub fn fit_table(analysis: &Analysis) -> Option<Table> {
    let rows: Vec<Vec<String>> = analysis
        .fits
        .iter()
        .map(|f| {
            vec![
                f.scenario.clone(),
                f.placement.clone(),
                f.points.len().to_string(),
                format!("{:.2}", f.fit.slope * 1000.0),
                format!("{:.1}", f.fit.intercept),
                format!("{:.3}", f.fit.r_squared),
            ]
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "Mesh memory against open connections (least squares)".to_owned(),
        note: String::new(),
        headers: [
            "scenario",
            "placement",
            "points",
            "MiB per 1000 connections",
            "MiB at 0 connections",
            "R^2",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

/// Repetitions the outlier policy left out, so a reader sees what was dropped.
pub fn outlier_table(analysis: &Analysis) -> Option<Table> {
    let mut rows: Vec<Vec<String>> = vec![];
    for point in analysis.points() {
        if let Some(g) = analysis.at(point).find(|g| !g.dropped.is_empty()) {
            rows.push(vec![
                point.label(),
                g.dropped
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
    }
    (!rows.is_empty()).then(|| Table {
        title: "Repetitions dropped as outliers".to_owned(),
        note: "The outlier policy drops the repetition with the highest baseline maximum latency; \
               its cells stay in results.json."
            .to_owned(),
        headers: ["load", "repetitions dropped (every scenario)"]
            .map(String::from)
            .to_vec(),
        rows,
    })
}

/// Status, environment and configuration lines shown above the tables.
pub fn header_lines(result: &RunResult) -> Vec<(String, String)> {
    let env = &result.environment;
    let cfg = &result.config;
    let mut lines = vec![
        ("status".to_owned(), format!("{:?}", result.status).to_lowercase()),
        ("profile".to_owned(), cfg.profile.clone()),
        ("platform".to_owned(), cfg.platform.clone()),
        (
            "placements".to_owned(),
            if cfg.placements.is_empty() {
                "-".to_owned()
            } else {
                cfg.placements.join(", ")
            },
        ),
        (
            "started / finished".to_owned(),
            format!(
                "{} / {}",
                result.started_at,
                result.finished_at.as_deref().unwrap_or("-")
            ),
        ),
        (
            "machine".to_owned(),
            format!(
                "{} ({} cores, {} MiB), {} {}",
                env.cpu_model, env.cpu_cores, env.memory_total_mib, env.os, env.kernel
            ),
        ),
        (
            "meshbench".to_owned(),
            format!(
                "{} ({}, {} build)",
                env.meshbench_version, env.git_commit, env.build_profile
            ),
        ),
        ("workload".to_owned(), workload_line(cfg)),
        (
            "load".to_owned(),
            format!(
                "{}, {}{}",
                load_line(cfg),
                match cfg.until_decided {
                    Some(rule) => format!(
                        "rounds until every finding is decided (at most {})",
                        rule.max_rounds
                    ),
                    None => format!("{} repetition(s)", cfg.repetitions),
                },
                match cfg.outliers.drop_highest_baseline_max {
                    0 => String::new(),
                    n => format!(
                        "; per load point the {n} repetition(s) with the highest baseline maximum latency are left out"
                    ),
                }
            ),
        ),
    ];
    let mut software: Vec<String> = cfg
        .scenarios
        .iter()
        .flat_map(|s| &s.software)
        .map(|v| format!("{}: {}", v.name, v.version))
        .collect();
    software.sort();
    software.dedup();
    if !software.is_empty() {
        lines.push(("third-party software".to_owned(), software.join("; ")));
    }
    if !cfg.description.is_empty() {
        lines.insert(2, ("experiment".to_owned(), cfg.description.clone()));
    }
    if cfg.scale != "local" {
        lines.insert(2, ("scale".to_owned(), cfg.scale.clone()));
    }
    if let Some(reason) = &result.status_reason {
        lines.insert(1, ("status reason".to_owned(), reason.clone()));
    }
    let untrusted: Vec<String> = result
        .cells
        .iter()
        .filter_map(|c| {
            let n = c.load.generator.as_ref()?.untrusted_timestamps;
            (n > 0).then(|| {
                format!(
                    "{} {} rep {}: {n}",
                    c.scenario,
                    c.load_point.label(),
                    c.repetition
                )
            })
        })
        .collect();
    if !untrusted.is_empty() {
        lines.push((
            "untrusted timestamps".to_owned(),
            format!(
                "requests whose clock readings were out of order, their latency re-read from \
                 the monotonic clock (an upper bound): {}",
                untrusted.join("; ")
            ),
        ));
    }
    // A cluster mesh measured without encryption (Cilium where the cluster enables neither
    // WireGuard nor IPsec states `encryption: none` in its mode) is not the encrypting
    // configuration the studies measured: said where its figures are read.
    for mesh in env.cluster_meshes.iter().filter(|m| {
        m.usable
            && m.mode
                .as_deref()
                .is_some_and(|mode| mode.contains("encryption: none"))
            && cfg.scenarios.iter().any(|s| s.name == m.scenario)
    }) {
        lines.push((
            format!("not encrypted: {}", mesh.scenario),
            format!(
                "{} encrypts nothing on this cluster ({}), not even between nodes: its cells \
                 measure policy enforced without encryption, not the encrypting configuration a \
                 study of mTLS measured",
                mesh.scenario,
                mesh.mode.as_deref().unwrap_or_default()
            ),
        ));
    }
    for missing in &cfg.unavailable {
        lines.push((
            format!("unavailable: {}", missing.name),
            if missing.install.is_empty() {
                missing.reason.clone()
            } else {
                format!("{} (install: {})", missing.reason, missing.install)
            },
        ));
    }
    lines
}
