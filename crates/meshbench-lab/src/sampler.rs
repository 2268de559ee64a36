//! CPU and memory sampling of lab components on a fixed interval, in a thread of its own so
//! sampling never waits behind the async runtime. A component with a cgroup is read from it
//! (CPU and working set of everything it forked, RSS summed over its processes); one without
//! falls back to its process's /proc entries.
//!
//! Figures are cut to a measurement window afterwards: cumulative CPU time is interpolated at
//! the window's edges, so the mean CPU covers exactly the window no matter how the sampling
//! ticks fall. The whole machine's counters are read on the same ticks (see `machine`).

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use meshbench_results::{Sample, SampleSeries};
use meshbench_time::now_ns;

use crate::machine::{read_cpu_mhz, read_machine_sample, MachineSeries};
use crate::Cgroup;

/// What to sample: a component's main process, and its cgroup where it has one.
#[derive(Debug, Clone)]
pub struct SampleTarget {
    pub component: String,
    pub role: String,
    pub pid: u32,
    pub cgroup: Option<Cgroup>,
}

impl SampleTarget {
    pub fn process(component: &str, role: &str, pid: u32) -> Self {
        SampleTarget {
            component: component.to_owned(),
            role: role.to_owned(),
            pid,
            cgroup: None,
        }
    }
}

pub struct ResourceSampler {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Sampled>,
}

/// What a sampling run read: each component's series and the machine's.
#[derive(Debug, Clone)]
pub struct Sampled {
    pub components: Vec<SampleSeries>,
    pub machine: MachineSeries,
}

impl ResourceSampler {
    /// Starts sampling `targets` every `interval`. A process that exits simply stops
    /// contributing samples.
    pub fn start(targets: Vec<SampleTarget>, interval: Duration) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("resource-sampler".into())
            .spawn(move || sample_loop(targets, interval, stopped))
            .expect("spawning the sampler thread");
        ResourceSampler { stop, thread }
    }

    pub fn finish(self) -> Sampled {
        let _ = self.stop.send(());
        self.thread.join().expect("sampler thread does not panic")
    }
}

fn sample_loop(
    targets: Vec<SampleTarget>,
    interval: Duration,
    stopped: mpsc::Receiver<()>,
) -> Sampled {
    let mut machine = MachineSeries {
        interrupt_accounting: crate::machine::interrupt_accounting(),
        ..MachineSeries::default()
    };
    let cgroups = crate::CgroupFs::detect();
    machine.mhz.extend(read_cpu_mhz());
    let ticks_per_second = rustix::param::clock_ticks_per_second();
    let page_size = rustix::param::page_size() as u64;
    let mut series: Vec<(SampleSeries, Option<Cgroup>)> = targets
        .into_iter()
        .map(|t| {
            let source = t.cgroup.as_ref().map_or("procfs", |g| g.source());
            let series = SampleSeries {
                component: t.component,
                role: t.role,
                pid: t.pid,
                source,
                samples: Vec::new(),
            };
            (series, t.cgroup)
        })
        .collect();
    let sample_all = |series: &mut Vec<(SampleSeries, Option<Cgroup>)>| {
        for (s, group) in series.iter_mut() {
            let sample = match group {
                Some(group) => read_cgroup(group, page_size),
                None => read_proc(s.pid, ticks_per_second, page_size),
            };
            if let Some(sample) = sample {
                s.samples.push(sample);
            }
        }
    };
    loop {
        sample_all(&mut series);
        machine
            .samples
            .extend(read_machine_sample(cgroups.as_ref()));
        match stopped.recv_timeout(interval) {
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            _ => break,
        }
    }
    // One last sample so the window's end is bracketed.
    sample_all(&mut series);
    machine
        .samples
        .extend(read_machine_sample(cgroups.as_ref()));
    machine.mhz.extend(read_cpu_mhz());
    Sampled {
        components: series.into_iter().map(|(s, _)| s).collect(),
        machine,
    }
}

fn read_cgroup(group: &Cgroup, page_size: u64) -> Option<Sample> {
    let t_ns = now_ns();
    let pids = group.pids();
    if pids.is_empty() {
        return None;
    }
    let reading = group.read()?;
    let rss_bytes = pids
        .iter()
        .filter_map(|&pid| resident_bytes(pid, page_size))
        .sum();
    Some(Sample {
        t_ns,
        cpu_ns: reading.cpu_ns,
        rss_bytes,
        working_set_bytes: Some(reading.working_set_bytes),
    })
}

fn resident_bytes(pid: u32, page_size: u64) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident_pages * page_size)
}

/// One sample of a process now; `None` if it is gone.
pub fn sample_process(pid: u32) -> Option<Sample> {
    read_proc(
        pid,
        rustix::param::clock_ticks_per_second(),
        rustix::param::page_size() as u64,
    )
}

fn read_proc(pid: u32, ticks_per_second: u64, page_size: u64) -> Option<Sample> {
    let t_ns = now_ns();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    if fields.first() == Some(&"Z") {
        return None;
    }
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Sample {
        t_ns,
        cpu_ns: (utime + stime) * 1_000_000_000 / ticks_per_second,
        rss_bytes: resident_bytes(pid, page_size)?,
        working_set_bytes: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_a_real_busy_process() {
        let process_cpu_ns = || {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let sampler = ResourceSampler::start(
            vec![SampleTarget::process("me", "test", std::process::id())],
            Duration::from_millis(20),
        );
        let (start, cpu_start) = (now_ns(), process_cpu_ns());
        let mut x = 0u64;
        while now_ns() - start < 300_000_000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let (end, cpu_end) = (now_ns(), process_cpu_ns());
        let sampled = sampler.finish();
        let summary = sampled.components[0].summarize(start, end);
        // The machine was at least as busy as this process, over the same window.
        let machine = sampled.machine.summarize(start, end, 2).unwrap();
        assert!(
            machine.busy_cores().unwrap() >= summary.cpu_cores_mean - 0.15,
            "{machine:?} against {summary:?}"
        );
        // What the kernel charged this process over the window (the test process may run
        // other tests too, and a busy machine gives the spinning thread less than a core).
        let charged = (cpu_end - cpu_start) as f64 / (end - start) as f64;
        // /proc counts in clock ticks (10 ms): a few ticks over 300 ms at each edge.
        assert!(
            (summary.cpu_cores_mean - charged).abs() < 0.15,
            "sampled {summary:?}, charged {charged:.3} cores"
        );
        assert!(summary.rss_mib_max > 1.0, "{summary:?}");
    }
}
