//! Making a probe's request the way E3 did, from inside the calling pod: the verifier joins
//! the pod's network namespace and asks the pod's own app over loopback (which no mesh
//! captures) to call the target, so the call itself leaves the pod like any of the app's
//! calls and goes through whatever the mesh put in its path.

use std::time::Duration;

use http::Uri;
use meshbench_netlab::{run_in_netns, LabNetwork, NetPlace};
use meshbench_workload::Caller;
use serde_json::{json, Value};

use crate::e3::{member, Probe, EXPERIMENTER, SERVICE_PORT};
use crate::Error;

/// What the calling app reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The outcome class (`http_200`, `http_403`, `connection_reset`, ...).
    pub outcome: String,
    pub error: Option<String>,
}

impl Observation {
    pub fn allowed(&self) -> bool {
        self.outcome.starts_with("http_2")
    }
}

/// Runs `probe` from its calling pod, with `marker` in the request.
pub fn run_probe(net: &LabNetwork, probe: &Probe, marker: &str) -> Result<Observation, Error> {
    let (path, body) = probe_request(probe, marker);
    let reply = ask_app(net, probe.from, path, body)?;
    Ok(observation(probe, &reply))
}

/// What the calling pod's own app is asked, to make `probe` with `marker` in it: the
/// experimenter runs a one-request experiment, a checker checks its target.
pub fn probe_request(probe: &Probe, marker: &str) -> (&'static str, Value) {
    let to = member(probe.to);
    let host = format!("{}.{}.svc", to.workload, to.namespace);
    if probe.from == EXPERIMENTER {
        (
            "/api/experimenter/experiment",
            json!({
                "interactions": 1,
                "batchSize": 1,
                "allowedOperations": ["sum"],
                "marker": marker,
            }),
        )
    } else {
        let mut target = json!({
            "host": host,
            "port": SERVICE_PORT,
            "path": probe.path,
            "method": probe.method,
            "marker": marker,
        });
        if probe.method == "POST" {
            target["body"] = json!({"firstNumber": 1, "secondNumber": 2});
        }
        ("/api/security-checker/check", target)
    }
}

/// What the calling app's `reply` says happened to `probe`.
pub fn observation(probe: &Probe, reply: &Value) -> Observation {
    if probe.from == EXPERIMENTER {
        experiment_outcome(reply)
    } else {
        Observation {
            outcome: reply["outcome"].as_str().unwrap_or("other").to_owned(),
            error: reply["error"].as_str().map(str::to_owned),
        }
    }
}

/// The single request of a one-interaction experiment: a 200 if its RTT is listed, else
/// its failure class.
fn experiment_outcome(result: &Value) -> Observation {
    let succeeded = result["rttsInMilliseconds"]
        .as_array()
        .is_some_and(|rtts| rtts.len() == 1);
    if succeeded {
        return Observation {
            outcome: "http_200".into(),
            error: None,
        };
    }
    let outcome = result["failuresByClass"]
        .as_object()
        .and_then(|classes| classes.keys().next().cloned())
        .unwrap_or_else(|| "other".into());
    Observation {
        outcome,
        error: None,
    }
}

/// Posts `body` to `path` of `workload`'s app, from inside its pod, and returns its JSON
/// answer; an app that does not answer 2xx is an error of the verification itself.
pub fn ask_app(net: &LabNetwork, workload: &str, path: &str, body: Value) -> Result<Value, Error> {
    let pod = net
        .topology()
        .first_pod(workload)
        .ok_or_else(|| Error::Probe(format!("no pod for {workload}")))?;
    let netns = net.netns_of(NetPlace::Pod(&pod.name))?;
    let uri: Uri = format!("http://127.0.0.1:{}{path}", meshbench_meshes::Ports::APP)
        .parse()
        .expect("a loopback URL parses");
    let call = run_in_netns(&netns, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime builds");
        runtime.block_on(Caller::new(Duration::from_secs(60)).post_json(&uri, &body))
    })?;
    if !call.is_success() {
        return Err(Error::Probe(format!(
            "{workload} did not answer {path}: {} {}",
            call.outcome,
            call.error
                .unwrap_or_else(|| String::from_utf8_lossy(&call.body).into_owned())
        )));
    }
    serde_json::from_slice(&call.body)
        .map_err(|e| Error::Probe(format!("{workload}'s answer is not JSON: {e}")))
}
