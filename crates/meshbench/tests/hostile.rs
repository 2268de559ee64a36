//! The reference data plane and the CA as an attacker meets them: the real `meshbench`
//! processes on loopback, raw bytes on real sockets. Each test is one finding of the
//! hardening issue (request smuggling, lenient parsing, a panic reachable from the network,
//! connections held forever, connection caps) and what the proxy must do instead.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use meshbench_testkit::{poll, wait_for};

/// A `meshbench` role started as a child process, killed when dropped.
struct Component {
    child: Child,
    /// The address its ready line announced (unspecified when it announced none).
    addr: SocketAddr,
    /// The whole ready line.
    ready: serde_json::Value,
}

impl Component {
    fn start(args: &[&str]) -> Component {
        Self::start_with_stderr(args, Stdio::inherit())
    }

    fn start_with_stderr(args: &[&str], stderr: Stdio) -> Component {
        let mut child = Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = Vec::new();
            let mut byte = [0u8];
            while let Ok(1) = stdout.read(&mut byte) {
                if byte[0] == b'\n' {
                    let _ = tx.send(String::from_utf8_lossy(&line).into_owned());
                    line.clear();
                } else {
                    line.push(byte[0]);
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no ready line from meshbench {args:?}"));
        let ready: serde_json::Value = serde_json::from_str(&line).unwrap();
        // A certificate agent announces a path, not an address.
        let addr = ready["addr"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        Component { child, addr, ready }
    }

    /// Whether the process is still running (a panic in a task does not end it, but an
    /// abort would).
    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The app behind the proxy: answers every request `200 ok` and records the request heads it
/// read, so a test can tell what the proxy forwarded.
struct RecordingApp {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    connections: Arc<AtomicUsize>,
}

impl RecordingApp {
    fn start() -> RecordingApp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (seen, count) = (heads.clone(), connections.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, Ordering::SeqCst);
                let seen = seen.clone();
                std::thread::spawn(move || serve_recording(stream, &seen));
            }
        });
        RecordingApp {
            addr,
            heads,
            connections,
        }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve_recording(mut stream: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() < end + 4 + length {
                break;
            }
            buf.drain(..end + 4 + length);
            seen.lock().unwrap().push(head);
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .is_err()
            {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Sends `request` and reads until the proxy closes or `deadline` passes; returns what came.
fn exchange(addr: SocketAddr, request: &[u8], deadline: Duration) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request).unwrap();
    read_until_close(&mut stream, deadline)
}

fn read_until_close(stream: &mut TcpStream, deadline: Duration) -> String {
    let until = Instant::now() + deadline;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "the proxy neither answered nor closed within {deadline:?}; got {:?}",
            String::from_utf8_lossy(&answer)
        );
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends one request on a fresh connection and returns the first response's status line.
/// Sends `request` and checks the status of the answer.
fn assert_status(addr: SocketAddr, request: &[u8], expected: u16) {
    let status = status_of(addr, request);
    let wanted = format!("HTTP/1.1 {expected}");
    assert!(status.starts_with(&wanted), "{status}");
}

fn status_of(addr: SocketAddr, request: &[u8]) -> String {
    let answer = exchange(addr, request, Duration::from_secs(20));
    answer.lines().next().unwrap_or_default().to_owned()
}

/// The L7 sidecar's policy: plaintext allowed in `app`, and no `/admin` at the calculator.
const POLICY: &str = include_str!("policies/permissive-no-admin.yaml");

/// An L7 sidecar (plaintext inbound, so raw sockets reach its parser) in front of `app`.
/// An app that records what reaches it, behind an L7 sidecar started with `extra` flags.
fn l7_in_front_of_recording_app(extra: &[&str]) -> (tempfile::TempDir, RecordingApp, Component) {
    let dir = tempfile::tempdir().unwrap();
    let app = RecordingApp::start();
    let proxy = l7_sidecar(dir.path(), app.addr, extra);
    (dir, app, proxy)
}

fn l7_sidecar(dir: &Path, app: SocketAddr, extra: &[&str]) -> Component {
    let mut args = vec!["--no-metrics"];
    args.extend_from_slice(extra);
    l7_sidecar_with(dir, app, &args, Stdio::inherit())
}

/// The L7 sidecar with `extra` flags and its stderr sent to `stderr`.
fn l7_sidecar_with(dir: &Path, app: SocketAddr, extra: &[&str], stderr: Stdio) -> Component {
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let inbound = format!("127.0.0.1:0={app}");
    let mut args = vec![
        "proxy",
        "sidecar",
        "--namespace",
        "app",
        "--workload",
        "calculator",
        "--mode",
        "l7",
        "--no-mtls",
        "--threads",
        "1",
        "--policy",
        policy.to_str().unwrap(),
        "--inbound",
        &inbound,
    ];
    args.extend_from_slice(extra);
    Component::start_with_stderr(&args, stderr)
}

#[test]
fn a_connection_header_naming_the_framing_smuggles_nothing_past_the_policy() {
    let (_dir, app, mut proxy) = l7_in_front_of_recording_app(&[]);
    let smuggled = b"GET /admin HTTP/1.1\r\nHost: calc\r\n\r\n";
    for nominated in ["content-length", "Content-Length, x-y", "host"] {
        let request = [
            format!(
                "POST /public HTTP/1.1\r\nHost: calc\r\nConnection: {nominated}\r\n\
                 Content-Length: {}\r\n\r\n",
                smuggled.len()
            )
            .as_bytes(),
            smuggled,
        ]
        .concat();
        assert!(
            status_of(proxy.addr, &request).starts_with("HTTP/1.1 400"),
            "{nominated}"
        );
    }
    // A request that does reach the app shows that nothing before it did.
    assert_status(
        proxy.addr,
        b"GET /public HTTP/1.1\r\nHost: calc\r\nConnection: close\r\n\r\n",
        200,
    );
    let heads = app.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].starts_with("GET /public HTTP/1.1"));
    assert!(proxy.alive());
}

