//! What a user's cluster does every day, done to the test cluster while a run's second cell
//! loads: the server pod deleted, the server's sidecar OOM-killed at its memory limit, the API
//! server restarted, a node's kubelet killed for good. Each time the run records in the cell
//! (or, where the cell cannot finish, in `failed_cells`) which component, when and the
//! cluster's reason; it keeps the finished cell, removes what it created once the cluster lets
//! it, and a run the fault ended completes with `run --resume`. The report names what died.
//!
//! The API server and the kubelets are `scripts/k8s-lab`'s processes, killed and started
//! again with its `kill` and `start`; a guard starts them again however the test ends, so a
//! failed test leaves the cluster whole for the next.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use meshbench_testkit::{run_ok, wait_for};
use serde_json::Value;

use super::{results, Cluster};

/// The run each fault interrupts: two cells of our sidecar (two load points), six seconds of
/// load each.
const FAULT_RUN: &[&str] = &[
    "--profile",
    "smoke",
    "--scenarios",
    "meshbench-sidecar",
    "--duration",
    "6s",
];

fn k8s_lab() -> Command {
    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-lab"))
}

/// Starts one of the lab's daemons again when dropped, so that no test leaves it dead.
struct StartAgain(&'static str);

impl StartAgain {
    fn kill(name: &'static str) -> StartAgain {
        run_ok(k8s_lab().args(["kill", name]));
        StartAgain(name)
    }
}

impl Drop for StartAgain {
    fn drop(&mut self) {
        let started = k8s_lab().args(["start", self.0]).status();
        if !matches!(started, Ok(s) if s.success()) && !std::thread::panicking() {
            panic!("scripts/k8s-lab start {} failed: {started:?}", self.0);
        }
    }
}

/// The second cell's server pod, once its load generator runs: (namespace, pod, node, IP).
struct SecondCell {
    namespace: String,
    server: String,
    node: String,
    server_ip: IpAddr,
}

impl Cluster {
    /// [`FAULT_RUN`] into `out`, in the background, and the second cell once its load
    /// generator's pod runs (the first cell is then in the results).
    fn start_fault_run(&self, out: &Path) -> (Child, SecondCell) {
        let child = self
            .run(out, FAULT_RUN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let results = out.join("results.json");
        let cell = wait_for(
            "the second cell's load generator",
            Duration::from_secs(240),
            || {
                let r: Value = serde_json::from_slice(&std::fs::read(&results).ok()?).ok()?;
                (r["cells"].as_array()?.len() == 1).then_some(())?;
                let pods: Value = serde_json::from_str(&self.kubectl_ok(&[
                    "get",
                    "pods",
                    "-A",
                    "-l",
                    "app.kubernetes.io/managed-by=meshbench",
                    "-o",
                    "json",
                ]))
                .ok()?;
                let pods = pods["items"].as_array()?;
                let running = |prefix: &str| {
                    pods.iter().find(|p| {
                        p["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with(prefix))
                            && p["status"]["phase"] == "Running"
                    })
                };
                running("load-generator-1-")?;
                let server = running("echo-server-1-")?;
                Some(SecondCell {
                    namespace: server["metadata"]["namespace"].as_str()?.to_owned(),
                    server: server["metadata"]["name"].as_str()?.to_owned(),
                    node: server["spec"]["nodeName"].as_str()?.to_owned(),
                    server_ip: server["status"]["podIP"].as_str()?.parse().ok()?,
                })
            },
        );
        (child, cell)
    }

    /// The run's end, and its results.
    fn finish_fault_run(&self, mut child: Child, out: &Path) -> (bool, Value) {
        let status = child.wait().unwrap();
        (status.success(), results(out))
    }

    /// Nothing of meshbench's left, once the cluster has let it go.
    fn wait_nothing_left(&self) {
        wait_for(
            "meshbench's objects to go",
            Duration::from_secs(120),
            || self.leftovers().is_empty().then_some(()),
        );
    }
}

/// The one disruption of the second cell, with the first cell kept undisturbed.
fn second_cells_disruption(r: &Value) -> &Value {
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{r}");
    assert!(cells[0]["disruptions"].is_null(), "{}", cells[0]);
    let found = cells[1]["disruptions"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", cells[1]));
    assert_eq!(found.len(), 1, "{found:?}");
    // Within the cell: from its start (warm-up and the wait for the target come first) to
    // the end of its six seconds.
    let into = found[0]["into_window_secs"].as_f64().unwrap();
    assert!((-30.0..7.0).contains(&into), "{}", found[0]);
    &found[0]
}

fn report_names(out: &Path, component: &str, reason: &str) {
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let table = report
        .split("## Disruptions: components that died")
        .nth(1)
        .unwrap_or_else(|| panic!("no disruption table: {report}"));
    assert!(
        table.contains(component) && table.contains(reason),
        "{component} / {reason}: {table}"
    );
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn a_server_pod_deleted_mid_cell_is_recorded_and_the_run_goes_on() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (child, cell) = cluster.start_fault_run(&out);
    cluster.kubectl_ok(&[
        "-n",
        &cell.namespace,
        "delete",
        "pod",
        &cell.server,
        "--wait=false",
    ]);
    let (ok, r) = cluster.finish_fault_run(child, &out);
    assert!(ok, "{r}");
    assert_eq!(r["status"], "complete");
    let d = second_cells_disruption(&r);
    assert_eq!(d["component"], format!("pod/{}", cell.server));
    assert_eq!(
        (&d["kind"], &d["reason"]),
        (&"deleted".into(), &"deleted".into())
    );
    assert!(
        d["detail"]
            .as_str()
            .unwrap()
            .contains("ran echo-server-1, echo-server-1-sidecar"),
        "{d}"
    );
    report_names(&out, &format!("pod/{}", cell.server), "deleted");
    cluster.wait_nothing_left();
}

/// Opens `connections` to `server`, each with half of a 16 KiB TLS record the proxy must hold
/// until the rest comes: memory the proxy takes, as a burst of slow clients makes it take.
fn slow_clients(server: SocketAddr, connections: usize) -> Vec<TcpStream> {
    use std::io::Write;
    let mut record = vec![0x16, 0x03, 0x01, 0x40, 0x00];
    record.resize(5 + 8000, 1);
    (0..connections)
        .map_while(|_| {
            let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(2)).ok()?;
            s.write_all(&record).ok()?;
            Some(s)
        })
        .collect()
}

/// The memory cgroup (v1, the test cluster's kubelets' cgroupfs driver) of the container
/// `container_id` on `node`.
fn memory_cgroup(node: &str, container_id: &str) -> PathBuf {
    let root = Path::new("/sys/fs/cgroup/memory").join(format!("mbk8s-{node}/kubepods"));
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if entry.file_name() == container_id {
                    return entry.path();
                }
                dirs.push(entry.path());
            }
        }
    }
    panic!(
        "no memory cgroup of container {container_id} under {}",
        root.display()
    );
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn a_sidecar_oom_killed_at_its_memory_limit_mid_cell_is_recorded_with_the_clusters_reason() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (child, cell) = cluster.start_fault_run(&out);
    // Our sidecar is a native sidecar: an init container that runs with the pod.
    let pod: Value = serde_json::from_str(&cluster.kubectl_ok(&[
        "-n",
        &cell.namespace,
        "get",
        "pod",
        &cell.server,
        "-o",
        "json",
    ]))
    .unwrap();
    let statuses = pod["status"]["initContainerStatuses"].as_array().unwrap();
    let proxy = statuses
        .iter()
        .find(|c| c["name"] == "meshbench-proxy")
        .unwrap_or_else(|| panic!("no meshbench-proxy in {statuses:?}"));
    let id = proxy["containerID"].as_str().unwrap();
    let id = id.rsplit("//").next().unwrap();
    // Its memory limit lowered to what it uses now: the next memory it needs is over it,
    // and the kernel's OOM killer ends it in its container's cgroup, as a limit too low for
    // the load does.
    let cgroup = memory_cgroup(&cell.node, id);
    let usage = std::fs::read_to_string(cgroup.join("memory.usage_in_bytes")).unwrap();
    std::fs::write(cgroup.join("memory.limit_in_bytes"), usage.trim()).unwrap();
    let clients = slow_clients(SocketAddr::new(cell.server_ip, 8080), 400);
    let (ok, r) = cluster.finish_fault_run(child, &out);
    drop(clients);
    assert!(ok, "{r}");
    assert_eq!(r["status"], "complete");
    let d = second_cells_disruption(&r);
    assert_eq!(
        (&d["component"], &d["role"], &d["kind"], &d["reason"]),
        (
            &"echo-server-1-sidecar".into(),
            &"sidecar".into(),
            &"exited".into(),
            &"OOMKilled".into()
        ),
        "{d}"
    );
    assert!(
        d["detail"].as_str().unwrap().contains("exit code 137"),
        "{d}"
    );
    report_names(&out, "echo-server-1-sidecar (sidecar)", "OOMKilled");
    cluster.wait_nothing_left();
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn an_api_server_restarted_mid_cell_is_ridden_out_and_recorded() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (child, _) = cluster.start_fault_run(&out);
    // Started again once it is down: a restart, as an upgrade or a crash loop does it.
    drop(StartAgain::kill("kube-apiserver"));
    let (ok, r) = cluster.finish_fault_run(child, &out);
    assert!(ok, "{r}");
    assert_eq!(r["status"], "complete");
    // Every disruption is the API server's: its restart may show as more than one stretch
    // (no answer, then a refusal or two while its authorizer loads), never as a kubelet's.
    let cells = r["cells"].as_array().unwrap();
    assert!(cells[0]["disruptions"].is_null(), "{}", cells[0]);
    let found = cells[1]["disruptions"]
        .as_array()
        .expect("the restart seen");
    for d in found {
        assert_eq!(
            (&d["component"], &d["kind"]),
            (&"api-server".into(), &"unreachable".into()),
            "{found:?}"
        );
        let lasted = d["lasted_secs"].as_f64().expect("it came back");
        assert!(lasted > 0.0 && lasted < 60.0, "{d}");
    }
    report_names(&out, "api-server (api-server)", "unreachable for");
    cluster.wait_nothing_left();
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn a_kubelet_killed_mid_cell_gives_the_cell_up_and_the_run_resumes_once_it_is_back() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (child, cell) = cluster.start_fault_run(&out);
    // The node of the cell's pods (an intra-node cell: client and server share it).
    let kubelet: &'static str = match cell.node.as_str() {
        "node-1" => "kubelet-1",
        "node-2" => "kubelet-2",
        "node-3" => "kubelet-3",
        other => panic!("not a node of scripts/k8s-lab: {other}"),
    };
    let dead = StartAgain::kill(kubelet);
    let (ok, r) = cluster.finish_fault_run(child, &out);
    assert!(!ok, "the cell cannot finish without its kubelet: {r}");
    assert_eq!(r["status"], "partial");
    assert_eq!(
        r["cells"].as_array().unwrap().len(),
        1,
        "the first cell kept"
    );
    let failed = r["failed_cells"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{r}");
    let error = failed[0]["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("{}/kubelet has not answered for 30 s", cell.node))
            && error.contains("connection refused"),
        "{error}"
    );
    // Its pods go once their kubelet is back.
    drop(dead);
    cluster.wait_nothing_left();
    let mut resume = cluster.meshbench(&["run", "--resume", out.to_str().unwrap()]);
    resume.args(["--backend", "kubernetes", "--image", super::image()]);
    run_ok(&mut resume);
    let done = results(&out);
    assert_eq!(done["status"], "complete");
    let cells = done["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    assert_eq!(cells[0], r["cells"][0], "the first cell as it was");
    assert_eq!(done["failed_cells"], r["failed_cells"], "the attempt kept");
    report_names(&out, "the whole cell", "has not answered for 30 s");
    assert_eq!(cluster.leftovers(), "");
}
