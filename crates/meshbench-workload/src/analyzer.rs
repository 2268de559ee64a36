//! The analyzer role: `POST /api/analyzer/analyze` with an experimenter result answers E3's
//! RTT90 / RTT95 / RTT99 as CSV, or, with `?format=json` (or `Accept: application/json`),
//! meshbench's full statistics ([`meshbench_stats::Summary`]). `?discardFirst=true` drops the
//! first RTT, as E3 did to leave out connection set-up.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, StatusCode};
use hyper::body::Incoming;
use meshbench_stats::Summary;
use serde::Serialize;
use serde_json::Value;

use crate::http::{error, json, kind, not_found, post_json_object, with_type, Reply, Role};

pub const ANALYZE_PATH: &str = "/api/analyzer/analyze";

#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub discarded_first: bool,
    /// `null` when no RTT is left to analyze.
    pub summary: Option<Summary>,
}

impl Analysis {
    pub fn of(rtts: &[f64], discard_first: bool) -> Analysis {
        let kept = if discard_first && !rtts.is_empty() {
            &rtts[1..]
        } else {
            rtts
        };
        Analysis {
            discarded_first: discard_first,
            summary: Summary::of(kept),
        }
    }

    /// E3's CSV: a header line and one row of percentiles in milliseconds.
    pub fn csv(&self) -> String {
        let row = match &self.summary {
            Some(s) => format!("{},{},{}", s.p90, s.p95, s.p99),
            None => ",,".to_owned(),
        };
        format!("RTT90,RTT95,RTT99\n{row}\n")
    }
}

/// The RTT list of an experimenter result, or a message naming what is wrong with it.
pub fn rtts_of(result: &serde_json::Map<String, Value>) -> Result<Vec<f64>, String> {
    const FIELD: &str = "rttsInMilliseconds";
    let items = match result.get(FIELD) {
        None => {
            return Err(format!(
                "{FIELD}: missing (expected an experimenter result)"
            ))
        }
        Some(Value::Array(items)) => items,
        Some(other) => return Err(format!("{FIELD}: expected an array, got {}", kind(other))),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_f64()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{FIELD}[{i}]: expected a non-negative number, got {v}"))
        })
        .collect()
}

#[derive(Debug, Default)]
pub struct Analyzer;

impl Role for Analyzer {
    const NAME: &'static str = "analyzer";

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        if req.uri().path() != ANALYZE_PATH {
            return not_found(&req);
        }
        let mut as_json = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.contains("application/json"));
        let mut discard_first = false;
        for (key, value) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
            match (key.as_ref(), value.as_ref()) {
                ("format", "json") => as_json = true,
                ("format", "csv") => as_json = false,
                ("discardFirst", "true") => discard_first = true,
                ("discardFirst", "false") => discard_first = false,
                ("format" | "discardFirst", other) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("{key}: unexpected value {other:?}"),
                    )
                }
                _ => {}
            }
        }
        let result = match post_json_object(req, ANALYZE_PATH).await {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let rtts = match rtts_of(&result) {
            Ok(rtts) => rtts,
            Err(message) => return error(StatusCode::BAD_REQUEST, message),
        };
        let analysis = Analysis::of(&rtts, discard_first);
        if as_json {
            json(StatusCode::OK, &analysis)
        } else {
            with_type(StatusCode::OK, "text/csv", Bytes::from(analysis.csv()))
        }
    }
}
