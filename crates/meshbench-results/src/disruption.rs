//! What happened to a cell's components while it ran, beyond the load: a process that
//! ended on its own, a pod deleted, a container OOM-killed, a kubelet or the API server out of
//! reach. Platforms record these in the cell (`Cell::disruptions`), dated on the wall clock
//! and placed against the load window, so that a report can say which figures a fault shaped.

use std::time::{SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::MeasurementWindow;

/// Something that happened to a component during a cell, as the platform saw it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Disruption {
    /// What it happened to: a component as `resources` names it (`echo-server-1-sidecar`),
    /// a pod (`pod/echo-server-1`), a node's kubelet (`node-2/kubelet`), or `api-server`.
    pub component: String,
    /// `sidecar`, `app`, `node-agent`, `pod`, `kubelet`, `api-server`, ...
    pub role: String,
    /// `exited` (the process or container ended on its own), `deleted` (the pod was
    /// removed), `unreachable` (meshbench could not reach it for a while).
    pub kind: String,
    /// RFC 3339, UTC: when it happened, as the platform dates it (a container's
    /// `finishedAt`, a process's exit as meshbench saw it), or when meshbench first saw it.
    pub at: String,
    /// Seconds from the start of the load window to `at` (negative: before the load
    /// began); absent where the window is unknown.
    pub into_window_secs: Option<f64>,
    /// For `unreachable`: how long it stayed so, in seconds, as far as meshbench looked;
    /// absent if it had not come back when the cell ended.
    pub lasted_secs: Option<f64>,
    /// The platform's own words: `OOMKilled`, `signal 9 (SIGKILL)`, `exit status 1`, the
    /// API server's error.
    pub reason: String,
    /// More of what the platform said (an exit code, the last lines of stderr).
    pub detail: Option<String>,
}

impl Disruption {
    /// A disruption dated `at`, placed against `window` when the window is on the wall clock.
    pub fn at(
        component: impl Into<String>,
        role: impl Into<String>,
        kind: DisruptionKind,
        at: SystemTime,
        window: Option<&MeasurementWindow>,
        reason: impl Into<String>,
    ) -> Self {
        Disruption {
            component: component.into(),
            role: role.into(),
            kind: kind.as_str().to_owned(),
            at: rfc3339_millis(at),
            into_window_secs: window.and_then(|w| w.secs_into(at)),
            lasted_secs: None,
            reason: reason.into(),
            detail: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        self.detail = (!detail.trim().is_empty()).then(|| detail.trim().to_owned());
        self
    }

    pub fn lasting(mut self, secs: Option<f64>) -> Self {
        self.lasted_secs = secs;
        self
    }

    /// "echo-server-1-sidecar (sidecar) exited 1.2 s into the load: signal: 9 (SIGKILL)".
    pub fn describe(&self) -> String {
        let when = match self.into_window_secs {
            Some(s) if s < 0.0 => format!("{:.1} s before the load", -s),
            Some(s) => format!("{s:.1} s into the load"),
            None => format!("at {}", self.at),
        };
        format!(
            "{} ({}) {} {when}: {}",
            self.component,
            self.role,
            self.what(),
            self.reason
        )
    }

    /// What happened, with how long for an outage: "exited", "unreachable for 4.1 s".
    pub fn what(&self) -> String {
        match (self.kind.as_str(), self.lasted_secs) {
            ("unreachable", Some(s)) => format!("unreachable for {s:.1} s"),
            ("unreachable", None) => "unreachable until the cell ended".to_owned(),
            (kind, _) => kind.to_owned(),
        }
    }
}

/// What kind of thing happened, as `Disruption::kind` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisruptionKind {
    /// The process or container ended on its own (killed, crashed, OOM-killed).
    Exited,
    /// The pod was deleted.
    Deleted,
    /// meshbench could not reach it for a while.
    Unreachable,
}

impl DisruptionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionKind::Exited => "exited",
            DisruptionKind::Deleted => "deleted",
            DisruptionKind::Unreachable => "unreachable",
        }
    }
}

impl MeasurementWindow {
    /// Seconds from the window's start to `t` on the wall clock; `None` when the window was
    /// not tied to the wall clock.
    pub fn secs_into(&self, t: SystemTime) -> Option<f64> {
        let offset = self.realtime_offset_ns?;
        let start = self.start_monotonic_ns as i128 + offset as i128;
        let t = t.duration_since(UNIX_EPOCH).ok()?.as_nanos() as i128;
        Some((t - start) as f64 / 1e9)
    }
}

/// RFC 3339 in UTC with milliseconds: a fault inside a cell of a few seconds needs them.
pub fn rfc3339_millis(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_are_rfc3339_with_milliseconds() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_958_400_123);
        assert_eq!(rfc3339_millis(t), "2026-11-29T13:20:00.123Z");
    }

    #[test]
    fn a_disruption_is_placed_against_the_load_window() {
        let window = MeasurementWindow {
            start_monotonic_ns: 1_000_000_000,
            end_monotonic_ns: 3_000_000_000,
            seconds: 2.0,
            warmup_seconds: 0.0,
            realtime_offset_ns: Some(1_795_958_399_000_000_000),
        };
        let at = UNIX_EPOCH + Duration::from_millis(1_795_958_401_500);
        let d = Disruption::at(
            "echo-server-1-sidecar",
            "sidecar",
            DisruptionKind::Exited,
            at,
            Some(&window),
            "OOMKilled",
        )
        .with_detail("exit code 137");
        assert_eq!(d.into_window_secs, Some(1.5));
        assert_eq!(
            d.describe(),
            "echo-server-1-sidecar (sidecar) exited 1.5 s into the load: OOMKilled"
        );
        let unplaced = MeasurementWindow {
            realtime_offset_ns: None,
            ..window
        };
        assert_eq!(unplaced.secs_into(at), None);
        let gone = Disruption::at(
            "node-2/kubelet",
            "kubelet",
            DisruptionKind::Unreachable,
            at,
            None,
            "connection refused",
        );
        assert!(gone
            .describe()
            .contains("unreachable until the cell ended at 2026-"));
    }
}
