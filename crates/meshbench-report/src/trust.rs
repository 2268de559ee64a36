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
//! - other processes: more than [`OTHER_CORES`] cores went to neither the lab nor the kernel's
//!   interrupts;
//! - the load generator limited the run, or sent more than [`LATE_SHARE`] of its requests
//!   late while their connection was free (its own lateness, not the target's);
//! - CPU frequency moved by more than [`MHZ_CHANGE`] between the window's ends;
//! - spread: across repetitions, a coefficient of variation of p99 above [`SPREAD_CV`].

use meshbench_results::{Cell, MachineCpu, RunResult};

use crate::analysis::{Analysis, Group};
use crate::cell::BASELINE;
use crate::table::Table;

use meshbench_results::noise::{generator_noise, GeneratorNoise};
pub use meshbench_results::noise::{LATE_SHARE, STEAL_SHARE};
/// Busy CPU outside the lab and outside interrupts, in cores.
pub const OTHER_CORES: f64 = 0.25;
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
pub fn cell_flags(cell: &Cell) -> Vec<String> {
    let mut flags = vec![];
    if let Some(share) = machine_share(cell) {
        let steal = share.steal_cores / f64::from(share.cpus.max(1));
        if steal > STEAL_SHARE {
            flags.push(format!(
                "steal: the hypervisor took {:.1}% of the CPU (threshold {:.0}%)",
                steal * 100.0,
                STEAL_SHARE * 100.0
            ));
        }
        if share.other_cores > OTHER_CORES {
            let outside = match cell.machines.iter().any(|m| m.node.is_some()) {
                true => "outside the cell's pods (the nodes' kubelets, runtimes, other pods)",
                false => "outside the lab",
            };
            flags.push(format!(
                "other processes: {:.2} cores went to processes {outside} (threshold {OTHER_CORES})",
                share.other_cores
            ));
        }
    }
    let generator = cell.load.generator.as_ref();
    match generator.and_then(|g| generator_noise(g, cell.load.sent)) {
        Some(GeneratorNoise::Limited) => flags.push(
            "generator-limited: the load generator, not the target, limited the rate".to_owned(),
        ),
        Some(GeneratorNoise::Late { share }) => flags.push(format!(
            "generator late: {:.1}% of requests left late with their connection free (threshold {:.0}%)",
            share * 100.0,
            LATE_SHARE * 100.0
        )),
        None => {}
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

/// A cell or group whose figures are flagged, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseFlag {
    pub point: String,
    pub scenario: String,
    /// `None` for a flag on the group (spread across repetitions).
    pub repetition: Option<u32>,
    pub reason: String,
}

/// Every flag of the run: each cell's, and each group's spread across its kept repetitions.
pub fn noise_flags(analysis: &Analysis) -> Vec<NoiseFlag> {
    let mut flags = vec![];
    for g in &analysis.groups {
        for cell in &g.cells {
            for reason in cell_flags(cell) {
                flags.push(NoiseFlag {
                    point: g.point.label(),
                    scenario: g.scenario.clone(),
                    repetition: Some(cell.repetition),
                    reason,
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
                });
            }
        }
    }
    flags
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
    let rows: Vec<Vec<String>> = flags
        .iter()
        .map(|f| {
            vec![
                f.point.clone(),
                f.scenario.clone(),
                f.repetition.map_or("all".to_owned(), |r| r.to_string()),
                f.reason.clone(),
            ]
        })
        .collect();
    Some(Table {
        title: "Noise: cells whose figures may not be trustworthy, and why".to_owned(),
        note: pin_advice(result, &flags)
            .map(|advice| format!("Advice: {advice}."))
            .unwrap_or_default(),
        headers: ["load", "scenario", "repetition", "why"]
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
                outside a task; the last column is the kernel's and the machine's part of a \
                scenario's cost that a per-process view misses."
            .to_owned(),
        headers: [
            "load",
            "scenario",
            "machine busy",
            "charged to components",
            "unattributed (share of busy)",
            "of which interrupts",
            "of which other",
            "unattributed vs baseline",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}
