//! The workload roles as a user runs them: separate processes that print a ready line, E3's
//! application behind a real nginx entry point, structured JSON logs, a SIGTERM that lets an
//! in-flight request finish, and bad arguments rejected with exit code 2.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use http::Uri;
use meshbench_workload::Caller;
use serde_json::{json, Value};

/// A role process; killed if the test ends before it is stopped.
struct Role {
    child: Child,
    addr: String,
    stderr: mpsc::Receiver<String>,
}

impl Role {
    fn spawn(args: &[&str]) -> Role {
        let mut child = Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(args)
            .env("MESHBENCH_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = ready_tx.send(line);
        });
        let line = ready_rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{args:?} printed no ready line"));
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{args:?}: ready line {line:?}: {e}"));
        let addr = ready["addr"].as_str().unwrap().to_owned();
        Role {
            child,
            addr,
            stderr,
        }
    }

    /// An experimenter calling `calculator`.
    fn experimenter(calculator: &Role) -> Role {
        Role::spawn(&[
            "workload",
            "experimenter",
            "--listen",
            "127.0.0.1:0",
            "--calculator",
            &format!("http://{}", calculator.addr),
        ])
    }

    fn url(&self, path: &str) -> Uri {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    /// Waits for a stderr line containing `needle` and returns it.
    fn log_line(&self, needle: &str) -> String {
        loop {
            let line = self
                .stderr
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no log line with {needle:?}"));
            if line.contains(needle) {
                return line;
            }
        }
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGTERM, then the exit code.
    fn stop(mut self) -> Option<i32> {
        self.terminate();
        meshbench_testkit::wait_for("the role to exit", Duration::from_secs(10), || {
            self.child.try_wait().unwrap()
        })
        .code()
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

async fn post(uri: Uri, body: &Value) -> (u16, bytes::Bytes) {
    let call = Caller::new(Duration::from_secs(30))
        .post_json(&uri, body)
        .await;
    match call.outcome {
        meshbench_loadgen::Outcome::Http(status) => (status, call.body),
        other => panic!("{uri}: {other} {:?}", call.error),
    }
}

#[tokio::test]
async fn e3s_application_runs_behind_an_nginx_entry_point() {
    if meshbench_testkit::require_tool("nginx").is_none() {
        return;
    }
    let calculator = Role::spawn(&["workload", "calculator", "--listen", "127.0.0.1:0"]);
    let calc_url = format!("http://{}", calculator.addr);
    let experimenter = Role::experimenter(&calculator);
    let analyzer = Role::spawn(&["workload", "analyzer", "--listen", "127.0.0.1:0"]);
    let listen = free_port();
    let gateway = Role::spawn(&[
        "workload",
        "gateway",
        "--listen",
        &listen,
        "--route",
        &format!("/api/experimenter/=http://{}", experimenter.addr),
        "--route",
        &format!("/api/analyzer/=http://{}", analyzer.addr),
        "--route",
        &format!("/api/calculator/={calc_url}/"),
    ]);

    let health = Caller::new(Duration::from_secs(5))
        .send(
            http::Request::get(gateway.url("/healthz"))
                .body(Default::default())
                .unwrap(),
        )
        .await;
    assert_eq!(health.outcome.to_string(), "http_200");
    let (status, body) = post(
        gateway.url("/api/calculator/divide"),
        &json!({"firstNumber": 9, "secondNumber": 3}),
    )
    .await;
    assert_eq!((status, &body[..]), (200, &br#"{"result":3.0}"#[..]));

    let (status, result) = post(
        gateway.url("/api/experimenter/experiment"),
        &json!({"interactions": 150, "batchSize": 40, "intervalBetweenBatchesInMilliseconds": 10}),
    )
    .await;
    assert_eq!(status, 200);
    let result: Value = serde_json::from_slice(&result).unwrap();
    assert_eq!(result["rttsInMilliseconds"].as_array().unwrap().len(), 150);
    assert_eq!(result["failures"], json!(0));

    let (status, csv) = post(gateway.url("/api/analyzer/analyze"), &result).await;
    assert_eq!(status, 200);
    let csv = String::from_utf8(csv.to_vec()).unwrap();
    assert!(csv.starts_with("RTT90,RTT95,RTT99\n"), "{csv}");

    assert_eq!(gateway.stop(), Some(0));
    assert_eq!(calculator.stop(), Some(0));
    assert_eq!(analyzer.stop(), Some(0));
    assert_eq!(experimenter.stop(), Some(0));
}

// Multi-threaded: the test thread blocks reading the role's log while the request runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_an_experiment_in_flight_finish_and_logs_are_json() {
    let calculator = Role::spawn(&[
        "--log-format",
        "json",
        "workload",
        "calculator",
        "--listen",
        "127.0.0.1:0",
    ]);
    let serving: Value = serde_json::from_str(&calculator.log_line("serving")).unwrap();
    assert_eq!(serving["level"], json!("INFO"));
    assert_eq!(serving["fields"]["role"], json!("calculator"));
    assert_eq!(serving["fields"]["address"], json!(calculator.addr));

    let experimenter = Role::experimenter(&calculator);
    let url = experimenter.url("/api/experimenter/experiment");
    let running = tokio::spawn(async move {
        post(
            url,
            &json!({"interactions": 40, "batchSize": 1, "intervalBetweenBatchesInMilliseconds": 20}),
        )
        .await
    });
    experimenter.log_line("experiment started");
    experimenter.terminate();
    let (status, result) = running.await.unwrap();
    assert_eq!(status, 200);
    let result: Value = serde_json::from_slice(&result).unwrap();
    assert_eq!(result["rttsInMilliseconds"].as_array().unwrap().len(), 40);
    assert_eq!(experimenter.stop(), Some(0));
    assert_eq!(calculator.stop(), Some(0));
}

#[test]
fn bad_role_arguments_exit_with_code_2_naming_the_argument() {
    let cases: [(&[&str], &str); 5] = [
        (&["workload", "echo", "--delay", "soon"], "--delay"),
        (&["workload", "echo", "--status", "503:120"], "--status"),
        (
            &["workload", "experimenter", "--calculator", "ftp://calc"],
            "--calculator",
        ),
        (
            &["workload", "gateway", "--route", "api=http://x:1"],
            "--route",
        ),
        (&["workload", "counter", "--next", "not a url"], "--next"),
    ];
    for (args, needle) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
