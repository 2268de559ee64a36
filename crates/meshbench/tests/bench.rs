//! `meshbench bench loadgen` with the real peers: every tool is run, parsed and compared.
//! This checks the harness, never a speed: the figures are the benchmark's to report.

use std::process::Command;

use meshbench_results::{read_json, BenchReport};
use meshbench_testkit::require_tool;

#[test]
fn loadgen_bench_runs_meshbench_wrk_and_fortio_side_by_side() {
    if require_tool("wrk").is_none() || require_tool("fortio").is_none() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["bench", "loadgen", "--duration", "1s", "--out"])
        .arg(dir.path())
        .args(["--target-cpu", &(cores - 1).min(1).to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: BenchReport = read_json(&dir.path().join("bench.json")).unwrap();
    let tools: Vec<(&str, &str)> = report
        .measurements
        .iter()
        .map(|m| (m.case.as_str(), m.tool.as_str()))
        .collect();
    assert_eq!(
        tools,
        [
            ("closed-loop-16", "meshbench"),
            ("closed-loop-16", "wrk"),
            ("closed-loop-16", "fortio"),
            ("fixed-5k", "meshbench"),
            ("fixed-5k", "fortio"),
            ("floor-1k", "meshbench"),
            ("floor-1k", "fortio"),
        ]
    );
    for m in &report.measurements {
        assert!(m.requests > 0 && m.seconds > 0.5, "{m:?}");
        assert!(
            m.cpu_seconds > 0.0,
            "CPU of {} was not accounted: {m:?}",
            m.tool
        );
        assert!(m.p50_us.is_some_and(|p| p > 0.0), "{m:?}");
    }
    let targets: Vec<&str> = report
        .ratios
        .iter()
        .filter(|r| r.target.is_some())
        .map(|r| r.metric.as_str())
        .collect();
    assert_eq!(targets, ["client CPU us per request", "p50 us"]);
    let md = std::fs::read_to_string(dir.path().join("bench.md")).unwrap();
    assert!(md.contains("## Ratios (ours / peer)"));
}

#[test]
fn dataplane_bench_runs_our_proxies_haproxy_and_envoy_side_by_side() {
    if require_tool("haproxy").is_none() || require_tool("envoy").is_none() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args([
            "bench",
            "dataplane",
            "--duration",
            "1s",
            "--open-connections",
            "50",
            "--out",
        ])
        .arg(dir.path())
        .args(["--proxy-cpu", &(cores - 1).min(1).to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: BenchReport = read_json(&dir.path().join("bench.json")).unwrap();
    let planes = [
        "direct",
        "meshbench-sidecar-l4",
        "meshbench-sidecar-l7",
        "meshbench-node-agent",
        "haproxy",
        "envoy",
    ];
    for plane in planes {
        let cases: Vec<&str> = report
            .measurements
            .iter()
            .filter(|m| m.tool == plane)
            .map(|m| m.case.as_str())
            .collect();
        let expected: &[&str] = if plane == "direct" {
            &["latency", "throughput"]
        } else {
            &["latency", "throughput", "memory"]
        };
        assert_eq!(cases, expected, "{plane}");
    }
    for m in &report.measurements {
        assert!(m.requests > 0, "{m:?}");
        // Every request through every pair got its 200: the mTLS chain really works.
        if m.case != "memory" {
            assert_eq!(m.errors, Some(0), "{m:?}");
            assert!(m.p50_us.is_some_and(|p| p > 0.0), "{m:?}");
        }
        if m.case == "throughput" && m.tool != "direct" {
            assert!(m.cpu_seconds > 0.0, "proxy CPU not accounted: {m:?}");
        }
        if m.case == "memory" {
            assert!(m.memory_bytes.is_some_and(|b| b > 0), "{m:?}");
        }
    }
    // Three of ours against two peers, five figures each.
    assert_eq!(report.ratios.len(), 3 * 2 * 5);
}
