//! The meshbench binary as a user runs it: bad input gets one clear line and exit code 2;
//! `run` produces results and reports; Ctrl-C keeps finished cells and leaves no process.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use meshbench_results::{read_json, RunResult, RunStatus};
use meshbench_testkit::{assert_success, run_ok, wait_for};

fn meshbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_meshbench"))
}

fn run(args: &[&str]) -> Output {
    meshbench().args(args).output().unwrap()
}

fn assert_bad_input(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
}

/// Built without the Kubernetes backend (the default build), every cluster command says so,
/// with the build that has it, before it touches anything. `./scripts/test` builds with the
/// backend; this runs under `cargo test -p meshbench --test cli` without features.
#[cfg(not(feature = "kubernetes"))]
#[test]
fn cluster_commands_say_the_backend_is_not_built_in() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    for command in [
        vec![
            "run",
            "--backend",
            "kubernetes",
            "--profile",
            "smoke",
            "--out",
            out,
        ],
        vec!["verify", "--backend", "kubernetes", "--out", out],
        vec!["mesh", "detect"],
        vec!["mesh", "check", "--mesh", "linkerd"],
        vec!["lab", "clean", "--kubernetes"],
        vec!["serve", "--kubeconfig", "/nonexistent", "--results", out],
    ] {
        let output = run(&command);
        assert_bad_input(&output, "built without the Kubernetes backend");
        assert_bad_input(&output, "--features kubernetes");
    }
    assert!(
        !dir.path().join("out").exists(),
        "a refused command wrote {out}"
    );
}

