//! The serving code's connection limits over real sockets: an HTTP/2 connection with no open
//! stream is closed after the idle timeout (its client answering pings does not keep it), a
//! stream that takes longer than the timeout keeps its connection, and the workloads' own
//! limits have no idle timeout at all.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_workload::{ConnectionLimits, Echo, EchoConfig, RoleService};
use tokio::net::TcpStream;

mod common;

const IDLE: Duration = Duration::from_millis(500);

/// An echo server that answers after `delay`, with the control listeners' limits but a short
/// HTTP/2 idle timeout.
async fn start(delay: Duration) -> common::Running {
    let limits = ConnectionLimits {
        h2_idle_timeout: Some(IDLE),
        ..ConnectionLimits::control()
    };
    let echo = RoleService::new(Echo::new(&EchoConfig::fixed(delay, 1024)));
    common::start_service(echo, None, Some(limits)).await
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_and_an_open_stream_keeps_its_own() {
    let server = start(IDLE * 3).await;
    let addr = server.addr;

    // Nothing asked: the server says GOAWAY once the timeout has passed, and the connection
    // ends, though the client is there to answer pings.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (_sender, conn) = hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), conn)
        .await
        .expect("an idle HTTP/2 connection is closed")
        .unwrap();
    let lasted = started.elapsed();
    assert!(lasted >= IDLE - Duration::from_millis(100), "{lasted:?}");

    // A request answered after three timeouts: its stream holds the connection open.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    let driver = tokio::spawn(conn);
    let request = http::Request::get(format!("http://{addr}/"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.len(), 1024);
    // And once it is answered, the connection is idle, and closed.
    tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("closed after its last stream")
        .unwrap()
        .unwrap();
}

#[test]
fn the_workloads_keep_their_connections_and_the_control_listeners_do_not() {
    let workload = ConnectionLimits::workload();
    assert_eq!(workload.h2_idle_timeout, None);
    assert!(workload.max_connections >= 2 * 65_536);
    let control = ConnectionLimits::control();
    assert_eq!(control.max_connections, 256);
    assert_eq!(control.sniff_timeout, Duration::from_secs(10));
    assert_eq!(control.h2_idle_timeout, Some(Duration::from_secs(60)));
}
