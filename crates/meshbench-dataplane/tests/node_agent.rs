//! Two node agents over real sockets: app -> agent (node a) -> HBONE (HTTP/2 CONNECT over
//! mTLS) -> agent (node b) -> app, with each workload's own SVID and the shared policy engine.

use std::net::SocketAddr;
use std::sync::Arc;

use meshbench_dataplane::{
    run_node_agent, Limits, LocalWorkload, NodeAgentConfig, NodeAgentFile, OutboundListener,
    ProxyMetrics, RemoteWorkload, ServiceEndpoint,
};
use meshbench_fixtures::{closed_loop, e3_policy, local_workload, node_agent_file, TestPki};
use meshbench_loadgen::{run_load, LoadResult, Outcome};
use meshbench_policy::Policy;
use meshbench_role::InputFault;

const ANY: &str = meshbench_fixtures::ANY;

struct Lab {
    pki: TestPki,
    runtime: tokio::runtime::Runtime,
}

impl Lab {
    fn new() -> Self {
        Lab {
            pki: TestPki::e3(),
            runtime: meshbench_workload::runtime(Some(1)).unwrap(),
        }
    }

    fn echo_app(&self) -> SocketAddr {
        meshbench_fixtures::echo_app(&self.runtime)
    }

    fn workload(&self, sa: &str, address: SocketAddr) -> LocalWorkload {
        local_workload(&self.pki, sa, address)
    }

    fn file(&self, node: &str, workloads: Vec<LocalWorkload>) -> NodeAgentFile {
        node_agent_file(&self.pki, node, workloads)
    }

    /// Starts an agent under E3's policy; returns its HBONE address and outbound listeners.
    fn agent(
        &self,
        file: NodeAgentFile,
        metrics: Option<Arc<ProxyMetrics>>,
    ) -> (SocketAddr, Vec<SocketAddr>) {
        self.agent_limited(file, metrics, Limits::default())
    }

    fn agent_limited(
        &self,
        file: NodeAgentFile,
        metrics: Option<Arc<ProxyMetrics>>,
        limits: Limits,
    ) -> (SocketAddr, Vec<SocketAddr>) {
        let bound = self
            .runtime
            .block_on(run_node_agent(NodeAgentConfig {
                file,
                policy: Arc::new(Policy::from_yaml(&e3_policy()).unwrap()),
                tls: Default::default(),
                metrics,
                limits,
            }))
            .unwrap();
        let addrs = (bound.hbone_addr().unwrap(), bound.outbound_addrs());
        self.runtime.spawn(bound.serve(std::future::pending()));
        addrs
    }
}

/// A workload of namespace `app` on another node, its service account named as it is.
fn remote(name: &str, address: SocketAddr, node_agent: SocketAddr) -> RemoteWorkload {
    RemoteWorkload {
        namespace: "app".into(),
        name: name.into(),
        service_account: name.into(),
        address,
        node_agent,
    }
}

/// Node a: the experimenter, with one outbound listener to the calculator at `calculator`,
/// whose node's agent is `node_b`.
fn experimenter_to_calculator(
    lab: &Lab,
    calculator: SocketAddr,
    node_b: SocketAddr,
) -> NodeAgentFile {
    let mut node_a = lab.file(
        "node-a",
        vec![lab.workload("experimenter", "127.0.0.1:1".parse().unwrap())],
    );
    node_a.destinations = vec![remote("calculator", calculator, node_b)];
    node_a.outbound = vec![outbound("experimenter", calculator)];
    node_a
}

fn outbound(source: &str, destination: SocketAddr) -> OutboundListener {
    OutboundListener {
        listen: ANY.parse().unwrap(),
        source: format!("app/{source}"),
        destination,
    }
}

fn load(addr: SocketAddr, n: u64, per_connection: Option<u64>) -> LoadResult {
    let mut config = closed_loop(addr, n, 4);
    config.max_requests_per_connection = per_connection;
    run_load(config).unwrap()
}

fn outcomes(result: &LoadResult) -> Vec<Outcome> {
    result.recorder.outcomes.keys().cloned().collect()
}

