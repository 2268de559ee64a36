//! Which part of the cluster stopped answering, and for how long, as the requests meshbench
//! makes during a cell see it (the kubelets' summaries, the watch of the cell's pods). Who
//! failed is told by who answered: an error from the API server about a node's proxy (it
//! answered, the kubelet behind it did not) is the kubelet's; no answer at all is the API
//! server's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The API server, as disruptions name it.
pub const API_SERVER: &str = "api-server";

/// A part of the cluster meshbench talks to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reach {
    ApiServer,
    /// A node's kubelet, reached through the API server's node proxy.
    Kubelet(String),
}

impl Reach {
    pub(crate) fn component(&self) -> String {
        match self {
            Reach::ApiServer => API_SERVER.to_owned(),
            Reach::Kubelet(node) => format!("{node}/kubelet"),
        }
    }

    pub(crate) fn role(&self) -> &'static str {
        match self {
            Reach::ApiServer => "api-server",
            Reach::Kubelet(_) => "kubelet",
        }
    }

    /// Who failed a request made to `self`: the part behind the API server when the API
    /// server answered that it could not reach it (502, 503, 504 from its proxy), the API
    /// server otherwise (no answer, or its own refusal: a restarted API server answers 403
    /// until its authorizer has loaded).
    pub fn blamed_for(self, e: &kube::Error) -> Reach {
        match e {
            kube::Error::Api(status) if matches!(status.code, 502..=504) => self,
            _ => Reach::ApiServer,
        }
    }
}

/// A stretch of time a part of the cluster did not answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    pub reach: Reach,
    pub since: SystemTime,
    /// When it answered again; `None` if it had not when the cell ended.
    pub until: Option<SystemTime>,
    /// Its first failure, as the client saw it.
    pub reason: String,
}

/// Outages as requests see them, shared by everything that talks to the cluster during a
/// cell.
#[derive(Debug, Clone, Default)]
pub struct Outages(Arc<Mutex<OutageLog>>);

#[derive(Debug, Default)]
struct OutageLog {
    open: BTreeMap<Reach, (SystemTime, String)>,
    closed: Vec<Outage>,
}

impl Outages {
    /// A request to `reach` failed with `e` at `at`: opens an outage of whoever failed it.
    pub fn failed(&self, reach: Reach, e: &kube::Error, at: SystemTime) {
        let blamed = reach.blamed_for(e);
        let mut log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        log.open
            .entry(blamed)
            .or_insert_with(|| (at, short_reason(e)));
    }

    /// A request to `reach` was answered at `at`: the API server answered too.
    pub fn answered(&self, reach: Reach, at: SystemTime) {
        let mut log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for part in [Reach::ApiServer, reach] {
            if let Some((since, reason)) = log.open.remove(&part) {
                log.closed.push(Outage {
                    reach: part,
                    since,
                    until: Some(at),
                    reason,
                });
            }
        }
    }

    /// The longest outage still open at `now`, if it has lasted longer than `limit`.
    pub fn open_longer_than(
        &self,
        limit: std::time::Duration,
        now: SystemTime,
    ) -> Option<(String, std::time::Duration, String)> {
        let log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        log.open
            .iter()
            .filter_map(|(reach, (since, reason))| {
                let lasted = now.duration_since(*since).ok()?;
                (lasted > limit).then(|| (reach.component(), lasted, reason.clone()))
            })
            .max_by_key(|(_, lasted, _)| *lasted)
    }

    /// Resolves once an outage has lasted longer than `limit`, with the error that ends the
    /// cell; checked every second.
    pub async fn lost_for(&self, limit: std::time::Duration) -> crate::Error {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            if let Some((component, lasted, reason)) =
                self.open_longer_than(limit, SystemTime::now())
            {
                return crate::Error::Lost {
                    component,
                    seconds: lasted.as_secs(),
                    reason,
                };
            }
        }
    }

    /// Every outage seen, those still open last.
    pub fn take(&self) -> Vec<Outage> {
        let mut log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let open = std::mem::take(&mut log.open);
        let mut all = std::mem::take(&mut log.closed);
        all.extend(open.into_iter().map(|(reach, (since, reason))| Outage {
            reach,
            since,
            until: None,
            reason,
        }));
        all
    }
}

/// The client's error in a table cell's words: the API server's message when it answered,
/// the innermost cause otherwise ("Connection refused (os error 111)").
fn short_reason(e: &kube::Error) -> String {
    if let kube::Error::Api(status) = e {
        return format!("{} ({})", status.message, status.code);
    }
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn an_outage_is_the_kubelets_when_the_api_server_answered_for_it() {
        let outages = Outages::default();
        let t = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let proxy_error = kube::Error::Api(Box::new(kube::core::Status {
            message: "error trying to reach service: dial tcp 10.77.0.12:10250: connect: \
                      connection refused"
                .into(),
            code: 503,
            ..Default::default()
        }));
        let kubelet = Reach::Kubelet("node-2".into());
        let refusal = kube::Error::Api(Box::new(kube::core::Status {
            message: "nodes \"node-2\" is forbidden".into(),
            code: 403,
            ..Default::default()
        }));
        assert_eq!(kubelet.clone().blamed_for(&refusal), Reach::ApiServer);
        assert_eq!(kubelet.clone().blamed_for(&proxy_error), kubelet);
        outages.failed(kubelet.clone(), &proxy_error, t(10));
        outages.failed(kubelet.clone(), &proxy_error, t(11));
        outages.answered(kubelet.clone(), t(14));
        let refused = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        )));
        outages.failed(kubelet, &refused, t(20));
        let seen = outages.0.lock().unwrap().closed.clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].reach, Reach::Kubelet("node-2".into()));
        assert_eq!(seen[0].until, Some(t(14)));
        assert!(
            seen[0].reason.contains("connection refused (503)"),
            "{}",
            seen[0].reason
        );
        assert_eq!(
            outages.open_longer_than(Duration::from_secs(30), t(40)),
            None
        );
        let (lost, lasted, _) = outages
            .open_longer_than(Duration::from_secs(30), t(51))
            .expect("down for 31 s");
        assert_eq!(
            (lost.as_str(), lasted),
            ("api-server", Duration::from_secs(31))
        );
        let seen = outages.take();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].reach, Reach::ApiServer);
        assert_eq!(seen[1].until, None, "still down when the cell ended");
        assert_eq!(seen[1].reason, "Connection refused (os error 111)");
    }
}
