//! A pod's life as the API server reports it, followed through a watch rather than polled:
//! ready, run to its end, or unable to start, with the cluster's reason (`ImagePullBackOff`,
//! `CrashLoopBackOff` with the container's last log lines, `Unschedulable` with the
//! scheduler's message).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::api::LogParams;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;

use crate::Error;

/// Waiting reasons after which a container will not start without someone's help.
const STUCK: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// How many of a failed container's last log lines an error carries.
const LOG_LINES: i64 = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    Pending,
    Ready,
    Succeeded,
    /// Cannot start, or ended in failure: the reason and the cluster's message.
    Failed {
        reason: String,
        message: String,
        /// Whether the container ran (so that its log is worth fetching), and which run of
        /// it failed.
        ran: Option<Ran>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// The current container ended.
    Current,
    /// The container restarts; the previous one ended.
    Previous,
}

/// What the pod's status says now.
pub fn state(pod: &Pod) -> PodState {
    let Some(status) = &pod.status else {
        return PodState::Pending;
    };
    for c in status.conditions.iter().flatten() {
        if c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
        {
            return PodState::Failed {
                reason: "Unschedulable".into(),
                message: c.message.clone().unwrap_or_default(),
                ran: None,
            };
        }
    }
    // Sidecar containers are init containers: one that cannot start stops the pod too.
    let containers = status.init_container_statuses.iter().flatten();
    for c in containers.chain(status.container_statuses.iter().flatten()) {
        if let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = waiting.reason.clone().unwrap_or_default();
            if STUCK.contains(&reason.as_str()) {
                let ran = (reason == "CrashLoopBackOff").then_some(Ran::Previous);
                return PodState::Failed {
                    reason,
                    message: waiting.message.clone().unwrap_or_default(),
                    ran,
                };
            }
        }
    }
    match status.phase.as_deref() {
        Some("Succeeded") => return PodState::Succeeded,
        Some("Failed") => {
            let terminated = status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.as_ref()?.terminated.as_ref());
            return PodState::Failed {
                reason: terminated
                    .and_then(|t| t.reason.clone())
                    .or_else(|| status.reason.clone())
                    .unwrap_or_else(|| "Failed".into()),
                message: terminated
                    .map(|t| format!("exit code {}", t.exit_code))
                    .or_else(|| status.message.clone())
                    .unwrap_or_default(),
                ran: terminated.map(|_| Ran::Current),
            };
        }
        _ => {}
    }
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if ready {
        PodState::Ready
    } else {
        PodState::Pending
    }
}

/// What to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    Ready,
    /// Its containers run and it has its address (readiness not awaited).
    Running,
    /// Run to its end successfully.
    Succeeded,
}

impl Until {
    /// As progress lines say it: "3 of 24 pods ready".
    pub fn describe(self) -> &'static str {
        match self {
            Until::Ready => "ready",
            Until::Running => "running",
            Until::Succeeded => "finished",
        }
    }
}

/// Follows pod `name` until `until`, a failure, or `timeout`.
pub async fn wait(
    api: &Api<Pod>,
    name: &str,
    until: Until,
    timeout: Duration,
) -> Result<Pod, Error> {
    let namespace = api.namespace().unwrap_or_default().to_owned();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    // Backed off and resumed when the API server goes away for a while (restarted, a
    // network blip): the pod runs on meanwhile, and the wait's deadline still bounds it.
    let mut pods = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let followed = async {
        let mut forbidden_since = None;
        while let Some(pod) = pods.next().await {
            let pod = match pod {
                Ok(pod) => pod,
                Err(e) if transient_watch(&e) => {
                    tracing::debug!(pod = name, error = %e, "watch interrupted; resuming");
                    continue;
                }
                // A restarted API server refuses for a moment what its authorizer's caches
                // have not loaded yet; the run's permissions were checked before it began.
                Err(e)
                    if forbidden_watch(&e)
                        && forbidden_since
                            .get_or_insert_with(tokio::time::Instant::now)
                            .elapsed()
                            < FORBIDDEN_GRACE =>
                {
                    tracing::debug!(pod = name, error = %e, "refused; asking again");
                    continue;
                }
                Err(e) => {
                    return Err(Error::Api {
                        what: format!("watching pod {name}"),
                        source: kube::Error::Service(Box::new(e)),
                    })
                }
            };
            let status = pod.status.as_ref();
            let running = status.and_then(|s| s.phase.as_deref()) == Some("Running")
                && status.and_then(|s| s.pod_ip.as_ref()).is_some();
            match (state(&pod), until) {
                (PodState::Ready, Until::Ready) | (PodState::Succeeded, Until::Succeeded) => {
                    return Ok(pod)
                }
                (PodState::Ready | PodState::Pending, Until::Running) if running => return Ok(pod),
                (PodState::Succeeded, Until::Ready | Until::Running) => {
                    return Err(failed(
                        api,
                        &namespace,
                        name,
                        "Completed".into(),
                        "the container ended".into(),
                        Some(Ran::Current),
                    )
                    .await)
                }
                (
                    PodState::Failed {
                        reason,
                        message,
                        ran,
                    },
                    _,
                ) => return Err(failed(api, &namespace, name, reason, message, ran).await),
                _ => {}
            }
        }
        Err(Error::Timeout {
            namespace: namespace.clone(),
            pod: name.to_owned(),
            what: "followed (the watch ended)",
            seconds: 0,
        })
    };
    match tokio::time::timeout(timeout, followed).await {
        Ok(result) => result,
        Err(_) => Err(Error::Timeout {
            namespace,
            pod: name.to_owned(),
            what: match until {
                Until::Ready => "ready",
                Until::Running => "running",
                Until::Succeeded => "finished",
            },
            seconds: timeout.as_secs(),
        }),
    }
}

