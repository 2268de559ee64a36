//! A run killed with SIGKILL cannot tear down; `meshbench lab clean` must then remove every
//! namespace, rule, cgroup and process the run left. Alone in its test binary because
//! `lab clean` removes every lab on the machine.

use std::process::{Command, Stdio};
use std::time::Duration;

use meshbench_testkit::{run_ok, wait_for};

fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// PIDs of processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn lab_clean_removes_everything_a_killed_run_left_behind() {
    if !meshbench_testkit::require_netns() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("killed");
    let mut run = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["run", "--profile", "meshes", "--backend", "netns"])
        .args([
            "--scenarios",
            "meshbench-sidecar",
            "--placements",
            "inter-node",
        ])
        .args(["--duration", "60s", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Every component reads its config from the run's proxy area, named after the run's pid.
    let out_text = format!("/run/meshbench/run-{}-", run.id());
    // Midway: the namespaces exist and the load generator (the last component) is running.
    // The machine is read at rest for a cell's length (60 s and the warm-up) before the first
    // cell.
    wait_for("the run to be under load", Duration::from_secs(150), || {
        let loading = processes_mentioning(&out_text).iter().any(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    let mut args = c.split(|&b| b == 0);
                    args.next() == Some(env!("CARGO_BIN_EXE_meshbench").as_bytes())
                        && args.next() == Some(b"load".as_slice())
                })
                .unwrap_or(false)
        });
        (netns_list().contains("mb-") && loading).then_some(())
    });
    run.kill().unwrap();
    run.wait().unwrap();
    // SIGKILL gave the run no chance: its lab is still there.
    assert!(netns_list().contains("mb-"));
    assert!(!processes_mentioning(&out_text).is_empty());

    let clean = run_ok(Command::new(env!("CARGO_BIN_EXE_meshbench")).args(["lab", "clean"]));
    let said = String::from_utf8_lossy(&clean.stdout);
    assert!(said.contains("removed"), "{said}");

    assert!(!netns_list().contains("mb-"), "{}", netns_list());
    wait_for(
        "the lab's processes to be gone",
        Duration::from_secs(10),
        || processes_mentioning(&out_text).is_empty().then_some(()),
    );
    let leftovers: Vec<_> = std::fs::read_dir("/etc/netns")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        leftovers
            .iter()
            .all(|n| !n.to_string_lossy().starts_with("mb-")),
        "{leftovers:?}"
    );
    for hierarchy in ["cpuacct", "memory", "unified", ""] {
        let root = std::path::Path::new("/sys/fs/cgroup")
            .join(hierarchy)
            .join("meshbench");
        if let Ok(entries) = std::fs::read_dir(&root) {
            let labs: Vec<_> = entries
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.path())
                .collect();
            assert!(labs.is_empty(), "{labs:?}");
        }
    }
    // The host's own iptables never held lab rules; the namespaces that did are gone.
    let host_rules = Command::new("iptables")
        .args(["-t", "nat", "-S"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&host_rules.stdout).contains("MESHBENCH"));
    // A second clean finds nothing.
    let again = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["lab", "clean"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to clean"));
}
