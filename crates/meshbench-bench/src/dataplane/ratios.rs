//! Ours over each peer, per figure, with a 95% interval and a verdict that says when the data
//! cannot tell. Rounds are the unit: each round gives each plane one value of each figure
//! (from that round's seconds; an added latency against direct's in the same round), and the
//! ratio's interval comes from how ours and the peer's vary together from round to round
//! ([`paired_ratio_interval`]). An interval from the seconds of a few rounds left out what
//! moves a figure between runs of the bench: three runs of the same comparison gave intervals
//! two of which did not overlap. A target is met when the interval lies on its side of the
//! bound, missed when it lies on the other, and inconclusive otherwise: a 6x "miss" between
//! two added p99s of 20 us, each the 50th-largest of 5000 samples, is not a miss.

use std::collections::BTreeMap;

use meshbench_lab::Sampled;
use meshbench_meshes::configs::ProxyMode;
use meshbench_results::{BenchRatio, LoadReport, RatioInterval, TargetVerdict};
use meshbench_stats::{paired_ratio_interval, SecondValue};

use super::planes::Plane;

/// The interval's level.
pub(crate) const LEVEL: f64 = 0.95;

/// (metric, lower is better), in the order of [`Quantity`]'s use in [`ratio_terms`].
pub(crate) const METRICS: [(&str, bool); 5] = [
    ("added p50 us at fixed rate", true),
    ("added p99 us at fixed rate", true),
    ("throughput as a fraction of direct", false),
    ("proxy CPU s per 100k requests", true),
    ("proxy memory MiB with connections open", true),
];

/// What one round of one plane leaves for the estimates, second by second.
#[derive(Debug, Default, Clone)]
pub(crate) struct RoundSeries {
    /// The latency case's per-second p50 and p99, each second weighted by its responses.
    pub p50_us: Vec<SecondValue>,
    pub p99_us: Vec<SecondValue>,
    /// The throughput case's responses in each whole second (all seconds weigh the same).
    pub rate: Vec<SecondValue>,
    /// The proxies' CPU per request in each whole second of the throughput case, weighted by
    /// its responses: their mean is the CPU of the window over its requests.
    pub cpu_us_per_request: Vec<SecondValue>,
    /// One value a round: RSS with the connections open.
    pub memory_mib: Option<f64>,
}

/// Every plane's rounds, by plane name.
pub(crate) type Series = BTreeMap<&'static str, Vec<RoundSeries>>;

fn latency_seconds(
    load: &LoadReport,
    pick: fn(&meshbench_results::SecondStats) -> u64,
) -> Vec<SecondValue> {
    load.time_series
        .iter()
        .map(|s| SecondValue {
            value: pick(s) as f64,
            responses: s.responses,
        })
        .collect()
}

/// The seconds that lie wholly inside the load's measured window: a trailing part-second
/// would count as a slow one.
fn whole_seconds(load: &LoadReport) -> impl Iterator<Item = &meshbench_results::SecondStats> {
    let whole = load.window.seconds.floor() as u32;
    load.time_series.iter().filter(move |s| s.second < whole)
}

impl RoundSeries {
    pub(crate) fn latency(load: &LoadReport) -> Self {
        RoundSeries {
            p50_us: latency_seconds(load, |s| s.p50_us),
            p99_us: latency_seconds(load, |s| s.p99_us),
            ..RoundSeries::default()
        }
    }

    /// The throughput case's rate and, with the proxies' CPU sampled over it, CPU per
    /// request (none for a plane without proxies).
    pub(crate) fn add_throughput(&mut self, load: &LoadReport, sampled: Option<&Sampled>) {
        let start = load.window.start_monotonic_ns;
        for s in whole_seconds(load) {
            self.rate.push(SecondValue {
                value: s.responses as f64,
                responses: 1,
            });
            let Some(sampled) = sampled.filter(|_| s.responses > 0) else {
                continue;
            };
            let from = start + u64::from(s.second) * 1_000_000_000;
            let cpu_seconds: f64 = sampled
                .components
                .iter()
                .map(|series| series.summarize(from, from + 1_000_000_000).cpu_cores_mean)
                .sum();
            self.cpu_us_per_request.push(SecondValue {
                value: cpu_seconds * 1e6 / s.responses as f64,
                responses: s.responses,
            });
        }
    }
}

