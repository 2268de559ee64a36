//! The whole machine's CPU, from /proc/stat, beside the per-component samples. A component's
//! cgroup or /proc entry is charged for what its own threads run; the kernel's network
//! processing in softirq and hardware interrupts is charged to nobody, and neither is a
//! process outside the lab. The machine's counters over the same window show both: busy time
//! minus what the components were charged is CPU a per-process view hides.
//!
//! /proc/stat's states are sampled at the scheduler tick on a kernel with tick-based CPU
//! accounting (most distribution kernels; this lab's: 250 Hz), which misses work that runs
//! between ticks: at a few percent of a core it read less than half of what the components'
//! exact cgroup counters did. So the CPU of every task is also read exactly, from the root
//! cgroup on the same ticks (`tasks`), and the report takes processes from there and only the
//! interrupt states from /proc/stat.

use meshbench_results::MachineCpu;
use meshbench_time::now_ns;

use crate::CgroupFs;
use meshbench_results::{cores_per_interval, counter_at};

/// Cumulative CPU time of all CPUs, by state, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MachineSample {
    pub t_ns: u64,
    /// user, nice, system, idle, iowait, irq, softirq, steal.
    pub states_ns: [u64; 8],
    /// Every task's CPU from the root cgroup (exact), where it is readable.
    pub tasks_ns: Option<u64>,
}

/// Reads /proc/stat's first line, and the root cgroup's CPU where `cgroups` is given; `None`
/// where /proc/stat cannot be read or parsed.
pub fn read_machine_sample(cgroups: Option<&CgroupFs>) -> Option<MachineSample> {
    let t_ns = now_ns();
    let tasks_ns = cgroups.and_then(CgroupFs::root_cpu_ns);
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let sample = parse_proc_stat(&stat, rustix::param::clock_ticks_per_second(), t_ns)?;
    Some(MachineSample { tasks_ns, ..sample })
}

/// The aggregate `cpu` line of /proc/stat, in clock ticks, turned into nanoseconds. Fields
/// after steal (guest time) are already counted in user and nice.
pub fn parse_proc_stat(stat: &str, ticks_per_second: u64, t_ns: u64) -> Option<MachineSample> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map_while(|f| f.parse().ok())
        .collect();
    // Kernels before 2.6.11 had no steal field; treat it as zero.
    if fields.len() < 7 || ticks_per_second == 0 {
        return None;
    }
    let mut states_ns = [0u64; 8];
    for (state, ticks) in states_ns.iter_mut().zip(&fields) {
        *state = ticks.saturating_mul(1_000_000_000) / ticks_per_second;
    }
    Some(MachineSample {
        t_ns,
        states_ns,
        tasks_ns: None,
    })
}

/// The lowest and highest "cpu MHz" of /proc/cpuinfo; `None` where it has none (many
/// architectures, some virtual machines).
pub fn read_cpu_mhz() -> Option<(f64, f64)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpu_mhz(&cpuinfo)
}

pub fn parse_cpu_mhz(cpuinfo: &str) -> Option<(f64, f64)> {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("cpu MHz"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .filter(|mhz| mhz.is_finite() && *mhz > 0.0)
        .fold(None, |range, mhz| match range {
            None => Some((mhz, mhz)),
            Some((low, high)) => Some((f64::min(low, mhz), f64::max(high, mhz))),
        })
}

/// The machine's samples over a sampling run, and the frequencies read at its ends.
#[derive(Debug, Clone, Default)]
pub struct MachineSeries {
    pub samples: Vec<MachineSample>,
    pub mhz: Vec<(f64, f64)>,
    /// How the kernel times interrupts (see [`interrupt_accounting`]).
    pub interrupt_accounting: Option<&'static str>,
}

/// How the kernel times interrupts, from its build configuration: `precise` where it
/// measures irq and softirq time (`CONFIG_IRQ_TIME_ACCOUNTING`, or native virtual CPU
/// accounting), `tick-sampled` where /proc/stat's irq and softirq only count the scheduler
/// ticks that landed in them, which is no measurement of a few percent of a core; `None`
/// where the configuration is unreadable (/proc/config.gz, /boot/config-<release>).
pub fn interrupt_accounting() -> Option<&'static str> {
    use std::io::Read;
    let from_proc = std::fs::File::open("/proc/config.gz").ok().and_then(|f| {
        let mut text = String::new();
        flate2::read::GzDecoder::new(f)
            .read_to_string(&mut text)
            .ok()
            .map(|_| text)
    });
    let config = from_proc.or_else(|| {
        let release = rustix::system::uname().release().to_str().ok()?.to_owned();
        std::fs::read_to_string(format!("/boot/config-{release}")).ok()
    })?;
    interrupt_accounting_of(&config)
}

