//! Starting roles on 127.0.0.1:0 and calling them over real sockets.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Uri};
use http_body_util::Full;
use meshbench_identity::ServerTlsFiles;
use meshbench_workload::{bind, Call, Caller, ConnectionLimits, Role, RoleService, ServeOptions};
use tokio::sync::oneshot;

/// A role serving on loopback; it stops (draining) when this is dropped.
pub struct Running {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl Running {
    pub fn url(&self, path: &str) -> Uri {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    pub fn base(&self) -> Uri {
        format!("http://{}", self.addr).parse().unwrap()
    }
}

pub async fn start<R: Role>(role: R) -> Running {
    start_service(RoleService::new(role), None, None).await
}

/// Serves any hyper service (a role, the gRPC echo) on 127.0.0.1:0: over TLS with `tls`,
/// with `limits` in place of the serving code's defaults.
pub async fn start_service<S, B>(
    service: S,
    tls: Option<ServerTlsFiles>,
    limits: Option<ConnectionLimits>,
) -> Running
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut server = bind(&ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls,
        drain_timeout: Duration::from_secs(1),
    })
    .await
    .unwrap();
    if let Some(limits) = limits {
        server = server.with_limits(limits);
    }
    let addr = server.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.serve(service, async move {
        let _ = stopped.await;
    }));
    Running { addr, _stop: stop }
}

/// A loopback address nothing listens on: bound, then released.
/// A port nothing answers on, held until the returned value is dropped.
pub fn closed_port() -> meshbench_testkit::ClosedPort {
    meshbench_testkit::ClosedPort::new()
}

pub async fn post(uri: Uri, body: &str) -> (u16, serde_json::Value) {
    let call = request(Method::POST, uri, body).await;
    let status = match call.outcome {
        meshbench_loadgen::Outcome::Http(status) => status,
        other => panic!("no HTTP response: {other} {:?}", call.error),
    };
    let value = serde_json::from_slice(&call.body).unwrap_or(serde_json::Value::Null);
    (status, value)
}

pub async fn request(method: Method, uri: Uri, body: &str) -> Call {
    let caller = Caller::new(Duration::from_secs(10));
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    caller.send(req).await
}
