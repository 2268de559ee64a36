//! The studies' own applications as a run's workload, on the netns lab: E3's experimenter
//! measuring the calculator through the mesh (its every RTT kept in E3's format), and E4's
//! counter chain driven by concurrent users, where every hop crosses the mesh and is
//! authorized. Small specs, so the test takes seconds; the built-in profiles are the same
//! shape at a larger size.

use std::process::Command;

use meshbench_results::{read_json, Cell, RunResult, RunStatus};
use meshbench_testkit::run_ok;

fn required_tools_present() -> bool {
    meshbench_testkit::require_netns()
        && ["setpriv", "taskset", "iptables"]
            .iter()
            .all(|tool| meshbench_testkit::require_tool(tool).is_some())
}

/// Runs `spec` on the netns lab; its directory and complete results, or `None` (having said
/// why) where the machine lacks what the lab needs.
fn run_spec(spec: &str) -> Option<(tempfile::TempDir, RunResult)> {
    if !required_tools_present() {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let path = dir.join("spec.yaml");
    std::fs::write(&path, spec).unwrap();
    let out = dir.join("out");
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(["run", "--backend", "netns", "--spec"])
            .arg(&path)
            .arg("--out")
            .arg(&out),
    );
    let result: RunResult = read_json(&out.join("results.json")).unwrap();
    assert_eq!(result.status, RunStatus::Complete);
    Some((tmp, result))
}

/// The cell sent `requests` and every one was answered 200.
fn assert_all_answered(cell: &Cell, requests: u64) {
    assert_eq!(cell.load.sent, requests, "{}", cell.scenario);
    let outcomes = &cell.load.outcomes;
    assert_eq!(outcomes.get("http_200"), Some(&requests), "{outcomes:?}");
}

#[test]
fn the_experimenter_measures_the_calculator_through_the_mesh_and_keeps_every_rtt() {
    let Some((dir, result)) = run_spec(
        "name: e3\napplication: zero-trust-app\nscenarios: [baseline, meshbench-sidecar]\n\
         placements: [inter-node]\nload:\n  model: sequential\n  points:\n    \
         - { requests: 45, group_size: 10, group_interval: 5ms, max_operand: 10000000000000000 }\n",
    ) else {
        return;
    };
    assert_eq!(result.config.application, "zero-trust-app");
    assert_eq!(result.cells.len(), 2);
    for (i, cell) in result.cells.iter().enumerate() {
        // E3 discards the first request: 44 measured, every one answered by the calculator.
        assert_all_answered(cell, 44);
        assert!(cell.load.latency.p50_us > 0, "{}", cell.scenario);
        let experiment: serde_json::Value = read_json(
            &dir.path()
                .join("out/cells")
                .join(format!(
                    "{:03}-{}-inter-node-0rps-1c-rep1",
                    i + 1,
                    cell.scenario
                ))
                .join("experiment.json"),
        )
        .unwrap();
        assert_eq!(
            experiment["rttsInMilliseconds"].as_array().unwrap().len(),
            44
        );
        assert_eq!(
            experiment["workload"]["maxOperand"],
            10_000_000_000_000_000u64
        );
        // The experimenter is the client side, the calculator the server side.
        let roles: Vec<(&str, &str)> = cell
            .resources
            .iter()
            .map(|r| (r.component.as_str(), r.role.as_str()))
            .collect();
        assert!(
            roles.contains(&("experimenter-1", "load-generator")),
            "{roles:?}"
        );
        assert!(roles.contains(&("calculator-1", "app")), "{roles:?}");
    }
    let sidecar = &result.cells[1];
    assert_eq!(sidecar.scenario, "meshbench-sidecar");
    assert!(sidecar
        .resources
        .iter()
        .any(|r| r.component == "calculator-1-sidecar" && r.cpu_cores_mean > 0.0));
}

#[test]
fn the_counter_chain_crosses_the_mesh_on_every_hop_for_every_user() {
    let Some((_dir, result)) = run_spec(
        "name: e4\napplication: counter-chain\nscenarios: [baseline, meshbench-sidecar]\n\
         placements: [inter-node]\nload:\n  model: users\n  points:\n    \
         - { users: 3, requests: 4, services: 5 }\n",
    ) else {
        return;
    };
    assert_eq!(result.cells.len(), 2);
    for cell in &result.cells {
        assert_all_answered(cell, 12);
    }
    let sidecar = &result.cells[1];
    // The load generator and both counters have a sidecar; counter B is reached only by
    // hops of the chain, so its sidecar working proves the hops crossed the mesh.
    for pod in ["load-generator-1", "counter-a-1", "counter-b-1"] {
        let name = format!("{pod}-sidecar");
        let proxy = sidecar.resources.iter().find(|r| r.component == name);
        assert!(
            proxy.is_some_and(|p| p.cpu_cores_mean > 0.0),
            "{name}: {proxy:?}"
        );
    }
}
