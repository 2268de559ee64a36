//! What happened to a cell's pods and to the cluster while the cell's instrument ran: a
//! container that ended (OOM-killed, crashed, killed), a pod deleted, a kubelet or the API
//! server out of reach. Two sources feed it: a watch of the cell's namespaces (the cluster's
//! own reasons and times: a container's `lastState.terminated`, a pod's deletion), and every
//! request meshbench makes meanwhile (the kubelets' summaries, the watch itself), whose
//! failures date when a kubelet or the API server stopped answering and when it came back
//! ([`crate::outage`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use meshbench_results::{Disruption, DisruptionKind, MeasurementWindow};
use tokio::task::JoinHandle;

use crate::outage::{Outage, Outages, Reach};
use crate::stats::Target;

/// Something the watch saw happen to a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodEvent {
    pub namespace: String,
    pub pod: String,
    /// `None` for the pod as a whole (deleted).
    pub container: Option<String>,
    pub kind: DisruptionKind,
    pub at: SystemTime,
    pub reason: String,
    pub detail: Option<String>,
    /// Which run of a container ended (its container id, else its end time); empty for a
    /// pod's event.
    pub end_id: String,
}

/// Follows the cell's namespaces from before its instrument starts until it ends.
pub struct CellWatch {
    tasks: Vec<JoinHandle<()>>,
    events: Arc<Mutex<Vec<PodEvent>>>,
    outages: Outages,
}

impl CellWatch {
    /// Watches the pods of `namespaces` that `selector` picks (the cell's own: an earlier
    /// cell's pods still going away are not this cell's news).
    pub fn start(client: &Client, namespaces: &[String], selector: &str, outages: Outages) -> Self {
        let events = Arc::new(Mutex::new(vec![]));
        let tasks = namespaces
            .iter()
            .map(|ns| {
                let api = Api::<Pod>::namespaced(client.clone(), ns);
                let config = watcher::Config::default().labels(selector);
                let follow = follow(api, config, ns.clone(), events.clone(), outages.clone());
                tokio::spawn(follow)
            })
            .collect();
        CellWatch {
            tasks,
            events,
            outages,
        }
    }

    /// Stops watching (before the cell's own clean-up deletes anything) and returns what was
    /// seen.
    pub fn finish(self) -> CellEvents {
        for task in &self.tasks {
            task.abort();
        }
        let events = std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()));
        CellEvents {
            events,
            outages: self.outages.take(),
        }
    }
}

/// What a [`CellWatch`] saw.
#[derive(Debug, Default)]
pub struct CellEvents {
    pub events: Vec<PodEvent>,
    pub outages: Vec<Outage>,
}

impl CellEvents {
    /// As disruptions named after `targets`' components and placed against `window`.
    pub fn disruptions(
        &self,
        targets: &[Target],
        window: Option<&MeasurementWindow>,
    ) -> Vec<Disruption> {
        disruptions(self.events.clone(), self.outages.clone(), targets, window)
    }
}

/// The cell's pods and the outages, as results name them: a container's event under its
/// component's name, a pod's under `pod/<name>` with the components it carried.
pub fn disruptions(
    events: Vec<PodEvent>,
    outages: Vec<Outage>,
    targets: &[Target],
    window: Option<&MeasurementWindow>,
) -> Vec<Disruption> {
    let mut all: Vec<(SystemTime, Disruption)> = vec![];
    for e in events {
        let of_pod = |t: &&Target| t.namespace == e.namespace && t.pod == e.pod;
        let (component, role, carried) = match &e.container {
            Some(container) => match targets
                .iter()
                .filter(of_pod)
                .find(|t| &t.container == container)
            {
                Some(t) => (t.component.clone(), t.role.clone(), None),
                None => (
                    format!("{}/{container}", e.pod),
                    "container".to_owned(),
                    None,
                ),
            },
            None => {
                let carried: Vec<&str> = targets
                    .iter()
                    .filter(of_pod)
                    .map(|t| t.component.as_str())
                    .collect();
                let carried = (!carried.is_empty()).then(|| format!("ran {}", carried.join(", ")));
                (format!("pod/{}", e.pod), "pod".to_owned(), carried)
            }
        };
        let detail = [e.detail, carried]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        let d = Disruption::at(component, role, e.kind, e.at, window, e.reason)
            .with_detail(detail.join("; "));
        all.push((e.at, d));
    }
    for o in outages {
        let lasted = o
            .until
            .and_then(|u| u.duration_since(o.since).ok())
            .map(|d| d.as_secs_f64());
        let d = Disruption::at(
            o.reach.component(),
            o.reach.role(),
            DisruptionKind::Unreachable,
            o.since,
            window,
            o.reason,
        )
        .lasting(lasted);
        all.push((o.since, d));
    }
    all.sort_by_key(|(at, _)| *at);
    all.into_iter().map(|(_, d)| d).collect()
}