#[test]
fn bad_input_is_named_and_exits_with_code_2() {
    // Each command line, split at spaces, and what its error must say.
    let bad = |command: &str, needle: &str| {
        let args: Vec<&str> = command.split_whitespace().collect();
        assert_bad_input(&run(&args), needle);
    };
    bad("run --profile nope", "unknown profile \"nope\"");
    bad(
        "verify --mesh meshbench-sidecar --policy /nonexistent/policy.yaml",
        "--policy: cannot read /nonexistent/policy.yaml",
    );
    bad(
        "verify --mesh meshbench-sidecar --policy Cargo.toml",
        "--policy: Cargo.toml is not a valid policy",
    );
    bad(
        "run --profile meshes --scenarios istio",
        "--scenarios: the profile has no \"istio\"",
    );
    bad(
        "run --profile mtls-architectures --rates 400,3200",
        "--rates: the profile has no \"3200 rps\"; it has: 40 rps, 400 rps, 1600 rps",
    );
    bad(
        "run --profile smoke --backend loopback --verify",
        "--verify: verification needs the netns backend",
    );
    bad(
        "run --profile smoke --backend netns --scenarios baseline --verify",
        "--verify: none of this run's scenarios (baseline) can be verified",
    );
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("mine.yaml");
    let builtin = run(&["profiles", "show", "sustained"]);
    assert_success(&builtin);
    let text = String::from_utf8(builtin.stdout).unwrap();
    let run_spec = format!("run --spec {}", spec.display());
    std::fs::write(&spec, text.replacen("- { rps: 200,", "- { rps: fast,", 1)).unwrap();
    bad(&run_spec, "mine.yaml: load.points[1].rps");
    let five = text.replace(
        "drop_highest_baseline_max: 2",
        "drop_highest_baseline_max: 5",
    );
    std::fs::write(&spec, five).unwrap();
    bad(
        &run_spec,
        "outliers.drop_highest_baseline_max: dropping 5 of 5 repetitions",
    );
    // Rounds until decided: the rule is checked field by field, in a spec and on the command line.
    let until = |rule: &str| {
        let minimal = format!(
            "name: t\nscenarios: [baseline]\nload: {{model: constant-rate, points: [{{rps: 10, connections: 2}}]}}\nduration: 1s\nrepetitions: {rule}\n"
        );
        std::fs::write(&spec, minimal).unwrap();
    };
    until("{until: forever, max: 5}");
    bad(&run_spec, "repetitions.until: expected `decided`");
    until("{until: decided}");
    bad(&run_spec, "repetitions.max: the most rounds is required");
    until("{until: decided, max: 1}");
    bad(
        &run_spec,
        "repetitions.max: 1 is not a whole number between 2",
    );
    until("{until: decided, max: 4, budget: soon}");
    bad(&run_spec, "repetitions.budget");
    until("{until: decided, max: 4, every: 2}");
    bad(&run_spec, "repetitions.every: unknown field");
    bad(
        "run --profile smoke --until-decided --max-rounds 1",
        "--max-rounds: 1 is not between 2",
    );
    bad("run --profile smoke --max-rounds 4", "--until-decided");
    bad(
        "run --profile capacity --until-decided",
        "--until-decided: the capacity model's searches end on their own",
    );
    let url = "--url http://127.0.0.1:9/";
    bad(&format!("load {url} --rps 10 --duration 10x"), "--duration");
    bad(&format!("load {url}"), "--rps is required by --model open");
    bad(&format!("load {url} --rps -5"), "--rps");
    bad(
        "load --url gopher://127.0.0.1:9/ --rps 10",
        "scheme must be http or https",
    );
    bad(
        "load --grpc --url http://127.0.0.1:9/my.Service/Call --payload-size 1KiB --rps 10",
        "--payload-size builds Fortio's ping message",
    );
    bad(
        "workload echo --listen 127.0.0.1:0 --tls-cert /nonexistent/cert.pem --tls-key /nonexistent/key.pem",
        "/nonexistent/cert.pem",
    );
    let exchange = "wire exchange --sidecar 127.0.0.1:9 --ca /nonexistent/ca.pem";
    let calculator = "spiffe://cluster.local/ns/app/sa/calculator";
    bad(
        &format!("{exchange} --expect-server-id calculator"),
        "--expect-server-id \"calculator\"",
    );
    bad(
        &format!("{exchange} --expect-server-id {calculator} --header x-forged"),
        "--header \"x-forged\": expected `name: value`",
    );
    bad(
        &format!("{exchange} --expect-server-id {calculator}"),
        "/nonexistent/ca.pem",
    );
    // Neither touches a lab or a cluster: both are refused before.
    bad(
        "lab clean --backend kubernetes --lab mine",
        "--lab names a local lab; it cannot go with --backend kubernetes",
    );
    bad("lab clean --backend nomad", "unknown backend \"nomad\"");
    bad("mesh render --mesh nope", "--mesh \"nope\": unknown mesh");
    bad(
        "mesh render --mesh meshbench-sidecar",
        "--mesh meshbench-sidecar: not a mesh a cluster runs",
    );
    bad(
        "mesh render --mesh istio --application nope",
        "--application \"nope\": unknown",
    );
    bad(
        "mesh render --mesh istio --policy /nonexistent/policy.yaml",
        "/nonexistent/policy.yaml",
    );
}

#[test]
fn mesh_render_prints_what_a_cluster_running_the_mesh_would_get() {
    let output = run(&["mesh", "render", "--mesh", "istio"]);
    assert_success(&output);
    let yaml = String::from_utf8(output.stdout).unwrap();
    // E3's policy, as Istio's own resources, and the label that enrolls the pods.
    assert!(yaml.contains("kind: AuthorizationPolicy"), "{yaml}");
    assert!(
        yaml.contains("- cluster.local/ns/app/sa/experimenter"),
        "{yaml}"
    );
    assert!(
        yaml.contains("# pod labels of calculator: sidecar.istio.io/inject=true"),
        "{yaml}"
    );
    // What a verification must expect of Istio, said up front.
    assert!(
        yaml.contains("# documented: Istio's sidecar hides some denials as connection resets"),
        "{yaml}"
    );
    let cilium = run(&["mesh", "render", "--mesh", "cilium"]);
    assert_success(&cilium);
    let cilium = String::from_utf8(cilium.stdout).unwrap();
    assert!(
        cilium.contains("same-node traffic NOT encrypted"),
        "{cilium}"
    );
    // Every document parses as YAML with a kind and a name.
    for doc in yaml.split("\n---\n").skip(1) {
        let value: serde_json::Value = serde_yaml_ng::from_str(doc).unwrap();
        assert!(
            value["kind"].is_string() && value["metadata"]["name"].is_string(),
            "{doc}"
        );
    }
}

