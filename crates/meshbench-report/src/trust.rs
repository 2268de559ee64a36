//! How far a run's figures can be trusted: CPU that no component was charged for, and the
//! cells whose figures were disturbed by something other than the system under test.
//!
//! Unattributed CPU is the machine's busy time (from /proc/stat, over the cell's window)
//! minus what every sampled component was charged. Of it, hardware interrupts and softirqs
//! are the kernel's network processing, charged to no process or cgroup; the rest is
//! processes outside the lab (meshbench's own runner among them) and kernel threads. A mesh
//! that moves packets through more sockets or more kernel hops adds the first kind, which a
//! per-process view hides; the difference to the baseline's is the kernel's part of its cost.
//!
//! Noise flags, and their thresholds (the defaults below, the same for every run):
//! - steal: the hypervisor took more than [`STEAL_SHARE`] of the machine's CPU;
//! - other processes: on the local lab, more than [`OTHER_CORES`] cores went to neither the
//!   lab nor the kernel's interrupts (the lab's machine has no platform of its own: anything
//!   else is someone else's). On a cluster the nodes' kubelets, runtimes, API server and
//!   control planes run anyway, so the CPU outside the cell's pods is judged against the
//!   machines' background, measured with no cell running before the cell's round (results'
//!   `backgrounds`): flagged past the background's mean plus the larger of [`OTHER_CORES`]
//!   and [`BACKGROUND_Z`] standard deviations of a cell-long window's mean. A cluster run
//!   without a background is judged as the local lab is;
//! - the load generator's own threads were saturated (it, not the target, limited the rate);
//!   or it sent more than [`LATE_SHARE`] of its requests late while their connection was free
//!   and something outside the system under test took the CPU: the hypervisor (at least that
//!   share of one CPU stolen) or other processes (flagged as above). Lateness with neither is
//!   not noise ([`generator_delay`], reported apart): up to the baseline's at the same point
//!   and round it is the machine's own (a sleeping generator woken late, mesh or not, in every
//!   scenario's latency alike); beyond it, the scenario's components taking the CPUs the
//!   generator shares with them, which the latency, measured from the intended send time,
//!   already carries: the scenario's cost;
//! - CPU frequency moved by more than [`MHZ_CHANGE`] between the window's ends;
//! - disruption: a component died, its pod was deleted, or a kubelet or the API server was out
//!   of reach during the cell (`Cell::disruptions`): the cell measured the fault too;
//! - spread: across repetitions, a coefficient of variation of p99 above [`SPREAD_CV`].

use meshbench_results::noise::{late_share, saturated};
use meshbench_results::{Cell, MachineCpu, RunResult};

use crate::analysis::{Analysis, Group};
use crate::cell::BASELINE;
use crate::table::Table;

pub use crate::background::{
    background_level, background_note, level_of, outside_limit, show_level, BackgroundLevel,
    OutsideLimit, BACKGROUND_Z, OTHER_CORES,
};

pub use meshbench_results::noise::{LATE_SHARE, STEAL_SHARE};
/// CPU frequency range over the window, as a share of the highest.
pub const MHZ_CHANGE: f64 = 0.10;
/// Coefficient of variation of p99 across repetitions.
pub const SPREAD_CV: f64 = 0.25;

/// One cell's CPU on its machine, split by who was charged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MachineShare {
    pub busy_cores: f64,
    /// What the sampled components were charged.
    pub attributed_cores: f64,
    /// irq + softirq.
    pub interrupt_cores: f64,
    /// busy - attributed - interrupts: processes outside the lab, kernel threads.
    pub other_cores: f64,
    pub steal_cores: f64,
    pub cpus: u32,
    /// Whether processes came from the root cgroup's exact counter (else /proc/stat's ticks).
    pub exact_tasks: bool,
    /// How far the interrupts could be counted in `busy_cores`.
    pub interrupts: Interrupts,
}

/// What became of a machine's interrupt time (irq and softirq).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupts {
    /// Measured, and counted in the busy CPU.
    Counted,
    /// The kernel only sampled them at the tick: beside exact processes they are shown but
    /// not counted.
    TickSampled,
    /// The source has no split by state (a kubelet): not read at all.
    NotRead,
}

impl MachineShare {
    pub fn unattributed_cores(&self) -> f64 {
        self.busy_cores - self.attributed_cores
    }
}