#[test]
fn every_forwarded_request_frames_as_the_proxy_framed_it() {
    let (_dir, app, proxy) = l7_in_front_of_recording_app(&[]);
    // Duplicate agreeing lengths, tabs around values: the app gets exactly one length.
    let answer = exchange(
        proxy.addr,
        b"POST /a HTTP/1.1\r\nHost: calc\r\nContent-Length: 3\r\ncontent-length:\t3\t\r\n\
          Connection: close\r\n\r\nabc",
        Duration::from_secs(20),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let heads = app.heads();
    let lengths: Vec<&str> = heads[0]
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("content-length"))
        .collect();
    assert_eq!(lengths, ["content-length: 3"], "{heads:?}");
}

#[test]
fn lenient_framing_is_refused_with_400() {
    let (_dir, _app, proxy) = l7_in_front_of_recording_app(&[]);
    let cases: [&[u8]; 7] = [
        "POST /a HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\u{a0}\r\n\r\n0\r\n\r\n"
            .as_bytes(),
        "POST /a HTTP/1.1\r\nHost: c\r\nContent-Length: 3\u{a0}\r\n\r\nabc".as_bytes(),
        b"POST /a HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\n3;x\nabc\r\n0\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nx: 1\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ];
    for request in cases {
        let status = status_of(proxy.addr, request);
        assert!(
            status.starts_with("HTTP/1.1 400"),
            "{:?} got {status:?}",
            String::from_utf8_lossy(request)
        );
    }
}

#[test]
fn request_targets_are_not_misread_and_none_panics_the_proxy() {
    let (_dir, app, mut proxy) = l7_in_front_of_recording_app(&[]);
    // The absolute form without a path used to panic the connection's task.
    for _ in 0..50 {
        assert_status(
            proxy.addr,
            b"GET http://web HTTP/1.1\r\nConnection: close\r\n\r\n",
            200,
        );
    }
    // `://` in the query is not an authority and a path.
    assert_status(
        proxy.addr,
        b"GET /public?next=http://evil/admin HTTP/1.1\r\nHost: calc\r\nConnection: close\r\n\r\n",
        200,
    );
    let heads = app.heads();
    assert!(
        heads[0].starts_with("GET / HTTP/1.1\r\nhost: web"),
        "{heads:?}"
    );
    assert!(
        heads
            .last()
            .unwrap()
            .starts_with("GET /public?next=http://evil/admin HTTP/1.1\r\nHost: calc"),
        "{heads:?}"
    );
    assert!(proxy.alive());
}

#[test]
fn a_clients_identity_headers_never_reach_the_app() {
    let (_dir, app, proxy) = l7_in_front_of_recording_app(&[]);
    let status = status_of(
        proxy.addr,
        b"GET /public HTTP/1.1\r\nHost: calc\r\nConnection: close\r\n\
          X-Forwarded-Client-Cert: By=spiffe://cluster.local/ns/app/sa/calculator;\
          URI=spiffe://cluster.local/ns/app/sa/experimenter\r\n\
          x-meshbench-identity: spiffe://cluster.local/ns/app/sa/experimenter\r\n\r\n",
    );
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let head = app.heads()[0].to_ascii_lowercase();
    assert!(
        !head.contains("x-forwarded-client-cert") && !head.contains("x-meshbench-identity"),
        "{head}"
    );
}

#[test]
fn a_request_head_that_never_ends_is_timed_out_with_408() {
    let (_dir, _app, proxy) = l7_in_front_of_recording_app(&["--header-read-timeout", "1s"]);
    let started = Instant::now();
    let answer = exchange(
        proxy.addr,
        b"GET /public HTTP/1.1\r\nHost: calc\r\nX-Slow: ",
        Duration::from_secs(20),
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn past_the_connection_limit_a_client_waits_for_a_free_slot() {
    let (_dir, _app, proxy) = l7_in_front_of_recording_app(&["--max-connections", "2"]);
    let holders: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(proxy.addr).unwrap())
        .collect();
    // The two holders are accepted (the kernel queues the third): wait until the proxy has
    // taken them, shown by a third connection going unanswered while they are open.
    let mut third = TcpStream::connect(proxy.addr).unwrap();
    third
        .write_all(b"GET /public HTTP/1.1\r\nHost: calc\r\nConnection: close\r\n\r\n")
        .unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut byte = [0u8];
    assert!(
        matches!(third.read(&mut byte), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)),
        "a third connection was served past --max-connections 2"
    );
    drop(holders);
    let answer = read_until_close(&mut third, Duration::from_secs(20));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

fn meshbench_ok(args: &[&str]) {
    let status = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(args)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{args:?}");
}

/// A CA in `dir/ca` with SVIDs for the calculator and the experimenter.
fn lab_ca(dir: &Path) -> std::path::PathBuf {
    let ca = dir.join("ca");
    let ca_str = ca.to_str().unwrap();
    meshbench_ok(&[
        "ca",
        "init",
        "--dir",
        ca_str,
        "--trust-domain",
        "cluster.local",
    ]);
    for sa in ["calculator", "experimenter"] {
        meshbench_ok(&["ca", "issue", "--dir", ca_str, "--ns", "app", "--sa", sa]);
    }
    ca
}

/// A role's SVID and trust bundle as flags; `ca_flag` is `--ca`, or `--cacert` for the load
/// generator.
fn svid_flags<'a>(cert: &'a Path, key: &'a Path, ca_flag: &'a str, ca: &'a Path) -> [&'a str; 6] {
    let text = |path: &'a Path| path.to_str().unwrap();
    ["--cert", text(cert), "--key", text(key), ca_flag, text(ca)]
}

/// The calculator's sidecar terminating mTLS (L4) in front of `app`, trusting `bundle`.
fn mtls_sidecar(
    ca: &Path,
    bundle: &Path,
    policy: Option<&Path>,
    app: SocketAddr,
    extra: &[&str],
) -> Component {
    let (cert, key) = (ca.join("app.calculator.pem"), ca.join("app.calculator.key"));
    let inbound = format!("127.0.0.1:0={app}");
    let mut args = vec![
        "proxy",
        "sidecar",
        "--namespace",
        "app",
        "--workload",
        "calculator",
    ];
    args.extend(svid_flags(&cert, &key, "--ca", bundle));
    args.extend(["--no-metrics", "--threads", "1", "--inbound", &inbound]);
    if let Some(policy) = policy {
        args.extend(["--policy", policy.to_str().unwrap()]);
    }
    args.extend_from_slice(extra);
    Component::start(&args)
}

#[test]
fn half_sent_client_hellos_are_dropped_at_the_handshake_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let app = RecordingApp::start();
    let ca = lab_ca(dir.path());
    let proxy = mtls_sidecar(
        &ca,
        &ca.join("ca.pem"),
        None,
        app.addr,
        &["--handshake-timeout", "1s"],
    );
    let started = Instant::now();
    let mut held: Vec<TcpStream> = (0..20)
        .map(|i| {
            let mut s = TcpStream::connect(proxy.addr).unwrap();
            // A lone record type byte, or the start of a ClientHello.
            let sent: &[u8] = if i % 2 == 0 {
                &[0x16]
            } else {
                &[0x16, 3, 1, 0, 200, 1]
            };
            s.write_all(sent).unwrap();
            s
        })
        .collect();
    for stream in &mut held {
        read_until_close(stream, Duration::from_secs(20));
    }
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn the_proxy_survives_a_burst_of_panicky_and_malformed_requests() {
    let (_dir, app, mut proxy) = l7_in_front_of_recording_app(&[]);
    let garbage: [&[u8]; 8] = [
        b"GET http://web HTTP/1.1\r\n\r\n",
        b"GET http://web?x HTTP/1.1\r\n\r\n",
        b"GET http:// HTTP/1.1\r\n\r\n",
        b"GET http://a@b/ HTTP/1.1\r\n\r\n",
        b"\r\n\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: c\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
    ];
    for _ in 0..10 {
        for request in garbage {
            let mut s = TcpStream::connect(proxy.addr).unwrap();
            let _ = s.write_all(request);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = read_until_close(&mut s, Duration::from_secs(20));
        }
    }
    assert!(proxy.alive());
    assert_status(
        proxy.addr,
        b"GET /public HTTP/1.1\r\nHost: calc\r\nConnection: close\r\n\r\n",
        200,
    );
    wait_for("the app to have answered", Duration::from_secs(5), || {
        (app.connections.load(Ordering::SeqCst) >= 1).then_some(())
    });
}

/// Requests `url` through the real load generator presenting `cert`, and returns its outcome
/// counts by class.
fn outcomes_with(dir: &Path, url: &str, cert: &Path, key: &Path, ca: &Path) -> Vec<String> {
    let json = dir.join(format!(
        "{}.json",
        cert.file_stem().unwrap().to_string_lossy()
    ));
    let output = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args([
            "load",
            "--url",
            url,
            "--model",
            "closed",
            "--connections",
            "1",
            "--requests",
            "3",
            "--timeout",
            "5s",
        ])
        .args(svid_flags(cert, key, "--cacert", ca))
        .args([
            "--expect-server-id",
            "spiffe://cluster.local/ns/app/sa/calculator",
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        json.exists(),
        "load wrote no result: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    report["outcomes"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[test]
fn a_spiffe_id_counts_only_when_a_root_of_its_own_trust_domain_vouches_for_it() {
    use meshbench_identity::CertificateAuthority;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = lab_ca(d);
    let evil_dir = d.join("evil");
    meshbench_ok(&[
        "ca",
        "init",
        "--dir",
        evil_dir.to_str().unwrap(),
        "--trust-domain",
        "evil.example",
    ]);
    // Both roots in the sidecar's bundle, as a mesh federated with evil.example would hold.
    let bundle = d.join("bundle.pem");
    let roots = [ca.join("ca.pem"), evil_dir.join("ca.pem")]
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<String>();
    std::fs::write(&bundle, roots).unwrap();
    let evil = CertificateAuthority::load(&evil_dir).unwrap();
    let ours = CertificateAuthority::load(&ca).unwrap();
    let experimenter = "spiffe://cluster.local/ns/app/sa/experimenter";
    let forged = evil.issue_with_uris(&[experimenter]).unwrap();
    let foreign = evil
        .issue_with_uris(&["spiffe://evil.example/ns/app/sa/experimenter"])
        .unwrap();
    let two = ours
        .issue_with_uris(&[experimenter, "spiffe://cluster.local/ns/app/sa/calculator"])
        .unwrap();
    for (svid, stem) in [
        (&forged, "forged"),
        (&foreign, "foreign"),
        (&two, "two-ids"),
    ] {
        svid.write(d, stem).unwrap();
    }
    let policy = d.join("policy.yaml");
    std::fs::write(
        &policy,
        include_str!("policies/strict-app-namespace-only.yaml"),
    )
    .unwrap();
    let app = RecordingApp::start();
    let proxy = mtls_sidecar(&ca, &bundle, Some(&policy), app.addr, &[]);
    let url = format!("https://{}/", proxy.addr);
    let outcomes = |stem: &str, dir: &Path| {
        outcomes_with(
            d,
            &url,
            &dir.join(format!("{stem}.pem")),
            &dir.join(format!("{stem}.key")),
            &ca.join("ca.pem"),
        )
    };
    assert_eq!(outcomes("app.experimenter", &ca), ["http_200"]);
    for stem in ["forged", "foreign", "two-ids"] {
        let got = outcomes(stem, d);
        assert!(
            !got.iter().any(|o| o.starts_with("http_")),
            "{stem}: {got:?}"
        );
    }
    // Only the genuine experimenter's three requests reached the app.
    assert_eq!(app.heads().len(), 3);
}

#[test]
fn the_ca_and_hbone_ports_drop_connections_that_never_finish_a_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let ca = lab_ca(dir.path());
    let ca_str = ca.to_str().unwrap();
    let ca_service = Component::start(&[
        "ca",
        "serve",
        "--dir",
        ca_str,
        "--listen",
        "127.0.0.1:0",
        "--handshake-timeout",
        "1s",
    ]);
    let agent_config = dir.path().join("agent.yaml");
    std::fs::write(
        &agent_config,
        format!(
            "node: node-a\nca: {ca_str}/ca.pem\nhbone: 127.0.0.1:0\nworkloads:\n  - \
             {{ namespace: app, name: calculator, service_account: calculator, \
             cert: {ca_str}/app.calculator.pem, key: {ca_str}/app.calculator.key, \
             address: 127.0.0.1:9 }}\n"
        ),
    )
    .unwrap();
    let agent = Component::start(&[
        "proxy",
        "node-agent",
        "--config",
        agent_config.to_str().unwrap(),
        "--no-metrics",
        "--threads",
        "1",
        "--handshake-timeout",
        "1s",
    ]);
    let started = Instant::now();
    let mut held = Vec::new();
    for addr in [ca_service.addr, agent.addr] {
        for sent in [&[][..], &[0x16], &[0x16, 3, 1, 0, 200, 1]] {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(sent).unwrap();
            held.push(stream);
        }
    }
    for stream in &mut held {
        read_until_close(stream, Duration::from_secs(20));
    }
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn keys_on_disk_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let ca = lab_ca(dir.path());
    assert_eq!(mode(&ca), 0o700);
    for key in ["ca.key", "app.calculator.key", "app.experimenter.key"] {
        assert_eq!(mode(&ca.join(key)), 0o600, "{key}");
    }
    // The certificate agent publishes what Envoy reads: the key private too.
    let ca_str = ca.to_str().unwrap();
    let ca_service = Component::start(&["ca", "serve", "--dir", ca_str, "--listen", "127.0.0.1:0"]);
    let published = dir.path().join("published");
    let endpoint = ca_service.addr.to_string();
    let (cert, key) = (ca.join("app.calculator.pem"), ca.join("app.calculator.key"));
    let bundle = ca.join("ca.pem");
    let mut args = vec!["proxy", "cert-agent"];
    args.extend(svid_flags(&cert, &key, "--ca", &bundle));
    args.extend([
        "--ca-endpoint",
        &endpoint,
        "--dir",
        published.to_str().unwrap(),
    ]);
    let _agent = Component::start(&args);
    assert_eq!(mode(&published.join("key.pem")), 0o600);
    assert_eq!(mode(&published), 0o700);
}

/// The process's peak resident memory, from `/proc`.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024
}

#[test]
fn the_echo_server_streams_a_huge_body_instead_of_buffering_it() {
    let echo = Component::start(&["workload", "echo", "--listen", "127.0.0.1:0"]);
    const BODY: usize = 256 << 20;
    let mut stream = TcpStream::connect(echo.addr).unwrap();
    stream
        .write_all(
            format!("POST / HTTP/1.1\r\nHost: echo\r\nContent-Length: {BODY}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..BODY / chunk.len() {
        stream.write_all(&chunk).unwrap();
    }
    let answer = read_until_close(&mut stream, Duration::from_secs(60));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // It held 270 MiB for a 256 MiB body when it collected bodies whole.
    let peak = peak_rss_mib(echo.child.id());
    assert!(peak < 64, "peak RSS {peak} MiB for a 256 MiB body");
}

/// User and system CPU the process has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn out_of_descriptors_the_proxy_backs_off_and_says_so_once() {
    use rustix::process::{prlimit, Pid, Resource, Rlimit};
    let dir = tempfile::tempdir().unwrap();
    let app = RecordingApp::start();
    let log = dir.path().join("stderr.log");
    let proxy = l7_sidecar_with(
        dir.path(),
        app.addr,
        &["--admin", "127.0.0.1:0"],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let pid = proxy.child.id();
    let open_now = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64;
    let limit = Rlimit {
        current: Some(open_now + 3),
        maximum: Some(open_now + 3),
    };
    prlimit(Pid::from_raw(pid as i32), Resource::Nofile, limit).unwrap();
    // Past the limit, every further connection waits in the accept queue and each accept
    // fails with EMFILE.
    let admin: SocketAddr = proxy.ready["admin"].as_str().unwrap().parse().unwrap();
    let held: Vec<TcpStream> = (0..40)
        .map(|i| TcpStream::connect(if i % 2 == 0 { proxy.addr } else { admin }).unwrap())
        .collect();
    wait_for(
        "the proxy to run out of descriptors",
        Duration::from_secs(10),
        || {
            let open = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
            (open >= open_now + 3).then_some(())
        },
    );
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_ticks(pid) - before;
    // The admin endpoint spun at 2.9 s of CPU in 3 s; backing off costs next to nothing.
    assert!(
        spent < 50,
        "{spent} ticks of CPU in 2 s while out of descriptors"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = text.matches("accept failed").count();
    // One line per listener at most (the first failure), not one per retry.
    assert!(lines <= 2, "{lines} accept warnings in 2 s:\n{text}");
    drop(held);
}

/// The process's anonymous resident memory (its heap, stacks and buffers) in MiB. Not VmRSS:
/// that also counts the pages of the (debug, large) binary's code as they are first run, which
/// grow by a MiB or more over a test and are no memory a connection held.
fn anon_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap()
        / 1024
}

#[test]
fn unfinished_heads_are_timed_out_and_their_memory_given_back() {
    let (_dir, _app, proxy) = l7_in_front_of_recording_app(&["--header-read-timeout", "2s"]);
    let pid = proxy.child.id();
    let start = anon_rss_mib(pid);
    let mut head = b"GET / HTTP/1.1\r\nHost: calc\r\nX-Long: ".to_vec();
    head.resize(60_000, b'a');
    let mut held: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = TcpStream::connect(proxy.addr).unwrap();
            s.write_all(&head).unwrap();
            s
        })
        .collect();
    let grown = wait_for(
        "the proxy to hold the heads",
        Duration::from_secs(20),
        || {
            let rss = anon_rss_mib(pid);
            (rss >= start + 10).then_some(rss)
        },
    );
    // Each is answered 408 and closed at the header read timeout...
    for stream in &mut held {
        let answer = read_until_close(stream, Duration::from_secs(30));
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    drop(held);
    // ...and the memory they held goes back to the system (it stayed, 70 MB for 1000).
    let mut last = grown;
    let given_back = poll(Duration::from_secs(30), || {
        last = anon_rss_mib(pid);
        (last < start + (grown - start) / 4).then_some(())
    });
    assert!(
        given_back.is_some(),
        "anonymous RSS {last} MiB 30 s after the heads closed: {start} MiB at the start, {grown} MiB holding them"
    );
}

#[test]
fn a_kept_alive_connection_that_sends_nothing_more_is_closed_at_the_idle_timeout() {
    let (_dir, _app, proxy) = l7_in_front_of_recording_app(&["--idle-timeout", "1s"]);
    let mut stream = TcpStream::connect(proxy.addr).unwrap();
    let started = Instant::now();
    // Two requests keep it busy; then silence, between requests, is idleness.
    for _ in 0..2 {
        stream
            .write_all(b"GET /public HTTP/1.1\r\nHost: calc\r\n\r\n")
            .unwrap();
        // The app's answer: a head, then a two-byte body.
        let mut answer = Vec::new();
        let mut chunk = [0u8; 256];
        while !answer.ends_with(b"\r\n\r\nok") {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "closed mid-answer");
            answer.extend_from_slice(&chunk[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200"));
    }
    let rest = read_until_close(&mut stream, Duration::from_secs(20));
    assert!(rest.is_empty(), "{rest}");
    assert!(started.elapsed() >= Duration::from_secs(1));
}

/// HBONE connections the agent listening on `port` holds open (its side of each).
fn established_to_port(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields[1].rsplit(':').next().unwrap();
            u16::from_str_radix(local_port, 16).unwrap() == port && fields[3] == "01"
        })
        .count()
}

/// One request on `stream`, kept open; the status line, or "" when the agent closed it.
fn request_kept_open(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: calculator\r\n\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 256];
    while !answer.ends_with(b"ok") {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no answer and no close: {e}"),
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn hbone_tunnels_are_capped_per_connection_and_per_app() {
    let dir = tempfile::tempdir().unwrap();
    let ca = lab_ca(dir.path());
    let ca_str = ca.to_str().unwrap();
    let app = RecordingApp::start();
    let agent = |name: &str, body: String, extra: &[&str]| {
        let config = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &config,
            format!("node: {name}\nca: {ca_str}/ca.pem\nhbone: 127.0.0.1:0\n{body}"),
        )
        .unwrap();
        let mut args = vec!["proxy", "node-agent", "--config", config.to_str().unwrap()];
        args.extend([
            "--no-metrics",
            "--threads",
            "1",
            "--max-tunnels-per-connection",
            "2",
        ]);
        args.extend_from_slice(extra);
        Component::start(&args)
    };
    let server = agent(
        "node-b",
        format!(
            "workloads:\n  - {{ namespace: app, name: calculator, service_account: calculator, \
             cert: {ca_str}/app.calculator.pem, key: {ca_str}/app.calculator.key, \
             address: {} }}\n",
            app.addr
        ),
        &["--max-upstream-connections", "4"],
    );
    let client = agent(
        "node-a",
        format!(
            "workloads:\n  - {{ namespace: app, name: experimenter, service_account: experimenter, \
             cert: {ca_str}/app.experimenter.pem, key: {ca_str}/app.experimenter.key, \
             address: 127.0.0.1:1 }}\n\
             destinations:\n  - {{ namespace: app, name: calculator, service_account: calculator, \
             address: {app}, node_agent: {hbone} }}\n\
             outbound:\n  - {{ listen: 127.0.0.1:0, source: app/experimenter, destination: {app} }}\n",
            app = app.addr,
            hbone = server.addr
        ),
        &[],
    );
    let entry: SocketAddr = client.ready["outbound"][0]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    let mut open: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(entry).unwrap()).collect();
    for stream in &mut open {
        assert_eq!(request_kept_open(stream), "HTTP/1.1 200 OK");
    }
    // Two tunnels per connection: the sending agent opened a second HBONE connection.
    assert!(
        established_to_port(server.addr.port()) >= 2,
        "4 tunnels at 2 per connection over {} HBONE connection(s)",
        established_to_port(server.addr.port())
    );
    // The app's cap holds across those connections: the fifth tunnel is refused and the
    // app never sees it.
    let mut fifth = TcpStream::connect(entry).unwrap();
    assert_eq!(request_kept_open(&mut fifth), "");
    assert_eq!(app.connections.load(Ordering::SeqCst), 4);

    // A tunnel that ends gives its place back.
    drop(open.pop());
    wait_for(
        "a tunnel once one of the four ended",
        Duration::from_secs(20),
        || {
            let mut next = TcpStream::connect(entry).unwrap();
            (request_kept_open(&mut next) == "HTTP/1.1 200 OK").then_some(())
        },
    );
}