/// The response-weighted mean of a round's per-second values (`None` without responses).
fn weighted_mean(seconds: &[SecondValue]) -> Option<f64> {
    let (sum, weight) = seconds
        .iter()
        .filter(|s| s.responses > 0 && s.value.is_finite())
        .fold((0.0, 0.0), |(sum, weight), s| {
            (
                sum + s.value * s.responses as f64,
                weight + s.responses as f64,
            )
        });
    (weight > 0.0).then(|| sum / weight)
}

/// One plane's figures in one round, each from that round's seconds.
#[derive(Debug, Clone, Copy, Default)]
struct RoundFigures {
    p50: Option<f64>,
    p99: Option<f64>,
    rate: Option<f64>,
    cpu_us_per_request: Option<f64>,
    memory_mib: Option<f64>,
}

impl RoundFigures {
    fn of(round: &RoundSeries) -> Self {
        RoundFigures {
            p50: weighted_mean(&round.p50_us),
            p99: weighted_mean(&round.p99_us),
            rate: weighted_mean(&round.rate),
            cpu_us_per_request: weighted_mean(&round.cpu_us_per_request),
            memory_mib: round.memory_mib,
        }
    }
}

/// Metric `index` of [`METRICS`] for a plane in one round, against direct's in the same
/// round: the added latencies over direct's, throughput as a fraction of direct's, CPU per
/// 100k requests, memory.
fn figure(index: usize, plane: &RoundFigures, direct: &RoundFigures) -> Option<f64> {
    match index {
        0 => Some(plane.p50? - direct.p50?),
        1 => Some(plane.p99? - direct.p99?),
        2 => Some(plane.rate? / direct.rate?),
        // us per request x 100k requests / 1e6 us per s.
        3 => Some(plane.cpu_us_per_request? * 0.1),
        _ => plane.memory_mib,
    }
}

/// Ours and the peer's values of metric `index`, round by round, over the rounds where both
/// and direct have one.
fn paired_rounds(
    index: usize,
    ours: &[RoundFigures],
    peer: &[RoundFigures],
    direct: &[RoundFigures],
) -> (Vec<f64>, Vec<f64>) {
    ours.iter()
        .zip(peer)
        .zip(direct)
        .filter_map(|((o, p), d)| Some((figure(index, o, d)?, figure(index, p, d)?)))
        .unzip()
}

/// A node-agent plane's target against the L4 sidecar pair, per figure of [`METRICS`]
/// (the ratio's bound; `None`: reported without a target): the loop's added p99 at most
/// twice the pair's and its CPU per request at most 1.1 times; the node-agent pair's
/// throughput at least the L4 pair's.
fn floor_target(plane: Plane, metric: &str) -> Option<f64> {
    let [_, p99, throughput, cpu, _] = METRICS.map(|(name, _)| name);
    match plane {
        Plane::NodeAgentLoop if metric == p99 => Some(2.0),
        Plane::NodeAgentLoop if metric == cpu => Some(1.1),
        Plane::NodeAgent if metric == throughput => Some(1.0),
        _ => None,
    }
}

/// Whether `ours` is compared with `peer`. Every plane of ours is compared with the HTTP
/// proxies; the L4 sidecar with the TCP proxies as well, which do its work (each client
/// connection over an mTLS connection of its own) where the HTTP proxies pool a thousand
/// client connections over a few; the node agents with the L4 sidecar pair, their floor; the
/// looping node agent with the looping ztunnel; both sidecars with linkerd2-proxy's pair.
fn compared(ours: Plane, peer: Plane) -> bool {
    match peer.peer_mode() {
        Some(mode) => mode == ProxyMode::Http || ours == Plane::SidecarL4,
        None if peer == Plane::ZtunnelLoop => ours == Plane::NodeAgentLoop,
        None if peer == Plane::Linkerd2Proxy => {
            matches!(ours, Plane::SidecarL7 | Plane::SidecarL4)
        }
        None => peer == Plane::SidecarL4 && ours.is_node_agent(),
    }
}