#[test]
fn a_port_already_in_use_is_reported_with_exit_code_2() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = run(&["workload", "echo", "--listen", &addr]);
    assert_bad_input(&output, &format!("cannot listen on {addr}"));
}

#[test]
fn ca_commands_issue_usable_svids() {
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("ca");
    let ca = ca_dir.to_str().unwrap();
    let out = run(&["ca", "init", "--dir", ca, "--trust-domain", "lab.test"]);
    assert_success(&out);
    let out = run(&["ca", "issue", "--dir", ca, "--ns", "shop", "--sa", "cart"]);
    assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("spiffe://lab.test/ns/shop/sa/cart"));
    assert!(ca_dir.join("shop.cart.pem").exists() && ca_dir.join("shop.cart.key").exists());
    // A second init must not clobber the CA.
    assert_bad_input(&run(&["ca", "init", "--dir", ca]), "already exists");
}

fn check_complete_run(dir: &Path, result: &RunResult) {
    assert_eq!(result.status, RunStatus::Complete);
    assert_eq!(result.cells.len(), 6, "3 scenarios x 2 load points");
    assert_eq!(result.environment.build_profile, "debug");
    for cell in &result.cells {
        let requested = cell.load_point.rps;
        let achieved = cell.load.achieved_rps;
        assert!(
            (achieved - requested).abs() / requested < 0.02,
            "{} at {requested}: achieved {achieved}",
            cell.scenario
        );
        assert_eq!(cell.load.outcomes.get("http_200"), Some(&cell.load.sent));
        let mut components: Vec<&str> = cell
            .resources
            .iter()
            .map(|r| r.component.as_str())
            .collect();
        components.sort();
        if cell.scenario == "meshbench-sidecar" {
            assert_eq!(
                components,
                [
                    "ca",
                    "echo-server-1",
                    "echo-server-1-sidecar",
                    "load-generator-1",
                    "load-generator-1-sidecar"
                ]
            );
            // E5's handshake time, from each sidecar's own histogram: the client's sidecar
            // opened one mTLS connection per load-generator connection, the server's
            // accepted them.
            let handshakes = |direction: &str| {
                cell.handshakes
                    .iter()
                    .find(|h| h.direction == direction)
                    .unwrap_or_else(|| panic!("no {direction} handshakes: {:?}", cell.handshakes))
            };
            let connections = u64::from(cell.load_point.connections);
            assert!(handshakes("outbound").count >= connections);
            assert_eq!(handshakes("outbound").component, "load-generator-1-sidecar");
            assert!(handshakes("inbound").count >= connections);
            assert!(handshakes("inbound").mean_ms > 0.0);
        } else {
            assert_eq!(components, ["echo-server-1", "load-generator-1"]);
            assert!(cell.handshakes.is_empty(), "{:?}", cell.handshakes);
        }
        for r in &cell.resources {
            assert!(r.samples >= 5, "{r:?}");
            assert!(r.rss_mib_max > 0.0, "{r:?}");
            // The CA idles while no certificate is due; everything else carries traffic.
            if r.role != "control-plane" {
                assert!(r.cpu_cores_mean > 0.0, "{r:?}");
            }
        }
    }
    let mtls = &result.config.scenarios[1];
    assert_eq!(mtls.name, "baseline-mtls");
    assert_ne!(
        mtls.client_identity, mtls.server_identity,
        "distinct identities"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("Overhead relative to baseline")
            && md.contains("| baseline-mtls (intra-node) |")
    );
    assert!(
        md.contains("| meshbench-sidecar (intra-node) |") && md.contains("Resources by component")
    );
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<table>") && !html.contains("<script"));
    assert!(html.contains("<figcaption>p99 latency against requested rate"));
    assert!(html.contains("<figcaption>Latency CDF"));
    let figures = std::fs::read_to_string(dir.join("figures.csv")).unwrap();
    assert_eq!(figures.lines().count(), 1 + result.cells.len(), "{figures}");
}

