//! The thresholds past which a measurement is flagged noisy, and the generator's own test: one
//! set, read by the run reports (meshbench-report's `trust`) and the benchmarks alike, so
//! "noisy" means the same in both.

use crate::GeneratorStats;

/// Steal above this share of all CPUs: the hypervisor ran something else while this machine
/// wanted the CPU.
pub const STEAL_SHARE: f64 = 0.05;
/// Requests sent late by the generator with their connection free, as a share of those sent:
/// the generator's own lateness, not the target's.
pub const LATE_SHARE: f64 = 0.01;

/// How the load generator itself disturbed a load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GeneratorNoise {
    /// The generator, not the target, limited the rate (`GeneratorStats::limited`): its thread
    /// was saturated, or more than [`LATE_SHARE`] of its sends left late.
    Limited,
    /// More than [`LATE_SHARE`] of the requests left late with their connection free; `share`
    /// is that share of the `sent` requests.
    Late { share: f64 },
}

/// Whether the generator disturbed a load of `sent` requests, and how; a saturated generator
/// first, as it explains its lateness too.
pub fn generator_noise(generator: &GeneratorStats, sent: u64) -> Option<GeneratorNoise> {
    if generator.limited {
        return Some(GeneratorNoise::Limited);
    }
    let share = late_share(generator, sent);
    (share > LATE_SHARE).then_some(GeneratorNoise::Late { share })
}

/// Whether the generator's own threads limited it (busy for more than 90% of the run). A
/// report from before `saturated` was recorded says only `limited`: saturated where its
/// lateness does not explain it.
pub fn saturated(generator: &GeneratorStats, sent: u64) -> bool {
    generator
        .saturated
        .unwrap_or(generator.limited && late_share(generator, sent) <= LATE_SHARE)
}

/// The share of `sent` requests the generator sent late with their connection free.
pub fn late_share(generator: &GeneratorStats, sent: u64) -> f64 {
    generator.late_while_idle as f64 / sent.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(late_while_idle: u64, limited: bool) -> GeneratorStats {
        GeneratorStats {
            threads: 1,
            cpu_seconds: 1.0,
            cpu_us_per_request: 10.0,
            late_while_idle,
            limited,
            saturated: None,
            untrusted_timestamps: 0,
        }
    }

    #[test]
    fn a_saturated_or_late_generator_is_noise_and_a_punctual_one_is_not() {
        assert_eq!(
            generator_noise(&stats(0, true), 1000),
            Some(GeneratorNoise::Limited)
        );
        assert_eq!(
            generator_noise(&stats(50, true), 1000),
            Some(GeneratorNoise::Limited)
        );
        assert_eq!(
            generator_noise(&stats(20, false), 1000),
            Some(GeneratorNoise::Late { share: 0.02 })
        );
        // 1% is the threshold, not past it.
        assert_eq!(generator_noise(&stats(10, false), 1000), None);
        // Nothing sent: no share to speak of.
        assert_eq!(generator_noise(&stats(0, false), 0), None);
    }
}