pub fn interrupt_accounting_of(config: &str) -> Option<&'static str> {
    let set = |option: &str| config.lines().any(|l| l.trim() == format!("{option}=y"));
    if set("CONFIG_IRQ_TIME_ACCOUNTING") || set("CONFIG_VIRT_CPU_ACCOUNTING_NATIVE") {
        Some("precise")
    } else if set("CONFIG_TICK_CPU_ACCOUNTING") || set("CONFIG_VIRT_CPU_ACCOUNTING_GEN") {
        Some("tick-sampled")
    } else {
        None
    }
}

impl MachineSeries {
    /// Mean cores in each state over `[start_ns, end_ns]`, the counters interpolated at the
    /// window's edges as the components' are; `None` without two samples around it.
    pub fn summarize(&self, start_ns: u64, end_ns: u64, cpus: u32) -> Option<MachineCpu> {
        let window_ns = end_ns.checked_sub(start_ns).filter(|w| *w > 0)? as f64;
        if self.samples.len() < 2 {
            return None;
        }
        let (start, end) = (self.at(start_ns), self.at(end_ns));
        let cores = |state: usize| ((end[state] - start[state]) / window_ns).max(0.0);
        let tasks_cores = self
            .tasks_at(start_ns)
            .zip(self.tasks_at(end_ns))
            .map(|(start, end)| ((end - start) / window_ns).max(0.0));
        let mhz_min = self.mhz.iter().map(|m| m.0).reduce(f64::min);
        let mhz_max = self.mhz.iter().map(|m| m.1).reduce(f64::max);
        Some(MachineCpu {
            source: "/proc/stat".to_owned(),
            node: None,
            same_machine_nodes: vec![],
            cpus,
            user_cores: Some(cores(0)),
            nice_cores: Some(cores(1)),
            system_cores: Some(cores(2)),
            idle_cores: Some(cores(3)),
            iowait_cores: Some(cores(4)),
            irq_cores: Some(cores(5)),
            softirq_cores: Some(cores(6)),
            steal_cores: Some(cores(7)),
            tasks_cores,
            interrupt_accounting: self.interrupt_accounting.map(str::to_owned),
            edge_gap_seconds: None,
            mhz_min,
            mhz_max,
        })
    }

    /// The machine's processes' cores over each `interval_ns` of the sampled span, as a
    /// cell's `other` counts them: every task from the root cgroup where every sample has it,
    /// else /proc/stat's user, nice and system (interrupts left out). The background a cell
    /// is judged against.
    pub fn process_cores(&self, interval_ns: u64) -> Vec<f64> {
        let (Some(first), Some(last)) = (self.samples.first(), self.samples.last()) else {
            return vec![];
        };
        let span = (first.t_ns, last.t_ns);
        let time = |s: &MachineSample| s.t_ns;
        if self.samples.iter().all(|s| s.tasks_ns.is_some()) {
            let tasks = |s: &MachineSample| s.tasks_ns.unwrap_or(0) as f64;
            return cores_per_interval(&self.samples, span, interval_ns, time, tasks);
        }
        let processes = |s: &MachineSample| s.states_ns[..3].iter().sum::<u64>() as f64;
        cores_per_interval(&self.samples, span, interval_ns, time, processes)
    }

    /// Every state's cumulative nanoseconds at `t_ns`, interpolated, clamped to the ends.
    fn at(&self, t_ns: u64) -> [f64; 8] {
        std::array::from_fn(|state| {
            counter_at(
                &self.samples,
                t_ns,
                |s| s.t_ns,
                |s| s.states_ns[state] as f64,
            )
            .unwrap_or(0.0)
        })
    }

