//! The reference sidecar pair over real sockets: client -> outbound sidecar -> mTLS ->
//! inbound sidecar -> echo app, under E3's zero-trust policy.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{Lab, STRICT_NO_ADMIN};
use meshbench_dataplane::{bind_admin, serve_admin, ProxyMetrics, ProxyMode, Rotation};
use meshbench_fixtures::{closed_loop, e3_policy};
use meshbench_identity::{bind_ca_server, CertificateAuthority, IssueOptions};
use meshbench_loadgen::{
    run_load, LoadConfig, LoadModel, LoadResult, Outcome, Protocol, Stop, Target,
};

/// E3's zero-trust policy: only the experimenter may call the calculator.
fn policy() -> String {
    e3_policy()
}

fn requests(addr: SocketAddr, n: u64) -> LoadResult {
    run_load(closed_loop(addr, n, 2)).unwrap()
}

fn only_outcome(result: &LoadResult) -> Outcome {
    let outcomes: Vec<_> = result.recorder.outcomes.keys().cloned().collect();
    assert_eq!(outcomes.len(), 1, "{:?}", result.recorder.outcomes);
    outcomes[0].clone()
}

#[test]
fn the_allowed_identity_gets_through_the_sidecar_pair() {
    let lab = Lab::new();
    let calculator = lab.calculator(&policy(), true);
    let experimenter = lab.client("experimenter", calculator, "calculator", true);
    let result = requests(experimenter, 200);
    assert_eq!(only_outcome(&result), Outcome::Http(200));
    assert_eq!(result.sent(), 200);
}

#[test]
fn another_identity_is_denied_by_closing_the_connection() {
    let lab = Lab::new();
    let calculator = lab.calculator(&policy(), true);
    let checker = lab.client("security-checker", calculator, "calculator", true);
    let result = requests(checker, 5);
    assert_eq!(only_outcome(&result), Outcome::ConnectionReset);
}

#[test]
fn strict_refuses_plaintext_and_permissive_admits_it() {
    let lab = Lab::new();
    let strict = lab.calculator(&policy(), true);
    assert_eq!(only_outcome(&requests(strict, 5)), Outcome::ConnectionReset);

    let permissive = lab.calculator("{}", true);
    let result = requests(permissive, 20);
    assert_eq!(
        only_outcome(&result),
        Outcome::Http(200),
        "plaintext detected and admitted"
    );
    // The same PERMISSIVE sidecar still speaks mTLS to a meshed client.
    let meshed = lab.client("experimenter", permissive, "calculator", true);
    assert_eq!(only_outcome(&requests(meshed, 20)), Outcome::Http(200));
}

#[test]
fn a_destination_with_an_unexpected_identity_is_refused_by_the_client_sidecar() {
    let lab = Lab::new();
    let calculator = lab.calculator("{}", true);
    // The client expects the experimenter's identity at that address; the calculator answers.
    let misrouted = lab.client("security-checker", calculator, "experimenter", true);
    assert_eq!(
        only_outcome(&requests(misrouted, 5)),
        Outcome::ConnectionReset
    );
}

#[test]
fn without_mtls_the_pair_forwards_plaintext() {
    let lab = Lab::new();
    let calculator = lab.calculator("{}", false);
    let client = lab.client("experimenter", calculator, "calculator", false);
    assert_eq!(only_outcome(&requests(client, 50)), Outcome::Http(200));
}

/// The calculator's L7 policy: no `/admin`, and only GETs from the experimenter.
fn l7_policy() -> String {
    format!(
        "{STRICT_NO_ADMIN}  - name: calculator-only-from-experimenter
    namespace: app
    workload: calculator
    action: ALLOW
    rules:
      - from: {{ principals: [cluster.local/ns/app/sa/experimenter] }}
        to: {{ methods: [GET] }}
"
    )
}

fn requests_to(url: &str, n: u64) -> LoadResult {
    let mut config =
        LoadConfig::open_loop(Target::parse(url).unwrap(), 1.0, 2, Duration::from_secs(1));
    config.model = LoadModel::ClosedLoop;
    config.stop = Stop::Requests(n);
    config.timeout = Duration::from_secs(2);
    run_load(config).unwrap()
}

