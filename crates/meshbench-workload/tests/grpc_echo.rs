//! The gRPC echo over real h2c: Fortio's ping contract (sequence, payload, server receive
//! time), the delay and size knobs, and the standard health service.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use meshbench_workload::proto::ping_server_client::PingServerClient;
use meshbench_workload::proto::PingMessage;
use meshbench_workload::{grpc_echo_service, GrpcEchoConfig, Mix};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

async fn start(config: GrpcEchoConfig) -> (String, common::Running) {
    let running = common::start_service(grpc_echo_service(&config).await, None, None).await;
    (format!("http://{}", running.addr), running)
}

fn echoing() -> GrpcEchoConfig {
    GrpcEchoConfig {
        delay: Mix::always(Duration::ZERO),
        response_size: None,
    }
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

#[tokio::test]
async fn ping_echoes_the_sequence_and_payload_with_the_servers_receive_time() {
    let (url, _stop) = start(echoing()).await;
    let mut client = PingServerClient::connect(url).await.unwrap();
    let sent = now_nanos();
    let reply = client
        .ping(PingMessage {
            seq: 42,
            ts: sent,
            payload: "hello".into(),
            delay_nanos: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.seq, 42);
    assert_eq!(reply.payload, "hello");
    assert!(reply.ts >= sent && reply.ts <= now_nanos(), "{reply:?}");
}

#[tokio::test]
async fn delay_and_size_come_from_the_request_or_the_server() {
    let (url, _stop) = start(GrpcEchoConfig {
        delay: Mix::always(Duration::from_millis(20)),
        response_size: Some(Mix::always(100)),
    })
    .await;
    let mut client = PingServerClient::connect(url).await.unwrap();

    let started = Instant::now();
    let reply = client
        .ping(PingMessage::default())
        .await
        .unwrap()
        .into_inner();
    assert!(started.elapsed() >= Duration::from_millis(20));
    assert_eq!(reply.payload.len(), 100);

    // delayNanos, as Fortio's client sends it.
    let started = Instant::now();
    client
        .ping(PingMessage {
            delay_nanos: 40_000_000,
            ..PingMessage::default()
        })
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(40));

    // Metadata knobs, like the HTTP echo's headers.
    let mut request = tonic::Request::new(PingMessage::default());
    request
        .metadata_mut()
        .insert("x-echo-size", "7".parse().unwrap());
    request
        .metadata_mut()
        .insert("x-echo-delay", "0s".parse().unwrap());
    let reply = client.ping(request).await.unwrap().into_inner();
    assert_eq!(reply.payload.len(), 7);

    let mut request = tonic::Request::new(PingMessage::default());
    request
        .metadata_mut()
        .insert("x-echo-size", "lots".parse().unwrap());
    let status = client.ping(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("size="), "{}", status.message());
}

#[tokio::test]
async fn the_standard_health_service_reports_serving() {
    let (url, _stop) = start(echoing()).await;
    let channel = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "fgrpc.PingServer"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "{service:?}");
    }
}

/// The checked-in code of the gRPC echo is what `proto/ping.proto` generates (the build
/// compiles no protobuf code generator).
#[test]
fn the_checked_in_protobuf_code_is_current() {
    use meshbench_testkit::protobuf::{check_generated_code, Proto};
    check_generated_code(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        &[Proto {
            file: "ping.proto",
            server: true,
        }],
    );
}
