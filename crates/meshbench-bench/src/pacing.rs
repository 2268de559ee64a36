//! How evenly a fixed-rate generator spaces its requests, from their send times on the wire.
//! CPU per request at a fixed rate depends on how many wake-ups a tool spends per request: a
//! tool that sends in bursts (several requests per timer tick) wakes less often than one that
//! sends every request on time. This is the figure that tells the two apart.

use std::time::Duration;

use meshbench_results::Pacing;

/// Send is a burst when it follows the previous one by less than this share of the even gap.
const BURST_FRACTION: f64 = 0.25;

/// The spacing of `send_times` (capture order) for a requested rate of `rps`; `None` with
/// fewer than two sends.
pub(crate) fn pacing(send_times: &[Duration], rps: f64) -> Option<Pacing> {
    let mut gaps_us: Vec<f64> = send_times
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]).as_secs_f64() * 1e6)
        .collect();
    if gaps_us.is_empty() {
        return None;
    }
    let even_gap_us = 1e6 / rps;
    let bursts = gaps_us
        .iter()
        .filter(|&&g| g < BURST_FRACTION * even_gap_us)
        .count();
    let burst_share = bursts as f64 / gaps_us.len() as f64;
    gaps_us.sort_by(f64::total_cmp);
    let p = |q| meshbench_stats::percentile(&gaps_us, q);
    Some(Pacing {
        requests: send_times.len() as u64,
        even_gap_us,
        gap_p10_us: p(10.0),
        gap_p50_us: p(50.0),
        gap_p90_us: p(90.0),
        gap_p99_us: p(99.0),
        burst_share,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_us(times: &[u64]) -> Vec<Duration> {
        times.iter().map(|&t| Duration::from_micros(t)).collect()
    }

    #[test]
    fn an_even_schedule_has_no_bursts() {
        let times: Vec<u64> = (0..1000).map(|i| i * 200).collect();
        let p = pacing(&at_us(&times), 5000.0).unwrap();
        assert_eq!(p.requests, 1000);
        assert_eq!(p.burst_share, 0.0);
        assert!((p.gap_p50_us - 200.0).abs() < 1e-6);
        assert!((p.even_gap_us - 200.0).abs() < 1e-6);
    }

    #[test]
    fn five_requests_per_millisecond_tick_are_bursts() {
        // A 1 ms timer tick that sends 5 requests 10 us apart: 5k rps on average.
        let times: Vec<u64> = (0..200)
            .flat_map(|tick| (0..5).map(move |k| tick * 1000 + k * 10))
            .collect();
        let p = pacing(&at_us(&times), 5000.0).unwrap();
        assert!((p.burst_share - 0.8).abs() < 0.01, "{}", p.burst_share);
        assert!((p.gap_p50_us - 10.0).abs() < 1e-6);
        assert!(p.gap_p99_us > 900.0);
    }

    #[test]
    fn fewer_than_two_sends_say_nothing() {
        assert!(pacing(&at_us(&[5]), 1000.0).is_none());
        assert!(pacing(&[], 1000.0).is_none());
    }
}