#[test]
fn without_namespaces_recording_relays_stand_for_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("wire.yaml");
    std::fs::write(
        &spec,
        "name: wire\nscenarios: [baseline, meshbench-sidecar]\nplacements: [inter-node]\n\
         load: {model: constant-rate, points: [{rps: 50, connections: 2}]}\n\
         duration: 1s\nwarmup: 0s\n",
    )
    .unwrap();
    let out_dir = dir.path().join("run");
    run_ok(
        meshbench()
            .args(["run", "--backend", "loopback", "--capture-link", "--spec"])
            .arg(&spec)
            .arg("--out")
            .arg(&out_dir),
    );
    let result: RunResult = read_json(&out_dir.join("results.json")).unwrap();
    let wire = |scenario: &str| {
        result
            .cells
            .iter()
            .find(|c| c.scenario == scenario)
            .and_then(|c| c.wire.clone())
            .unwrap_or_else(|| panic!("{scenario}: no wire observation"))
    };
    let plain = wire("baseline");
    assert!(plain.marker_seen && plain.tls_connections == 0, "{plain:?}");
    let meshed = wire("meshbench-sidecar");
    assert!(
        !meshed.marker_seen
            && meshed.connections >= 1
            && meshed.tls_connections == meshed.connections,
        "{meshed:?}"
    );
    assert_eq!(meshed.tls_versions, ["TLSv1.3"]);
    assert!(meshed.link.contains("recording relays"));
}

#[test]
fn run_writes_results_and_reports_then_report_regenerates_them() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    // The unprivileged backend; tests/lab.rs runs the netns one.
    let out = run_ok(
        meshbench()
            .args([
                "run",
                "--profile",
                "smoke",
                "--backend",
                "loopback",
                "--out",
            ])
            .arg(&out_dir),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Overhead relative to baseline"));
    let result: RunResult = read_json(&out_dir.join("results.json")).unwrap();
    check_complete_run(&out_dir, &result);

    std::fs::remove_file(out_dir.join("report.md")).unwrap();
    let out = meshbench().arg("report").arg(&out_dir).output().unwrap();
    assert!(out.status.success());
    assert!(out_dir.join("report.md").exists());

    let stdout =
        |output: std::process::Output| String::from_utf8_lossy(&output.stdout).into_owned();
    let text = stdout(run_ok(
        meshbench().arg("compare").arg(&out_dir).arg(&out_dir),
    ));
    assert!(text.contains("Latency, B against A"), "{text}");
    let text = stdout(run_ok(meshbench().arg("cost").arg(&out_dir).args([
        "--pods",
        "100",
        "--cpu-price",
        "30",
        "--mem-price",
        "4",
    ])));
    assert!(text.contains("| meshbench-sidecar |"), "{text}");
    assert!(text.contains("difference to baseline"), "{text}");

    // The same directory is never overwritten.
    let again = meshbench()
        .args(["run", "--profile", "smoke", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_bad_input(&again, "already holds a run's results");
}

/// PIDs of live processes whose environment carries `tag`.
fn processes_tagged(tag: &str) -> Vec<u32> {
    let needle = format!("MESHBENCH_TEST_TAG={tag}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = state
                .rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'));
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            !zombie && env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes())
        })
        .collect()
}

