//! Helpers for meshbench's tests: finding the external tools a test needs (failing under CI,
//! skipping with a reason elsewhere) and polling for a condition with a deadline instead of
//! sleeping and hoping; and the check that the checked-in protobuf code is current.

pub mod protobuf;

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Runs `command` to its end and asserts that it succeeded (see [`assert_success`]).
pub fn run_ok(command: &mut std::process::Command) -> std::process::Output {
    let output = command.output().expect("the command starts");
    assert_success(&output);
    output
}

/// Asserts that a finished command succeeded, showing its exit code and stderr when not.
pub fn assert_success(output: &std::process::Output) {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Locates `tool` on PATH. Under CI (`CI` set) a missing tool fails the test, because CI's
/// set-up installs everything; elsewhere the test is skipped with a message saying why.
/// Returns `None` when the caller should return early.
pub fn require_tool(tool: &str) -> Option<PathBuf> {
    if let Some(path) = which(tool) {
        return Some(path);
    }
    let msg = format!(
        "`{tool}` is not installed; install it (scripts/test installs every test dependency)"
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// Whether this test runs as root, as `why` needs. Under CI its absence fails the test;
/// elsewhere the test is skipped with the reason.
pub fn require_root(why: &str) -> bool {
    let euid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_default();
    if euid == "0" {
        return true;
    }
    let msg = format!("this test {why} and needs root");
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    false
}

/// The kubeconfig of the test cluster (`scripts/k8s-lab up`, which `scripts/test` runs and
/// names in `MESHBENCH_KUBECONFIG`). Under CI its absence fails the test; elsewhere the test
/// is skipped with the reason.
pub fn require_cluster() -> Option<PathBuf> {
    let path = std::env::var_os("MESHBENCH_KUBECONFIG").map(PathBuf::from);
    if let Some(path) = path.filter(|p| p.is_file()) {
        return Some(path);
    }
    let msg = "no test cluster: start one with `scripts/k8s-lab up` and set MESHBENCH_KUBECONFIG \
               to the kubeconfig it prints (scripts/test does both)";
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// The meshes' CRDs as `scripts/mesh-crds` caches them (`MESHBENCH_MESH_CRDS`, which
/// `scripts/test` sets). Under CI their absence fails the test; elsewhere it is skipped.
pub fn require_mesh_crds() -> Option<PathBuf> {
    let path = std::env::var_os("MESHBENCH_MESH_CRDS").map(PathBuf::from);
    if let Some(path) = path.filter(|p| p.join("istio").is_dir()) {
        return Some(path);
    }
    let msg = "no mesh CRDs: set MESHBENCH_MESH_CRDS to the directory `scripts/mesh-crds` \
               prints (scripts/test does)";
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// Whether this test may build network namespaces (root, `ip`, `iptables`). Under CI a
/// missing privilege or tool fails the test; elsewhere it is skipped with the reason.
pub fn require_netns() -> bool {
    if !require_root("builds network namespaces") {
        return false;
    }
    ["ip", "iptables", "sysctl"]
        .iter()
        .all(|tool| require_tool(tool).is_some())
}

/// The local lab's network namespaces on this machine now (names starting `mb-`).
pub fn lab_namespaces() -> std::collections::BTreeSet<String> {
    let listing = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("`ip netns list` runs");
    String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| name.starts_with("mb-"))
        .map(str::to_owned)
        .collect()
}

/// Asserts that no lab namespace exists now that was not there in `before`: what a run left
/// behind. Labs that were already on the machine (another run, or a killed one awaiting
/// `meshbench lab clean`) are not the test's to judge.
pub fn assert_no_lab_left_since(before: &std::collections::BTreeSet<String>) {
    let left: Vec<String> = lab_namespaces().difference(before).cloned().collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

/// The lab's own lookup, so that a test skips exactly when the lab would not find the tool.
pub use meshbench_lab::which;

/// Polls `check` every 10 ms until it returns `Some`, panicking with `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, check: impl FnMut() -> Option<T>) -> T {
    poll(timeout, check).unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Polls `check` until it answers or `timeout` passes; `None` when it never did, for tests
/// that explain the failure with what they last saw.
pub fn poll<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A loopback port nothing answers on, held for as long as the value lives: a socket bound to
/// it that does not listen, so connections are refused and no other test (or process) can take
/// the port meanwhile, as one could between dropping a listener and using its port.
pub struct ClosedPort {
    _socket: socket2::Socket,
    pub addr: std::net::SocketAddr,
}

impl ClosedPort {
    pub fn new() -> ClosedPort {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a TCP socket");
        let any: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
        socket.bind(&any.into()).expect("binding 127.0.0.1:0");
        let addr = socket
            .local_addr()
            .expect("a bound socket has an address")
            .as_socket()
            .expect("an IP address");
        ClosedPort {
            _socket: socket,
            addr,
        }
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}