#[test]
fn l7_authorizes_every_request_and_answers_403_on_deny() {
    let lab = Lab::new();
    let calculator = lab.calculator_in(&l7_policy(), true, ProxyMode::L7);
    let experimenter = lab.l7_client("experimenter", calculator);
    let ok = requests_to(&format!("http://{experimenter}/"), 200);
    assert_eq!(only_outcome(&ok), Outcome::Http(200));

    let admin = requests_to(&format!("http://{experimenter}/admin/users"), 10);
    assert_eq!(only_outcome(&admin), Outcome::Http(403), "DENY on the path");

    // At L7 a refused identity is an HTTP 403 per request, not a dropped connection.
    let checker = lab.l7_client("security-checker", calculator);
    let denied = requests_to(&format!("http://{checker}/"), 10);
    assert_eq!(only_outcome(&denied), Outcome::Http(403));

    // Peer authentication still works per connection: STRICT refuses plaintext outright.
    let plaintext = requests_to(&format!("http://{calculator}/"), 5);
    assert_eq!(only_outcome(&plaintext), Outcome::ConnectionReset);
}

#[test]
fn l7_shares_pooled_upstream_connections_between_downstream_ones() {
    let mut lab = Lab::new();
    let server_side = Arc::new(ProxyMetrics::new());
    lab.metrics = Some(server_side.clone());
    let calculator = lab.calculator_in(&l7_policy(), true, ProxyMode::L7);
    let experimenter = lab.l7_client("experimenter", calculator);
    let url = format!("http://{experimenter}/");
    let target = || Target::parse(&url).unwrap();
    // 150 downstream HTTP/1.1 connections of two requests each, two at a time.
    let mut config = LoadConfig::open_loop(target(), 1.0, 2, Duration::from_secs(1));
    config.model = LoadModel::ClosedLoop;
    config.stop = Stop::Requests(300);
    config.max_requests_per_connection = Some(2);
    config.timeout = Duration::from_secs(2);
    let reconnecting = run_load(config).unwrap();
    assert_eq!(only_outcome(&reconnecting), Outcome::Http(200));
    // h2c downstream: each request takes a pooled HTTP/1.1 connection and gives it back.
    let mut config = LoadConfig::open_loop(target(), 1.0, 1, Duration::from_secs(1));
    config.model = LoadModel::Users {
        users: 4,
        requests_per_user: 25,
    };
    config.protocol = Protocol::Http2;
    config.timeout = Duration::from_secs(2);
    let h2 = run_load(config).unwrap();
    assert_eq!(only_outcome(&h2), Outcome::Http(200));
    assert_eq!(h2.sent(), 100);
    // Upstream connections reach the server's sidecar; a few served them all.
    let opened = sample(
        &server_side.encode_prometheus_text(),
        r#"meshbench_proxy_tcp_connections_opened_total{direction="inbound"}"#,
    );
    assert!(
        (1.0..=8.0).contains(&opened),
        "{opened} upstream connections for 154 downstream ones"
    );
}

/// The value of the sample `name` with exactly these labels, from an exposition.
fn sample(exposition: &str, name_and_labels: &str) -> f64 {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name_and_labels} in:\n{exposition}"))
}

/// `GET /metrics` on the admin endpoint: the response head and body.
async fn scrape(admin: SocketAddr, accept: Option<&str>) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(admin).await.unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: admin\r\n{accept}Connection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

