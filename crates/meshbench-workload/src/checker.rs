//! The security-checker role (E3): asked to, it calls a target and reports what it got, an
//! HTTP status or a connection-error class, so a reachability matrix can tell a 403 from a
//! refused connection or a TLS alert. It is also a target itself: `GET /` answers who it is,
//! so a checker can call itself or a peer checker in another namespace.
//!
//! `POST /api/security-checker/check` with `{"host": "calculator.app.svc", "port": 8080,
//! "path": "/add", "method": "POST", "body": {...}, "marker": "..."}` (only `host` is
//! required) answers 200 with the verdict. A `marker` goes into the request body and the
//! `x-meshbench-marker` header, so a capture on the wire can prove whether the request crossed
//! it in plaintext.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use serde::Serialize;
use serde_json::Value;

use crate::client::{millis, Caller, MARKER_HEADER};
use crate::fields::{self, Object};
use crate::http::{error, json, kind, not_found, post_json_object, Reply, Role};

pub const CHECK_PATH: &str = "/api/security-checker/check";

pub struct SecurityChecker {
    name: String,
    namespace: String,
    caller: Caller,
}

impl SecurityChecker {
    pub fn new(name: &str, namespace: &str, timeout: Duration) -> Self {
        SecurityChecker {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            caller: Caller::new(timeout),
        }
    }
}

/// What to call.
#[derive(Debug, Clone)]
pub struct CheckTarget {
    pub uri: Uri,
    pub method: Method,
    pub body: Option<Value>,
    pub marker: Option<String>,
}

impl CheckTarget {
    pub fn parse(object: &Object) -> Result<CheckTarget, String> {
        let host = fields::string(object, "host")?.ok_or("host: missing")?;
        let port = fields::whole(object, "port", Some(80), 1, 65535)?;
        let path = fields::string(object, "path")?.unwrap_or("/");
        if !path.starts_with('/') {
            return Err(format!("path: {path:?} does not start with /"));
        }
        let uri: Uri = format!("http://{host}:{port}{path}")
            .parse()
            .map_err(|e| format!("host/path: {host:?} and {path:?} do not make a URI: {e}"))?;
        let marker = fields::string(object, "marker")?.map(str::to_owned);
        let mut body = object.get("body").cloned();
        if let Some(marker) = &marker {
            match &mut body {
                None => body = Some(serde_json::json!({ "marker": marker })),
                Some(Value::Object(map)) => {
                    map.insert("marker".to_owned(), Value::String(marker.clone()));
                }
                Some(other) => {
                    return Err(format!(
                        "body: a marker needs an object body, got {}",
                        kind(other)
                    ))
                }
            }
        }
        let method = match fields::string(object, "method")? {
            Some(m) => m
                .parse::<Method>()
                .map_err(|_| format!("method: {m:?} is not an HTTP method"))?,
            None if body.is_some() => Method::POST,
            None => Method::GET,
        };
        Ok(CheckTarget {
            uri,
            method,
            body,
            marker,
        })
    }

    fn request(&self) -> Request<Full<Bytes>> {
        let mut builder = Request::builder()
            .method(self.method.clone())
            .uri(self.uri.clone());
        if let Some(marker) = &self.marker {
            builder = builder.header(MARKER_HEADER, marker.as_str());
        }
        let body = match &self.body {
            Some(body) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(serde_json::to_vec(body).expect("a JSON value serializes"))
            }
            None => Bytes::new(),
        };
        builder
            .body(Full::new(body))
            .expect("a parsed URI and method make a valid request")
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    pub checker: String,
    pub namespace: String,
    pub target: String,
    pub method: String,
    /// The outcome class: `http_200`, `http_403`, `connect_refused`, `connection_reset`,
    /// `tls_...`, `timeout`, `other`.
    pub outcome: String,
    /// The HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// A 2xx response arrived.
    pub allowed: bool,
    pub error: Option<String>,
    pub elapsed_milliseconds: f64,
}

impl SecurityChecker {
    pub async fn check(&self, target: &CheckTarget) -> CheckReport {
        let call = self.caller.send(target.request()).await;
        let status = match call.outcome {
            meshbench_loadgen::Outcome::Http(code) => Some(code),
            _ => None,
        };
        CheckReport {
            checker: self.name.clone(),
            namespace: self.namespace.clone(),
            target: target.uri.to_string(),
            method: target.method.to_string(),
            outcome: call.outcome.to_string(),
            status,
            allowed: call.is_success(),
            error: call.error,
            elapsed_milliseconds: millis(call.elapsed),
        }
    }
}

impl Role for SecurityChecker {
    const NAME: &'static str = "security-checker";

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        match req.uri().path() {
            CHECK_PATH => {}
            "/" => {
                return json(
                    StatusCode::OK,
                    &serde_json::json!({
                        "service": Self::NAME,
                        "name": self.name,
                        "namespace": self.namespace,
                    }),
                )
            }
            _ => return not_found(&req),
        }
        let object = match post_json_object(req, CHECK_PATH).await {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let target = match CheckTarget::parse(&object) {
            Ok(target) => target,
            Err(message) => return error(StatusCode::BAD_REQUEST, message),
        };
        let report = self.check(&target).await;
        tracing::info!(
            target = report.target,
            outcome = report.outcome,
            elapsed_ms = report.elapsed_milliseconds,
            "check"
        );
        json(StatusCode::OK, &report)
    }
}