/// One namespace's pods, from a watch that resumes after the API server comes back.
async fn follow(
    api: Api<Pod>,
    config: watcher::Config,
    namespace: String,
    events: Arc<Mutex<Vec<PodEvent>>>,
    outages: Outages,
) {
    let mut seen = Seen::default();
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(item) = stream.next().await {
        let now = SystemTime::now();
        let found = match item {
            Err(e) => {
                // Only a failure to answer is an outage: a restarted API server's first
                // refusals (403, its authorizer still loading) are answers, told apart from
                // the connection failures before them.
                if let Some(source) = watch_source(&e).filter(|e| crate::pods::transient(e)) {
                    outages.failed(Reach::ApiServer, source, now);
                }
                continue;
            }
            Ok(event) => {
                outages.answered(Reach::ApiServer, now);
                seen.event(&namespace, event, now)
            }
        };
        if !found.is_empty() {
            events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(found);
        }
    }
}

fn watch_source(e: &watcher::Error) -> Option<&kube::Error> {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => Some(e),
        watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => None,
    }
}

/// What the watch knows of a namespace's pods: which exist, and each container's
/// terminations counted so far.
#[derive(Debug, Default)]
struct Seen {
    pods: BTreeSet<String>,
    /// (pod, container) -> (restarts, whether its current run had ended) when last seen.
    containers: BTreeMap<(String, String), (i32, bool)>,
    /// The pods before a relist began (the watch resumed), to find those deleted meanwhile.
    relisting: Option<BTreeSet<String>>,
    relisted: BTreeSet<String>,
    /// Pods whose deletion was told.
    told_deleted: BTreeSet<String>,
    /// Containers' ends told: (pod, container, the ended run's id).
    told_ended: BTreeSet<(String, String, String)>,
}

impl Seen {
    fn event(&mut self, namespace: &str, event: Event<Pod>, now: SystemTime) -> Vec<PodEvent> {
        match event {
            Event::Init => {
                self.relisting = Some(self.pods.clone());
                self.relisted.clear();
                vec![]
            }
            Event::InitApply(pod) => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                self.relisted.insert(name);
                self.applied(namespace, &pod)
            }
            Event::InitDone => {
                let Some(before) = self.relisting.take() else {
                    return vec![];
                };
                // Gone while the watch was down: dated when the watch saw it gone.
                let gone: Vec<String> = before.difference(&self.relisted).cloned().collect();
                gone.into_iter()
                    .filter(|pod| self.told_deleted.insert(pod.clone()))
                    .map(|pod| {
                        self.pods.remove(&pod);
                        PodEvent {
                            namespace: namespace.to_owned(),
                            pod,
                            container: None,
                            kind: DisruptionKind::Deleted,
                            at: now,
                            reason: "deleted".into(),
                            detail: Some("found gone when the watch resumed".into()),
                            end_id: String::new(),
                        }
                    })
                    .collect()
            }
            Event::Apply(pod) => self.applied(namespace, &pod),
            Event::Delete(pod) => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                self.pods.remove(&name);
                self.deleted(namespace, &pod, now).into_iter().collect()
            }
        }
    }

    /// A pod whose deletion was asked for, once: dated when it was asked (the deletion
    /// timestamp less the grace period, both the API server's), else when it was seen.
    fn deleted(&mut self, namespace: &str, pod: &Pod, now: SystemTime) -> Option<PodEvent> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if !self.told_deleted.insert(name.clone()) {
            return None;
        }
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        let at = pod.metadata.deletion_timestamp.as_ref().map_or(now, |t| {
            SystemTime::from(t.0) - std::time::Duration::from_secs(grace.max(0) as u64)
        });
        Some(PodEvent {
            namespace: namespace.to_owned(),
            pod: name,
            container: None,
            kind: DisruptionKind::Deleted,
            at,
            reason: "deleted".into(),
            detail: Some(format!("grace period {grace} s")),
            end_id: String::new(),
        })
    }

    /// A pod as it is now: the terminations of its containers not seen before. A container
    /// that ended successfully and stays ended (an instrument run to its end) is not one.
    fn applied(&mut self, namespace: &str, pod: &Pod) -> Vec<PodEvent> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let first_sight = self.pods.insert(name.clone());
        let mut found: Vec<PodEvent> = vec![];
        if pod.metadata.deletion_timestamp.is_some() {
            found.extend(self.deleted(namespace, pod, SystemTime::now()));
        }
        let Some(status) = &pod.status else {
            return found;
        };
        let statuses = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for c in statuses {
            let key = (name.clone(), c.name.clone());
            let ended_now = c.state.as_ref().and_then(|s| s.terminated.as_ref());
            let (restarts_before, ended_before) = self
                .containers
                .get(&key)
                .copied()
                .unwrap_or((c.restart_count, first_sight && ended_now.is_some()));
            self.containers
                .insert(key, (c.restart_count, ended_now.is_some()));
            // Restarted since last seen: its previous run ended (lastState says how).
            if c.restart_count > restarts_before {
                found.extend(ended(namespace, &name, c, Previous::Last));
            }
            if let Some(t) = ended_now.filter(|_| !ended_before) {
                if t.exit_code != 0 {
                    found.extend(ended(namespace, &name, c, Previous::Current));
                }
            }
        }
        // One end is seen twice when the watch saw the container ended and then restarted
        // (its state, then its lastState): told once.
        found.retain(|e| match &e.container {
            Some(container) => {
                self.told_ended
                    .insert((name.clone(), container.clone(), e.end_id.clone()))
            }
            None => true,
        });
        found
    }
}