    /// The tasks' cumulative nanoseconds at `t_ns`; `None` unless every sample has them.
    fn tasks_at(&self, t_ns: u64) -> Option<f64> {
        if self.samples.iter().any(|s| s.tasks_ns.is_none()) {
            return None;
        }
        counter_at(
            &self.samples,
            t_ns,
            |s| s.t_ns,
            |s| s.tasks_ns.unwrap_or(0) as f64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_is_read_in_nanoseconds_and_cut_to_the_window() {
        const S: u64 = 1_000_000_000;
        // Two CPUs at 100 ticks/s: over one second, 200 ticks in all.
        let before = "cpu  100 0 50 1000 0 0 10 0 0 0\ncpu0 50 0 25 500 0 0 5 0 0 0\n";
        let after = "cpu  180 0 70 1080 0 0 30 10 0 0\n";
        let series = MachineSeries {
            samples: vec![
                MachineSample {
                    tasks_ns: Some(5 * S),
                    ..parse_proc_stat(before, 100, 0).unwrap()
                },
                MachineSample {
                    tasks_ns: Some(5 * S + S / 2),
                    ..parse_proc_stat(after, 100, S).unwrap()
                },
            ],
            mhz: vec![(2600.0, 2600.0), (1800.0, 2600.0)],
            interrupt_accounting: Some("precise"),
        };
        let cpu = series.summarize(0, S, 2).unwrap();
        assert!((cpu.user_cores.unwrap() - 0.8).abs() < 1e-9, "{cpu:?}");
        assert!((cpu.system_cores.unwrap() - 0.2).abs() < 1e-9);
        assert!((cpu.softirq_cores.unwrap() - 0.2).abs() < 1e-9);
        assert!((cpu.steal_cores.unwrap() - 0.1).abs() < 1e-9);
        assert!((cpu.idle_cores.unwrap() - 0.8).abs() < 1e-9);
        assert!((cpu.busy_cores().unwrap() - 1.2).abs() < 1e-9);
        assert_eq!((cpu.mhz_min, cpu.mhz_max), (Some(1800.0), Some(2600.0)));
        assert_eq!(cpu.tasks_cores, Some(0.5));
        // The second half only, interpolated.
        let half = series.summarize(S / 2, S, 2).unwrap();
        assert!((half.user_cores.unwrap() - 0.8).abs() < 1e-9);
        assert_eq!(series.summarize(S, S, 2), None);
    }

    #[test]
    fn the_kernels_interrupt_accounting_is_read_from_its_config() {
        let tick = "# comment\nCONFIG_HZ=250\nCONFIG_TICK_CPU_ACCOUNTING=y\n";
        assert_eq!(interrupt_accounting_of(tick), Some("tick-sampled"));
        let precise = format!("{tick}CONFIG_IRQ_TIME_ACCOUNTING=y\n");
        assert_eq!(interrupt_accounting_of(&precise), Some("precise"));
        assert_eq!(
            interrupt_accounting_of("# CONFIG_IRQ_TIME_ACCOUNTING is not set\n"),
            None
        );
    }

    #[test]
    fn unreadable_input_is_no_sample() {
        assert_eq!(parse_proc_stat("", 100, 0), None);
        assert_eq!(parse_proc_stat("cpu  1 2 x", 100, 0), None);
        assert_eq!(parse_proc_stat("cpu  1 2 3 4 5 6 7", 0, 0), None);
        assert_eq!(parse_cpu_mhz("model name: x\ncpu MHz : fast\n"), None);
        assert_eq!(
            parse_cpu_mhz("cpu MHz\t\t: 2596.122\ncpu MHz\t\t: 1200\n"),
            Some((1200.0, 2596.122))
        );
    }

    #[test]
    fn this_machine_is_readable() {
        let sample = read_machine_sample(CgroupFs::detect().as_ref()).expect("/proc/stat on Linux");
        assert!(sample.states_ns.iter().sum::<u64>() > 0);
        if CgroupFs::detect().is_some() {
            assert!(sample.tasks_ns.is_some_and(|ns| ns > 0), "{sample:?}");
        }
    }
}
