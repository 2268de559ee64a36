//! `meshbench run --backend kubernetes` and `verify --backend kubernetes` on the real test
//! cluster (`scripts/k8s-lab`: three nodes as `./scripts/test` starts it, each with its own
//! containerd and kubelet): the image of this very binary imported into the nodes, cells whose
//! latency and per-container resources come back with the node of every pod, placement across
//! nodes, E3's and E4's applications, a load split over generator pods, E3's matrix, a pod
//! that cannot start ending the run with the cluster's reason, and nothing labelled by
//! meshbench left behind after a run, a failure or Ctrl-C. Every meshbench command runs as
//! the service account of `docs/rbac.yaml`, with exactly the permissions meshbench documents;
//! one without them is told which before anything is created. `faults`: the cluster's
//! everyday faults (a pod deleted, a sidecar OOM-killed, the API server restarted, a kubelet
//! killed) during a run.

mod distribution;
#[path = "kubernetes/faults.rs"]
mod faults;
mod serving;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use meshbench_testkit::{assert_success, require_cluster, require_tool, run_ok, wait_for};
use serde_json::{json, Value};

const IMAGE: &str = "docker.io/library/meshbench:under-test";

/// The image of the binary under test, with Envoy where it is installed (`./scripts/test`
/// installs it), built and imported into every node once.
fn image() -> &'static str {
    static IMPORTED: OnceLock<()> = OnceLock::new();
    IMPORTED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("meshbench.oci.tar");
        let mut build = Command::new(env!("CARGO_BIN_EXE_meshbench"));
        build.args(["image", "build", "--tag", "meshbench:under-test", "--out"]);
        build.arg(&archive);
        if meshbench_lab::which("envoy").is_some() {
            build.arg("--with-envoy");
        }
        run_ok(&mut build);
        let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-lab");
        run_ok(Command::new(lab).arg("load-image").arg(&archive));
    });
    IMAGE
}

/// One test at a time on the cluster: each checks that nothing of meshbench's is left, which
/// another test's run would contradict, and two cores run one cell well, not four.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Cluster {
    /// The cluster's administrator's: the tests' own checks and the meshes' installs.
    kubeconfig: PathBuf,
    /// meshbench's service account's, with exactly the permissions of `docs/rbac.yaml`:
    /// every meshbench command of these tests runs with it.
    meshbench_kubeconfig: PathBuf,
    kubectl: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

/// The service account of `docs/rbac.yaml`, with its ClusterRoles and bindings, applied once.
const SERVICE_ACCOUNT: (&str, &str) = ("meshbench", "meshbench");

/// A kubeconfig of the cluster's for `namespace/account`'s token (three hours), beside the
/// cluster's administrator's `admin` as `<account>.sa.kubeconfig` (`scripts/k8s-lab down`
/// removes it with the cluster).
fn kubeconfig_for(kubectl: &Path, admin: &Path, (namespace, account): (&str, &str)) -> PathBuf {
    let admin_kubectl = |args: &[&str]| kubectl_stdout(kubectl, admin, args).trim().to_owned();
    let token = admin_kubectl(&[
        "-n",
        namespace,
        "create",
        "token",
        account,
        "--duration",
        "3h",
    ]);
    let cluster = |field: &str| {
        admin_kubectl(&[
            "config",
            "view",
            "--minify",
            "--flatten",
            "-o",
            &format!("jsonpath={{.clusters[0].cluster.{field}}}"),
        ])
    };
    let path = admin.with_file_name(format!("{account}.sa.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n  - name: test\n    cluster:\n      \
             server: {}\n      certificate-authority-data: {}\nusers:\n  - name: {account}\n    \
             user:\n      token: {token}\ncontexts:\n  - name: {account}\n    context: {{ cluster: \
             test, user: {account} }}\ncurrent-context: {account}\n",
            cluster("server"),
            cluster("certificate-authority-data"),
        ),
    )
    .unwrap();
    path
}

