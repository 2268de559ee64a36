//! The counter role, E4's chain: `POST /count` with `{"count": c, "max_count": m}` increments
//! c and, until c == m, forwards to the next service (the other deployment), so one request
//! crosses m services. The answer carries every hop's timing (`total_ms` from receipt to
//! answer, `downstream_ms` spent waiting for the next hop), first hop first, so a report can
//! show where the time goes.
//!
//! Unlike the original, a failed hop is never retried: the chain answers 502 at once, with
//! the failing hop, its count and the outcome class (`connect_refused`, `http_503`, ...); a
//! failure further down is passed up unchanged so the first hop reports where it happened.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, StatusCode, Uri};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};

use crate::client::{millis, Caller};
use crate::fields;
use crate::http::{error, json, not_found, post_json_object, with_type, Reply, Role};

pub const COUNT_PATH: &str = "/count";
/// The longest chain one request may ask for.
pub const MAX_CHAIN: u64 = 10_000;

pub struct Counter {
    name: String,
    /// Where to forward: the other deployment's `/count`.
    next: Option<Uri>,
    caller: Caller,
}

impl Counter {
    /// `next` is the other deployment's base URI (`http://counter-b:8080`).
    pub fn new(name: &str, next: Option<&Uri>, timeout: Duration) -> Result<Self, crate::Error> {
        let next = next
            .map(|base| {
                let text = base.to_string();
                format!("{}{COUNT_PATH}", text.trim_end_matches('/'))
                    .parse::<Uri>()
                    .map_err(|e| crate::Error::BadUri {
                        uri: text,
                        problem: e.to_string(),
                    })
            })
            .transpose()?;
        Ok(Counter {
            name: name.to_owned(),
            next,
            caller: Caller::new(timeout),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    pub service: String,
    /// The count after this hop incremented it.
    pub count: u64,
    pub total_ms: f64,
    /// Waiting for the rest of the chain; `None` at the last hop.
    pub downstream_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountReply {
    pub count: u64,
    pub max_count: u64,
    pub hops: Vec<Hop>,
}

impl Role for Counter {
    const NAME: &'static str = "counter";

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        let received = Instant::now();
        if req.uri().path() != COUNT_PATH {
            return not_found(&req);
        }
        let object = match post_json_object(req, COUNT_PATH).await {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let parsed = fields::whole(&object, "max_count", None, 1, MAX_CHAIN).and_then(|max| {
            let count = fields::whole(&object, "count", None, 0, MAX_CHAIN)?;
            if count >= max {
                return Err(format!(
                    "count: {count} must be less than max_count ({max})"
                ));
            }
            Ok((count, max))
        });
        let (count, max_count) = match parsed {
            Ok(parsed) => parsed,
            Err(message) => return error(StatusCode::BAD_REQUEST, message),
        };
        let count = count + 1;
        if count == max_count {
            let hop = Hop {
                service: self.name.clone(),
                count,
                total_ms: millis(received.elapsed()),
                downstream_ms: None,
            };
            return json(
                StatusCode::OK,
                &CountReply {
                    count,
                    max_count,
                    hops: vec![hop],
                },
            );
        }
        let Some(next) = &self.next else {
            return self.failure(count, "no_next_service", "no --next service to forward to");
        };
        let body = serde_json::json!({ "count": count, "max_count": max_count });
        let call = self.caller.post_json(next, &body).await;
        let downstream_ms = millis(call.elapsed);
        if !call.is_success() {
            if let meshbench_loadgen::Outcome::Http(status) = call.outcome {
                if is_chain_failure(&call.body) {
                    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
                    return with_type(status, "application/json", call.body);
                }
            }
            let message = call
                .error
                .unwrap_or_else(|| format!("{next} answered {}", call.outcome));
            return self.failure(count, &call.outcome.to_string(), &message);
        }
        let mut reply: CountReply = match serde_json::from_slice(&call.body) {
            Ok(reply) => reply,
            Err(e) => {
                return self.failure(
                    count,
                    "bad_reply",
                    &format!("{next} answered something that is not a count reply: {e}"),
                )
            }
        };
        reply.hops.insert(
            0,
            Hop {
                service: self.name.clone(),
                count,
                total_ms: millis(received.elapsed()),
                downstream_ms: Some(downstream_ms),
            },
        );
        json(StatusCode::OK, &reply)
    }
}

impl Counter {
    fn failure(&self, count: u64, outcome: &str, message: &str) -> Reply {
        tracing::warn!(hop = self.name, count, outcome, message, "chain failed");
        json(
            StatusCode::BAD_GATEWAY,
            &serde_json::json!({
                "error": message,
                "failed_at": self.name,
                "count": count,
                "outcome": outcome,
            }),
        )
    }
}

/// A failure reported by a counter further down the chain (it names the failing hop).
fn is_chain_failure(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .is_some_and(|v| v.get("failed_at").is_some())
}
