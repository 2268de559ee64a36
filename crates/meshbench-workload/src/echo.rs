//! The echo role: the studies' test server. It waits a configured delay, then answers with a
//! body of a configured size. `/healthz` answers at once.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::Service;

#[derive(Debug, Clone)]
pub struct EchoConfig {
    pub delay: Duration,
    pub response_size: usize,
}

#[derive(Debug, Clone)]
pub struct EchoService {
    delay: Duration,
    /// Shared, so every response reuses one allocation.
    payload: Bytes,
}

impl EchoService {
    pub fn new(config: &EchoConfig) -> Self {
        EchoService {
            delay: config.delay,
            payload: Bytes::from(vec![b'x'; config.response_size]),
        }
    }
}

impl Service<Request<Incoming>> for EchoService {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        if req.uri().path() == "/healthz" {
            return Box::pin(async { Ok(text(StatusCode::OK, "ok\n")) });
        }
        let delay = self.delay;
        let payload = self.payload.clone();
        Box::pin(async move {
            if !delay.is_zero() {
                // A precise sleep: tokio's timer would round 1 ms up to nearly 2 ms.
                match meshbench_time::PreciseTimer::new() {
                    Ok(mut timer) => {
                        let _ = timer.sleep(delay).await;
                    }
                    Err(_) => tokio::time::sleep(delay).await,
                }
            }
            Ok(Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, "application/octet-stream")
                .body(Full::new(payload))
                .expect("static response parts are valid"))
        })
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("static response parts are valid")
}
