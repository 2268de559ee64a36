//! `meshbench bench loadgen` with the real peers: every tool is run, parsed and compared.
//! This checks the harness, never a speed: the figures are the benchmark's to report.

use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use meshbench_results::{read_json, BenchReport, TargetVerdict};
use meshbench_testkit::{require_tool, run_ok};

/// Each benchmark pins its tools to the machine's CPUs and loads them: two at once would
/// measure each other (and overflow the pacing pass's capture), so they take turns.
static MACHINE: Mutex<()> = Mutex::new(());

fn machine() -> MutexGuard<'static, ()> {
    MACHINE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `meshbench bench <kind>` for `duration` a case and `rounds` repetitions, with
/// `flags`, the measured component pinned by `cpu_flag` to CPU 1 where there is one; its
/// directory and report.
fn bench(
    kind: &str,
    duration: &str,
    rounds: &str,
    flags: &[&str],
    cpu_flag: &str,
) -> (tempfile::TempDir, BenchReport) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().unwrap();
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args([
                "bench",
                kind,
                "--duration",
                duration,
                "--repetitions",
                rounds,
            ])
            .args(flags)
            .arg("--out")
            .arg(dir.path())
            .args([cpu_flag, &(cores - 1).min(1).to_string()]),
    );
    let report = read_json(&dir.path().join("bench.json")).unwrap();
    (dir, report)
}

/// `meshbench bench loadgen` with `flags`, one second a case and two rounds, checked: every
/// tool of `peers` (beside meshbench and the floors) ran in every round in order, was parsed
/// and compared, and the pacing pass captured each fixed-rate tool. The report.
fn loadgen_bench(peers: &[&str], flags: &[&str]) -> BenchReport {
    let (dir, report) = bench("loadgen", "1s", "2", flags, "--target-cpu");
    let (rounds, pacing): (Vec<_>, Vec<_>) = report
        .measurements
        .iter()
        .partition(|m| m.repetition.is_some());
    let tools: Vec<(u32, &str, &str)> = rounds
        .iter()
        .map(|m| (m.repetition.unwrap(), m.case.as_str(), m.tool.as_str()))
        .collect();
    let ran = |tool: &str| tool == "meshbench" || tool.ends_with("-floor") || peers.contains(&tool);
    let round = |r| {
        [
            (r, "closed-loop-16", "meshbench"),
            (r, "closed-loop-16", "wrk"),
            (r, "closed-loop-16", "fortio"),
            (r, "closed-loop-16", "oha"),
            (r, "closed-loop-16", "closed-floor"),
            (r, "fixed-5k", "meshbench"),
            (r, "fixed-5k", "fortio"),
            (r, "fixed-5k", "oha"),
            (r, "fixed-5k", "paced-floor"),
            (r, "floor-1k", "meshbench"),
            (r, "floor-1k", "fortio"),
            (r, "floor-1k", "oha"),
        ]
        .into_iter()
        .filter(|(_, _, tool)| ran(tool))
        .collect::<Vec<_>>()
    };
    assert_eq!(
        tools,
        [round(1), round(2)].concat(),
        "rounds interleave the tools"
    );
    for m in &report.measurements {
        assert!(m.requests > 0 && m.seconds > 0.5, "{m:?}");
        assert!(
            m.cpu_seconds > 0.0,
            "CPU of {} was not accounted: {m:?}",
            m.tool
        );
        // The floors only send and read: they time nothing.
        if !m.tool.ends_with("-floor") {
            assert!(m.p50_us.is_some_and(|p| p > 0.0), "{m:?}");
        }
    }
    // Nothing is compared with a peer that did not run.
    assert!(
        report.ratios.iter().all(|r| ran(&r.peer)),
        "{:?}",
        report.ratios
    );
    // Ours is set against each floor, and the report says what the closed floor means for the
    // target over wrk.
    for (case, floor) in [
        ("fixed-5k", "paced-floor"),
        ("closed-loop-16", "closed-floor"),
    ] {
        assert!(report
            .ratios
            .iter()
            .any(|r| r.case == case && r.peer == floor && r.ratio > 0.0));
    }
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("closed-loop-16: a client that only sends")),
        "{:?}",
        report.notes
    );
    // Ratios compare medians: with two rounds, the mean of the two.
    let p50 = report
        .ratios
        .iter()
        .find(|r| r.case == "floor-1k" && r.metric == "p50 us" && r.peer == "fortio")
        .unwrap();
    let ours: Vec<f64> = report
        .measurements
        .iter()
        .filter(|m| m.case == "floor-1k" && m.tool == "meshbench")
        .map(|m| m.p50_us.unwrap())
        .collect();
    assert_eq!(p50.repetitions, Some(2));
    assert!(
        (p50.ours - (ours[0] + ours[1]) / 2.0).abs() < 1e-9,
        "{p50:?} {ours:?}"
    );
    let md = std::fs::read_to_string(dir.path().join("bench.md")).unwrap();
    assert!(md.contains("## Ratios (ours / peer, medians of 2 repetitions)"));

    // The pacing pass captures loopback, which takes root; elsewhere a note says why it is
    // missing.
    if rustix::process::geteuid().is_root() {
        let paced: Vec<(&str, u64)> = pacing
            .iter()
            .map(|m| {
                let p = m.pacing.as_ref().unwrap_or_else(|| panic!("{m:?}"));
                (m.tool.as_str(), p.requests)
            })
            .collect();
        assert_eq!(
            paced.iter().map(|(tool, _)| *tool).collect::<Vec<_>>(),
            ["meshbench", "fortio", "oha"]
                .into_iter()
                .filter(|tool| ran(tool))
                .collect::<Vec<_>>(),
            "{:?}",
            report.notes
        );
        // One second at 5k rps: the requests the tool sent were seen on the wire (a capture
        // may drop a few packets under load; the figures are the gaps).
        for (m, (_, seen)) in pacing.iter().zip(&paced) {
            assert!(
                *seen as f64 >= 0.99 * m.requests as f64 && *seen > 2_000,
                "{} sent {} requests, {seen} on the wire",
                m.tool,
                m.requests
            );
        }
        assert!(md.contains("## Pacing on the wire"));
    } else {
        assert!(report.notes.iter().any(|n| n.starts_with("pacing-5k")));
    }
    report
}