#[test]
fn ctrl_c_keeps_finished_cells_marks_the_run_partial_and_stops_every_child() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let tag = format!("ctrl-c-{}", std::process::id());
    let mut child = meshbench()
        .args(["run", "--profile", "smoke", "--out"])
        .arg(&out_dir)
        .env("MESHBENCH_TEST_TAG", &tag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let results = out_dir.join("results.json");
    wait_for("the first finished cell", Duration::from_secs(60), || {
        let r: RunResult = read_json(&results).ok()?;
        (!r.cells.is_empty()).then_some(())
    });
    // The run is now inside a later cell, with a server and a load generator running.
    wait_for(
        "lab processes of the next cell",
        Duration::from_secs(20),
        || (processes_tagged(&tag).len() >= 3).then_some(()),
    );
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));

    let result: RunResult = read_json(&results).unwrap();
    assert_eq!(result.status, RunStatus::Partial);
    assert_eq!(result.status_reason.as_deref(), Some("interrupted"));
    assert!(!result.cells.is_empty() && result.cells.len() < 6);
    assert!(
        out_dir.join("report.md").exists(),
        "reports of the finished cells"
    );
    wait_for("every lab process to exit", Duration::from_secs(10), || {
        processes_tagged(&tag).is_empty().then_some(())
    });

    // Resuming runs only the missing cells and keeps the finished ones as they were.
    run_ok(meshbench().args(["run", "--resume"]).arg(&out_dir));
    let complete: RunResult = read_json(&results).unwrap();
    assert_eq!(complete.status, RunStatus::Complete);
    assert_eq!(complete.cells.len(), 6);
    assert_eq!(complete.cells[..result.cells.len()], result.cells[..]);
    let mut keys: Vec<_> = complete
        .cells
        .iter()
        .map(|c| (c.scenario.clone(), c.load_point.connections, c.repetition))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 6, "every cell exactly once");
    let again = meshbench()
        .args(["run", "--resume"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_bad_input(&again, "the run is complete");
}

/// The PID of the live process tagged `tag` whose command line mentions `needle`.
fn tagged_process_running(tag: &str, needle: &str) -> Option<u32> {
    processes_tagged(tag).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
    })
}

#[test]
fn a_sidecar_killed_mid_cell_is_recorded_in_its_cell_and_named_by_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let tag = format!("sidecar-kill-{}", std::process::id());
    let mut child = meshbench()
        .args([
            "run",
            "--profile",
            "smoke",
            "--scenarios",
            "meshbench-sidecar",
        ])
        .args(["--duration", "4s", "--out"])
        .arg(&out_dir)
        .env("MESHBENCH_TEST_TAG", &tag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The first cell's load window has begun (its generator wrote a second of it): the
    // server's sidecar is carrying the load.
    let cells = out_dir.join("cells");
    let sidecar = wait_for(
        "the first cell's load window",
        Duration::from_secs(60),
        || {
            let first = std::fs::read_dir(&cells)
                .ok()?
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with("001-"))?;
            let live = std::fs::metadata(first.path().join("live.jsonl")).ok()?;
            (live.len() > 0).then_some(())?;
            tagged_process_running(&tag, "echo-server-1-sidecar.yaml")
        },
    );
    let killed_at = std::time::SystemTime::now();
    let pid = rustix::process::Pid::from_raw(sidecar as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    assert!(
        child.wait().unwrap().success(),
        "the run goes on to its end"
    );

    let result: RunResult = read_json(&out_dir.join("results.json")).unwrap();
    assert_eq!(result.status, RunStatus::Complete);
    assert_eq!(result.cells.len(), 2, "both cells kept");
    let died = &result.cells[0].disruptions;
    assert_eq!(died.len(), 1, "{died:?}");
    let d = &died[0];
    assert_eq!(
        (d.component.as_str(), d.role.as_str(), d.kind.as_str()),
        ("echo-server-1-sidecar", "sidecar", "exited")
    );
    assert!(d.reason.contains("SIGKILL"), "{d:?}");
    let into = d.into_window_secs.expect("placed in the window");
    assert!((0.0..4.0).contains(&into), "{d:?}");
    let at = humantime::parse_rfc3339(&d.at).unwrap();
    let off = at
        .duration_since(killed_at)
        .unwrap_or_else(|e| e.duration());
    assert!(off < Duration::from_secs(1), "dated when it died: {d:?}");
    // The load saw it; the second cell, with a sidecar of its own, did not.
    let failed = |cell: &meshbench_results::Cell| -> u64 {
        let outcomes = &cell.load.outcomes;
        outcomes
            .iter()
            .filter(|(outcome, _)| !meshbench_results::is_success_outcome(outcome))
            .map(|(_, n)| n)
            .sum()
    };
    assert!(failed(&result.cells[0]) > 0, "{:?}", result.cells[0].load);
    assert!(result.cells[1].disruptions.is_empty());

    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        report.contains("Disruptions: components that died")
            && report.contains("echo-server-1-sidecar (sidecar)")
            && report.contains("SIGKILL"),
        "{report}"
    );
    wait_for("every lab process to exit", Duration::from_secs(10), || {
        processes_tagged(&tag).is_empty().then_some(())
    });
}