fn sample(metrics: &ProxyMetrics, name_and_labels: &str) -> f64 {
    let exposition = metrics.encode_prometheus_text();
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

const INBOUND_HANDSHAKES: &str =
    r#"meshbench_proxy_tls_handshake_duration_seconds_count{direction="inbound"}"#;
const INBOUND_TUNNELS: &str =
    r#"meshbench_proxy_tcp_connections_opened_total{direction="inbound"}"#;

#[test]
fn connections_between_nodes_share_one_mtls_connection_as_http2_streams() {
    let lab = Lab::new();
    let app = lab.echo_app();
    let node_b_metrics = Arc::new(ProxyMetrics::new());
    let (node_b, _) = lab.agent(
        lab.file("node-b", vec![lab.workload("calculator", app)]),
        Some(node_b_metrics.clone()),
    );
    let mut node_a = lab.file(
        "node-a",
        vec![
            lab.workload("experimenter", "127.0.0.1:1".parse().unwrap()),
            lab.workload("security-checker", "127.0.0.1:2".parse().unwrap()),
        ],
    );
    node_a.destinations = vec![remote("calculator", app, node_b)];
    node_a.outbound = vec![
        outbound("experimenter", app),
        outbound("security-checker", app),
    ];
    let (_, listeners) = lab.agent(node_a, None);

    // 200 requests over app connections of 10 requests each: 20+ tunnels, one HBONE connection.
    let allowed = load(listeners[0], 200, Some(10));
    assert_eq!(outcomes(&allowed), vec![Outcome::Http(200)]);
    assert_eq!(sample(&node_b_metrics, INBOUND_HANDSHAKES), 1.0);
    assert!(sample(&node_b_metrics, INBOUND_TUNNELS) >= 20.0);

    // Another identity from the same node is refused by the destination's policy.
    let denied = load(listeners[1], 8, None);
    assert!(
        !outcomes(&denied).contains(&Outcome::Http(200)),
        "{:?}",
        denied.recorder.outcomes
    );
    assert!(
        sample(
            &node_b_metrics,
            r#"meshbench_proxy_authorization_decisions_total{decision="deny"}"#
        ) >= 1.0
    );
    // Its tunnels ran over a connection of its own: the checker's SVID, not the experimenter's.
    assert_eq!(sample(&node_b_metrics, INBOUND_HANDSHAKES), 2.0);
}

/// An echo app answering every request with `status`, to tell a workload's pods apart.
fn echo_answering(lab: &Lab, status: http::StatusCode) -> SocketAddr {
    use meshbench_workload::{bind, Echo, EchoConfig, Mix, RoleService, ServeOptions};
    let server = lab
        .runtime
        .block_on(bind(&ServeOptions {
            listen: ANY.parse().unwrap(),
            tls: None,
            drain_timeout: std::time::Duration::from_millis(100),
        }))
        .unwrap();
    let addr = server.local_addr();
    let config = EchoConfig {
        status: Mix::always(status),
        ..EchoConfig::fixed(std::time::Duration::ZERO, 16)
    };
    lab.runtime
        .spawn(server.serve(RoleService::new(Echo::new(&config)), std::future::pending()));
    addr
}

#[test]
fn a_service_of_two_pods_on_another_node_gets_tunnels_to_both() {
    let lab = Lab::new();
    // Two pods of the calculator on node b, one SVID for both; they answer 200 and 201.
    let pods = [
        echo_answering(&lab, http::StatusCode::OK),
        echo_answering(&lab, http::StatusCode::CREATED),
    ];
    let (node_b, _) = lab.agent(
        lab.file(
            "node-b",
            pods.iter()
                .map(|&p| lab.workload("calculator", p))
                .collect(),
        ),
        None,
    );
    let service: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut node_a = lab.file(
        "node-a",
        vec![lab.workload("experimenter", "127.0.0.1:1".parse().unwrap())],
    );
    node_a.destinations = pods
        .iter()
        .map(|&address| remote("calculator", address, node_b))
        .collect();
    node_a.services = pods
        .iter()
        .map(|&endpoint| ServiceEndpoint {
            address: service,
            endpoint,
        })
        .collect();
    node_a.outbound = vec![outbound("experimenter", service)];
    let (_, listeners) = lab.agent(node_a, None);

    // A connection per request, each to the service's next pod.
    let result = load(listeners[0], 20, Some(1));
    assert_eq!(
        outcomes(&result),
        vec![Outcome::Http(200), Outcome::Http(201)],
        "{:?}",
        result.recorder.outcomes
    );
}

#[test]
fn same_node_traffic_is_encrypted_only_when_configured() {
    for encrypted in [true, false] {
        let lab = Lab::new();
        let app = lab.echo_app();
        let metrics = Arc::new(ProxyMetrics::new());
        let mut file = lab.file(
            "node-a",
            vec![
                lab.workload("calculator", app),
                lab.workload("experimenter", "127.0.0.1:1".parse().unwrap()),
                lab.workload("security-checker", "127.0.0.1:2".parse().unwrap()),
            ],
        );
        file.same_node_encryption = encrypted;
        file.outbound = vec![
            outbound("experimenter", app),
            outbound("security-checker", app),
        ];
        let (_, listeners) = lab.agent(file, Some(metrics.clone()));

        let allowed = load(listeners[0], 50, None);
        assert_eq!(outcomes(&allowed), vec![Outcome::Http(200)]);
        let handshakes = sample(&metrics, INBOUND_HANDSHAKES);
        if encrypted {
            assert_eq!(handshakes, 1.0, "same-node tunnel over mTLS");
        } else {
            assert_eq!(handshakes, 0.0, "same-node traffic skips TLS");
        }
        // Policy holds either way.
        let denied = load(listeners[1], 4, None);
        assert!(!outcomes(&denied).contains(&Outcome::Http(200)));
    }
}

#[test]
fn an_agent_without_the_destination_workload_cannot_impersonate_it() {
    let lab = Lab::new();
    let app = lab.echo_app();
    // node-b holds only the checker's SVID, yet node-a is told the calculator lives there.
    let (node_b, _) = lab.agent(
        lab.file("node-b", vec![lab.workload("security-checker", app)]),
        None,
    );
    let calculator: SocketAddr = "127.0.0.1:3".parse().unwrap();
    let (_, listeners) = lab.agent(experimenter_to_calculator(&lab, calculator, node_b), None);
    let result = load(listeners[0], 4, None);
    assert!(!outcomes(&result).contains(&Outcome::Http(200)));
}

#[test]
fn a_bad_configuration_names_what_is_wrong() {
    let lab = Lab::new();
    let mut file = lab.file(
        "node-a",
        vec![lab.workload("experimenter", "127.0.0.1:1".parse().unwrap())],
    );
    file.outbound = vec![outbound("nobody", "127.0.0.1:1".parse().unwrap())];
    let err = lab
        .runtime
        .block_on(run_node_agent(NodeAgentConfig {
            file,
            policy: Arc::new(Policy::from_yaml("{}").unwrap()),
            tls: Default::default(),
            metrics: None,
            limits: Default::default(),
        }))
        .err()
        .unwrap();
    assert!(err.to_string().contains("app/nobody"), "{err}");
    assert!(err.is_bad_input());
}

/// A peer agent that accepts connections and never answers (a black hole): tunnels to it wait
/// for their connect timeout, and tunnels to every other peer go on meanwhile. The pool held
/// one lock across every dial, so one such peer stalled every tunnel from the node.
#[test]
fn a_black_holed_peer_agent_stalls_only_its_own_tunnels() {
    use std::io::{ErrorKind, Read, Write};
    let lab = Lab::new();
    let app = lab.echo_app();
    let (node_b, _) = lab.agent(
        lab.file("node-b", vec![lab.workload("calculator", app)]),
        None,
    );
    let black_hole = std::net::TcpListener::bind(ANY).unwrap();
    let held = std::thread::spawn({
        let black_hole = black_hole.try_clone().unwrap();
        move || {
            // Accepted and kept, never read from nor written to.
            let mut kept = Vec::new();
            for stream in black_hole.incoming().take(4) {
                kept.push(stream);
            }
            kept
        }
    });
    let unreachable_app: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut node_a = lab.file(
        "node-a",
        vec![lab.workload("experimenter", "127.0.0.1:1".parse().unwrap())],
    );
    node_a.destinations = vec![
        remote("calculator", app, node_b),
        remote(
            "security-checker",
            unreachable_app,
            black_hole.local_addr().unwrap(),
        ),
    ];
    node_a.outbound = vec![
        outbound("experimenter", app),
        outbound("experimenter", unreachable_app),
    ];
    let (_, listeners) = lab.agent(node_a, None);
    // A tunnel into the black hole, dialling (for up to the 10 s connect timeout)...
    let mut stuck = std::net::TcpStream::connect(listeners[1]).unwrap();
    stuck
        .write_all(b"GET / HTTP/1.1\r\nhost: checker\r\n\r\n")
        .unwrap();
    // ...while tunnels to the healthy peer are answered, each within its 2 s timeout.
    let healthy = load(listeners[0], 20, Some(5));
    assert_eq!(outcomes(&healthy), vec![Outcome::Http(200)]);
    stuck.set_nonblocking(true).unwrap();
    let mut byte = [0u8];
    assert!(
        matches!(stuck.read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the black-holed tunnel was still dialling while the others were served"
    );
    drop(stuck);
    drop(black_hole);
    drop(held);
}

/// The receiving agent closes an HBONE connection that stays idle (HTTP/2 GOAWAY); the
/// sending agent's next tunnel must not be sent into it, but over a new connection.
#[test]
fn a_tunnel_after_the_peer_closed_an_idle_connection_gets_a_new_one() {
    let lab = Lab::new();
    let app = lab.echo_app();
    let node_b_metrics = Arc::new(ProxyMetrics::new());
    let idle = std::time::Duration::from_millis(300);
    let (node_b, _) = lab.agent_limited(
        lab.file("node-b", vec![lab.workload("calculator", app)]),
        Some(node_b_metrics.clone()),
        Limits {
            idle_timeout: idle,
            ..Limits::default()
        },
    );
    let (_, listeners) = lab.agent(experimenter_to_calculator(&lab, app, node_b), None);

    assert_eq!(
        outcomes(&load(listeners[0], 4, Some(1))),
        vec![Outcome::Http(200)]
    );
    assert_eq!(sample(&node_b_metrics, INBOUND_HANDSHAKES), 1.0);
    // Idle, node b closes the connection (between one and two periods later, at its idle
    // clock's ticks); tunnels opened meanwhile and after must all be answered, until one
    // has been seen to go over a new connection.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while sample(&node_b_metrics, INBOUND_HANDSHAKES) < 2.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "node a never opened a second connection"
        );
        // Long enough for the connection to go idle: the load after it races the close.
        std::thread::sleep(idle * 3);
        assert_eq!(
            outcomes(&load(listeners[0], 2, Some(1))),
            vec![Outcome::Http(200)]
        );
    }
}