/// The targets the report judged, by metric.
fn judged_targets(report: &BenchReport) -> Vec<&str> {
    report
        .ratios
        .iter()
        .filter(|r| r.target.is_some())
        .map(|r| r.metric.as_str())
        .collect()
}

#[test]
fn loadgen_bench_runs_meshbench_wrk_and_fortio_and_says_it_left_oha_out() {
    let _machine = machine();
    if ["wrk", "fortio", "tcpdump"]
        .iter()
        .any(|tool| require_tool(tool).is_none())
    {
        return;
    }
    // oha builds from crates.io in minutes: the fast suite leaves it out and the mesh suite
    // runs all four (below).
    let report = loadgen_bench(&["wrk", "fortio"], &["--without", "oha"]);
    assert_eq!(
        judged_targets(&report),
        ["client CPU us per request", "p50 us"]
    );
    assert!(
        report.notes.iter().any(|n| n.starts_with(
            "oha: left out (--without oha): not run, and nothing is compared with it; \
             the target against it (client CPU s per 100k requests <= 0.5x in fixed-5k) is not judged"
        )),
        "{:?}",
        report.notes
    );
}

#[test]
fn loadgen_bench_names_an_unknown_peer_and_the_way_to_leave_a_missing_one_out() {
    let out = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["bench", "loadgen", "--without", "ab"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'ab'") && stderr.contains("wrk, fortio, oha"),
        "{stderr}"
    );
    // No peer on PATH: the first one missing is named with both ways out.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["bench", "loadgen", "--duration", "1s", "--out"])
        .arg(dir.path())
        .env("PATH", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("wrk")
            && stderr.contains("or leave it out with `--without wrk`"),
        "{stderr}"
    );
}

#[test]
#[ignore = "mesh suite (scripts/test --cluster): oha, the fourth peer, builds from crates.io \
            in minutes; the fast suite runs the bench without it"]
fn loadgen_bench_runs_meshbench_wrk_fortio_and_oha_side_by_side() {
    let _machine = machine();
    if ["wrk", "fortio", "oha", "tcpdump"]
        .iter()
        .any(|tool| require_tool(tool).is_none())
    {
        return;
    }
    let report = loadgen_bench(&["wrk", "fortio", "oha"], &[]);
    assert_eq!(
        judged_targets(&report),
        [
            "client CPU us per request",
            "client CPU s per 100k requests",
            "p50 us"
        ]
    );
    // The report says what the evenly paced floor means for the target over oha.
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("fixed-5k: an evenly paced sender")),
        "{:?}",
        report.notes
    );
    assert!(!report.notes.iter().any(|n| n.contains("left out")));
}

