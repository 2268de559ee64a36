//! Table models computed from results: what the reports show, independent of format.
//! Repetitions of a (scenario, load point) are averaged.

use meshbench_results::{Cell, RunResult};

pub const BASELINE: &str = "baseline";

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// The figures of one (scenario, load point), averaged over repetitions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub scenario: String,
    /// `intra-node`, `inter-node`, or empty for results without placements.
    pub placement: String,
    pub rps: f64,
    pub connections: u32,
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

/// Requests that did not end in a 2xx response.
pub fn error_count(cell: &Cell) -> u64 {
    cell.load
        .outcomes
        .iter()
        .filter(|(k, _)| !k.starts_with("http_2"))
        .map(|(_, n)| n)
        .sum()
}

/// Component name prefixes of each side: the pod's app and its sidecar (`load-generator-1`,
/// `load-generator-1-sidecar`), and the names of results from before pods (`client`).
const CLIENT_SIDE: [&str; 2] = ["client", "load-generator"];
const SERVER_SIDE: [&str; 2] = ["server", "echo-server"];
/// Roles of components shared by the mesh rather than belonging to one pod.
const SHARED_ROLES: [&str; 2] = ["node-agent", "control-plane"];

/// CPU cores (mean) and memory (MiB, max) of one side: the client is the load generator plus
/// its proxy, the server the app plus its proxy, as E1 splits them.
fn side(cell: &Cell, prefixes: &[&str]) -> (f64, f64) {
    cell.resources
        .iter()
        .filter(|r| !SHARED_ROLES.contains(&r.role.as_str()))
        .filter(|r| {
            prefixes.iter().any(|side| {
                r.component == *side
                    || r.component
                        .strip_prefix(side)
                        .is_some_and(|rest| rest.starts_with('-'))
            })
        })
        .fold((0.0, 0.0), |(cpu, mem), r| {
            (cpu + r.cpu_cores_mean, mem + r.rss_mib_max)
        })
}

/// Figures per (load point, scenario), in the order of the run's configuration.
pub fn figures(result: &RunResult) -> Vec<Figures> {
    let mut out = Vec::new();
    let placements: Vec<String> = if result.config.placements.is_empty() {
        vec![String::new()]
    } else {
        result.config.placements.clone()
    };
    for lp in &result.config.load_points {
        for placement in &placements {
            for scenario in &result.config.scenarios {
                let cells: Vec<&Cell> = result
                    .cells
                    .iter()
                    .filter(|c| {
                        c.scenario == scenario.name
                            && c.load_point == *lp
                            && c.placement.as_deref().unwrap_or("") == placement
                    })
                    .collect();
                if cells.is_empty() {
                    continue;
                }
                let n = cells.len() as f64;
                let mean = |f: &dyn Fn(&Cell) -> f64| cells.iter().map(|c| f(c)).sum::<f64>() / n;
                let ms = |us: u64| us as f64 / 1e3;
                out.push(Figures {
                    scenario: scenario.name.clone(),
                    placement: placement.clone(),
                    rps: lp.rps,
                    connections: lp.connections,
                    repetitions: cells.len() as u32,
                    achieved_rps: mean(&|c| c.load.achieved_rps),
                    sent: mean(&|c| c.load.sent as f64),
                    errors: mean(&|c| error_count(c) as f64),
                    unsent: mean(&|c| c.load.unsent as f64),
                    p50_ms: mean(&|c| ms(c.load.latency.p50_us)),
                    p90_ms: mean(&|c| ms(c.load.latency.p90_us)),
                    p99_ms: mean(&|c| ms(c.load.latency.p99_us)),
                    p999_ms: mean(&|c| ms(c.load.latency.p99_9_us)),
                    max_ms: mean(&|c| ms(c.load.latency.max_us)),
                    client_cpu: mean(&|c| side(c, &CLIENT_SIDE).0),
                    server_cpu: mean(&|c| side(c, &SERVER_SIDE).0),
                    client_mib: mean(&|c| side(c, &CLIENT_SIDE).1),
                    server_mib: mean(&|c| side(c, &SERVER_SIDE).1),
                    shared_cpu: mean(&|c| shared(c).0),
                    shared_mib: mean(&|c| shared(c).1),
                });
            }
        }
    }
    out
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
    format!("{} rps / {} conns", fmt_num(f.rps), f.connections)
}

fn cell_label(c: &Cell) -> String {
    format!(
        "{} rps / {} conns",
        fmt_num(c.load_point.rps),
        c.load_point.connections
    )
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Absolute figures: one row per (load point, scenario).
pub fn absolute_table(figures: &[Figures]) -> Table {
    Table {
        title: "Absolute figures".to_owned(),
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

/// Overhead of every other scenario relative to `baseline` at the same load point, as E1's
/// Table I: +delta and percentage.
pub fn overhead_table(figures: &[Figures]) -> Table {
    let mut rows = Vec::new();
    for f in figures.iter().filter(|f| f.scenario != BASELINE) {
        let Some(base) = figures.iter().find(|b| {
            b.scenario == BASELINE
                && b.placement == f.placement
                && b.rps == f.rps
                && b.connections == f.connections
        }) else {
            continue;
        };
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
        headers,
        rows,
    }
}

/// What captures on the inter-node link saw, per cell that had one.
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
                scenario_label(&c.scenario, c.placement.as_deref().unwrap_or("")),
                w.link.clone(),
                w.packets.to_string(),
                format!("{}/{}", w.tls_connections, w.connections),
                w.tls_versions.join(", "),
                w.cipher_suites.join(", "),
                verdict.to_owned(),
            ])
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "On the wire (inter-node link)".to_owned(),
        headers: [
            "scenario",
            "link",
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
pub fn report_tables(result: &RunResult) -> Vec<Table> {
    let figures = figures(result);
    let mut tables = vec![
        absolute_table(&figures),
        overhead_table(&figures),
        component_table(result),
        outcome_table(result),
    ];
    tables.extend(wire_table(result));
    tables
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
        (
            "workload".to_owned(),
            format!(
                "{} over {}, server delay {} ms, {} B responses",
                cfg.workload.role,
                cfg.workload.protocol,
                cfg.workload.delay_ms,
                cfg.workload.response_bytes
            ),
        ),
        (
            "load".to_owned(),
            format!(
                "constant-rate open loop, {} s measured after {} s warm-up, {} repetition(s); latency from the intended send time",
                cfg.duration_seconds, cfg.warmup_seconds, cfg.repetitions
            ),
        ),
    ];
    if let Some(reason) = &result.status_reason {
        lines.insert(1, ("status reason".to_owned(), reason.clone()));
    }
    for missing in &cfg.unavailable {
        lines.push((
            format!("unavailable: {}", missing.name),
            format!("{} (install: {})", missing.reason, missing.install),
        ));
    }
    lines
}
