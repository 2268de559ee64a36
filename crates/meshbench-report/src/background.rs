//! What a machine runs anyway: a cell's machines at rest, as the runner read them before the
//! cell's round (results' `backgrounds`), and the limit of the CPU outside a cell that follows
//! from it (see `trust` for the noise flags that use it).
//!
//! On a cluster the nodes' kubelets, runtimes, API server and control planes take CPU all
//! along, so the CPU outside a cell's pods is judged against their background: past its mean
//! by more than [`OTHER_CORES`] or [`BACKGROUND_Z`] standard deviations of a cell-long
//! window's mean, whichever is more. The local lab's machine has no platform of its own:
//! anything outside the lab counts against zero, and its background is only shown.

use meshbench_results::{Background, Cell, RunResult};
use meshbench_stats::{block_bootstrap_estimate, SecondValue};

use crate::analysis::{BOOTSTRAP_ITERATIONS, BOOTSTRAP_SEED};

/// Busy CPU outside the lab and outside interrupts, in cores; on a cluster, the least excess
/// over the machines' background that counts.
pub const OTHER_CORES: f64 = 0.25;
/// On a cluster, the background's standard deviations (of a cell-long window's mean) the CPU
/// outside a cell's pods may exceed its mean by, where that is more than [`OTHER_CORES`]: one
/// sided, about one cell in 700 by chance where the background is normal.
pub const BACKGROUND_Z: f64 = 3.0;
/// The busy CPU of a cell's machines with no cell running, over the same machines.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackgroundLevel {
    /// Mean busy cores of the machines' processes.
    pub mean_cores: f64,
    /// One standard deviation of that mean over a window of the cell's length (a block
    /// bootstrap of the background's intervals, which keeps their dependence); `None` with
    /// fewer than three intervals.
    pub window_sd_cores: Option<f64>,
    /// How long the background was read.
    pub seconds: f64,
}

/// The background that applies to `cell` of `run` (the measurement taken last before it),
/// over the machines its figures come from; `None` where the run has none, or it misses one
/// of those machines.
pub fn background_level(run: &RunResult, cell: &Cell) -> Option<BackgroundLevel> {
    let index = (run.cells.iter().position(|c| std::ptr::eq(c, cell)))
        .or_else(|| run.cells.iter().position(|c| c == cell))?;
    level_of(Background::for_cell(&run.backgrounds, index)?, cell)
}

/// `background` over `cell`'s machines: their means add, and so do their variances.
pub fn level_of(background: &Background, cell: &Cell) -> Option<BackgroundLevel> {
    if cell.machines.is_empty() {
        return None;
    }
    let window = cell.load.window.seconds;
    let (mut mean_cores, mut variance, mut seconds) = (0.0, Some(0.0), f64::INFINITY);
    for machine in &cell.machines {
        let rest = background
            .machines
            .iter()
            .find(|b| b.is_machine_of(machine.node.as_deref()))?;
        mean_cores += rest.mean_cores()?;
        let span = rest.cores.len() as f64 * background.interval_seconds;
        seconds = f64::min(seconds, span);
        let values: Vec<SecondValue> = (rest.cores.iter())
            .map(|&value| SecondValue {
                value,
                responses: 1,
            })
            .collect();
        let estimate = block_bootstrap_estimate(&[values], BOOTSTRAP_ITERATIONS, BOOTSTRAP_SEED);
        // The mean over the whole background has this error; a window of the cell's length
        // holds span/window times fewer intervals.
        let sd = estimate
            .filter(|_| window > 0.0)
            .map(|e| e.standard_error * (span / window).sqrt());
        variance = variance.zip(sd).map(|(v, sd)| v + sd * sd);
    }
    Some(BackgroundLevel {
        mean_cores,
        window_sd_cores: variance.map(f64::sqrt),
        seconds,
    })
}

/// How much CPU outside a cell's components flags it, and what it was judged against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutsideLimit {
    pub limit_cores: f64,
    /// The background the limit was set from (a cluster's), or shown beside it (the lab's).
    pub background: Option<BackgroundLevel>,
    /// Whether the limit is over the platform's background (a cluster) or over nothing.
    pub over_background: bool,
}

/// The limit of the CPU outside `cell` (see the module's header).
pub fn outside_limit(cell: &Cell, background: Option<BackgroundLevel>) -> OutsideLimit {
    let on_cluster = cell.machines.iter().any(|m| m.node.is_some());
    match background {
        Some(level) if on_cluster => {
            let spread = BACKGROUND_Z * level.window_sd_cores.unwrap_or(0.0);
            OutsideLimit {
                limit_cores: level.mean_cores + spread.max(OTHER_CORES),
                background: Some(level),
                over_background: true,
            }
        }
        _ => OutsideLimit {
            limit_cores: OTHER_CORES,
            background,
            over_background: false,
        },
    }
}

/// "0.13 cores (± 0.02 over a cell's length)".
pub fn show_level(level: &BackgroundLevel) -> String {
    match level.window_sd_cores {
        Some(sd) => format!(
            "{:.2} cores (± {sd:.2} over a cell's length)",
            level.mean_cores
        ),
        None => format!("{:.2} cores", level.mean_cores),
    }
}

/// "Background: ...": how each machine's background was measured and what it was, each
/// measurement's mean over its machines; `None` for a run without one.
pub fn background_note(run: &RunResult) -> Option<String> {
    let first = run.backgrounds.first()?;
    let means: Vec<f64> = (run.backgrounds.iter())
        .filter_map(|b| {
            b.machines
                .iter()
                .map(|m| m.mean_cores())
                .sum::<Option<f64>>()
        })
        .collect();
    let (low, high) = means
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), m| {
            (l.min(*m), h.max(*m))
        });
    let machines: Vec<String> = (first.machines.iter())
        .map(|m| {
            let mut name = m.node.clone().unwrap_or_else(|| "this machine".to_owned());
            if !m.same_machine_nodes.is_empty() {
                name.push_str(&format!(" (with {})", m.same_machine_nodes.join(", ")));
            }
            format!("{name}, {} CPUs", m.cpus)
        })
        .collect();
    let seconds =
        first.machines.first().map_or(0.0, |m| m.cores.len() as f64) * first.interval_seconds;
    let range = if means.len() > 1 {
        format!("{low:.2} to {high:.2} cores")
    } else {
        format!("{low:.2} cores")
    };
    Some(format!(
        "Background: the busy cores of every process on {} with no cell running, read for \
         {seconds:.0} s before the first cell and before each later round ({} time{}): {range}. \
         {}",
        machines.join("; "),
        means.len(),
        if means.len() == 1 { "" } else { "s" },
        if first.machines.iter().any(|m| m.node.is_some()) {
            format!(
                "A cell is flagged when the CPU outside its pods exceeds it by more than \
                 {OTHER_CORES} cores or {BACKGROUND_Z} standard deviations of a cell-long \
                 window, whichever is more."
            )
        } else {
            format!(
                "The lab's machine has no platform of its own: a cell is flagged when more \
                 than {OTHER_CORES} cores go outside the lab."
            )
        }
    ))
}