#[test]
fn role_config_files_are_checked_field_by_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("role.yaml");
    let path = config.to_str().unwrap();
    const SIDECAR: &[&str] = &["proxy", "sidecar"];
    const CA: &[&str] = &["ca", "serve"];
    const LOAD: &[&str] = &["load"];
    let app = "namespace: app\nworkload: w\n";
    let inbound = "inbound: { listen: 127.0.0.1:0, app: 127.0.0.1:9 }\n";
    let load = "url: http://127.0.0.1:9/\nmodel: {kind: open-loop, rps: 10}\n";
    let cases = [
        (
            SIDECAR,
            format!("{app}limits: {{ idle_timeout: 0s }}\n"),
            "limits.idle_timeout: must be longer than 0",
        ),
        (
            SIDECAR,
            format!("{app}inbound: {{ listen: 127.0.0.1:0, app: 127.0.0.1:9, colour: red }}\n"),
            "colour",
        ),
        (
            SIDECAR,
            format!("{app}policy: missing.yaml\n{inbound}"),
            "policy: cannot read policy",
        ),
        // The CA service reads one the same way.
        (
            CA,
            "dir: ca\nlisten: 127.0.0.1:0\nhandshake_timeout: 0s\n".into(),
            "handshake_timeout",
        ),
        (CA, "dir: ca\nlisten: 127.0.0.1:0\n".into(), "holds no CA"),
        // So does the load generator, whose spec the lab writes for every cell.
        (LOAD, format!("{load}rate: 3\n"), "rate"),
        (
            LOAD,
            "url: http://127.0.0.1:9/\nmodel: {kind: bursty}\n".into(),
            "bursty",
        ),
        (
            LOAD,
            format!("{load}protocol: http3\n"),
            "unknown protocol \"http3\"",
        ),
    ];
    for (role, yaml, expected) in cases {
        std::fs::write(&config, yaml).unwrap();
        let args: Vec<&str> = role.iter().copied().chain(["--config", path]).collect();
        assert_bad_input(&run(&args), expected);
    }
    // The same check through the flags names the flag.
    assert_bad_input(
        &run(&[
            "proxy",
            "sidecar",
            "--namespace",
            "app",
            "--workload",
            "w",
            "--policy",
            dir.path().join("missing.yaml").to_str().unwrap(),
            "--inbound",
            "127.0.0.1:0=127.0.0.1:9",
            "--no-mtls",
        ]),
        "--policy: cannot read policy",
    );
    // A file is the whole configuration.
    assert_bad_input(
        &run(&["proxy", "sidecar", "--config", path, "--mode", "l7"]),
        "cannot be used with",
    );
    assert_bad_input(
        &run(&["load", "--config", path, "--rps", "5"]),
        "cannot be used with",
    );
}

#[test]
fn doctor_says_what_runs_here_and_how_to_get_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let no_cluster = dir.path().join("no-such-kubeconfig");
    let output = meshbench()
        .args(["doctor", "--kubeconfig"])
        .arg(&no_cluster)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for section in [
        "local lab\n",
        "data planes of the local lab\n",
        "benchmark peers (",
        "cluster (",
        "web UI tests\n",
    ] {
        assert!(stdout.contains(section), "{section:?} missing: {stdout}");
    }
    // Every line says what is ready, or what is missing and how to get it.
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}: {stdout}"))
            .to_owned()
    };
    let netns = line("netns lab");
    assert!(
        netns.contains("ready:")
            || netns.contains("needs root")
            || netns.contains("install it with"),
        "{netns}"
    );
    for plane in [
        "baseline",
        "meshbench-sidecar",
        "envoy-sidecar",
        "consul-connect",
    ] {
        let plane = line(plane);
        assert!(
            plane.contains("ready:") || plane.contains("install it with"),
            "{plane}"
        );
    }
    // linkerd2-proxy is found where its build script caches it, off PATH too.
    let linkerd = line("linkerd2-proxy");
    assert!(
        linkerd.contains("ready:") || linkerd.contains("./scripts/linkerd-build"),
        "{linkerd}"
    );
    for binary in ["chromium", "chromedriver"] {
        let binary = line(binary);
        assert!(
            binary.contains("ready:") || binary.contains("apt-get install"),
            "{binary}"
        );
    }
    if cfg!(feature = "kubernetes") {
        // A kubeconfig that cannot be read is named, with why.
        let cluster = line(&no_cluster.display().to_string());
        assert!(
            cluster.contains("unreachable:") && cluster.contains("no-such-kubeconfig"),
            "{cluster}"
        );
    } else {
        // Built without the backend: said, with the build that has it.
        let backend = line("backend");
        assert!(
            backend.contains("not built in") && backend.contains("--features kubernetes"),
            "{backend}"
        );
    }
    assert!(stdout.contains("on a cluster only: "), "{stdout}");
}