/// The machine's CPU against the components', over the cell's window. On a cluster, only
/// the components on the nodes that were read count. `None` where the machine was not read.
pub fn machine_share(cell: &Cell) -> Option<MachineShare> {
    if cell.machines.is_empty() {
        return None;
    }
    let on_read_machines = |node: Option<&str>| cell.machines.iter().any(|m| m.covers(node));
    let attributed_cores = cell
        .resources
        .iter()
        .filter(|r| on_read_machines(r.node.as_deref()))
        .map(|r| r.cpu_cores_mean)
        .sum();
    let interrupt_readings: Option<f64> =
        cell.machines.iter().map(MachineCpu::interrupt_cores).sum();
    // Processes from the root cgroup's exact counter where every machine has it; else from
    // /proc/stat's ticks, which miss work between ticks at low load.
    let tasks: Option<f64> = cell.machines.iter().map(|m| m.tasks_cores).sum();
    // A kernel that only samples interrupts at the tick gives no measurement of them: with
    // the processes measured exactly, they are shown but not counted.
    let interrupts = match interrupt_readings {
        None => Interrupts::NotRead,
        Some(_)
            if cell
                .machines
                .iter()
                .all(|m| m.interrupt_accounting.as_deref() == Some("tick-sampled")) =>
        {
            Interrupts::TickSampled
        }
        Some(_) => Interrupts::Counted,
    };
    let interrupt_cores = interrupt_readings.unwrap_or(0.0);
    let (busy_cores, other_cores) = match tasks {
        Some(tasks) if interrupts != Interrupts::Counted => (tasks, tasks - attributed_cores),
        Some(tasks) => (tasks + interrupt_cores, tasks - attributed_cores),
        None => {
            let busy = cell
                .machines
                .iter()
                .map(MachineCpu::busy_cores)
                .sum::<Option<f64>>()?;
            (busy, busy - attributed_cores - interrupt_cores)
        }
    };
    Some(MachineShare {
        busy_cores,
        attributed_cores,
        interrupt_cores,
        other_cores,
        steal_cores: cell.machines.iter().filter_map(|m| m.steal_cores).sum(),
        cpus: cell.machines.iter().map(|m| m.cpus).sum(),
        exact_tasks: tasks.is_some(),
        interrupts,
    })
}

/// Why a cell's figures may not be trustworthy, one sentence each; empty when nothing was
/// seen. (Spread across repetitions is a group's, see [`noise_flags`].)
pub fn cell_flags(run: &RunResult, cell: &Cell) -> Vec<String> {
    cell_flags_against(cell, background_level(run, cell))
}

/// [`cell_flags`] of a cell judged against `background` (a cell not yet in its run's results:
/// the progress line).
pub fn cell_flags_against(cell: &Cell, background: Option<BackgroundLevel>) -> Vec<String> {
    let mut flags: Vec<String> = cell
        .disruptions
        .iter()
        .map(|d| format!("disruption: {}", d.describe()))
        .collect();
    let share = machine_share(cell);
    let mut outside_flagged = false;
    if let Some(share) = &share {
        let steal = share.steal_cores / f64::from(share.cpus.max(1));
        if steal > STEAL_SHARE {
            flags.push(format!(
                "steal: the hypervisor took {:.1}% of the CPU (threshold {:.0}%)",
                steal * 100.0,
                STEAL_SHARE * 100.0
            ));
        }
        let limit = outside_limit(cell, background);
        if share.other_cores > limit.limit_cores {
            outside_flagged = true;
            flags.push(other_processes_flag(cell, share.other_cores, &limit));
        }
    }
    if let Some(flag) = generator_flag(cell, share.as_ref(), outside_flagged) {
        flags.push(flag);
    }
    for machine in &cell.machines {
        if let (Some(low), Some(high)) = (machine.mhz_min, machine.mhz_max) {
            if high > 0.0 && (high - low) / high > MHZ_CHANGE {
                flags.push(format!(
                    "frequency: the CPUs ran between {low:.0} and {high:.0} MHz"
                ));
            }
        }
    }
    flags
}

fn other_processes_flag(cell: &Cell, other_cores: f64, limit: &OutsideLimit) -> String {
    let on_cluster = cell.machines.iter().any(|m| m.node.is_some());
    let outside = match on_cluster {
        true => "outside the cell's pods (the nodes' kubelets, runtimes, other pods)",
        false => "outside the lab",
    };
    match limit.background {
        // Short enough for a table cell: the noise table shows the background beside it.
        Some(level) if limit.over_background => format!(
            "other processes: {other_cores:.2} cores went to processes outside the cell's pods, \
             {:+.2} over the nodes' background of {} (threshold {:.2})",
            other_cores - level.mean_cores,
            show_level(&level),
            limit.limit_cores
        ),
        Some(level) => format!(
            "other processes: {other_cores:.2} cores went to processes {outside} (threshold {OTHER_CORES}; {} before the cells)",
            show_level(&level)
        ),
        None => format!(
            "other processes: {other_cores:.2} cores went to processes {outside} (threshold {OTHER_CORES})"
        ),
    }
}