/// `meshbench bench dataplane --planes <planes>`, one second a case and three rounds (the
/// fewest with an interval: rounds are its unit); its directory and report. Every plane ran
/// its cases in every round, every request got its 200 and every proxy's CPU and memory were
/// accounted.
fn dataplane_bench(planes: &[&str]) -> (tempfile::TempDir, BenchReport) {
    let (dir, report) = bench(
        "dataplane",
        "1s",
        "3",
        &["--open-connections", "50", "--planes", &planes.join(",")],
        "--proxy-cpu",
    );
    for plane in planes {
        let tool = match *plane {
            "direct" | "haproxy" | "envoy" | "haproxy-tcp" | "envoy-tcp" | "ztunnel-loop"
            | "linkerd2-proxy" => plane.to_string(),
            ours => format!("meshbench-{ours}"),
        };
        let cases: Vec<(u32, &str)> = report
            .measurements
            .iter()
            .filter(|m| m.tool == tool)
            .map(|m| (m.repetition.unwrap(), m.case.as_str()))
            .collect();
        let expected: Vec<(u32, &str)> = [1, 2, 3]
            .into_iter()
            .flat_map(|round| {
                let cases: &[&str] = if *plane == "direct" {
                    &["latency", "throughput"]
                } else {
                    &["latency", "throughput", "memory"]
                };
                cases.iter().map(move |&case| (round, case))
            })
            .collect();
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
    (dir, report)
}

/// The report's notes apart: (proofs, left-out ratios with their reasons). The noise notes
/// (loads the machine disturbed) say nothing of a ratio and come first, counted apart.
fn proofs_and_left_out(report: &BenchReport) -> (Vec<&String>, Vec<&String>) {
    let (proofs, notes): (Vec<_>, Vec<_>) =
        report.notes.iter().partition(|n| n.starts_with("proof: "));
    let (noise, left_out): (Vec<_>, Vec<_>) = notes
        .into_iter()
        .partition(|n| n.starts_with("noise: ") || n.starts_with("noisy: "));
    assert!(
        noise.is_empty() || noise[0].starts_with("noise: "),
        "{noise:#?}"
    );
    (proofs, left_out)
}

/// Every ratio's interval comes from its three rounds and lies around it; its verdict follows
/// from where the interval lies against its target. None where the peer's figure is not
/// clearly above zero (Fieller): those cannot be judged.
fn assert_ratios_judged_by_their_intervals(report: &BenchReport) {
    assert!(report.ratios.iter().all(|r| r.repetitions == Some(3)
        && r.theirs > 0.0
        && (r.ratio - r.ours / r.theirs).abs() < 1e-9));
    for r in &report.ratios {
        let interval = r.interval;
        if let Some(interval) = interval {
            assert!(
                interval.low <= r.ratio && r.ratio <= interval.high && interval.level == 0.95,
                "{r:?}"
            );
        }
        let Some(target) = r.target.as_deref() else {
            assert_eq!((r.verdict, r.met), (None, None), "{r:?}");
            continue;
        };
        let bound: f64 = target[3..].parse().unwrap();
        // Met when the whole interval is on the target's side, missed when it is wholly on
        // the other.
        let lower_better = target.starts_with("<=");
        let expected = match interval {
            None => TargetVerdict::Inconclusive,
            Some(i) if lower_better && i.high <= bound => TargetVerdict::Met,
            Some(i) if lower_better && i.low > bound => TargetVerdict::Missed,
            Some(i) if !lower_better && i.low >= bound => TargetVerdict::Met,
            Some(i) if !lower_better && i.high < bound => TargetVerdict::Missed,
            Some(_) => TargetVerdict::Inconclusive,
        };
        assert_eq!(r.verdict, Some(expected), "{r:?}");
        let met = match expected {
            TargetVerdict::Met => Some(true),
            TargetVerdict::Missed => Some(false),
            TargetVerdict::Inconclusive => None,
        };
        assert_eq!(r.met, met, "{r:?}");
    }
}

#[test]
fn dataplane_bench_runs_our_proxies_and_the_installed_peers_side_by_side() {
    let _machine = machine();
    if ["haproxy", "envoy"]
        .iter()
        .any(|tool| require_tool(tool).is_none())
    {
        return;
    }
    let planes = [
        "direct",
        "sidecar-l4",
        "sidecar-l7",
        "node-agent",
        "node-agent-loop",
        "haproxy",
        "envoy",
        "haproxy-tcp",
        "envoy-tcp",
    ];
    let (_dir, report) = dataplane_bench(&planes);
    // The L4 sidecar against four peers (the HTTP and the TCP proxies), the other three of
    // ours against the two HTTP proxies, and the two node agents against their floor (the L4
    // sidecar pair), five figures each: compared, or left out with the reason (a peer whose
    // median added latency is not above direct's).
    let (proofs, left_out) = proofs_and_left_out(&report);
    assert!(proofs.is_empty(), "{proofs:#?}");
    assert_eq!(
        report.ratios.len() + left_out.len(),
        (4 + 3 * 2 + 2) * 5,
        "{left_out:#?}"
    );
    assert!(report
        .ratios
        .iter()
        .filter(|r| r.peer != "meshbench-sidecar-l4")
        .all(|r| r.target.is_some()));
    for peer in ["haproxy-tcp", "envoy-tcp"] {
        assert!(
            report
                .ratios
                .iter()
                .filter(|r| r.peer == peer)
                .all(|r| r.case == "meshbench-sidecar-l4"),
            "{:?}",
            report.ratios
        );
    }
    // Memory, one reading a round, has an interval too.
    assert!(report
        .ratios
        .iter()
        .any(|r| r.metric.starts_with("proxy memory") && r.interval.is_some()));
    assert_ratios_judged_by_their_intervals(&report);
    // The floor's targets are the issue's: the loop's p99 and CPU, the pair's throughput.
    let floor_targets: Vec<(&str, &str, Option<&str>)> = report
        .ratios
        .iter()
        .filter(|r| r.peer == "meshbench-sidecar-l4" && r.target.is_some())
        .map(|r| (r.case.as_str(), r.metric.as_str(), r.target.as_deref()))
        .collect();
    for expected in [
        (
            "meshbench-node-agent-loop",
            "proxy CPU s per 100k requests",
            Some("<= 1.1"),
        ),
        (
            "meshbench-node-agent",
            "throughput as a fraction of direct",
            Some(">= 1"),
        ),
    ] {
        assert!(floor_targets.contains(&expected), "{floor_targets:?}");
    }
}

/// The peers built from their pinned sources (about 70 minutes the first time, cached), hence
/// the mesh suite.
#[test]
#[ignore = "mesh suite (scripts/test --cluster): ztunnel and linkerd2-proxy come from \
            scripts/ztunnel-build and scripts/linkerd-build"]
fn dataplane_bench_runs_ztunnel_and_linkerd2_proxy_beside_ours() {
    let _machine = machine();
    if ["ztunnel", "linkerd2-proxy"]
        .iter()
        .any(|tool| require_tool(tool).is_none())
        || !meshbench_testkit::require_root(
            "ztunnel-loop and linkerd2-proxy run in network namespaces of their own",
        )
    {
        return;
    }
    let planes = [
        "direct",
        "sidecar-l4",
        "sidecar-l7",
        "node-agent-loop",
        "ztunnel-loop",
        "linkerd2-proxy",
    ];
    let (dir, report) = dataplane_bench(&planes);
    // Both sidecars against linkerd2-proxy, the looping node agent against the looping
    // ztunnel and against its floor (the L4 sidecar pair), five figures each.
    let (proofs, left_out) = proofs_and_left_out(&report);
    assert_eq!(
        report.ratios.len() + left_out.len(),
        (2 + 1 + 1) * 5,
        "{left_out:#?}"
    );
    assert!(report
        .ratios
        .iter()
        .filter(|r| r.peer == "linkerd2-proxy")
        .all(|r| r.case == "meshbench-sidecar-l7" || r.case == "meshbench-sidecar-l4"));
    // linkerd2-proxy's pair carried the latency case over mesh TLS between the identities
    // meshbench's harness certified, by the proxies' own metrics (kept beside the logs), and
    // its requests were all authorized by the inbound policy.
    let client_id = "client.bench.serviceaccount.identity.linkerd.cluster.local";
    assert!(
        proofs.len() == 1
            && proofs[0].starts_with("proof: round ")
            && proofs[0].contains(&format!("all over TLS from {client_id}"))
            && proofs[0].contains("(0 denied)"),
        "{proofs:#?}"
    );
    let server_metrics =
        std::fs::read_to_string(dir.path().join("raw/linkerd2-proxy/server.metrics.txt")).unwrap();
    assert!(
        server_metrics
            .lines()
            .any(|l| l.starts_with("tcp_open_total{")
                && l.contains(r#"direction="inbound""#)
                && l.contains(r#"tls="true""#)
                && l.contains(&format!(r#"client_id="{client_id}""#))),
        "{server_metrics}"
    );
    assert!(report
        .ratios
        .iter()
        .filter(|r| r.peer == "ztunnel-loop")
        .all(|r| r.case == "meshbench-node-agent-loop" && r.target.is_some()));
    // Every request of ztunnel's cases crossed it over HBONE with the SVID meshbench's CA
    // issued through Istio's certificate API: its access log says so, per connection.
    let ztunnel_log =
        std::fs::read_to_string(dir.path().join("raw/ztunnel-loop/ztunnel.stdout.log")).unwrap();
    let identity = "spiffe://cluster.local/ns/bench/sa/server";
    let tunneled: Vec<&str> = ztunnel_log
        .lines()
        .filter(|l| l.contains("connection complete") && l.contains("dst.addr=127.0.0.1:15008"))
        .collect();
    assert!(
        tunneled
            .iter()
            .any(|l| l.contains(r#"direction="outbound""#))
            && tunneled
                .iter()
                .any(|l| l.contains(r#"direction="inbound""#))
            && tunneled
                .iter()
                .all(|l| l.contains(&format!(r#"src.identity="{identity}""#))
                    && l.contains(&format!(r#"dst.identity="{identity}""#))),
        "{ztunnel_log}"
    );
    assert_ratios_judged_by_their_intervals(&report);
}