#[test]
fn metrics_are_served_on_the_admin_port_and_pass_promtool() {
    let mut lab = Lab::new();
    let metrics = Arc::new(ProxyMetrics::new());
    lab.metrics = Some(metrics.clone());
    let calculator = lab.calculator_in(&l7_policy(), true, ProxyMode::L7);
    let experimenter = lab.l7_client("experimenter", calculator);
    let checker = lab.l7_client("security-checker", calculator);
    assert_eq!(
        only_outcome(&requests_to(&format!("http://{experimenter}/"), 30)),
        Outcome::Http(200)
    );
    assert_eq!(
        only_outcome(&requests_to(&format!("http://{checker}/"), 7)),
        Outcome::Http(403)
    );

    let admin = lab
        .runtime
        .block_on(bind_admin("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let admin_addr = admin.local_addr().unwrap();
    lab.runtime
        .spawn(serve_admin(admin, metrics, std::future::pending()));
    let (head, exposition) = lab.runtime.block_on(scrape(admin_addr, None));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    let inbound_ok = r#"meshbench_proxy_responses_total{direction="inbound",status_code="200"}"#;
    let inbound_403 = r#"meshbench_proxy_responses_total{direction="inbound",status_code="403"}"#;
    assert_eq!(sample(&exposition, inbound_ok), 30.0);
    assert_eq!(sample(&exposition, inbound_403), 7.0);
    assert_eq!(
        sample(
            &exposition,
            r#"meshbench_proxy_authorization_decisions_total{decision="deny"}"#
        ),
        7.0
    );
    assert_eq!(
        sample(
            &exposition,
            r#"meshbench_proxy_authorization_decisions_total{decision="allow"}"#
        ),
        30.0
    );
    assert!(
        sample(
            &exposition,
            r#"meshbench_proxy_tls_handshake_duration_seconds_count{direction="inbound"}"#
        ) >= 2.0
    );
    // 30 echo responses of 512 bytes each, plus the 403s, went back through the L7 path.
    let returned = sample(
        &exposition,
        r#"meshbench_proxy_tcp_bytes_total{direction="inbound",flow="backward"}"#,
    );
    assert!(returned > 30.0 * 512.0, "{returned} bytes");
    let expiry = sample(
        &exposition,
        "meshbench_proxy_certificate_expiration_timestamp_seconds",
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        expiry > now && expiry < now + 2.0 * 86_400.0,
        "expiry {expiry}"
    );

    let (head, openmetrics) = lab
        .runtime
        .block_on(scrape(admin_addr, Some("application/openmetrics-text")));
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(openmetrics.trim_end().ends_with("# EOF"));

    let Some(promtool) = meshbench_testkit::require_tool("promtool") else {
        return;
    };
    let mut check = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool rejected the exposition: {}{}\n{exposition}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn svids_rotate_under_load_without_failing_a_request() {
    let mut lab = Lab::new();
    // Two-second SVIDs, renewed at half-life: several rotations within the run, and the
    // first SVIDs expire while connections made with them are still carrying requests.
    let ca = CertificateAuthority::load(&lab.ca_dir).unwrap();
    let short = IssueOptions {
        ttl: Some(Duration::from_secs(2)),
        ..IssueOptions::default()
    };
    for sa in ["calculator", "experimenter"] {
        ca.issue("app", sa, &short)
            .unwrap()
            .write(&lab.ca_dir, sa)
            .unwrap();
    }
    let ca_service = lab
        .runtime
        .block_on(bind_ca_server(
            ca,
            "127.0.0.1:0".parse().unwrap(),
            Duration::from_secs(2),
        ))
        .unwrap();
    lab.rotation = Some(Rotation {
        ca_endpoint: ca_service.local_addr().unwrap(),
        fraction: 0.5,
    });
    lab.runtime.spawn(ca_service.serve(std::future::pending()));
    let metrics = Arc::new(ProxyMetrics::new());
    lab.metrics = Some(metrics.clone());
    let calculator = lab.calculator(&policy(), true);
    let experimenter = lab.client("experimenter", calculator, "calculator", true);

    let mut config = LoadConfig::open_loop(
        Target::parse(&format!("http://{experimenter}/")).unwrap(),
        200.0,
        4,
        Duration::from_secs(5),
    );
    // Some connections outlive every rotation; others are replaced and handshake again.
    config.max_requests_per_connection = Some(100);
    config.timeout = Duration::from_secs(2);
    let result = run_load(config).unwrap();
    assert_eq!(only_outcome(&result), Outcome::Http(200));

    let exposition = metrics.encode_prometheus_text();
    assert!(
        sample(&exposition, "meshbench_proxy_certificate_rotations_total") >= 3.0,
        "{exposition}"
    );
}
