//! Unary gRPC load against the real grpc-echo server (tonic, Fortio's ping service): every
//! call's gRPC status becomes its outcome, over h2c and over h2 with mTLS.

mod common;

use std::time::Duration;

use common::{echo_server, grpc_echo_server};
use http::{HeaderName, HeaderValue};
use meshbench_loadgen::{
    run_load, LoadConfig, LoadModel, LoadResult, Outcome, Protocol, Stop, Target,
};

fn grpc_config(url: &str, requests: u64) -> LoadConfig {
    let mut config =
        LoadConfig::open_loop(Target::parse(url).unwrap(), 1.0, 4, Duration::from_secs(1));
    config.model = LoadModel::ClosedLoop;
    config.stop = Stop::Requests(requests);
    config.protocol = Protocol::Grpc;
    config.request.body = meshbench_workload::ping_request(64).into();
    config
}

fn outcomes(config: LoadConfig) -> Vec<(String, u64)> {
    let result = run_load(config).unwrap();
    result
        .recorder
        .outcomes
        .iter()
        .map(|(o, n)| (o.to_string(), *n))
        .collect()
}

/// Every one of the `calls` ended in gRPC status OK, over `protocol`.
fn assert_all_ok(result: &LoadResult, calls: u64, protocol: &str) {
    let outcomes = &result.recorder.outcomes;
    assert_eq!(
        outcomes.get(&Outcome::Grpc(0)),
        Some(&calls),
        "{outcomes:?}"
    );
    assert_eq!(result.to_report().protocol.as_deref(), Some(protocol));
}

#[test]
fn grpc_calls_end_in_their_grpc_status() {
    let server = grpc_echo_server(None);
    let base = format!("http://{}", server.addr);

    // No path: Fortio's ping method.
    let result = run_load(grpc_config(&base, 300)).unwrap();
    assert_all_ok(&result, 300, "grpc (h2c)");

    // Another method of the server, with its own (empty) message.
    let mut health = grpc_config(&format!("{base}/grpc.health.v1.Health/Check"), 20);
    health.request.body = bytes::Bytes::new();
    assert_eq!(outcomes(health), [("grpc_ok".to_owned(), 20)]);

    // A method the server does not have, and metadata the server rejects.
    let missing = grpc_config(&format!("{base}/fgrpc.PingServer/Nope"), 20);
    assert_eq!(outcomes(missing), [("grpc_unimplemented".to_owned(), 20)]);
    let mut bad_metadata = grpc_config(&base, 20);
    bad_metadata.request.headers = vec![(
        HeaderName::from_static("x-echo-delay"),
        HeaderValue::from_static("soon"),
    )];
    assert_eq!(
        outcomes(bad_metadata),
        [("grpc_invalid_argument".to_owned(), 20)]
    );
}

#[test]
fn grpc_to_a_plain_http_server_is_mapped_from_its_http_status_and_refusal_is_a_connection_class() {
    // An HTTP/2 server that is not a gRPC server answers 200 without grpc-status: gRPC clients
    // report that as an error, not as OK.
    let echo = echo_server(Duration::ZERO, None);
    let statuses = outcomes(grpc_config(&format!("http://{}", echo.addr), 10));
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert!(
        statuses[0].0.starts_with("grpc_") && statuses[0].0 != "grpc_ok",
        "{statuses:?}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    assert_eq!(
        outcomes(grpc_config(&format!("http://{addr}"), 5)),
        [("connect_refused".to_owned(), 5)]
    );
}

#[test]
fn grpc_over_mtls_negotiates_h2() {
    let dir = tempfile::tempdir().unwrap();
    let (server_tls, tls) = common::mtls(dir.path());
    let server = grpc_echo_server(Some(server_tls));
    let mut config = grpc_config(&format!("https://{}", server.addr), 100);
    config.tls = Some(tls);
    let result = run_load(config).unwrap();
    assert_all_ok(&result, 100, "grpc (h2)");
}
