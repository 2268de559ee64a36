//! What every role shares on the server side: the [`Role`] trait a role implements, the hyper
//! service that adds the health endpoint and request logging around it, and the JSON and
//! error replies, so every role rejects bad requests the same way (`{"error": "..."}` naming
//! the field).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::Service;
use serde::Serialize;

pub type Reply = Response<Full<Bytes>>;

/// Where every role answers its health check.
pub const HEALTH_PATH: &str = "/healthz";

/// An application role: answers requests (the health endpoint is handled for it).
pub trait Role: Send + Sync + 'static {
    /// The role's name in health answers and logs (`calculator`, `counter`, ...).
    const NAME: &'static str;

    fn handle(self: Arc<Self>, req: Request<Incoming>) -> impl Future<Output = Reply> + Send;
}

/// A role as a hyper service: `/healthz` answers at once, everything else goes to the role,
/// and each request is logged at debug level with its status and duration.
///
/// One type for every role, the role behind a trait object: hyper's server (its connection
/// machine, over plain TCP and over TLS) compiles once for all the roles, not once for each,
/// which was most of this crate's build. The request's future was boxed before as it is now,
/// so a request costs one virtual call more.
#[derive(Clone)]
pub struct RoleService {
    role: Arc<dyn AnswerRequests>,
}

/// A role's requests answered and logged, behind a vtable (what [`RoleService`] calls).
trait AnswerRequests: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    fn answer(self: Arc<Self>, req: Request<Incoming>) -> RoleFuture;
}

type RoleFuture = Pin<Box<dyn Future<Output = Result<Reply, Infallible>> + Send>>;

impl<R: Role> AnswerRequests for R {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn answer(self: Arc<Self>, req: Request<Incoming>) -> RoleFuture {
        Box::pin(async move {
            if !tracing::enabled!(tracing::Level::DEBUG) {
                return Ok(self.handle(req).await);
            }
            let (method, path) = (req.method().clone(), req.uri().path().to_owned());
            let started = Instant::now();
            let reply = self.handle(req).await;
            tracing::debug!(
                role = R::NAME,
                %method,
                path,
                status = reply.status().as_u16(),
                elapsed_us = started.elapsed().as_micros() as u64,
                "request"
            );
            Ok(reply)
        })
    }
}

impl RoleService {
    pub fn new<R: Role>(role: R) -> Self {
        RoleService {
            role: Arc::new(role),
        }
    }
}

impl Service<Request<Incoming>> for RoleService {
    type Response = Reply;
    type Error = Infallible;
    type Future = RoleFuture;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        if req.uri().path() == HEALTH_PATH {
            let role = self.role.name();
            return Box::pin(async move {
                Ok(json(
                    StatusCode::OK,
                    &serde_json::json!({"status": "ok", "role": role}),
                ))
            });
        }
        self.role.clone().answer(req)
    }
}

pub fn json(status: StatusCode, value: &impl Serialize) -> Reply {
    let body = serde_json::to_vec(value).expect("serializing plain data cannot fail");
    with_type(status, "application/json", Bytes::from(body))
}

/// `{"error": message}` with `status`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Reply {
    json(status, &serde_json::json!({ "error": message.into() }))
}

pub fn with_type(status: StatusCode, content_type: &'static str, body: Bytes) -> Reply {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body))
        .expect("static response parts are valid")
}

pub fn not_found(req: &Request<Incoming>) -> Reply {
    error(
        StatusCode::NOT_FOUND,
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
}

/// Largest request body a role reads; an experiment result with 10^6 RTTs fits.
pub const MAX_BODY: usize = 32 * 1024 * 1024;

/// Reads the whole body, or answers 413 / 400 when it is too large or broken.
pub async fn read_body(body: Incoming) -> Result<Bytes, Reply> {
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than {} MiB", MAX_BODY >> 20),
        )),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("reading the request body: {e}"),
        )),
    }
}

/// Reads the body as a JSON object, or answers 400 saying why it is not one.
pub async fn read_json_object(
    body: Incoming,
) -> Result<serde_json::Map<String, serde_json::Value>, Reply> {
    let bytes = read_body(body).await?;
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(other) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("expected a JSON object, got {}", kind(&other)),
        )),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("request body is not JSON: {e}"),
        )),
    }
}

/// The JSON object body of a `POST` to `path`, or the reply refusing the request (405 for
/// another method, 400 or 413 for the body).
pub async fn post_json_object(
    req: Request<Incoming>,
    path: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, Reply> {
    if req.method() != http::Method::POST {
        return Err(error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{path} takes POST, not {}", req.method()),
        ));
    }
    read_json_object(req.into_body()).await
}

/// The JSON type name of a value, for error messages.
pub fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