#[test]
fn a_relative_out_directory_is_where_the_results_go() {
    // The default `meshbench run` writes under ./meshbench-results: the components, which
    // read their configs elsewhere, must still write their results there.
    let cwd = tempfile::tempdir().unwrap();
    run_ok(
        meshbench()
            .current_dir(cwd.path())
            .args(["run", "--profile", "smoke", "--backend", "loopback"])
            .args([
                "--scenarios",
                "baseline",
                "--duration",
                "1s",
                "--warmup",
                "0s",
            ])
            .args(["--out", "relative/run"]),
    );
    let result: RunResult = read_json(&cwd.path().join("relative/run/results.json")).unwrap();
    assert_eq!(result.status, RunStatus::Complete);
    assert!(result.cells.iter().all(|c| c.load.sent > 0));
}

#[test]
fn the_generator_waits_for_a_target_that_answers_late_and_gives_up_on_one_that_never_does() {
    use std::io::{BufRead, BufReader};
    // A port nothing answers on until the server below takes it over.
    let closed = meshbench_testkit::ClosedPort::new();
    let port = closed.addr.port();
    let url = format!("http://127.0.0.1:{port}/");
    let load = |wait: &str| {
        let mut command = meshbench();
        command.args([
            "load",
            "--url",
            &url,
            "--rps",
            "50",
            "--duration",
            "1s",
            "--wait-for-target",
            wait,
        ]);
        command
    };

    let output = load("1s").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no HTTP response within wait_for_target (1s)")
            && stderr.contains("connect_refused"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("load.json");
    let mut generator = load("60s")
        .arg("--json")
        .arg(&json)
        .env("MESHBENCH_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The server starts only once the generator has found the target silent.
    let mut lines = BufReader::new(generator.stderr.take().unwrap()).lines();
    wait_for("a probe refused", Duration::from_secs(30), || {
        lines
            .next()?
            .ok()?
            .contains("the target does not answer yet")
            .then_some(())
    });
    std::thread::spawn(move || for _ in lines {});
    drop(closed);
    let mut server = meshbench()
        .args(["workload", "echo", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let status = generator.wait().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(status.success());
    let report: meshbench_results::LoadReport = read_json(&json).unwrap();
    assert_eq!(
        report.outcomes.keys().collect::<Vec<_>>(),
        ["http_200"],
        "the probes are not measured: {:?}",
        report.outcomes
    );
    assert!(report.achieved_rps > 40.0, "{}", report.achieved_rps);
}

#[test]
fn bench_coverage_wants_two_bench_reports_and_names_a_file_that_is_not_one() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("bench.json");
    std::fs::write(&junk, "{\"not\": \"a bench\"}").unwrap();
    let junk = junk.to_str().unwrap();
    assert_bad_input(&run(&["bench", "coverage", junk]), "<RUNS>");
    assert_bad_input(&run(&["bench", "coverage", junk, junk]), junk);
    let harness = dir.path().join("harness.yaml");
    std::fs::write(&harness, "dir: pki\nlisten: 127.0.0.1:0\nworkloads: []\n").unwrap();
    assert_bad_input(
        &run(&["harness", "linkerd", "--config", harness.to_str().unwrap()]),
        "workloads",
    );
}
