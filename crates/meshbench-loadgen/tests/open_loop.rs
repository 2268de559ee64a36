//! The open-loop generator against a real echo server on loopback: it must deliver the
//! requested rate, account for every request, and report (not hide) a target that cannot
//! keep up or refuses it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::echo_server;
use meshbench_fixtures::TestPki;
use meshbench_identity::client_config;
use meshbench_loadgen::{run_load, LoadConfig, LoadResult, Outcome, Target, Warmup};

fn config(url: &str, rps: f64, connections: u32, duration: Duration) -> LoadConfig {
    let mut config = LoadConfig::open_loop(Target::parse(url).unwrap(), rps, connections, duration);
    config.warmup = Warmup::Time(Duration::from_millis(300));
    config.timeout = Duration::from_secs(2);
    config
}

fn count(result: &LoadResult, outcome: &Outcome) -> u64 {
    result.recorder.outcomes.get(outcome).copied().unwrap_or(0)
}

fn assert_every_request_accounted_for(result: &LoadResult) {
    let classified: u64 = result.recorder.outcomes.values().sum();
    assert_eq!(
        classified,
        result.sent(),
        "outcome classes must add up to sent"
    );
    assert_eq!(result.sent() + result.unsent(), result.scheduled);
    let latency = result.recorder.corrected.summary();
    assert_eq!(latency.count, result.sent());
}

#[test]
fn achieved_rate_is_within_one_percent_of_a_sustainable_request() {
    let server = echo_server(Duration::ZERO, None);
    let url = format!("http://{}/", server.addr);
    let result = run_load(config(&url, 500.0, 8, Duration::from_secs(3))).unwrap();

    assert_every_request_accounted_for(&result);
    assert_eq!(count(&result, &Outcome::Http(200)), result.sent());
    assert_eq!(result.unsent(), 0);
    let error = (result.achieved_rps() - 500.0).abs() / 500.0;
    assert!(
        error < 0.01,
        "achieved {:.2} rps for 500 requested",
        result.achieved_rps()
    );
    // Scheduled requests follow from the rate and the window alone.
    assert!(
        (result.scheduled as f64 - 1500.0).abs() <= 8.0,
        "{}",
        result.scheduled
    );

    let report = result.to_report();
    assert_eq!(report.requested_rps, Some(500.0));
    assert_eq!(report.outcomes.get("http_200"), Some(&result.sent()));
    let corrected = report.latency;
    let uncorrected = report.latency_uncorrected;
    assert!(corrected.p50_us >= uncorrected.p50_us);
    assert!(
        corrected.p50_us > 0 && corrected.p50_us < 50_000,
        "{corrected:?}"
    );
}

#[test]
fn a_target_that_cannot_keep_up_shows_as_lower_achieved_rate_and_late_requests() {
    // 2 connections x 1 request per 20 ms = at most ~100 rps; ask for 200.
    let server = echo_server(Duration::from_millis(20), None);
    let url = format!("http://{}/", server.addr);
    let result = run_load(config(&url, 200.0, 2, Duration::from_secs(2))).unwrap();

    assert_every_request_accounted_for(&result);
    assert!(result.achieved_rps() < 110.0, "{}", result.achieved_rps());
    assert!(result.achieved_rps() > 70.0, "{}", result.achieved_rps());
    assert!(result.unsent() > 100, "unsent {}", result.unsent());
    assert!(result.recorder.late > 0);
    // Corrected latency includes the wait for the busy connection; uncorrected does not.
    let corrected = result.recorder.corrected.summary();
    let uncorrected = result.recorder.uncorrected.summary();
    assert!(
        corrected.p99_us > 4 * uncorrected.p99_us,
        "{corrected:?} vs {uncorrected:?}"
    );
}

#[test]
fn an_answer_read_at_the_next_send_keeps_its_arrival_time() {
    // Two connections taking turns, one request per 50 ms, answers after 5 ms. The open loop
    // sleeps until the other connection's send and reads the answer then, 45 ms after it
    // came: the latency must be the server's 5 ms (the kernel's arrival time), not the
    // generator's 50 ms schedule.
    let server = echo_server(Duration::from_millis(5), None);
    let url = format!("http://{}/", server.addr);
    let result = run_load(config(&url, 20.0, 2, Duration::from_secs(2))).unwrap();

    assert_every_request_accounted_for(&result);
    assert_eq!(count(&result, &Outcome::Http(200)), result.sent());
    for latency in [
        result.recorder.corrected.summary(),
        result.recorder.uncorrected.summary(),
    ] {
        assert!(
            latency.min_us >= 5_000,
            "faster than the server: {latency:?}"
        );
        assert!(
            latency.p99_us < 25_000,
            "the schedule leaked in: {latency:?}"
        );
    }
}

