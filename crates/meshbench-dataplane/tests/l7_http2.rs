//! The L7 sidecar's HTTP/2 path under a client that opens many streams: each stream used to
//! pin an upstream HTTP/1.1 connection of its own (5 connections x 200 streams opened 1002
//! connections to the app). Streams per connection and connections per upstream are bounded
//! now, as Envoy's circuit breakers bound them, and requests past the bound wait their turn.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::Lab;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_dataplane::{Limits, ProxyMode, SidecarConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Connections the app has accepted, and the most it has had open at once.
#[derive(Default)]
struct AppCounts {
    accepted: AtomicUsize,
    open: AtomicUsize,
    most_open: AtomicUsize,
}

/// An HTTP/1.1 app that answers each request after 50 ms.
async fn slow_app(counts: Arc<AppCounts>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let counts = counts.clone();
            counts.accepted.fetch_add(1, Ordering::SeqCst);
            let open = counts.open.fetch_add(1, Ordering::SeqCst) + 1;
            counts.most_open.fetch_max(open, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            break;
                        }
                    }
                    match stream.read_buf(&mut buf).await {
                        Ok(1..) => {}
                        _ => break,
                    }
                }
                counts.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    addr
}

#[test]
fn many_http2_streams_share_a_bounded_set_of_upstream_connections() {
    let lab = Lab::new();
    let counts = Arc::new(AppCounts::default());
    let app = lab.runtime.block_on(slow_app(counts.clone()));
    let limits = Limits {
        max_upstream_connections: 3,
        max_streams_per_connection: 20,
        ..Limits::default()
    };
    // Plaintext, no identity and no metrics: only the upstream pool is under test.
    let (inbound, _) = lab.sidecar(SidecarConfig {
        identity: None,
        metrics: None,
        limits,
        ..lab.calculator_config(app, "{}", false, ProxyMode::L7)
    });
    let proxy = inbound.unwrap();
    let statuses = lab.runtime.block_on(async move {
        let mut requests = Vec::new();
        for _ in 0..2 {
            let tcp = TcpStream::connect(proxy).await.unwrap();
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            for i in 0..40 {
                let mut sender = sender.clone();
                requests.push(tokio::spawn(async move {
                    // Streams opened before the proxy's SETTINGS arrive may be refused past
                    // its limit (REFUSED_STREAM: never processed, safe to send again).
                    loop {
                        let request = http::Request::builder()
                            .uri(format!("http://calc/{i}"))
                            .body(Empty::<Bytes>::new())
                            .unwrap();
                        match sender.send_request(request).await {
                            Ok(response) => {
                                let status = response.status().as_u16();
                                response.into_body().collect().await.unwrap();
                                return status;
                            }
                            Err(e) => {
                                assert!(format!("{e:?}").contains("REFUSED_STREAM"), "{e:?}");
                            }
                        }
                    }
                }));
            }
        }
        let mut statuses = Vec::new();
        for request in requests {
            statuses.push(request.await.unwrap());
        }
        statuses
    });
    assert_eq!(statuses.len(), 80);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let most_open = counts.most_open.load(Ordering::SeqCst);
    assert!(
        most_open <= 3,
        "the app had {most_open} connections open at once (limit 3)"
    );
}
