//! Whether the machine let a load measure the plane, not itself: the hypervisor's steal over
//! the load's measured window, and the generator's own: its thread saturated or, at a fixed
//! rate, its requests sent late (`meshbench_results::noise::generator_noise`, as the run
//! reports test it). A flag goes to the report's notes beside the figures and changes none of
//! them. The thresholds are the run reports' (`meshbench_results::noise`), so "noisy" means
//! the same in a run and in a benchmark.

use meshbench_lab::MachineSeries;
use meshbench_results::noise::{generator_noise, GeneratorNoise, LATE_SHARE, STEAL_SHARE};
use meshbench_results::LoadReport;

/// Why one load's figures may not be the plane's, one sentence each; empty when nothing was
/// seen. `machine` is sampled over the load, on the clock of the load's window.
pub(crate) fn flags(load: &LoadReport, machine: &MachineSeries, cpus: u32) -> Vec<String> {
    let window = (load.window.start_monotonic_ns, load.window.end_monotonic_ns);
    steal(machine, window, cpus)
        .into_iter()
        .chain(generator(load))
        .collect()
}

fn steal(machine: &MachineSeries, (start, end): (u64, u64), cpus: u32) -> Option<String> {
    let stolen = machine.summarize(start, end, cpus)?.steal_cores?;
    let share = stolen / f64::from(cpus.max(1));
    (share > STEAL_SHARE).then(|| {
        format!(
            "the hypervisor took {:.1}% of the CPU (threshold {:.0}%)",
            share * 100.0,
            STEAL_SHARE * 100.0
        )
    })
}

fn generator(load: &LoadReport) -> Option<String> {
    match generator_noise(load.generator.as_ref()?, load.sent)? {
        GeneratorNoise::Limited => {
            Some("the generator, not the plane, limited the rate (its thread saturated or its sends late)".to_owned())
        }
        GeneratorNoise::Late { share } => Some(format!(
            "the generator sent {:.1}% of its requests late with their connection free (threshold {:.0}%)",
            share * 100.0,
            LATE_SHARE * 100.0
        )),
    }
}

#[cfg(test)]
mod tests {
    use meshbench_lab::MachineSample;

    use super::*;

    /// Two samples a second apart on 2 CPUs, `stolen_ns` of steal between them.
    fn machine(stolen_ns: u64) -> MachineSeries {
        let sample = |t_ns: u64, steal: u64| MachineSample {
            t_ns,
            states_ns: [0, 0, 0, 0, 0, 0, 0, steal],
            tasks_ns: None,
        };
        MachineSeries {
            samples: vec![sample(0, 0), sample(1_000_000_000, stolen_ns)],
            ..MachineSeries::default()
        }
    }

    #[test]
    fn steal_is_flagged_past_the_run_reports_threshold_only() {
        // 0.2 s of 2 CPU-seconds: 10%.
        let flag = steal(&machine(200_000_000), (0, 1_000_000_000), 2).unwrap();
        assert_eq!(flag, "the hypervisor took 10.0% of the CPU (threshold 5%)");
        // 0.05 s: 2.5%.
        assert_eq!(steal(&machine(50_000_000), (0, 1_000_000_000), 2), None);
        // No samples around the window: nothing to say, nothing said.
        assert_eq!(
            steal(&MachineSeries::default(), (0, 1_000_000_000), 2),
            None
        );
    }
}
