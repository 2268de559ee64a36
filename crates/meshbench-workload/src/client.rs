//! The HTTP client the roles that call other services use (experimenter, security checker,
//! counter). It pools keep-alive connections like an application's client would, never
//! retries behind the caller's back (E4's counter hid failed hops that way), times each call
//! until the whole response body is read (E3's experimenter stopped at the headers), and sorts
//! every failure into the load generator's [`Outcome`] classes.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use meshbench_loadgen::Outcome;

/// Marks requests whose body carries a marker, so a wire capture can look for it.
pub const MARKER_HEADER: &str = "x-meshbench-marker";

#[derive(Clone)]
pub struct Caller {
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

/// One call's result: the outcome class, the response body (empty on failure), the time
/// from sending until the body was read, and the error text when there was no response.
#[derive(Debug, Clone)]
pub struct Call {
    pub outcome: Outcome,
    pub body: Bytes,
    pub elapsed: Duration,
    pub error: Option<String>,
}

impl Call {
    pub fn is_success(&self) -> bool {
        self.outcome.is_success()
    }
}

impl Caller {
    /// `timeout` bounds each whole call: connecting, sending and reading the response.
    pub fn new(timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new())
            .retry_canceled_requests(false)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Caller { client, timeout }
    }

    pub async fn get(&self, uri: &Uri) -> Call {
        let request = Request::get(uri.clone())
            .body(Full::new(Bytes::new()))
            .expect("a parsed URI makes a valid request");
        self.send(request).await
    }

    pub async fn post_json(&self, uri: &Uri, body: &serde_json::Value) -> Call {
        self.post_json_marked(uri, body, None).await
    }

    /// Posts `body`; with a `marker`, also in the [`MARKER_HEADER`] header (the caller puts
    /// it in the body), so a capture can tell whether the request crossed the wire in
    /// plaintext.
    pub async fn post_json_marked(
        &self,
        uri: &Uri,
        body: &serde_json::Value,
        marker: Option<&str>,
    ) -> Call {
        let body = Bytes::from(serde_json::to_vec(body).expect("a JSON value serializes"));
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(uri.clone())
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(marker) = marker {
            request = request.header(MARKER_HEADER, marker);
        }
        let request = request
            .body(Full::new(body))
            .expect("a parsed URI and a marker header value make a valid request");
        self.send(request).await
    }

    pub async fn send(&self, request: Request<Full<Bytes>>) -> Call {
        let started = Instant::now();
        let exchange = async {
            let response = self.client.request(request).await?;
            let status = response.status().as_u16();
            // A peer's answer is read up to the roles' body limit, not without bound.
            let body = http_body_util::Limited::new(response.into_body(), crate::http::MAX_BODY)
                .collect()
                .await?
                .to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body))
        };
        let result = tokio::time::timeout(self.timeout, exchange).await;
        let elapsed = started.elapsed();
        match result {
            Ok(Ok((status, body))) => Call {
                outcome: Outcome::Http(status),
                body,
                elapsed,
                error: None,
            },
            Ok(Err(e)) => Call {
                outcome: Outcome::classify(e.as_ref()),
                body: Bytes::new(),
                elapsed,
                error: Some(error_chain(e.as_ref())),
            },
            Err(_) => Call {
                outcome: Outcome::Timeout,
                body: Bytes::new(),
                elapsed,
                error: Some(format!("no complete response within {:?}", self.timeout)),
            },
        }
    }
}

fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}

/// Milliseconds with nanosecond resolution, printed without binary noise (0.128769, not
/// 0.12876900000000002).
pub(crate) fn millis(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}