enum Previous {
    Last,
    Current,
}

fn ended(namespace: &str, pod: &str, c: &ContainerStatus, which: Previous) -> Option<PodEvent> {
    let state = match which {
        Previous::Last => c.last_state.as_ref(),
        Previous::Current => c.state.as_ref(),
    }?;
    let t = state.terminated.as_ref()?;
    let mut detail = format!("exit code {}", t.exit_code);
    if let Some(signal) = t.signal {
        detail.push_str(&format!(", signal {signal}"));
    }
    if let Some(message) = t.message.as_ref().filter(|m| !m.trim().is_empty()) {
        detail.push_str(&format!("; {}", message.trim()));
    }
    // The cluster dates a container's end to the second.
    let at = match &t.finished_at {
        Some(finished) => {
            detail.push_str("; finishedAt, to the second");
            SystemTime::from(finished.0)
        }
        None => SystemTime::now(),
    };
    Some(PodEvent {
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        container: Some(c.name.clone()),
        kind: DisruptionKind::Exited,
        at,
        reason: t.reason.clone().unwrap_or_else(|| "terminated".into()),
        detail: Some(detail),
        end_id: t
            .container_id
            .clone()
            .or_else(|| t.finished_at.as_ref().map(|f| f.0.to_string()))
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn pod(name: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "status": status}))
            .unwrap()
    }

    fn target(pod: &str, container: &str, component: &str, role: &str) -> Target {
        Target {
            namespace: "ns".into(),
            pod: pod.into(),
            container: container.into(),
            node: "node-2".into(),
            component: component.into(),
            role: role.into(),
        }
    }

    fn running(restarts: i32, last: Option<serde_json::Value>) -> serde_json::Value {
        let mut c = serde_json::json!({"name": "sidecar", "image": "x", "imageID": "",
            "ready": true, "restartCount": restarts, "state": {"running": {}}});
        if let Some(last) = last {
            c["lastState"] = serde_json::json!({"terminated": last});
        }
        serde_json::json!({"phase": "Running", "containerStatuses": [c]})
    }

    #[test]
    fn an_oom_killed_sidecar_is_told_by_its_component_with_the_clusters_reason() {
        let mut seen = Seen::default();
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert!(seen
            .event("ns", Event::Apply(pod("server", running(0, None))), now)
            .is_empty());
        let oom = serde_json::json!({"exitCode": 137, "reason": "OOMKilled",
            "finishedAt": "2027-01-15T08:00:01Z"});
        let found = seen.event(
            "ns",
            Event::Apply(pod("server", running(1, Some(oom)))),
            now,
        );
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].reason, "OOMKilled");
        // Seen again unchanged: told once.
        let oom = serde_json::json!({"exitCode": 137, "reason": "OOMKilled",
            "finishedAt": "2027-01-15T08:00:01Z"});
        assert!(seen
            .event(
                "ns",
                Event::Apply(pod("server", running(1, Some(oom)))),
                now
            )
            .is_empty());
        let targets = [target(
            "server",
            "sidecar",
            "echo-server-1-sidecar",
            "sidecar",
        )];
        let d = disruptions(found, vec![], &targets, None);
        assert_eq!(d[0].component, "echo-server-1-sidecar");
        assert_eq!(d[0].role, "sidecar");
        assert_eq!(d[0].kind, "exited");
        assert_eq!(d[0].at, "2027-01-15T08:00:01.000Z");
        assert_eq!(
            d[0].detail.as_deref(),
            Some("exit code 137; finishedAt, to the second")
        );
    }

    #[test]
    fn an_instrument_that_ends_well_is_no_disruption_and_one_that_fails_is() {
        let mut seen = Seen::default();
        let now = UNIX_EPOCH;
        let done = |code: i32| {
            serde_json::json!({"phase": "Succeeded", "containerStatuses": [{"name": "app",
            "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "reason": "Completed"}}}]})
        };
        let running = serde_json::json!({"phase": "Running"});
        seen.event("ns", Event::Apply(pod("load", running.clone())), now);
        assert!(seen
            .event("ns", Event::Apply(pod("load", done(0))), now)
            .is_empty());
        seen.event("ns", Event::Apply(pod("load-2", running)), now);
        assert_eq!(
            seen.event("ns", Event::Apply(pod("load-2", done(1))), now)
                .len(),
            1
        );
        // Already ended when first seen (the watch started late): not news.
        assert!(seen
            .event("ns", Event::Apply(pod("old", done(1))), now)
            .is_empty());
    }

    #[test]
    fn a_pod_deleted_is_told_with_what_it_ran_also_when_the_watch_missed_it() {
        let mut seen = Seen::default();
        let now = UNIX_EPOCH + Duration::from_secs(100);
        let running = serde_json::json!({"phase": "Running"});
        seen.event("ns", Event::Apply(pod("server", running.clone())), now);
        seen.event("ns", Event::Apply(pod("client", running.clone())), now);
        let mut deleting = pod("server", running.clone());
        deleting.metadata.deletion_grace_period_seconds = Some(3);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::try_from(now + Duration::from_secs(3)).unwrap(),
            ));
        let found = seen.event("ns", Event::Apply(deleting.clone()), now);
        // Removed for good: already told when its deletion was asked for.
        assert!(seen.event("ns", Event::Delete(deleting), now).is_empty());
        let targets = [
            target("server", "app", "echo-server-1", "app"),
            target("server", "sidecar", "echo-server-1-sidecar", "sidecar"),
        ];
        let d = disruptions(found, vec![], &targets, None);
        assert_eq!(d[0].component, "pod/server");
        assert_eq!(d[0].kind, "deleted");
        assert_eq!(d[0].at, "1970-01-01T00:01:40.000Z", "when it was asked for");
        assert_eq!(
            d[0].detail.as_deref(),
            Some("grace period 3 s; ran echo-server-1, echo-server-1-sidecar")
        );
        // The watch went down and came back without the client: gone meanwhile.
        assert!(seen.event("ns", Event::Init, now).is_empty());
        assert!(seen.event("ns", Event::InitDone, now).len() == 1);
    }

    #[test]
    fn outages_are_told_as_the_part_that_did_not_answer_and_for_how_long() {
        let t = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let outages = vec![
            Outage {
                reach: Reach::Kubelet("node-2".into()),
                since: t(10),
                until: Some(t(14)),
                reason: "connection refused (503)".into(),
            },
            Outage {
                reach: Reach::ApiServer,
                since: t(20),
                until: None,
                reason: "Connection refused (os error 111)".into(),
            },
        ];
        let d = disruptions(vec![], outages, &[], None);
        assert_eq!(
            (
                d[0].component.as_str(),
                d[0].role.as_str(),
                d[0].kind.as_str()
            ),
            ("node-2/kubelet", "kubelet", "unreachable")
        );
        assert_eq!(d[0].lasted_secs, Some(4.0));
        assert_eq!(d[1].component, "api-server");
        assert_eq!(d[1].lasted_secs, None);
    }
}