/// The generator's flag: its own saturation, or lateness that something outside the system
/// under test explains (see the module's header); `None` when neither.
fn generator_flag(cell: &Cell, share: Option<&MachineShare>, outside: bool) -> Option<String> {
    let generator = cell.load.generator.as_ref()?;
    let sent = cell.load.sent;
    if saturated(generator, sent) {
        return Some(
            "generator-limited: the load generator's own threads were saturated: it, not the target, limited the rate"
                .to_owned(),
        );
    }
    let late = late_share(generator, sent);
    if late <= LATE_SHARE {
        return None;
    }
    let lateness = format!(
        "generator late: {:.1}% of requests left late with their connection free (threshold {:.0}%)",
        late * 100.0,
        LATE_SHARE * 100.0
    );
    match share {
        // Without the machine's reading nothing tells who had the CPU.
        None => Some(lateness),
        Some(share) if share.steal_cores >= late => Some(format!(
            "{lateness}, and the hypervisor took {:.3} cores",
            share.steal_cores
        )),
        Some(_) if outside => Some(format!(
            "{lateness}, while other processes ran beside the cell"
        )),
        Some(_) => None,
    }
}

/// A load generator late with its connection free that neither the hypervisor nor processes
/// outside the cell explain (not noise: see the module's header). Part of it is the machine's
/// own: the baseline's cell of the same point and round is late too (this VM wakes a sleeping
/// generator over a millisecond late for 1-4% of sends at low rates, mesh or not); what a
/// scenario adds over that is its components taking the CPUs the generator shares with them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeneratorDelay {
    /// Of the requests sent, those sent late with their connection free.
    pub late_share: f64,
    /// The same share in the baseline's cell at the same point and round, where it ran.
    pub baseline_share: Option<f64>,
    /// The machines' busy cores and CPUs over the window.
    pub busy_cores: f64,
    pub cpus: u32,
}

impl GeneratorDelay {
    /// The lateness the scenario added to the baseline's, in share of the requests sent.
    pub fn added(&self) -> Option<f64> {
        self.baseline_share.map(|b| (self.late_share - b).max(0.0))
    }
}

/// Where the generator was late with no outside cause; `None` where it was punctual, or its
/// lateness is flagged as noise.
pub fn generator_delay(run: &RunResult, cell: &Cell) -> Option<GeneratorDelay> {
    let share = machine_share(cell)?;
    let generator = cell.load.generator.as_ref()?;
    let late = late_share(generator, cell.load.sent);
    let flagged = cell_flags(run, cell)
        .iter()
        .any(|f| f.starts_with("generator"));
    if late <= LATE_SHARE || flagged || saturated(generator, cell.load.sent) {
        return None;
    }
    let baseline = run.cells.iter().find(|b| {
        b.scenario == BASELINE
            && b.placement == cell.placement
            && b.load_point == cell.load_point
            && b.repetition == cell.repetition
            && b.search == cell.search
    });
    let baseline_share = baseline.and_then(|b| {
        let g = b.load.generator.as_ref()?;
        Some(late_share(g, b.load.sent))
    });
    Some(GeneratorDelay {
        late_share: late,
        baseline_share,
        busy_cores: share.busy_cores,
        cpus: share.cpus,
    })
}

