//! A component's CPU and memory as sampled over time, and how a series is cut to a measurement
//! window: cumulative CPU time is interpolated at the window's edges ([`counter_at`]), so the
//! mean CPU covers exactly the window however the sampling ticks fall. The local lab samples
//! processes and cgroups; the Kubernetes backend reads containers' counters from the kubelets;
//! both summarize with the same code. Not part of the JSON contract: what a run records of
//! them is [`ComponentResources`].

use crate::ComponentResources;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub t_ns: u64,
    /// Cumulative user + system CPU time of the whole process (all threads).
    pub cpu_ns: u64,
    pub rss_bytes: u64,
    /// The cgroup's working set, where the component has a cgroup.
    pub working_set_bytes: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct SampleSeries {
    pub component: String,
    pub role: String,
    pub pid: u32,
    /// `procfs`, `cgroup-v1` or `cgroup-v2`.
    pub source: &'static str,
    pub samples: Vec<Sample>,
}

impl SampleSeries {
    /// CPU cores and RSS over `[start_ns, end_ns]`.
    pub fn summarize(&self, start_ns: u64, end_ns: u64) -> ComponentResources {
        let in_window: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.t_ns >= start_ns && s.t_ns <= end_ns)
            .collect();
        let window_s = end_ns.saturating_sub(start_ns) as f64 / 1e9;
        let cpu_cores_mean = match (self.cpu_at(start_ns), self.cpu_at(end_ns)) {
            (Some(a), Some(b)) if window_s > 0.0 => (b - a) / 1e9 / window_s,
            _ => 0.0,
        };
        let cpu_cores_max = in_window
            .windows(2)
            .map(|pair| {
                let dt = (pair[1].t_ns - pair[0].t_ns) as f64;
                (pair[1].cpu_ns - pair[0].cpu_ns) as f64 / dt
            })
            .fold(cpu_cores_mean, f64::max);
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let (rss_mib_mean, rss_mib_max) = if in_window.is_empty() {
            (0.0, 0.0)
        } else {
            let sum: f64 = in_window.iter().map(|s| mib(s.rss_bytes)).sum();
            let max = in_window.iter().map(|s| s.rss_bytes).max().unwrap_or(0);
            (sum / in_window.len() as f64, mib(max))
        };
        let working_sets: Vec<u64> = in_window
            .iter()
            .filter_map(|s| s.working_set_bytes)
            .collect();
        let (working_set_mib_mean, working_set_mib_max) = if working_sets.is_empty() {
            (None, None)
        } else {
            let sum: f64 = working_sets.iter().map(|&b| mib(b)).sum();
            let max = working_sets.iter().copied().max().unwrap_or(0);
            (Some(sum / working_sets.len() as f64), Some(mib(max)))
        };
        ComponentResources {
            component: self.component.clone(),
            role: self.role.clone(),
            source: self.source.to_owned(),
            samples: in_window.len() as u32,
            cpu_cores_mean,
            cpu_cores_max,
            rss_mib_mean,
            rss_mib_max,
            working_set_mib_mean,
            working_set_mib_max,
            node: None,
        }
    }

    /// Cumulative CPU nanoseconds at `t_ns` (see [`counter_at`]).
    fn cpu_at(&self, t_ns: u64) -> Option<f64> {
        counter_at(&self.samples, t_ns, |s| s.t_ns, |s| s.cpu_ns as f64)
    }
}

/// A cumulative counter at `t_ns`, interpolated between the samples around it (ordered by
/// time) and clamped to the first or last sample outside the sampled span; `None` without
/// samples. Components' CPU and the machine's counters are cut to a window with it.
pub fn counter_at<S>(
    samples: &[S],
    t_ns: u64,
    time: impl Fn(&S) -> u64,
    value: impl Fn(&S) -> f64,
) -> Option<f64> {
    let (first, last) = (samples.first()?, samples.last()?);
    if t_ns <= time(first) {
        return Some(value(first));
    }
    if t_ns >= time(last) {
        return Some(value(last));
    }
    let i = samples.partition_point(|s| time(s) <= t_ns);
    let (a, b) = (&samples[i - 1], &samples[i]);
    let frac = (t_ns - time(a)) as f64 / (time(b) - time(a)) as f64;
    Some(value(a) + frac * (value(b) - value(a)))
}

/// A cumulative CPU counter (nanoseconds, at Unix or monotonic nanosecond times) as the mean
/// cores over each `interval_ns` from `start_ns` while whole intervals fit before `end_ns`,
/// interpolated between readings as a cell's window is.
pub fn cores_per_interval<S>(
    samples: &[S],
    (start_ns, end_ns): (u64, u64),
    interval_ns: u64,
    time: impl Fn(&S) -> u64 + Copy,
    value: impl Fn(&S) -> f64 + Copy,
) -> Vec<f64> {
    if interval_ns == 0 || samples.len() < 2 {
        return vec![];
    }
    let count = end_ns.saturating_sub(start_ns) / interval_ns;
    (0..count)
        .filter_map(|i| {
            let from = start_ns + i * interval_ns;
            let a = counter_at(samples, from, time, value)?;
            let b = counter_at(samples, from + interval_ns, time, value)?;
            Some(((b - a) / interval_ns as f64).max(0.0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(u64, u64, u64)]) -> SampleSeries {
        SampleSeries {
            component: "server".into(),
            role: "app".into(),
            pid: 1,
            source: "procfs",
            samples: points
                .iter()
                .map(|&(t, cpu, rss)| Sample {
                    t_ns: t,
                    cpu_ns: cpu,
                    rss_bytes: rss,
                    working_set_bytes: None,
                })
                .collect(),
        }
    }

    #[test]
    fn window_cut_interpolates_cpu_at_the_edges() {
        const S: u64 = 1_000_000_000;
        const MIB: u64 = 1024 * 1024;
        // Idle for 1 s, then one full core for 2 s, then idle.
        let s = series(&[
            (0, 0, 10 * MIB),
            (S, 0, 10 * MIB),
            (2 * S, S, 20 * MIB),
            (3 * S, 2 * S, 30 * MIB),
            (4 * S, 2 * S, 30 * MIB),
        ]);
        let busy = s.summarize(S, 3 * S);
        assert!((busy.cpu_cores_mean - 1.0).abs() < 1e-9);
        assert!((busy.cpu_cores_max - 1.0).abs() < 1e-9);
        assert_eq!(busy.samples, 3);
        assert!((busy.rss_mib_mean - 20.0).abs() < 1e-9);
        assert!((busy.rss_mib_max - 30.0).abs() < 1e-9);
        // Half a second busy out of a one-second window straddling the start of the burst.
        let straddle = s.summarize(S / 2, S + S / 2);
        assert!((straddle.cpu_cores_mean - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_counter_becomes_cores_per_interval() {
        // Half a core for 4 s, then a full core for 2 s, read every 2 s.
        const S: u64 = 1_000_000_000;
        let readings = [(0, 0.0), (2 * S, 1e9), (4 * S, 2e9), (6 * S, 4e9)];
        let cores = cores_per_interval(&readings, (0, 6 * S), S, |r| r.0, |r| r.1);
        assert_eq!(cores, vec![0.5, 0.5, 0.5, 0.5, 1.0, 1.0]);
        // Only whole intervals.
        let cores = cores_per_interval(&readings, (0, 5 * S + S / 2), 2 * S, |r| r.0, |r| r.1);
        assert_eq!(cores, vec![0.5, 0.5]);
        assert!(cores_per_interval(&readings[..1], (0, 6 * S), S, |r| r.0, |r| r.1).is_empty());
    }
}