/// What `kubectl --kubeconfig <kubeconfig> <args>` printed on stdout; it must succeed.
fn kubectl_stdout(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> String {
    let output = run_ok(
        Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args),
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `docs/rbac.yaml` applied (once), and a kubeconfig for its service account.
fn least_privilege_kubeconfig(kubectl: &Path, admin: &Path) -> PathBuf {
    static MADE: OnceLock<PathBuf> = OnceLock::new();
    MADE.get_or_init(|| {
        let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/rbac.yaml");
        kubectl_stdout(kubectl, admin, &["apply", "-f", rbac.to_str().unwrap()]);
        kubeconfig_for(kubectl, admin, SERVICE_ACCOUNT)
    })
    .clone()
}

impl Cluster {
    fn get() -> Option<Cluster> {
        if cfg!(not(feature = "kubernetes")) {
            let msg = "meshbench was built without the Kubernetes backend: test with \
                       `--features meshbench/kubernetes` (scripts/test does)";
            assert!(std::env::var_os("CI").is_none(), "{msg}");
            eprintln!("SKIPPED: {msg}");
            return None;
        }
        let kubeconfig = require_cluster()?;
        let kubectl = require_tool("kubectl")?;
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        Some(Cluster {
            meshbench_kubeconfig: least_privilege_kubeconfig(&kubectl, &kubeconfig),
            kubeconfig,
            kubectl,
            _turn: turn,
        })
    }

    /// The cluster with the CRDs of the meshes it runs installed (`install_mesh_crds`).
    fn with_mesh_crds() -> Option<Cluster> {
        let cluster = Cluster::get()?;
        let crds = meshbench_testkit::require_mesh_crds()?;
        install_mesh_crds(&cluster, &crds);
        Some(cluster)
    }

    /// `meshbench <args> --kubeconfig <meshbench's service account's>`.
    fn meshbench(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_meshbench"));
        command
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.meshbench_kubeconfig);
        command
    }

    /// What `meshbench <args>` printed on stdout; it must succeed.
    fn meshbench_ok(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&run_ok(&mut self.meshbench(args)).stdout).into_owned()
    }

    /// What `kubectl <args>` printed on stdout, against this cluster; it must succeed.
    fn kubectl_ok(&self, args: &[&str]) -> String {
        kubectl_stdout(&self.kubectl, &self.kubeconfig, args)
    }

    /// `meshbench run --backend kubernetes` with the image under test, into `out`.
    fn run(&self, out: &Path, args: &[&str]) -> Command {
        let mut command = self.meshbench(&["run", "--backend", "kubernetes"]);
        command
            .args(["--image", image(), "--out"])
            .arg(out)
            .args(args);
        command
    }

    /// `run --spec` of the spec `yaml` (written as `<name>.yaml` under `dir`) with `args`,
    /// which must succeed: its directory (`<name>` under `dir`) and results.
    fn run_spec(&self, dir: &Path, name: &str, yaml: &str, args: &[&str]) -> (PathBuf, Value) {
        let spec = dir.join(format!("{name}.yaml"));
        std::fs::write(&spec, yaml).unwrap();
        let out = dir.join(name);
        let mut command = self.run(&out, args);
        command.arg("--spec").arg(&spec);
        assert_success(&command.output().unwrap());
        let r = results(&out);
        (out, r)
    }

    /// `verify --backend kubernetes --mesh <meshes>` (with `--policy`, where given) into
    /// `out`: how it exited, and its report.
    fn verify(
        &self,
        out: &Path,
        meshes: &str,
        policy: Option<&Path>,
    ) -> (std::process::Output, Value) {
        let mut verify = self.meshbench(&["verify", "--backend", "kubernetes"]);
        verify
            .args(["--image", image(), "--mesh", meshes, "--out"])
            .arg(out);
        if let Some(policy) = policy {
            verify.arg("--policy").arg(policy);
        }
        let output = verify.output().unwrap();
        let report = serde_json::from_slice(&std::fs::read(out.join("verify.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {output:?}"));
        (output, report)
    }

    /// A run of a minute in the background, once its load generator's pod exists.
    fn start_long_run(&self, out: &Path) -> std::process::Child {
        let args = [
            "--profile",
            "smoke",
            "--scenarios",
            "baseline",
            "--duration",
            "60s",
        ];
        let child = self
            .run(out, &args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The nodes are read at rest for a cell's length (60.5 s) before the first cell.
        wait_for("the load generator's pod", Duration::from_secs(150), || {
            self.leftovers()
                .contains("pod/load-generator-1-")
                .then_some(())
        });
        child
    }

    /// How many nodes the cluster has.
    fn node_count(&self) -> usize {
        self.kubectl_ok(&["get", "nodes", "-o", "name"])
            .lines()
            .count()
    }

    /// Every object meshbench labelled, as `kind/name` lines.
    fn leftovers(&self) -> String {
        self.kubectl_ok(&[
            "get",
            "namespaces,pods,services,configmaps,secrets,serviceaccounts",
            "--all-namespaces",
            "-l",
            "app.kubernetes.io/managed-by=meshbench",
            "-o",
            "name",
        ])
        .trim()
        .to_owned()
    }

    /// What `meshbench mesh detect` says of this cluster.
    fn mesh_detect(&self) -> String {
        self.meshbench_ok(&["mesh", "detect"])
    }
}

fn results(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap()
}

/// Each component's node, by component name.
fn nodes_of(cell: &Value) -> std::collections::BTreeMap<String, String> {
    cell["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["component"].as_str().unwrap().to_owned(),
                r["node"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn the_smoke_profile_runs_on_the_cluster_with_per_container_resources_and_nodes() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // All of smoke's scenarios: no mesh, mTLS in the apps, our sidecar with its CA service.
    // Cells of 6 s, not smoke's 2 s: a kubelet stamps its node's figures to the second, so
    // the machine under a cell is read only where the readings surround its window within
    // half of it.
    let output = cluster
        .run(&out, &["--profile", "smoke", "--duration", "6s"])
        .output()
        .unwrap();
    assert_success(&output);
    let r = results(&out);
    assert_eq!(r["status"], "complete");
    assert!(
        r["config"]["platform"]
            .as_str()
            .unwrap()
            .starts_with("kubernetes/v1."),
        "{}",
        r["config"]["platform"]
    );
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6, "two load points of three scenarios");
    for cell in cells {
        let scenario = cell["scenario"].as_str().unwrap();
        let load = &cell["load"];
        let requested = load["requested_rps"].as_f64().unwrap();
        assert!(
            load["achieved_rps"].as_f64().unwrap() > requested * 0.9,
            "{scenario}: achieved {} of {requested} rps",
            load["achieved_rps"]
        );
        assert_eq!(
            load["outcomes"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["http_200"],
            "{scenario}: {}",
            load["outcomes"]
        );
        assert!(load["window"]["realtime_offset_ns"].as_i64().is_some());
        let mut nodes = nodes_of(cell);
        let expected: &[&str] = match scenario {
            "meshbench-sidecar" => &[
                "echo-server-1",
                "echo-server-1-sidecar",
                "load-generator-1",
                "load-generator-1-sidecar",
                "meshbench-ca",
            ],
            _ => &["echo-server-1", "load-generator-1"],
        };
        assert_eq!(
            nodes.keys().map(String::as_str).collect::<Vec<_>>(),
            expected,
            "{scenario}"
        );
        // Intra-node: every pod measured on the first node; meshbench's CA service on a
        // node of its own where the cluster has one.
        let ca = nodes.remove("meshbench-ca");
        assert!(
            nodes.values().all(|n| n == &nodes["echo-server-1"]),
            "{nodes:?}"
        );
        if let Some(ca) = ca {
            let spare = cluster.node_count() >= 3;
            assert_eq!(ca != nodes["echo-server-1"], spare, "{ca} {nodes:?}");
        }
        for res in cell["resources"].as_array().unwrap() {
            assert_eq!(res["source"], "kubelet-summary");
            assert!(res["samples"].as_u64().unwrap() >= 2, "{res}");
            assert!(res["working_set_mib_max"].as_f64().unwrap() > 0.5, "{res}");
            // Everything on the request path works for every request.
            if res["role"] != "control-plane" {
                assert!(res["cpu_cores_mean"].as_f64().unwrap() > 0.0, "{res}");
            }
        }
        // The machine under the cell's nodes, read through a kubelet over the same window:
        // this cluster's nodes share one kernel, so one machine covers every node measured,
        // and it was at least as busy as the components on it.
        let machines = cell["machines"]
            .as_array()
            .expect("the nodes' machine was read");
        assert_eq!(machines.len(), 1, "one kernel: {machines:?}");
        let machine = &machines[0];
        assert_eq!(machine["source"], "kubelet-summary");
        assert!(machine["user_cores"].is_null(), "no states from a kubelet");
        let gap = machine["edge_gap_seconds"].as_f64().unwrap();
        assert!(gap <= 3.0, "interpolated over {gap} s of a 6 s window");
        let mut covered: Vec<&str> = machine["same_machine_nodes"]
            .as_array()
            .map(|n| n.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        covered.push(machine["node"].as_str().unwrap());
        let charged: f64 = cell["resources"]
            .as_array()
            .unwrap()
            .iter()
            .inspect(|res| {
                let node = res["node"].as_str().unwrap();
                assert!(covered.contains(&node), "{node} not in {covered:?}");
            })
            .map(|res| res["cpu_cores_mean"].as_f64().unwrap())
            .sum();
        let tasks = machine["tasks_cores"].as_f64().unwrap();
        assert!(
            tasks >= charged * 0.9,
            "machine {tasks} cores, components {charged}"
        );
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("not read (the node's kubelet gives no split)"),
        "the unattributed table has the cluster's rows"
    );
    assert_eq!(cluster.leftovers(), "", "objects left after a run");
}

/// One baseline cell per round, long enough for the kubelets' readings to surround it.
fn noise_spec(dir: &Path, repetitions: u32) -> String {
    let spec = dir.join(format!("spec-{repetitions}.yaml"));
    let text = format!(
        "name: cluster-noise
scenarios: [baseline]
placements: [intra-node]
load:
  model: constant-rate
  points:
    - {{ rps: 200, connections: 4 }}
repetitions: {repetitions}
duration: 8s
warmup: 1s
"
    );
    std::fs::write(&spec, text).unwrap();
    spec.to_str().unwrap().to_owned()
}

/// The "other processes" flags of a finished run's cells.
fn other_processes_flags(out: &Path) -> Vec<String> {
    let result: meshbench_results::RunResult =
        meshbench_results::read_json(&out.join("results.json")).unwrap();
    result
        .cells
        .iter()
        .flat_map(|cell| meshbench_report::trust::cell_flags(&result, cell))
        .filter(|f| f.starts_with("other processes"))
        .collect()
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn a_hog_started_on_the_clusters_machine_during_a_run_is_flagged_and_a_quiet_run_is_not() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // Quiet: two rounds, each after the nodes' background was read. The kubelets, runtimes,
    // API server and control planes take CPU all along; against the fixed 0.25 cores of the
    // local lab this cluster's cells were flagged, against their background they are not.
    let quiet = dir.path().join("quiet");
    let output = cluster
        .run(&quiet, &["--spec", &noise_spec(dir.path(), 2)])
        .output()
        .unwrap();
    assert_success(&output);
    let result: meshbench_results::RunResult =
        meshbench_results::read_json(&quiet.join("results.json")).unwrap();
    assert_eq!(result.cells.len(), 2);
    let before: Vec<u32> = result.backgrounds.iter().map(|b| b.before_cell).collect();
    assert_eq!(before, [0, 1], "a background before each round");
    for background in &result.backgrounds {
        let machine = &background.machines[0];
        assert_eq!(machine.source, "kubelet-summary");
        assert!(machine.node.is_some(), "{machine:?}");
        // The test cluster's nodes share one kernel: one machine, read once.
        assert!(!machine.same_machine_nodes.is_empty(), "{machine:?}");
        let seconds = machine.cores.len() as f64 * background.interval_seconds;
        assert!(
            seconds >= 8.0,
            "read at rest for {seconds} s: {background:?}"
        );
    }
    for cell in &result.cells {
        let level = meshbench_report::trust::background_level(&result, cell)
            .expect("every cell has its round's background");
        eprintln!(
            "quiet cell {}: outside its pods {:?} cores, background {level:?}",
            cell.repetition,
            meshbench_report::trust::machine_share(cell).map(|s| s.other_cores)
        );
    }
    let flags = other_processes_flags(&quiet);
    assert!(flags.is_empty(), "flagged in a quiet run: {flags:?}");

    // The same cell with a core spinning on the machine, started after the background was
    // read and before the cell: flagged, with the background beside it.
    let noisy = dir.path().join("hog");
    let mut run = cluster
        .run(&noisy, &["--spec", &noise_spec(dir.path(), 1)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        "the background before the cell",
        Duration::from_secs(120),
        || {
            let text = std::fs::read_to_string(noisy.join("results.json")).ok()?;
            let result: meshbench_results::RunResult = serde_json::from_str(&text).ok()?;
            (!result.backgrounds.is_empty()).then_some(())
        },
    );
    let mut hog = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let status = run.wait().unwrap();
    let _ = hog.kill();
    let _ = hog.wait();
    assert!(status.success(), "{status}");
    let flags = other_processes_flags(&noisy);
    assert_eq!(flags.len(), 1, "the hog's cell: {flags:?}");
    assert!(
        flags[0].contains("over the nodes' background of"),
        "{flags:?}"
    );
    let report = std::fs::read_to_string(noisy.join("report.md")).unwrap();
    assert!(report.contains("(background "), "{report}");
    assert_eq!(cluster.leftovers(), "", "objects left after a run");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn a_run_started_from_the_web_ui_goes_to_the_cluster_and_streams_the_clusters_progress() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let kubeconfig = cluster.meshbench_kubeconfig.to_str().unwrap().to_owned();
    let serve = serving::Serve::start(&["--kubeconfig", &kubeconfig, "--image", image()]);
    let created = serve.post_json(
        &format!("{}/api/runs", serve.url),
        &serde_json::json!({"profile": "smoke", "backend": "kubernetes",
                            "scenarios": ["baseline"], "duration": "1s"}),
    );
    assert_eq!(
        created.status,
        http::StatusCode::CREATED,
        "{}",
        created.text()
    );
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let seen = serve.events(
        &format!("{}/api/runs/{id}/events", serve.url),
        Duration::from_secs(300),
        |name, _| name == "done",
    );
    assert_eq!(seen.last().unwrap().1["status"], "complete", "{seen:?}");
    // The cluster's own progress (pods applied, ready) is the job's log.
    let logged: Vec<&str> = seen
        .iter()
        .filter(|(name, _)| name == "log")
        .filter_map(|(_, v)| v["text"].as_str())
        .collect();
    assert!(
        logged
            .iter()
            .any(|l| l.contains("running 2 cells on the kubernetes backend")),
        "{logged:?}"
    );
    let run = serve.get_path(&format!("/api/runs/{id}")).json();
    assert!(
        run["platform"]
            .as_str()
            .unwrap()
            .starts_with("kubernetes/v1."),
        "{run}"
    );
    assert_eq!(run["cells_done"], 2);
    assert_eq!(
        cluster.leftovers(),
        "",
        "objects left after a run from the UI"
    );
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn inter_node_cells_put_client_and_server_on_two_nodes() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, r) = cluster.run_spec(
        dir.path(),
        "two-nodes",
        "name: two-nodes\nscenarios: [baseline]\nplacements: [inter-node]\nload:\n  model: constant-rate\n  points: [{ rps: 100, connections: 2 }]\nduration: 2s\nwarmup: 500ms\n",
        &[],
    );
    let nodes = nodes_of(&r["cells"][0]);
    assert_ne!(
        nodes["echo-server-1"], nodes["load-generator-1"],
        "{nodes:?}"
    );
    assert_eq!(cluster.leftovers(), "");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn e3s_experimenter_and_e4s_chain_run_on_the_cluster_through_the_mesh() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // E3's cells record their wire (the chain carries no marker, so E4's do not).
    let run =
        |name: &str, spec: &str| cluster.run_spec(dir.path(), name, spec, &["--capture-link"]);

    // E3: the experimenter is the instrument, in its own pod, enrolled as the client.
    let (out, r) = run(
        "e3",
        "name: e3-on-cluster\napplication: zero-trust-app\nscenarios: [baseline, meshbench-sidecar, meshbench-node-agent]\nplacements: [inter-node]\nload:\n  model: sequential\n  points: [{ requests: 200, group_size: 50, group_interval: 10ms }]\n",
    );
    assert_eq!(r["status"], "complete");
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 3);
    for cell in cells {
        let scenario = cell["scenario"].as_str().unwrap();
        // 200 requests, the first discarded as E3 did, every one answered.
        assert_eq!(
            cell["load"]["outcomes"]["http_200"], 199,
            "{scenario}: {}",
            cell["load"]
        );
        let nodes = nodes_of(cell);
        assert_ne!(
            nodes["experimenter-1"], nodes["calculator-1"],
            "{scenario}: {nodes:?}"
        );
        let components: Vec<&str> = nodes.keys().map(String::as_str).collect();
        match scenario {
            "meshbench-sidecar" => {
                assert!(
                    components.contains(&"experimenter-1-sidecar"),
                    "{components:?}"
                );
                assert!(
                    components.contains(&"calculator-1-sidecar"),
                    "{components:?}"
                );
            }
            "meshbench-node-agent" => assert!(
                components
                    .iter()
                    .filter(|c| c.contains("node-agent"))
                    .count()
                    >= 2,
                "an agent on each node: {components:?}"
            ),
            _ => {}
        }
        // On the wire: the marker in clear without a mesh; with ours, only TLS 1.3, at the
        // calculator's interface (the sidecar) or on the link between the agents' nodes.
        let wire = &cell["wire"];
        let pcap = out.join(wire["pcap"].as_str().unwrap());
        assert!(pcap.metadata().unwrap().len() > 24, "{scenario}: {wire}");
        if !assert_wire_of_cell(cell) {
            continue;
        }
        let link = wire["link"].as_str().unwrap();
        match scenario {
            "meshbench-node-agent" => assert!(link.contains("'s link toward"), "{link}"),
            _ => assert!(link.starts_with("calculator-1's pod interface"), "{link}"),
        }
    }
    // E3's own answer (every RTT) is kept beside the load report.
    let answers = std::fs::read_dir(out.join("cells"))
        .unwrap()
        .filter(|cell| {
            cell.as_ref()
                .unwrap()
                .path()
                .join("experiment.json")
                .exists()
        })
        .count();
    assert_eq!(answers, 3);

    // E4: every counter and the load generator enrolled; each request crosses 4 services,
    // each counter a deployment of two pods behind its service.
    let (_, r) = run(
        "e4",
        "name: e4-on-cluster\napplication: counter-chain\nscenarios: [meshbench-sidecar, meshbench-node-agent]\nplacements: [inter-node]\nload:\n  model: users\n  points: [{ users: 4, requests: 5, services: 4 }]\nrequest_timeout: 30s\nreplicas: 2\n",
    );
    assert_eq!(r["status"], "complete");
    for cell in r["cells"].as_array().unwrap() {
        let scenario = cell["scenario"].as_str().unwrap();
        assert_eq!(
            cell["load"]["outcomes"]["http_200"], 20,
            "{scenario}: {}",
            cell["load"]
        );
        let nodes = nodes_of(cell);
        assert_ne!(
            nodes["counter-a-1"], nodes["counter-b-1"],
            "{scenario}: {nodes:?}"
        );
        // The load generator is no end of the placement: on a node of its own where the
        // cluster has one (with its node's agent, for the node agent), else beside counter A.
        let generator = &nodes["load-generator-1"];
        if cluster.node_count() >= 3 {
            assert!(
                generator != &nodes["counter-a-1"] && generator != &nodes["counter-b-1"],
                "{scenario}: {nodes:?}"
            );
        } else {
            assert_eq!(generator, &nodes["counter-a-1"], "{scenario}: {nodes:?}");
        }
        if scenario == "meshbench-node-agent" {
            let agents: Vec<&String> = nodes
                .iter()
                .filter(|(c, _)| c.contains("node-agent"))
                .map(|(_, n)| n)
                .collect();
            assert!(agents.contains(&generator), "{nodes:?}");
        }
        assert_eq!(
            nodes["counter-a-2"], nodes["counter-a-1"],
            "{scenario}: {nodes:?}"
        );
        assert_eq!(
            nodes["counter-b-2"], nodes["counter-b-1"],
            "{scenario}: {nodes:?}"
        );
        if scenario == "meshbench-sidecar" {
            for pod in [
                "load-generator-1",
                "counter-a-1",
                "counter-a-2",
                "counter-b-1",
                "counter-b-2",
            ] {
                assert!(nodes.contains_key(&format!("{pod}-sidecar")), "{nodes:?}");
            }
        }
    }
    assert_eq!(cluster.leftovers(), "");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn a_user_without_meshbenchs_permissions_is_told_which_before_anything_is_created() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    // A service account with meshbench's reads only.
    let (namespace, account) = ("meshbench", "meshbench-reads-only");
    cluster.kubectl_ok(&["-n", namespace, "create", "serviceaccount", account]);
    cluster.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        account,
        "--clusterrole=meshbench-read",
        &format!("--serviceaccount={namespace}:{account}"),
    ]);
    let kubeconfig = kubeconfig_for(&cluster.kubectl, &cluster.kubeconfig, (namespace, account));
    let as_reader = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .output()
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = as_reader(&[
        "run",
        "--backend",
        "kubernetes",
        "--image",
        IMAGE,
        "--profile",
        "smoke",
        "--scenarios",
        "baseline",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    for missing in [
        "create namespaces (ClusterRole meshbench-run",
        "create pods (ClusterRole meshbench-run",
        "get pods/exec (ClusterRole meshbench-run",
        "create serviceaccounts/token (ClusterRole meshbench-run",
    ] {
        assert!(stderr.contains(missing), "{missing}: {stderr}");
    }
    assert!(
        !stderr.contains("nodes/proxy"),
        "reads are granted: {stderr}"
    );
    assert!(stderr.contains("docs/rbac.yaml"), "{stderr}");
    // `doctor` names the same, one line each.
    let doctor = as_reader(&["doctor"]);
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        said.contains("permissions      missing: create namespaces (ClusterRole meshbench-run"),
        "{said}"
    );
    assert_eq!(cluster.leftovers(), "", "nothing created");
    cluster.kubectl_ok(&["delete", "clusterrolebinding", account]);
    cluster.kubectl_ok(&["-n", namespace, "delete", "serviceaccount", account]);
    // With docs/rbac.yaml's roles, doctor finds nothing missing.
    let said = cluster.meshbench_ok(&["doctor"]);
    assert!(
        said.contains("permissions      ready: every rule of docs/rbac.yaml"),
        "{said}"
    );
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn the_cluster_runs_the_image_meshbench_pushed_to_a_registry_it_pulls_from() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    if require_tool("docker-registry").is_none() {
        return;
    }
    // A registry on the host's address on the nodes' bridge (the API server's), where the
    // nodes' containerd reaches it; plain HTTP, named in the hosts directory every node's
    // containerd reads (scripts/k8s-lab: certs.d beside the kubeconfig).
    let server = cluster.kubectl_ok(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    let host = server
        .trim_start_matches("https://")
        .split(':')
        .next()
        .unwrap()
        .to_owned();
    let registry = distribution::Registry::start(&host, None, None);
    let hosts = cluster
        .kubeconfig
        .with_file_name("certs.d")
        .join(&registry.addr);
    std::fs::create_dir_all(&hosts).unwrap();
    std::fs::write(
        hosts.join("hosts.toml"),
        format!(
            "server = \"http://{0}\"\n[host.\"http://{0}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            registry.addr
        ),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("meshbench.oci.tar");
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(["image", "build", "--without-iptables", "--out"])
            .arg(&archive),
    );
    let reference = format!("{}/meshbench:pulled", registry.addr);
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(["image", "push", &reference, "--plain-http", "--archive"])
            .arg(&archive),
    );
    // No node has the image but through the registry.
    let out = dir.path().join("run");
    let output = cluster
        .meshbench(&["run", "--backend", "kubernetes", "--image", &reference])
        .arg("--out")
        .arg(&out)
        .args([
            "--profile",
            "smoke",
            "--scenarios",
            "baseline",
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    assert_success(&output);
    assert_eq!(results(&out)["status"], "complete");
    // The image is in the containerd of the nodes that ran the pods, under the registry's
    // name (scripts/k8s-lab: each node's socket under /run/meshbench-k8s).
    let ctr = require_tool("ctr").unwrap();
    let pulled_by: Vec<usize> = (1..=cluster.node_count())
        .filter(|n| {
            let listed = run_ok(
                Command::new(&ctr)
                    .arg("--address")
                    .arg(format!("/run/meshbench-k8s/node-{n}/containerd.sock"))
                    .args(["-n", "k8s.io", "images", "ls", "-q"]),
            );
            String::from_utf8_lossy(&listed.stdout)
                .lines()
                .any(|image| image == reference)
        })
        .collect();
    assert!(!pulled_by.is_empty(), "no node pulled {reference}");
    let _ = std::fs::remove_dir_all(&hosts);
    assert_eq!(cluster.leftovers(), "");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn a_pod_that_cannot_start_ends_the_run_with_the_clusters_reason() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    image();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let output = cluster
        .meshbench(&["run", "--backend", "kubernetes"])
        // Offline, no registry: the kubelet cannot pull it.
        .args(["--image", "docker.io/library/meshbench:absent", "--out"])
        .arg(&out)
        .args(["--profile", "smoke", "--scenarios", "baseline"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot start: ErrImagePull")
            || stderr.contains("cannot start: ImagePullBackOff"),
        "{stderr}"
    );
    assert_eq!(results(&out)["status"], "partial");
    assert_eq!(cluster.leftovers(), "", "objects left after a failed cell");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn ctrl_c_deletes_what_the_run_created_and_keeps_the_partial_results() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Interrupted while its load generator runs.
    let mut child = cluster.start_long_run(&out);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted runs exit 130");
    assert_eq!(results(&out)["status"], "partial");
    assert_eq!(cluster.leftovers(), "", "objects left after Ctrl-C");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn lab_clean_removes_what_a_killed_run_left_on_the_cluster() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut child = cluster.start_long_run(&dir.path().join("run"));
    // Killed outright: no chance to clean up.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_ne!(cluster.leftovers(), "");
    let said = cluster.meshbench_ok(&["lab", "clean", "--backend", "kubernetes"]);
    assert!(said.contains("labelled by meshbench"), "{said}");
    assert_eq!(cluster.leftovers(), "", "objects left after lab clean");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn a_load_split_over_two_generator_pods_is_merged_exactly() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut command = cluster.run(&out, &["--profile", "smoke", "--scenarios", "baseline"]);
    command.args(["--generators", "2"]);
    assert_success(&command.output().unwrap());
    let r = results(&out);
    for cell in r["cells"].as_array().unwrap() {
        let load = &cell["load"];
        let (rps, connections) = (
            load["requested_rps"].as_f64().unwrap(),
            load["connections"].as_u64().unwrap(),
        );
        let cell_dir = std::fs::read_dir(out.join("cells"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .contains(&format!("{}rps", rps as u64))
            })
            .unwrap();
        let part = |i: u32| -> Value {
            serde_json::from_slice(
                &std::fs::read(cell_dir.join(format!("load-g{i}.json"))).unwrap(),
            )
            .unwrap()
        };
        let (g1, g2) = (part(1), part(2));
        // Each generator ran half of the point: half the connections, half the rate.
        assert_eq!(
            g1["connections"].as_u64().unwrap() + g2["connections"].as_u64().unwrap(),
            connections
        );
        assert_eq!(
            g1["requested_rps"].as_f64().unwrap() + g2["requested_rps"].as_f64().unwrap(),
            rps
        );
        assert_eq!(
            load["latency"]["count"].as_u64().unwrap(),
            g1["latency"]["count"].as_u64().unwrap() + g2["latency"]["count"].as_u64().unwrap()
        );
        assert!(load["achieved_rps"].as_f64().unwrap() > rps * 0.9, "{load}");
        let nodes = nodes_of(cell);
        assert!(
            nodes.contains_key("load-generator-1-g1") && nodes.contains_key("load-generator-1-g2"),
            "{nodes:?}"
        );
    }
    assert_eq!(cluster.leftovers(), "");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn our_data_planes_and_envoy_pass_e3s_matrix_on_the_cluster_and_no_mesh_fails_it() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    if require_tool("envoy").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let verify =
        |meshes: &str| cluster.verify(&dir.path().join(meshes.replace(',', "+")), meshes, None);

    let (output, report) = verify("meshbench-sidecar,meshbench-node-agent,envoy-sidecar");
    assert_success(&output);
    assert_eq!(report["passed"], true);
    assert!(report["platform"]
        .as_str()
        .unwrap()
        .starts_with("kubernetes/"));
    for mesh in report["meshes"].as_array().unwrap() {
        assert_eq!(
            mesh["cases"].as_array().unwrap().len(),
            6,
            "{}",
            mesh["mesh"]
        );
        // The same identity checks as locally, every one passed, from a pod outside the
        // mesh: bad certificates refused, the calculator's own SPIFFE ID presented, and its
        // certificate renewed under load with no request failed.
        let checks: Vec<&str> = mesh["identity"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            checks,
            [
                "valid-identity",
                "no-client-certificate",
                "other-trust-domain",
                "expired-certificate",
                "forged-identity-header",
                "rotation-under-load"
            ],
            "{}",
            mesh["mesh"]
        );
        for check in mesh["identity"].as_array().unwrap() {
            assert_eq!(check["verdict"], "pass", "{check}");
        }
        assert_eq!(
            mesh["identity"][0]["server_id"], "spiffe://cluster.local/ns/app/sa/calculator",
            "{}",
            mesh["mesh"]
        );
        // Where both ends are enrolled, the recording on the path saw TLS 1.3 only and
        // never the request's marker.
        encrypted_probes_of_case_2(mesh, true);
    }
    // The node agent's inter-node path was recorded on the calling node's link, from its
    // agent's pod, not in the destination pod (where the agent's last leg is in clear).
    let agent = &report["meshes"][1];
    assert_eq!(agent["mesh"], "meshbench-node-agent");
    let across = &agent["cases"][1]["probes"][0];
    assert!(
        across["wire"]["capture_point"]
            .as_str()
            .unwrap()
            .contains("node agent's pod"),
        "{across}"
    );
    // Sidecars answer a denial by identity with 403, as Istio's do.
    let denied = report["meshes"][0]["cases"][1]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["from"] == "security-checker" && p["to"] == "calculator")
        .unwrap();
    assert_eq!(denied["observed"], "http_403", "{denied}");

    // Without a mesh, the requests the policy denies go through, in clear.
    let (output, report) = verify("baseline");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(report["passed"], false);
    let impostor = report["meshes"][0]["cases"][1]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["from"] == "impostor")
        .unwrap();
    assert_eq!(impostor["observed"], "http_200", "{impostor}");
    assert_eq!(impostor["verdict"], "fail");
    assert_eq!(impostor["wire"]["marker_seen"], true);
    assert_eq!(cluster.leftovers(), "");
}

/// `scenario` of a mesh the cluster runs beside `baseline`, intra- and inter-node, at 100 rps
/// for 6 s with the wire recorded: where its results are (under `dir`) and what they say.
fn run_beside_baseline(cluster: &Cluster, dir: &Path, scenario: &str) -> (PathBuf, Value) {
    cluster.run_spec(
        dir,
        "run",
        &format!(
            "name: {scenario}-run\nscenarios: [baseline, {scenario}]\n\
             placements: [intra-node, inter-node]\nload:\n  model: constant-rate\n  \
             points: [{{ rps: 100, connections: 4 }}]\nduration: 6s\n"
        ),
        &["--capture-link"],
    )
}

/// `verify --backend kubernetes --mesh mesh`, which must pass; its report.
fn passing_verification(cluster: &Cluster, dir: &Path, mesh: &str) -> Value {
    passing_verification_of(cluster, dir, mesh, None)
}

/// The same with `--policy policy` where given (its results beside the other's).
fn passing_verification_of(
    cluster: &Cluster,
    dir: &Path,
    mesh: &str,
    policy: Option<&Path>,
) -> Value {
    let out = dir.join(match policy {
        None => "verify",
        Some(_) => "verify-policy",
    });
    let (output, report) = cluster.verify(&out, mesh, policy);
    assert_success(&output);
    assert_eq!(report["passed"], true);
    report
}

/// The CRDs of the meshes a cluster runs (Istio's, the Gateway API's, Cilium's, from the Go
/// modules they publish), installed into the test cluster as an operator would: meshbench
/// never installs a mesh. Only the schemas: no control plane, no webhook.
fn install_mesh_crds(cluster: &Cluster, crds: &Path) {
    let mut apply = vec!["apply", "--server-side", "--force-conflicts"];
    let dirs: Vec<String> = ["istio", "gateway-api", "cilium"]
        .map(|mesh| crds.join(mesh).to_str().unwrap().to_owned())
        .into();
    for dir in &dirs {
        apply.extend(["-f", dir]);
    }
    cluster.kubectl_ok(&apply);
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd",
        "--all",
        "--timeout=120s",
    ]);
}

/// A mesh running on the test cluster from its own charts (`scripts/istio-lab`,
/// `scripts/linkerd-lab`), removed when dropped.
struct MeshLab<'a> {
    cluster: &'a Cluster,
    script: &'static str,
}

impl<'a> MeshLab<'a> {
    fn script(cluster: &Cluster, script: &str, args: &[&str]) -> Command {
        let mut command = Command::new(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../scripts")
                .join(script),
        );
        command
            .args(args)
            .env("MESHBENCH_KUBECONFIG", &cluster.kubeconfig)
            .env("MESHBENCH", env!("CARGO_BIN_EXE_meshbench"));
        command
    }

    /// `scripts/<script> up <args>`, which must succeed.
    fn up(cluster: &'a Cluster, script: &'static str, args: &[&str]) -> MeshLab<'a> {
        let mut up = vec!["up"];
        up.extend(args);
        run_ok(&mut MeshLab::script(cluster, script, &up));
        MeshLab { cluster, script }
    }

    /// istiod, for Istio's sidecars.
    fn istio(cluster: &'a Cluster) -> MeshLab<'a> {
        MeshLab::up(cluster, "istio-lab", &[])
    }

    /// istiod with ambient's data plane: istio-cni and ztunnel on every node.
    fn istio_ambient(cluster: &'a Cluster) -> MeshLab<'a> {
        MeshLab::up(cluster, "istio-lab", &["--ambient"])
    }

    /// Linkerd's control plane, for its proxies.
    fn linkerd(cluster: &'a Cluster) -> MeshLab<'a> {
        MeshLab::up(cluster, "linkerd-lab", &[])
    }

    /// Cilium's agents as the cluster's CNI (and its operator where it could be built).
    fn cilium(cluster: &'a Cluster) -> MeshLab<'a> {
        MeshLab::up(cluster, "cilium-lab", &[])
    }
}

impl Drop for MeshLab<'_> {
    fn drop(&mut self) {
        let _ = MeshLab::script(self.cluster, self.script, &["down"]).status();
    }
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn istio_ambient_carries_every_request_through_ztunnel_on_the_cluster() {
    let Some(cluster) = Cluster::with_mesh_crds() else {
        return;
    };
    let _istio = MeshLab::istio_ambient(&cluster);
    let detected = cluster.mesh_detect();
    // istiod's version from its pod's image (it runs in the cluster, as Istio's chart puts it).
    assert!(
        detected.contains("istio-ambient    installed: version 0.0.0-"),
        "{detected}"
    );
    assert!(
        detected.contains(", mode ambient (ztunnel 62d826530e5c"),
        "{detected}"
    );
    assert!(detected.contains(", istio-cni 0.0.0-"), "{detected}");

    let dir = tempfile::tempdir().unwrap();
    let (out, r) = run_beside_baseline(&cluster, dir.path(), "istio-ambient");
    // On the wire at the server pod's interface, between nodes and within one: HBONE, TLS 1.3
    // to ztunnel's port 15008, the marker never in clear; without a mesh, the marker in clear.
    for cell in r["cells"].as_array().unwrap() {
        let wire = &cell["wire"];
        let label = format!("{} {}: {wire}", cell["scenario"], cell["placement"]);
        assert!(wire["link"]
            .as_str()
            .unwrap()
            .starts_with("echo-server-1's pod interface"));
        if !assert_wire_of_cell(cell) {
            continue;
        }
        let pcap = out.join(wire["pcap"].as_str().unwrap());
        let report = meshbench_netlab::analyze_pcap(&pcap, b"no-such-marker").unwrap();
        assert!(
            report
                .flows
                .iter()
                .any(|f| f.server.port() == 15008 && f.tls),
            "{label}: {:?}",
            report.flows
        );
    }
    let cell = r["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["scenario"] == "istio-ambient" && c["placement"] == "inter-node")
        .cloned()
        .expect("an inter-node istio-ambient cell");
    let outcomes: Vec<&String> = cell["load"]["outcomes"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(outcomes, ["http_200"], "{}", cell["load"]);
    // ztunnel on both nodes of the placement, as the node agents, each working for the cell;
    // istio-cni with the control plane.
    let resources = cell["resources"].as_array().unwrap();
    let ztunnels: Vec<&Value> = resources
        .iter()
        .filter(|r| r["component"].as_str().unwrap().starts_with("ztunnel-"))
        .collect();
    let nodes: std::collections::BTreeSet<String> = ztunnels
        .iter()
        .map(|z| z["node"].as_str().unwrap().to_owned())
        .collect();
    let nodes_of_apps = nodes_of(&cell);
    let placed: std::collections::BTreeSet<String> = ["echo-server-1", "load-generator-1"]
        .map(|app| nodes_of_apps[app].clone())
        .into();
    assert_eq!(placed.len(), 2, "inter-node: {nodes_of_apps:?}");
    assert!(placed.is_subset(&nodes), "{placed:?} {nodes:?}");
    for ztunnel in &ztunnels {
        assert_eq!(ztunnel["role"], "node-agent", "{ztunnel}");
        if placed.contains(ztunnel["node"].as_str().unwrap()) {
            assert!(
                ztunnel["cpu_cores_mean"].as_f64().unwrap() > 0.0,
                "{ztunnel}"
            );
        }
    }
    for control_plane in ["istio-cni-node-", "istiod-"] {
        assert!(
            resources.iter().any(
                |r| r["component"].as_str().unwrap().starts_with(control_plane)
                    && r["role"] == "control-plane"
                    && r["rss_mib_max"].as_f64().unwrap() > 0.0
            ),
            "{control_plane}: {resources:?}"
        );
    }
    // ztunnel's own word: the load generator's connections went over HBONE (port 15008) with
    // the identity istiod issued to the load generator's service account.
    let logs = istio_system_logs(&cluster, &["-l", "app=ztunnel"]);
    let hbone = logs.lines().find(|l| {
        l.contains("connection complete")
            && l.contains("/sa/load-generator\"")
            && l.contains(":15008 ")
    });
    assert!(
        hbone.is_some(),
        "no HBONE connection of the load generator in ztunnel's logs"
    );
    assert_eq!(cluster.leftovers(), "", "objects left after a run");

    // E3's six cases through ztunnel: the policy as Istio's resources, enforced at L4 (a
    // denial is a reset connection), and on the wire TLS 1.3 wherever both ends are enrolled,
    // recorded at the destination pod (its loopback for a pod's call to itself).
    let report = passing_verification(&cluster, dir.path(), "istio-ambient");
    let ambient = &report["meshes"][0];
    assert_eq!(ambient["cases"].as_array().unwrap().len(), 6);
    let probes = encrypted_probes_of_case_2(ambient, true);
    assert!(
        refused(&probes, "connection_reset") >= 2,
        "ztunnel denied nothing: {probes:?}"
    );
    // The identity checks present istiod's own certificates to ztunnel at the calculator's
    // port 15008, each issued to the checking pod through Istio's certificate API for a
    // service-account token: the experimenter's is let through, the checker's (claiming the
    // experimenter in headers) is not, nor none, another trust domain's or an expired one;
    // ztunnel presents the calculator's identity. No rotation check: istiod's SVIDs live a day.
    assert_identity_checks_pass(
        ambient,
        &[
            "valid-identity",
            "no-client-certificate",
            "other-trust-domain",
            "expired-certificate",
            "forged-identity-header",
        ],
        "spiffe://cluster.local/ns/app/sa/calculator",
    );
    assert_eq!(cluster.leftovers(), "", "objects left after verify");

    // L7 rules at a waypoint: E3's application under a policy whose calculator rules name
    // methods and paths. istiod deploys the waypoint (the same image as Istio's sidecars) for
    // the calculator's service; the experimenter's POST /add goes through it (200), the
    // security checker's, allowed only GET, is refused there with a 403 (ztunnel would
    // reset); presented to the calculator's ztunnel directly, the experimenter's SVID is
    // refused, since ztunnel lets only the waypoint call it.
    let policy = dir.path().join("l7.yaml");
    std::fs::write(
        &policy,
        "trust_domain: cluster.local\n\
         peer_authentication:\n  - { name: strict-app, namespace: app, mode: STRICT }\n\
         authorization:\n\
         \x20 - name: deny-other-namespaces\n    namespace: app\n    action: DENY\n    rules:\n\
         \x20     - from: { not_namespaces: [app] }\n\
         \x20 - name: calculator-operations\n    namespace: app\n    workload: calculator\n    action: ALLOW\n    rules:\n\
         \x20     - from: { principals: [cluster.local/ns/app/sa/experimenter] }\n        to: { methods: [POST], paths: [/add, /subtract, /multiply, /divide] }\n\
         \x20     - from: { principals: [cluster.local/ns/app/sa/security-checker] }\n        to: { methods: [GET] }\n",
    )
    .unwrap();
    let report = passing_verification_of(&cluster, dir.path(), "istio-ambient", Some(&policy));
    let ambient = &report["meshes"][0];
    let case_2 = &ambient["cases"][1];
    let observed = |from: &str| {
        case_2["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["from"] == from && p["to"] == "calculator")
            .map(|p| p["observed"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(observed("experimenter"), "http_200", "{case_2}");
    assert_eq!(observed("security-checker"), "http_403", "{case_2}");
    let valid = &ambient["identity"][0];
    assert_eq!(valid["name"], "valid-identity", "{valid}");
    assert_eq!(valid["expected"], "refused", "{valid}");
    assert_eq!(valid["verdict"], "pass", "{valid}");
    assert_eq!(cluster.leftovers(), "", "objects left after verify");
    // No proxy refused anything istiod sent (the waypoint's configuration included).
    assert_eq!(istiod_nacks(&cluster), Vec::<String>::new());
}

/// istiod's log lines where a proxy refused the configuration it sent (`ADS:<type>: ACK
/// ERROR`): what an extension upstream Envoy does not have would cause.
fn istiod_nacks(cluster: &Cluster) -> Vec<String> {
    istio_system_logs(cluster, &["deployment/istiod"])
        .lines()
        .filter(|l| l.contains("ACK ERROR"))
        .map(str::to_owned)
        .collect()
}

/// Every log line of the istio-system pods `which` names (`kubectl logs` arguments).
fn istio_system_logs(cluster: &Cluster, which: &[&str]) -> String {
    let mut args = vec!["-n", "istio-system", "logs", "--tail", "-1"];
    args.extend(which);
    cluster.kubectl_ok(&args)
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn istio_s_sidecars_carry_every_request_on_the_cluster() {
    let Some(cluster) = Cluster::with_mesh_crds() else {
        return;
    };
    let _istio = MeshLab::istio(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let (_, r) = run_beside_baseline(&cluster, dir.path(), "istio");
    // TLS 1.3 between the sidecars istiod injected (pilot-agent and upstream Envoy,
    // configured by istiod over xDS, certified over SDS), each sampled as its pod's sidecar;
    // istiod as the control plane.
    assert_sidecar_mesh_cells(&r, &["istiod-"]);
    let istio_mesh = r["environment"]["cluster_meshes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["scenario"] == "istio")
        .cloned()
        .unwrap();
    assert_eq!(istio_mesh["usable"], true, "{istio_mesh}");
    assert_eq!(cluster.leftovers(), "", "objects left after a run");

    // E3's six cases through the sidecars: the policy as PeerAuthentication STRICT and
    // AuthorizationPolicy, TLS 1.3 between the sidecars; the identity checks present
    // certificates istiod issued to the checking pod (Istio's certificate API, for each
    // service account's token) to the calculator's sidecar at its app's port.
    let report = passing_verification(&cluster, dir.path(), "istio");
    let mesh = &report["meshes"][0];
    assert_eq!(mesh["cases"].as_array().unwrap().len(), 6);
    let probes = encrypted_probes_of_case_2(mesh, false);
    for probe in &probes {
        assert_eq!(probe["wire"]["tls_versions"], json!(["TLSv1.3"]), "{probe}");
    }
    assert!(
        refused(&probes, "http_403") >= 3,
        "Istio's sidecars denied too little: {probes:?}"
    );
    assert_identity_checks_pass(
        mesh,
        &[
            "valid-identity",
            "no-client-certificate",
            "other-trust-domain",
            "expired-certificate",
            "forged-identity-header",
        ],
        "spiffe://cluster.local/ns/app/sa/calculator",
    );
    assert_eq!(cluster.leftovers(), "", "objects left after verify");

    // Every configuration istiod sent was taken.
    assert_eq!(istiod_nacks(&cluster), Vec::<String>::new());
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn each_meshs_resources_pass_server_side_dry_run_against_its_own_crds() {
    let Some(cluster) = Cluster::with_mesh_crds() else {
        return;
    };
    // Schemas without a control plane: installed is not usable.
    let detected = cluster.meshbench_ok(&["mesh", "detect"]);
    assert!(
        detected.contains("Istio's CRDs are installed but its control plane is not running"),
        "{detected}"
    );
    assert!(
        detected.contains("Cilium's CRDs are installed but no Cilium agent"),
        "{detected}"
    );

    // E3's policy for each mesh whose CRDs the module proxy serves: every resource accepted
    // (the CRDs' schemas and validation rules), every pod admitted.
    for (mesh, kinds) in [
        ("istio", &["PeerAuthentication", "AuthorizationPolicy"][..]),
        (
            "istio-ambient",
            &["PeerAuthentication", "AuthorizationPolicy"][..],
        ),
        ("cilium", &["CiliumNetworkPolicy"][..]),
    ] {
        let report = cluster.meshbench_ok(&["mesh", "check", "--mesh", mesh]);
        assert!(!report.contains("REFUSED"), "{mesh}: {report}");
        for kind in kinds {
            assert!(
                report.contains(&format!("accepted  {kind} ")),
                "{mesh}: {report}"
            );
        }
        assert!(
            report.contains("pod calculator (enrolled): admitted"),
            "{mesh}: {report}"
        );
    }

    // L7 rules on ambient: a waypoint (a Gateway API Gateway) and policies attached to the
    // calculator's service there, accepted by the Gateway API's and Istio's CRDs.
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("l7.yaml");
    std::fs::write(
        &policy,
        "authorization:\n\
         \x20 - name: calc\n    namespace: app\n    workload: calculator\n    action: ALLOW\n    rules:\n\
         \x20     - from: { principals: [cluster.local/ns/app/sa/experimenter] }\n        to: { methods: [POST], paths: [/api/*] }\n",
    )
    .unwrap();
    let report = cluster.meshbench_ok(&[
        "mesh",
        "check",
        "--mesh",
        "istio-ambient",
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert!(report.contains("accepted  Gateway "), "{report}");
    assert!(report.contains("/mb-calc-calculator"), "{report}");
    assert!(report.contains("/mb-via-waypoint-calculator"), "{report}");

    // istiod itself (built from istio.io/istio, run in the cluster by scripts/istio-lab from
    // Istio's chart): detected, with the settings that keep its configuration within upstream
    // Envoy named; its validating webhook accepting every resource (it fails closed: a
    // resource it did not answer for is refused), its injector injecting the enrolled pods.
    // A run through its sidecars is `istio_s_sidecars_carry_every_request_on_the_cluster`.
    let _istiod = MeshLab::istio(&cluster);
    let detected = cluster.meshbench_ok(&["mesh", "detect"]);
    assert!(
        detected.contains("istio            installed: version 0.0.0-")
            && detected.contains(
                ", mode sidecar; istiod without metadata exchange, the ALPN filter, in istio-system"
            ),
        "{detected}"
    );
    let report = cluster.meshbench_ok(&["mesh", "check", "--mesh", "istio"]);
    assert!(!report.contains("REFUSED"), "{report}");
    for workload in ["experimenter", "calculator"] {
        assert!(
            report.contains(&format!(
                "pod {workload} (enrolled): admitted, injected istio-init, istio-proxy (sidecar)"
            )),
            "{report}"
        );
    }

    let report = cluster.meshbench_ok(&["mesh", "check", "--mesh", "istio-ambient"]);
    assert!(
        report.contains("without ambient mode (no ztunnel pods)"),
        "{report}"
    );
    assert!(
        report.contains("pod calculator (enrolled): admitted, nothing injected"),
        "{report}"
    );

    // Linkerd's and consul-k8s's CRDs cannot be obtained here: the cluster refuses their
    // resources, and the check says so and fails.
    for (mesh, kind) in [
        ("linkerd", "policy.linkerd.io/v1beta3 Server"),
        (
            "consul-connect",
            "consul.hashicorp.com/v1alpha1 ServiceIntentions",
        ),
    ] {
        let output = cluster
            .meshbench(&["mesh", "check", "--mesh", mesh])
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{mesh}: {report}");
        assert!(
            report.contains(&format!(
                "does not serve {kind} (the mesh's CRDs are not installed)"
            )),
            "{mesh}: {report}"
        );
    }
    assert_eq!(cluster.leftovers(), "", "the checks' namespaces are gone");
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster"]
fn linkerd_carries_every_request_through_its_proxies_on_the_cluster() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let _linkerd = MeshLab::linkerd(&cluster);
    let detected = cluster.mesh_detect();
    assert!(
        detected.contains("linkerd          installed: version edge-26.8.3"),
        "{detected}"
    );
    // `doctor` finds the same cluster and mesh.
    let doctor = cluster.meshbench_ok(&["doctor"]);
    assert!(
        doctor.contains("ready: Kubernetes v")
            && doctor.contains("linkerd          installed: version edge-26.8.3"),
        "{doctor}"
    );
    // E3's policy as Linkerd's resources, each accepted by Linkerd's CRDs (server-side dry
    // run) and every enrolled pod admitted with the proxy Linkerd's injector adds.
    let report = cluster.meshbench_ok(&["mesh", "check", "--mesh", "linkerd"]);
    assert!(!report.contains("REFUSED"), "{report}");
    for kind in ["Server", "AuthorizationPolicy", "MeshTLSAuthentication"] {
        assert!(report.contains(&format!("accepted  {kind} ")), "{report}");
    }
    let calculator = report
        .lines()
        .find(|l| l.contains("pod calculator (enrolled): admitted, injected "));
    assert!(
        calculator.is_some_and(|l| l.contains("linkerd-proxy (sidecar)")),
        "{report}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (_, r) = run_beside_baseline(&cluster, dir.path(), "linkerd");
    // TLS 1.3 between the linkerd-proxies (native sidecars: init containers that keep
    // running), each sampled as its pod's sidecar; the control plane's pods.
    assert_sidecar_mesh_cells(&r, &["linkerd-destination-", "linkerd-identity-"]);
    assert_eq!(cluster.leftovers(), "", "objects left after a run");

    // E3's six cases through linkerd2-proxy: the policy as Linkerd's Server and
    // AuthorizationPolicy resources, denials answered with 403s, TLS 1.3 between the proxies;
    // a pod's call to itself stays on its loopback in plaintext, as Linkerd's proxy does it.
    let report = passing_verification(&cluster, dir.path(), "linkerd");
    let linkerd = &report["meshes"][0];
    assert_eq!(linkerd["cases"].as_array().unwrap().len(), 6);
    for probe in linkerd["cases"][1]["probes"].as_array().unwrap() {
        let wire = &probe["wire"];
        if probe["from"] == probe["to"] {
            assert_eq!(wire["marker_seen"], true, "{probe}");
            assert!(wire["note"]
                .as_str()
                .unwrap()
                .contains("never leaves the pod"));
        }
    }
    let probes = encrypted_probes_of_case_2(linkerd, false);
    for probe in &probes {
        assert_eq!(probe["wire"]["tls_versions"], json!(["TLSv1.3"]), "{probe}");
    }
    assert!(
        refused(&probes, "http_403") >= 3,
        "Linkerd denied too little: {probes:?}"
    );
    // The identity checks present certificates Linkerd's identity controller issued to the
    // checking pod (Identity/Certify, for each service account's token) to the calculator's
    // linkerd2-proxy, asked for the calculator's identity by SNI: the experimenter's is let
    // through; none, another trust anchor's and the checker's (claiming the experimenter in
    // headers) are not. No expired one: the controller signs for its configured lifetime.
    assert_identity_checks_pass(
        linkerd,
        &[
            "valid-identity",
            "no-client-certificate",
            "other-trust-domain",
            "forged-identity-header",
        ],
        "calculator.app.serviceaccount.identity.linkerd.cluster.local",
    );
}

#[test]
#[ignore = "cluster suite (scripts/test --cluster): needs the test cluster and Cilium's build"]
fn cilium_enforces_the_policy_in_the_kernel_without_encryption_on_the_cluster() {
    let Some(cluster) = Cluster::get() else {
        return;
    };
    let Some(bpftool) = require_tool("bpftool") else {
        return;
    };
    let cilium_programs = || {
        let out = run_ok(Command::new(&bpftool).args(["prog", "show"]));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(" name cil_"))
            .count()
    };
    {
        let _cilium = MeshLab::cilium(&cluster);
        assert!(cilium_programs() > 0, "Cilium's datapath is in the kernel");
        let detected = cluster.mesh_detect();
        assert!(
            detected.contains(
                "cilium           installed: version v1.20.2, mode encryption: none; \
                 mutual authentication: off; L7 proxy: off"
            ),
            "{detected}"
        );

        // Every request answered through Cilium's datapath, in plaintext on the wire as
        // baseline's; each agent on the cell's nodes sampled as a node agent.
        let dir = tempfile::tempdir().unwrap();
        let (_, r) = run_beside_baseline(&cluster, dir.path(), "cilium");
        let cells = r["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 4);
        for cell in cells {
            let label = format!("{} {}", cell["scenario"], cell["placement"]);
            let outcomes: Vec<&String> = cell["load"]["outcomes"]
                .as_object()
                .unwrap()
                .keys()
                .collect();
            assert_eq!(outcomes, ["http_200"], "{label}");
            assert_eq!(cell["wire"]["marker_seen"], true, "{label}");
            assert_eq!(cell["wire"]["tls_connections"], 0, "{label}");
            let agents = cell["resources"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| {
                    r["role"] == "node-agent"
                        && r["component"].as_str().unwrap().starts_with("cilium-node-")
                        && r["cpu_cores_mean"].as_f64().unwrap() > 0.0
                })
                .count();
            match cell["scenario"].as_str().unwrap() {
                "baseline" => assert_eq!(agents, 0, "{label}"),
                _ => assert!(agents >= 1, "{label}: {}", cell["resources"]),
            }
        }
        let mode = r["environment"]["cluster_meshes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["scenario"] == "cilium")
            .map(|m| m["mode"].clone());
        assert_eq!(
            mode,
            Some(json!(
                "encryption: none; mutual authentication: off; L7 proxy: off"
            ))
        );
        assert_eq!(cluster.leftovers(), "", "objects left after a run");

        // E3's six cases with the policy as CiliumNetworkPolicy: denials are drops (the
        // caller times out), every path is plaintext and said to be. The one thing Cilium
        // does otherwise than the policy says: E3's impostor, a pod outside the mesh under the
        // experimenter's service account, is the experimenter to Cilium (it knows pods by
        // their labels, and nothing is authenticated), so wherever the experimenter may call
        // the calculator, so may the impostor.
        let (output, report) = cluster.verify(&dir.path().join("verify"), "cilium", None);
        assert!(!output.status.success());
        let cilium = &report["meshes"][0];
        let notes = cilium["notes"].to_string();
        assert!(
            notes.contains("cilium encrypts nothing on this cluster"),
            "{notes}"
        );
        assert!(notes.contains("mutual authentication is off"), "{notes}");
        let mut failed = vec![];
        let mut dropped = 0;
        for case in cilium["cases"].as_array().unwrap() {
            for probe in case["probes"].as_array().unwrap() {
                let wire = &probe["wire"];
                assert_eq!(wire["tls_connections"], 0, "{probe}");
                assert_eq!(wire["encryption_expected"], false, "{probe}");
                if probe["verdict"] != "pass" {
                    failed.push((case["case"].as_u64().unwrap(), probe["from"].clone()));
                    assert_eq!(probe["observed"], "http_200", "{probe}");
                } else if probe["expected_allowed"] == false {
                    assert_ne!(probe["observed"], "http_403", "{probe}");
                    dropped += 1;
                }
            }
        }
        assert_eq!(
            failed,
            [(2, json!("impostor")), (6, json!("impostor"))],
            "{}",
            report["meshes"]
        );
        assert!(
            dropped >= 4,
            "Cilium denied too little: {}",
            report["meshes"]
        );
        assert_eq!(cluster.leftovers(), "", "the checks' namespaces are gone");
    }
    // `cilium-lab down` leaves nothing of Cilium's in the kernel or in the nodes' iptables.
    assert_eq!(cilium_programs(), 0, "Cilium's BPF programs are gone");
    for n in 1..=cluster.node_count() {
        let rules = run_ok(Command::new("ip").args([
            "netns",
            "exec",
            &format!("mbk8s-node-{n}"),
            "iptables-save",
        ]));
        let rules = String::from_utf8_lossy(&rules.stdout).to_lowercase();
        assert!(!rules.contains("cilium"), "node-{n}: {rules}");
    }
    let objects = cluster.kubectl_ok(&[
        "get",
        "ciliumendpoints,ciliumnodes,ciliumidentities",
        "-A",
        "-o",
        "name",
    ]);
    assert_eq!(objects.trim(), "", "Cilium's objects are gone");
}

/// The cells of a run of a sidecar mesh beside `baseline` (`run_beside_baseline`): on the wire
/// at the server pod's interface, the mesh's traffic TLS 1.3 only with the marker never in
/// clear, baseline's marker in clear; only 200s; a sidecar beside each end sampled with its
/// CPU and memory, and the control plane's pods (named from `control_planes`) sampled as such.
fn assert_sidecar_mesh_cells(r: &Value, control_planes: &[&str]) {
    for cell in r["cells"].as_array().unwrap() {
        let label = format!("{} {}", cell["scenario"], cell["placement"]);
        if !assert_wire_of_cell(cell) {
            continue;
        }
        let outcomes: Vec<&String> = cell["load"]["outcomes"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(outcomes, ["http_200"], "{label}: {}", cell["load"]);
        let resources = cell["resources"].as_array().unwrap();
        for app in ["echo-server-1", "load-generator-1"] {
            assert!(
                resources
                    .iter()
                    .any(|r| r["component"] == format!("{app}-sidecar")
                        && r["role"] == "sidecar"
                        && r["cpu_cores_mean"].as_f64().unwrap() > 0.0
                        && r["rss_mib_max"].as_f64().unwrap() > 0.0),
                "{app}: {resources:?}"
            );
        }
        for control_plane in control_planes {
            assert!(
                resources.iter().any(|r| r["component"]
                    .as_str()
                    .unwrap()
                    .starts_with(control_plane)
                    && r["role"] == "control-plane"),
                "{control_plane}: {resources:?}"
            );
        }
    }
}

/// A cell's record of its wire, at least one connection: the marker in clear for `baseline`
/// (false), a mesh's traffic TLS 1.3 only with the marker never in clear (true).
fn assert_wire_of_cell(cell: &Value) -> bool {
    let (scenario, wire) = (cell["scenario"].as_str().unwrap(), &cell["wire"]);
    let label = format!("{scenario} {}: {wire}", cell["placement"]);
    assert!(wire["connections"].as_u64().unwrap() > 0, "{label}");
    if scenario == "baseline" {
        assert_eq!(wire["marker_seen"], true, "{label}");
        return false;
    }
    assert_eq!(wire["marker_seen"], false, "{label}");
    assert_eq!(wire["tls_connections"], wire["connections"], "{label}");
    assert_eq!(wire["tls_versions"], json!(["TLSv1.3"]), "{label}");
    true
}

/// The probes of case 2 of `mesh`'s verification (everything enrolled) between enrolled pods:
/// all but the impostor's (its pod is outside the mesh) and, where `self_calls` is false, a
/// pod's calls to itself. Each recorded TLS 1.3 on its path and never the marker in clear.
fn encrypted_probes_of_case_2(mesh: &Value, self_calls: bool) -> Vec<&Value> {
    let probes: Vec<&Value> = mesh["cases"][1]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["from"] != "impostor" && (self_calls || p["from"] != p["to"]))
        .collect();
    for probe in &probes {
        let wire = &probe["wire"];
        assert_eq!(wire["marker_seen"], false, "{probe}");
        assert!(
            wire["tls_versions"].to_string().contains("TLSv1.3"),
            "{probe}"
        );
    }
    probes
}

/// How many of `probes` were answered `refusal`.
fn refused(probes: &[&Value], refusal: &str) -> usize {
    probes.iter().filter(|p| p["observed"] == refusal).count()
}

/// `mesh`'s identity checks in a verification report are exactly `names`, in order, each
/// passed, and the first (the valid identity's) saw the calculator's proxy present `server`.
fn assert_identity_checks_pass(mesh: &Value, names: &[&str], server: &str) {
    let checks = &mesh["identity"];
    let seen: Vec<(&str, &str)> = checks
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["verdict"].as_str().unwrap()))
        .collect();
    let expected: Vec<(&str, &str)> = names.iter().map(|n| (*n, "pass")).collect();
    assert_eq!(seen, expected, "{checks}");
    assert_eq!(checks[0]["server_id"], server, "{checks}");
}