/// The bound a compared ratio is held to, per figure of [`METRICS`] (`None`: reported
/// without a target): ours at or below every third-party peer; against the floor, the
/// issue's own bounds.
fn bound(ours: Plane, peer: Plane, metric: &str) -> Option<f64> {
    match peer {
        Plane::SidecarL4 => floor_target(ours, metric),
        _ => Some(1.0),
    }
}

/// The target judged by the interval (`None`: no interval, so no telling).
pub(crate) fn verdict(
    interval: Option<(f64, f64)>,
    bound: f64,
    lower_better: bool,
) -> TargetVerdict {
    let Some((low, high)) = interval else {
        return TargetVerdict::Inconclusive;
    };
    let (on_side, off_side) = if lower_better {
        (high <= bound, low > bound)
    } else {
        (low >= bound, high < bound)
    };
    match (on_side, off_side) {
        (true, _) => TargetVerdict::Met,
        (_, true) => TargetVerdict::Missed,
        _ => TargetVerdict::Inconclusive,
    }
}

/// Ours over each compared peer, per figure, with rounds as the unit
/// ([`paired_ratio_interval`]). An added latency the peer does not have (its mean is not
/// above direct's) has no meaningful ratio: that comparison is left out and said why in the
/// returned notes.
pub(crate) fn ratios(series: &Series, planes: &[Plane]) -> (Vec<BenchRatio>, Vec<String>) {
    let figures: BTreeMap<&str, Vec<RoundFigures>> = series
        .iter()
        .map(|(name, rounds)| (*name, rounds.iter().map(RoundFigures::of).collect()))
        .collect();
    let mut out = Vec::new();
    let mut notes = Vec::new();
    let Some(direct) = figures.get(Plane::Direct.name()) else {
        return (out, notes);
    };
    for &ours in planes.iter().filter(|p| p.is_ours()) {
        for &peer in planes.iter().filter(|&&peer| compared(ours, peer)) {
            let (Some(mine), Some(theirs)) = (figures.get(ours.name()), figures.get(peer.name()))
            else {
                continue;
            };
            for (index, (metric, lower_better)) in METRICS.into_iter().enumerate() {
                let (x, y) = paired_rounds(index, mine, theirs, direct);
                if x.is_empty() {
                    notes.push(format!(
                        "{} against {}: {metric} not compared: nothing measured",
                        ours.name(),
                        peer.name()
                    ));
                    continue;
                }
                let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
                let (ours_value, theirs_value) = (mean(&x), mean(&y));
                if theirs_value <= 0.0 {
                    notes.push(format!(
                        "{} against {}: {metric} not compared: {}'s estimate is {theirs_value:.0}, not above direct (within the run's noise); ours: {ours_value:.0}",
                        ours.name(),
                        peer.name(),
                        peer.name()
                    ));
                    continue;
                }
                let ratio = ours_value / theirs_value;
                let interval = paired_ratio_interval(&x, &y, LEVEL).map(|i| (i.low, i.high));
                let bound = bound(ours, peer, metric);
                let judged = bound.map(|b| verdict(interval, b, lower_better));
                let sign = if lower_better { "<=" } else { ">=" };
                out.push(BenchRatio {
                    repetitions: (x.len() > 1).then_some(x.len() as u32),
                    case: ours.name().to_owned(),
                    metric: metric.to_owned(),
                    peer: peer.name().to_owned(),
                    ours: ours_value,
                    theirs: theirs_value,
                    ratio,
                    interval: interval.map(|(low, high)| RatioInterval {
                        low,
                        high,
                        level: LEVEL,
                    }),
                    target: bound.map(|b| format!("{sign} {b}")),
                    met: judged.and_then(|v| match v {
                        TargetVerdict::Met => Some(true),
                        TargetVerdict::Missed => Some(false),
                        TargetVerdict::Inconclusive => None,
                    }),
                    verdict: judged,
                });
            }
        }
    }
    (out, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_needs_the_whole_interval_on_one_side() {
        assert_eq!(verdict(Some((0.5, 0.9)), 1.0, true), TargetVerdict::Met);
        assert_eq!(verdict(Some((1.1, 1.9)), 1.0, true), TargetVerdict::Missed);
        assert_eq!(
            verdict(Some((0.5, 6.0)), 1.0, true),
            TargetVerdict::Inconclusive
        );
        assert_eq!(verdict(Some((1.0, 1.3)), 1.0, false), TargetVerdict::Met);
        assert_eq!(verdict(Some((0.7, 0.9)), 1.0, false), TargetVerdict::Missed);
        assert_eq!(
            verdict(Some((0.9, 1.1)), 1.0, false),
            TargetVerdict::Inconclusive
        );
        assert_eq!(verdict(None, 1.0, true), TargetVerdict::Inconclusive);
    }

    /// `seconds` around `value`, off by up to `wobble`: uniform noise from a fixed
    /// generator (a regular pattern would cancel within blocks and show no spread).
    fn steady(value: f64, seconds: usize, responses: u64, wobble: f64) -> Vec<SecondValue> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static STATE: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
        (0..seconds)
            .map(|_| {
                let x = STATE
                    .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
                    .wrapping_mul(0xbf58_476d_1ce4_e5b9);
                let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
                SecondValue {
                    value: value + wobble * (2.0 * unit - 1.0),
                    responses,
                }
            })
            .collect()
    }

    fn round(p99: f64, wobble: f64) -> RoundSeries {
        RoundSeries {
            p50_us: steady(p99 / 2.0, 10, 1000, wobble),
            p99_us: steady(p99, 10, 1000, wobble),
            rate: steady(10_000.0, 10, 1, 50.0),
            cpu_us_per_request: steady(40.0, 10, 10_000, 1.0),
            memory_mib: Some(20.0),
        }
    }

    #[test]
    fn a_clear_gap_is_judged_and_noise_between_tiny_differences_is_not() {
        let planes = [Plane::Direct, Plane::NodeAgentLoop, Plane::ZtunnelLoop];
        let mut series = Series::new();
        // Ours adds 100 us at p99 and the peer 400: clearly met. At p50, 2 us against 3 us
        // with seconds wobbling by 30: inconclusive.
        series.insert(
            "direct",
            vec![round(300.0, 30.0), round(300.0, 30.0), round(300.0, 30.0)],
        );
        let mut ours = vec![round(400.0, 1.0), round(400.0, 1.0), round(400.0, 1.0)];
        let mut peer = vec![round(700.0, 1.0), round(700.0, 1.0), round(700.0, 1.0)];
        for r in &mut ours {
            r.p50_us = steady(152.0, 10, 1000, 1.0);
        }
        for r in &mut peer {
            r.p50_us = steady(153.0, 10, 1000, 1.0);
        }
        series.insert("meshbench-node-agent-loop", ours);
        series.insert("ztunnel-loop", peer);
        let (ratios, notes) = ratios(&series, &planes);
        assert!(notes.is_empty(), "{notes:?}");
        let find = |metric: &str| ratios.iter().find(|r| r.metric == metric).unwrap();
        let p99 = find(METRICS[1].0);
        assert!((p99.ratio - 0.25).abs() < 0.02, "{p99:?}");
        assert_eq!(p99.verdict, Some(TargetVerdict::Met));
        assert_eq!(p99.met, Some(true));
        let interval = p99.interval.unwrap();
        assert!(interval.low < p99.ratio && interval.high > p99.ratio && interval.high < 1.0);
        let p50 = find(METRICS[0].0);
        assert_eq!(p50.verdict, Some(TargetVerdict::Inconclusive), "{p50:?}");
        assert_eq!(p50.met, None);
        // Equal throughput, CPU and memory: each interval holds 1.
        for metric in &METRICS[2..] {
            let r = find(metric.0);
            let i = r.interval.unwrap();
            assert!(i.low <= 1.0 && i.high >= 1.0, "{r:?}");
        }
    }
}
