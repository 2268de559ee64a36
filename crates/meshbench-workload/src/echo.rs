//! The echo role: the studies' test server. Each request waits a delay, then gets a status
//! and a body of some size. The server sets the defaults (`--delay`, `--status`,
//! `--response-size`, each a [`Mix`]); a request may override them as Fortio's echo server
//! allows, with query parameters (`?delay=10ms:50&status=503:10&size=4KiB`) or the headers
//! `x-echo-delay`, `x-echo-status` and `x-echo-size` (a query parameter wins).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use crate::http::{error, Reply, Role};
use crate::mix::{parse_delay, parse_size, parse_status, Mix, MixError, Tickets};

#[derive(Debug, Clone)]
pub struct EchoConfig {
    pub delay: Mix<Duration>,
    pub response_size: Mix<usize>,
    pub status: Mix<StatusCode>,
}

impl EchoConfig {
    /// Every request waits `delay` and gets a 200 with `response_size` bytes.
    pub fn fixed(delay: Duration, response_size: usize) -> Self {
        EchoConfig {
            delay: Mix::always(delay),
            response_size: Mix::always(response_size),
            status: Mix::always(StatusCode::OK),
        }
    }
}

pub struct Echo {
    config: EchoConfig,
    tickets: Tickets,
    /// Bodies are slices of this one allocation (grown for larger requested sizes).
    filler: Bytes,
}

/// Bodies up to this size share one allocation.
const SHARED_FILLER: usize = 64 * 1024;

impl Echo {
    pub fn new(config: &EchoConfig) -> Self {
        Echo {
            config: config.clone(),
            tickets: Tickets::default(),
            filler: Bytes::from(vec![b'x'; SHARED_FILLER]),
        }
    }

    fn body(&self, size: usize) -> Bytes {
        if size <= self.filler.len() {
            self.filler.slice(..size)
        } else {
            Bytes::from(vec![b'x'; size])
        }
    }
}

/// Per-request overrides, parsed from the query string and headers.
#[derive(Default)]
struct Overrides {
    delay: Option<Mix<Duration>>,
    size: Option<Mix<usize>>,
    status: Option<Mix<StatusCode>>,
}

impl Overrides {
    fn parse(query: Option<&str>, headers: &HeaderMap) -> Result<Overrides, MixError> {
        let mut o = Overrides::default();
        for (knob, header) in [
            ("delay", "x-echo-delay"),
            ("size", "x-echo-size"),
            ("status", "x-echo-status"),
        ] {
            if let Some(value) = headers.get(header).and_then(|v| v.to_str().ok()) {
                o.set(knob, value)?;
            }
        }
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            o.set(&key, &value)?;
        }
        Ok(o)
    }

    fn set(&mut self, knob: &str, spec: &str) -> Result<(), MixError> {
        match knob {
            "delay" => self.delay = Some(Mix::parse("delay", spec, parse_delay)?),
            "size" => self.size = Some(Mix::parse("size", spec, parse_size)?),
            "status" => self.status = Some(Mix::parse("status", spec, parse_status)?),
            _ => {}
        }
        Ok(())
    }
}

impl Role for Echo {
    const NAME: &'static str = "echo";

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        let (parts, body) = req.into_parts();
        let overrides = if parts.uri.query().is_some()
            || parts
                .headers
                .keys()
                .any(|k| k.as_str().starts_with("x-echo-"))
        {
            match Overrides::parse(parts.uri.query(), &parts.headers) {
                Ok(o) => o,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            }
        } else {
            Overrides::default()
        };
        // Read the request body so a keep-alive connection stays usable after a POST, frame
        // by frame and dropped as it comes: a body of any size costs one frame of memory.
        let mut body = body;
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                return error(StatusCode::BAD_REQUEST, "request body ended early");
            }
        }
        let ticket = self.tickets.next();
        let delay = choose(&overrides.delay, &self.config.delay, ticket).unwrap_or_default();
        let size = choose(&overrides.size, &self.config.response_size, ticket).unwrap_or(0);
        let status =
            choose(&overrides.status, &self.config.status, ticket).unwrap_or(StatusCode::OK);
        if !delay.is_zero() {
            // A precise sleep: tokio's timer would round 1 ms up to nearly 2 ms.
            match meshbench_time::PreciseTimer::new() {
                Ok(mut timer) => {
                    let _ = timer.sleep(delay).await;
                }
                Err(_) => tokio::time::sleep(delay).await,
            }
        }
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Full::new(self.body(size)))
            .expect("static response parts are valid")
    }
}

/// The request's own mix decides first; where it claims no share, the server's does.
fn choose<T: Clone>(request: &Option<Mix<T>>, server: &Mix<T>, ticket: u64) -> Option<T> {
    request
        .as_ref()
        .and_then(|m| m.pick(ticket))
        .or_else(|| server.pick(ticket))
}
