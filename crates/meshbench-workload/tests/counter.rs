//! E4's counter chain over real sockets: two deployments forwarding to each other until
//! count == max_count, per-hop timing, and failures reported at once (never retried) with
//! the hop where they happened.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{closed_port, post, start};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_workload::{CountReply, Counter};
use serde_json::json;

/// Starts counters A and B, each forwarding to the other; returns A. B binds first so A
/// knows where to forward, and B forwards to `b_next`.
async fn chain(b_next: Option<http::Uri>) -> (common::Running, common::Running) {
    let b =
        start(Counter::new("counter-b", b_next.as_ref(), Duration::from_secs(5)).unwrap()).await;
    let a =
        start(Counter::new("counter-a", Some(&b.base()), Duration::from_secs(5)).unwrap()).await;
    (a, b)
}

#[tokio::test]
async fn a_request_crosses_max_count_services_with_timing_per_hop() {
    // a -> b -> c, where c (no --next) must be the last hop: max_count 3.
    let c = start(Counter::new("counter-c", None, Duration::from_secs(5)).unwrap()).await;
    let (a, _b) = chain(Some(c.base())).await;
    let (status, reply) = post(a.url("/count"), r#"{"count": 0, "max_count": 3}"#).await;
    assert_eq!(status, 200, "{reply}");
    let reply: CountReply = serde_json::from_value(reply).unwrap();
    assert_eq!((reply.count, reply.max_count), (3, 3));
    let names: Vec<&str> = reply.hops.iter().map(|h| h.service.as_str()).collect();
    assert_eq!(names, ["counter-a", "counter-b", "counter-c"]);
    let counts: Vec<u64> = reply.hops.iter().map(|h| h.count).collect();
    assert_eq!(counts, [1, 2, 3]);
    for pair in reply.hops.windows(2) {
        let downstream = pair[0].downstream_ms.unwrap();
        assert!(pair[0].total_ms >= downstream, "{pair:?}");
        assert!(downstream >= pair[1].total_ms, "{pair:?}");
    }
    assert_eq!(reply.hops[2].downstream_ms, None);
}

#[tokio::test]
async fn two_deployments_ping_pong_until_the_count_is_reached() {
    // Each forwards to the other, so B's port is reserved first for A to point at.
    let b_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b_addr = b_listener.local_addr().unwrap();
    drop(b_listener);
    let a = start(
        Counter::new(
            "counter-a",
            Some(&format!("http://{b_addr}").parse().unwrap()),
            Duration::from_secs(5),
        )
        .unwrap(),
    )
    .await;
    let b = Counter::new("counter-b", Some(&a.base()), Duration::from_secs(5)).unwrap();
    let server = meshbench_workload::bind(&meshbench_workload::ServeOptions {
        listen: b_addr,
        tls: None,
        drain_timeout: Duration::from_secs(1),
    })
    .await
    .unwrap();
    tokio::spawn(server.serve(
        meshbench_workload::RoleService::new(b),
        std::future::pending(),
    ));
    let (status, reply) = post(a.url("/count"), r#"{"count": 0, "max_count": 10}"#).await;
    assert_eq!(status, 200, "{reply}");
    let reply: CountReply = serde_json::from_value(reply).unwrap();
    assert_eq!(reply.count, 10);
    assert_eq!(reply.hops.len(), 10);
    assert!(reply
        .hops
        .iter()
        .enumerate()
        .all(|(i, h)| h.service == if i % 2 == 0 { "counter-a" } else { "counter-b" }));
}

#[tokio::test]
async fn a_failed_hop_is_reported_with_where_it_failed_and_never_retried() {
    // B forwards to nothing: refused at B, reported through A.
    let closed = closed_port();
    let (a, _b) = chain(Some(format!("http://{}", closed.addr).parse().unwrap())).await;
    let (status, reply) = post(a.url("/count"), r#"{"count": 0, "max_count": 5}"#).await;
    assert_eq!(status, 502, "{reply}");
    assert_eq!(reply["failed_at"], json!("counter-b"));
    assert_eq!(reply["outcome"], json!("connect_refused"));
    assert_eq!(reply["count"], json!(2));

    // B forwards to a service that answers 503 and counts what it gets: exactly one request.
    let hits = Arc::new(AtomicU64::new(0));
    let unavailable = serve_503(hits.clone()).await;
    let (a, _b) = chain(Some(format!("http://{unavailable}").parse().unwrap())).await;
    let (status, reply) = post(a.url("/count"), r#"{"count": 0, "max_count": 5}"#).await;
    assert_eq!(status, 502, "{reply}");
    assert_eq!(reply["failed_at"], json!("counter-b"));
    assert_eq!(reply["outcome"], json!("http_503"));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the failing hop was retried"
    );
}

#[tokio::test]
async fn bad_counts_are_rejected_naming_the_field() {
    let c = start(Counter::new("counter", None, Duration::from_secs(5)).unwrap()).await;
    for (body, message) in [
        (r#"{"count": 0}"#, "max_count: missing"),
        (
            r#"{"count": 5, "max_count": 5}"#,
            "count: 5 must be less than max_count (5)",
        ),
        (
            r#"{"count": -1, "max_count": 5}"#,
            "count: expected a whole number",
        ),
    ] {
        let (status, reply) = post(c.url("/count"), body).await;
        assert_eq!(status, 400, "{body}");
        let error = reply["error"].as_str().unwrap();
        assert!(error.contains(message), "{body}: {error}");
    }
    // Without --next, a chain that must go on fails at once.
    let (status, reply) = post(c.url("/count"), r#"{"count": 0, "max_count": 2}"#).await;
    assert_eq!(status, 502);
    assert_eq!(reply["outcome"], json!("no_next_service"));
}

/// A plain HTTP server answering 503 to everything, counting requests.
async fn serve_503(hits: Arc<AtomicU64>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let hits = hits.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req| {
                    hits.fetch_add(1, Ordering::SeqCst);
                    async {
                        Ok::<_, Infallible>(
                            http::Response::builder()
                                .status(503)
                                .body(Full::new(Bytes::new()))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}