async fn failed(
    api: &Api<Pod>,
    namespace: &str,
    pod: &str,
    reason: String,
    message: String,
    ran: Option<Ran>,
) -> Error {
    let logs = match ran {
        Some(ran) => tail(api, pod, ran == Ran::Previous).await,
        None => None,
    };
    Error::PodFailed {
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        reason,
        message,
        logs,
    }
}

/// The last lines of the pod's container's log, if it can be had.
async fn tail(api: &Api<Pod>, pod: &str, previous: bool) -> Option<String> {
    let params = LogParams {
        tail_lines: Some(LOG_LINES),
        previous,
        // The app's container; a sidecar's failure names its reason without its log.
        container: Some(crate::objects::APP_CONTAINER.into()),
        ..LogParams::default()
    };
    api.logs(pod, &params)
        .await
        .ok()
        .filter(|l| !l.trim().is_empty())
}

/// Whether a failed request may succeed if asked again: the API server did not answer, or
/// answered that something behind it (a kubelet) is unavailable; not a refusal (403), a
/// missing object (404) or a bad request.
pub fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// How long a wait rides out refusals (403).
const FORBIDDEN_GRACE: Duration = Duration::from_secs(30);

fn forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 403)
}

fn forbidden_watch(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => forbidden(e),
        _ => false,
    }
}

fn transient_watch(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => transient(e),
        // "too old resource version": the watcher relists by itself.
        watcher::Error::WatchError(status) => status.code == 410 || status.code >= 500,
        watcher::Error::NoResourceVersion => false,
    }
}

/// How long [`log_when_reachable`] keeps asking.
pub const LOG_RETRY: Duration = Duration::from_secs(60);
const LOG_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// [`log`], asked again while the API server or the pod's kubelet cannot answer (for up to
/// [`LOG_RETRY`]): an instrument's result is in its log, and a cell whose instrument finished
/// is not lost to a kubelet restarting.
pub async fn log_when_reachable(
    api: &Api<Pod>,
    pod: &str,
    container: &str,
) -> Result<String, Error> {
    let deadline = tokio::time::Instant::now() + LOG_RETRY;
    loop {
        match log(api, pod, container).await {
            // A 403 too: what a restarted API server says until its authorizer has loaded.
            Err(Error::Api { source, .. })
                if (transient(&source) || forbidden(&source))
                    && tokio::time::Instant::now() < deadline =>
            {
                tracing::debug!(pod, error = %source, "log unreadable for now");
                tokio::time::sleep(LOG_RETRY_PAUSE).await;
            }
            done => return done,
        }
    }
}

/// The whole log of the pod's container `container`.
pub async fn log(api: &Api<Pod>, pod: &str, container: &str) -> Result<String, Error> {
    let params = LogParams {
        container: Some(container.to_owned()),
        ..LogParams::default()
    };
    api.logs(pod, &params)
        .await
        .map_err(Error::api(format!("reading pod {pod}'s log")))
}

/// The containers that run for as long as the pod does: its containers and its native
/// sidecars, the init containers with `restartPolicy: Always` (Kubernetes 1.29+), which is how
/// Linkerd injects its proxy by default (`proxy.nativeSidecar`) and Istio can. What is sampled,
/// classed and versioned; the init containers that run to completion first are not.
pub fn long_running(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .chain(spec.containers.iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status}))
            .unwrap()
    }

    #[test]
    fn reads_the_reasons_a_pod_will_not_start() {
        let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity"}]}));
        assert!(
            matches!(state(&unschedulable), PodState::Failed { reason, message, ran: None }
            if reason == "Unschedulable" && message.contains("node affinity"))
        );
        let pull = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
            "name": "meshbench", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}),
        );
        assert!(
            matches!(state(&pull), PodState::Failed { reason, .. } if reason == "ImagePullBackOff")
        );
        let crash = pod(
            serde_json::json!({"phase": "Running", "containerStatuses": [{
            "name": "meshbench", "image": "x", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        );
        assert!(matches!(
            state(&crash),
            PodState::Failed {
                ran: Some(Ran::Previous),
                ..
            }
        ));
        let ready = pod(serde_json::json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}));
        assert_eq!(state(&ready), PodState::Ready);
        let done = pod(serde_json::json!({"phase": "Succeeded"}));
        assert_eq!(state(&done), PodState::Succeeded);
        let exited = pod(
            serde_json::json!({"phase": "Failed", "containerStatuses": [{
            "name": "meshbench", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}),
        );
        assert!(
            matches!(state(&exited), PodState::Failed { reason, message, ran: Some(Ran::Current) }
            if reason == "Error" && message == "exit code 2")
        );
    }

    #[test]
    fn native_sidecars_run_with_the_pod_and_other_init_containers_do_not() {
        let container = |name: &str, restart: Option<&str>| Container {
            name: name.into(),
            restart_policy: restart.map(Into::into),
            ..Container::default()
        };
        let spec = PodSpec {
            init_containers: Some(vec![
                container("linkerd-init", None),
                container("linkerd-proxy", Some("Always")),
            ]),
            containers: vec![container("app", None)],
            ..PodSpec::default()
        };
        let names: Vec<&str> = long_running(&spec).map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["linkerd-proxy", "app"]);
    }
}