#[test]
fn refused_connections_are_counted_as_such() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/");
    let result = run_load(config(&url, 100.0, 2, Duration::from_secs(1))).unwrap();

    assert_every_request_accounted_for(&result);
    assert!(result.sent() > 90);
    assert_eq!(count(&result, &Outcome::ConnectRefused), result.sent());
    assert_eq!(result.achieved_rps(), 0.0);
}

#[test]
fn an_mtls_server_rejecting_the_client_shows_as_a_tls_alert_class() {
    let pki = TestPki::new("default", &["server"]);
    let server = echo_server(Duration::ZERO, Some(pki.server_files("server")));
    let tls = client_config(&pki.client_files(None), &[b"http/1.1"]).unwrap();
    let url = format!("https://{}/", server.addr);
    let mut cfg = config(&url, 50.0, 1, Duration::from_secs(1));
    cfg.tls = Some(Arc::new(tls));
    let result = run_load(cfg).unwrap();

    assert_every_request_accounted_for(&result);
    let alert = Outcome::Tls("alert_certificate_required".into());
    assert_eq!(
        count(&result, &alert),
        result.sent(),
        "{:?}",
        result.recorder.outcomes
    );
}

#[test]
fn invalid_configuration_names_the_field() {
    let mut cfg = config("http://127.0.0.1:9/", 10.0, 1, Duration::from_secs(1));
    cfg.connections = 0;
    let err = run_load(cfg).unwrap_err();
    assert!(err.to_string().contains("--connections"), "{err}");
    assert!(Target::parse("ftp://example.invalid/").is_err());
    let https = config("https://127.0.0.1:9/", 10.0, 1, Duration::from_secs(1));
    assert!(run_load(https)
        .unwrap_err()
        .to_string()
        .contains("--cacert"));
}

#[test]
fn reports_of_generators_sharing_a_load_merge_into_its_exact_distribution() {
    use meshbench_loadgen::{merge_reports, LatencyRecorder};
    // Two generators with one rate each, at the same time, as `--generators 2` runs them.
    let server = echo_server(Duration::from_millis(1), None);
    let url = format!("http://{}/", server.addr);
    let generators: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                run_load(config(&url, 100.0, 2, Duration::from_secs(1)))
                    .unwrap()
                    .to_report()
            })
        })
        .collect();
    let reports: Vec<_> = generators.into_iter().map(|g| g.join().unwrap()).collect();
    let merged = merge_reports(&reports).unwrap();

    assert_eq!(merged.requested_rps, Some(200.0));
    assert_eq!(merged.connections, 4);
    assert_eq!(merged.sent, reports[0].sent + reports[1].sent);
    assert_eq!(
        merged.outcomes["http_200"],
        reports[0].outcomes["http_200"] + reports[1].outcomes["http_200"]
    );
    assert!((merged.achieved_rps - reports[0].achieved_rps - reports[1].achieved_rps).abs() < 1e-9);
    // The whole distribution is the sum of the parts, bucket for bucket.
    let mut both = LatencyRecorder::default();
    for r in &reports {
        both.merge(&LatencyRecorder::decode(&r.histogram).unwrap());
    }
    assert_eq!(merged.latency, both.summary());
    assert_eq!(merged.latency.count, merged.sent);
    let decoded = LatencyRecorder::decode(&merged.histogram).unwrap();
    assert_eq!(decoded.histogram(), both.histogram());
    assert!(merged.latency.p99_us >= reports.iter().map(|r| r.latency.p50_us).min().unwrap());
    assert_eq!(merged.latency_uncorrected.count, merged.sent);
    // The window spans both generators' windows.
    let wall = |r: &meshbench_results::LoadReport, t: u64| {
        t as i128 + r.window.realtime_offset_ns.unwrap() as i128
    };
    for r in &reports {
        assert!(
            wall(&merged, merged.window.start_monotonic_ns)
                <= wall(r, r.window.start_monotonic_ns) + 1
        );
        assert!(
            wall(&merged, merged.window.end_monotonic_ns) + 1 >= wall(r, r.window.end_monotonic_ns)
        );
    }
    // Reports of different loads do not merge.
    let mut other = reports[1].clone();
    other.target = "http://elsewhere/".into();
    assert!(merge_reports(&[reports[0].clone(), other]).is_err());
}