/// The cells whose generator was late with no outside cause, as a table; `None` without any.
pub fn generator_delay_table(analysis: &Analysis) -> Option<Table> {
    let percent =
        |share: Option<f64>| share.map_or("-".to_owned(), |s| format!("{:.1}%", s * 100.0));
    let mut rows = vec![];
    for g in &analysis.groups {
        for cell in &g.cells {
            if let Some(delay) = generator_delay(analysis.run, cell) {
                rows.push(vec![
                    g.point.label(),
                    g.scenario.clone(),
                    cell.repetition.to_string(),
                    percent(Some(delay.late_share)),
                    percent(delay.baseline_share),
                    percent(delay.added()),
                    format!("{:.2} of {}", delay.busy_cores, delay.cpus),
                ]);
            }
        }
    }
    if rows.is_empty() {
        return None;
    }
    Some(Table {
        title: "Load generator late without an outside cause (not noise)".to_owned(),
        note: "Requests the generator sent over a millisecond after their intended time with \
               their connection free, where more than 1% were and neither the hypervisor's \
               steal nor processes outside the cell explain it. The wait is part of each such \
               request's latency (measured from its intended send time). What the baseline's \
               cell of the same point and round shows is the machine's own: a generator woken \
               late without any mesh, in every scenario's latency alike, which cancels in their \
               differences on average. What a scenario adds over it is its components taking \
               the CPUs the generator shares with them, as they would from a client beside its \
               own proxy: counted as the scenario's cost. On one machine the generator shares \
               the CPUs with both ends' proxies, where on a cluster of several machines it \
               shares only its own node's."
            .to_owned(),
        headers: [
            "load",
            "scenario",
            "repetition",
            "sent late",
            "baseline's, same round",
            "added by the scenario",
            "machine busy (cores)",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

/// A cell or group whose figures are flagged, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseFlag {
    pub point: String,
    pub scenario: String,
    /// `None` for a flag on the group (spread across repetitions).
    pub repetition: Option<u32>,
    pub reason: String,
    /// The cell's CPU outside its components beside its machines' background, in cores
    /// ("0.32 (background 0.13 ± 0.02)"); empty for a group's flag or an unread machine.
    pub outside: String,
}

/// Every flag of the run: each cell's, and each group's spread across its kept repetitions.
pub fn noise_flags(analysis: &Analysis) -> Vec<NoiseFlag> {
    let mut flags = vec![];
    for g in &analysis.groups {
        for cell in &g.cells {
            let background = background_level(analysis.run, cell);
            for reason in cell_flags_against(cell, background) {
                flags.push(NoiseFlag {
                    point: g.point.label(),
                    scenario: g.scenario.clone(),
                    repetition: Some(cell.repetition),
                    reason,
                    outside: outside_beside_background(cell, background),
                });
            }
        }
        if let Some(cv) = p99_spread(g) {
            if cv > SPREAD_CV {
                flags.push(NoiseFlag {
                    point: g.point.label(),
                    scenario: g.scenario.clone(),
                    repetition: None,
                    reason: format!(
                        "spread: p99 varies by {:.0}% across {} repetitions (coefficient of variation; threshold {:.0}%)",
                        cv * 100.0,
                        g.cells.len(),
                        SPREAD_CV * 100.0
                    ),
                    outside: String::new(),
                });
            }
        }
    }
    flags
}

/// "0.32 (background 0.13 ± 0.02)": the cell's CPU outside its components, and its machines'
/// background where measured; empty where the machine was not read.
pub fn outside_beside_background(cell: &Cell, background: Option<BackgroundLevel>) -> String {
    let Some(share) = machine_share(cell) else {
        return String::new();
    };
    match background {
        Some(level) => format!(
            "{:.2} (background {})",
            share.other_cores,
            match level.window_sd_cores {
                Some(sd) => format!("{:.2} ± {sd:.2}", level.mean_cores),
                None => format!("{:.2}", level.mean_cores),
            }
        ),
        None => format!("{:.2} (no background measured)", share.other_cores),
    }
}

/// Coefficient of variation of the cells' p99; `None` with fewer than two.
pub fn p99_spread(g: &Group) -> Option<f64> {
    let values: Vec<f64> = g
        .cells
        .iter()
        .map(|c| c.load.latency.p99_us as f64)
        .collect();
    if values.len() < 2 {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    (mean > 0.0).then(|| sd / mean)
}

/// When the load generator shared its CPUs and a flag says it, or something beside it,
/// disturbed the run: what `--pin` would have changed.
pub fn pin_advice(result: &RunResult, flags: &[NoiseFlag]) -> Option<String> {
    if result.config.pinned != Some(false) {
        return None;
    }
    let generator = flags.iter().any(|f| f.reason.starts_with("generator"));
    generator.then(|| {
        "the load generator shared its CPUs with the system under test and fell behind: \
         `meshbench run --pin` gives it CPU 0 and the rest to the system under test"
            .to_owned()
    })
}

/// The noise flags as a table, with the advice on pinning under its heading; `None` when
/// nothing was flagged.
pub fn noise_table(result: &RunResult, analysis: &Analysis) -> Option<Table> {
    let flags = noise_flags(analysis);
    if flags.is_empty() {
        return None;
    }
    let note = [
        pin_advice(result, &flags).map(|advice| format!("Advice: {advice}.")),
        background_note(result),
    ];
    let rows: Vec<Vec<String>> = flags
        .iter()
        .map(|f| {
            vec![
                f.point.clone(),
                f.scenario.clone(),
                f.repetition.map_or("all".to_owned(), |r| r.to_string()),
                f.reason.clone(),
                f.outside.clone(),
            ]
        })
        .collect();
    Some(Table {
        title: "Noise: cells whose figures may not be trustworthy, and why".to_owned(),
        note: note.into_iter().flatten().collect::<Vec<_>>().join(" "),
        headers: [
            "load",
            "scenario",
            "repetition",
            "why",
            "CPU outside the cell, cores",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

/// Per scenario and point, means over the kept repetitions: the machine's busy CPU, what
/// the components were charged, the rest split into interrupts and other, and the
/// unattributed CPU against the baseline's at the same point.
pub fn unattributed_table(analysis: &Analysis) -> Table {
    let shares = |g: &Group| -> Option<MachineShare> {
        let shares: Vec<MachineShare> = g.cells.iter().filter_map(|c| machine_share(c)).collect();
        if shares.is_empty() {
            return None;
        }
        let n = shares.len() as f64;
        let mean = |f: fn(&MachineShare) -> f64| shares.iter().map(f).sum::<f64>() / n;
        Some(MachineShare {
            busy_cores: mean(|s| s.busy_cores),
            attributed_cores: mean(|s| s.attributed_cores),
            interrupt_cores: mean(|s| s.interrupt_cores),
            other_cores: mean(|s| s.other_cores),
            steal_cores: mean(|s| s.steal_cores),
            cpus: shares[0].cpus,
            exact_tasks: shares.iter().all(|s| s.exact_tasks),
            interrupts: shares
                .iter()
                .map(|s| s.interrupts)
                .find(|i| *i != Interrupts::Counted)
                .unwrap_or(Interrupts::Counted),
        })
    };
    let mut rows = vec![];
    for g in &analysis.groups {
        let Some(share) = shares(g) else { continue };
        let baseline = analysis
            .at(&g.point)
            .find(|b| b.scenario == BASELINE)
            .and_then(shares);
        let versus_baseline = match baseline {
            Some(b) if g.scenario != BASELINE => format!(
                "{:+.3}",
                share.unattributed_cores() - b.unattributed_cores()
            ),
            _ => "-".to_owned(),
        };
        let unattributed = share.unattributed_cores();
        let levels: Vec<f64> = (g.cells.iter())
            .filter_map(|c| background_level(analysis.run, c))
            .map(|l| l.mean_cores)
            .collect();
        let background = match levels.len() {
            0 => "-".to_owned(),
            n => format!("{:.3}", levels.iter().sum::<f64>() / n as f64),
        };
        rows.push(vec![
            g.point.label(),
            g.scenario.clone(),
            if share.exact_tasks {
                format!("{:.3}", share.busy_cores)
            } else {
                format!("{:.3} (/proc/stat ticks only)", share.busy_cores)
            },
            format!("{:.3}", share.attributed_cores),
            format!(
                "{unattributed:.3} ({:.0}%)",
                if share.busy_cores > 0.0 {
                    unattributed / share.busy_cores * 100.0
                } else {
                    0.0
                }
            ),
            match share.interrupts {
                Interrupts::TickSampled if share.exact_tasks => format!(
                    "{:.3} (tick-sampled by this kernel: not counted)",
                    share.interrupt_cores
                ),
                Interrupts::NotRead => "not read (the node's kubelet gives no split)".to_owned(),
                _ => format!("{:.3}", share.interrupt_cores),
            },
            format!("{:.3}", share.other_cores),
            background,
            versus_baseline,
        ]);
    }
    Table {
        title: "CPU nobody was charged for".to_owned(),
        note: "Cores, mean over each cell's window: the whole machine \
                against the sum of every sampled component: its processes from the root cgroup's \
                exact counter, its interrupts, the kernel's network processing in irq and \
                softirq charged to no process, from /proc/stat, which samples them at the \
                scheduler tick and may count some already inside a process's time; other is \
                processes outside the lab and kernel threads; on a cluster, each machine the \
                cell's nodes run on, from its kubelet's root cgroup, which has no interrupts \
                outside a task; background is the same machines' processes with no cell \
                running, measured before the cell's round; the last column is the kernel's \
                and the machine's part of a scenario's cost that a per-process view misses."
            .to_owned(),
        headers: [
            "load",
            "scenario",
            "machine busy",
            "charged to components",
            "unattributed (share of busy)",
            "of which interrupts",
            "of which other",
            "background (no cell running)",
            "unattributed vs baseline",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}
