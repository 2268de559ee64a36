//! Running a command in a pod's container through the API server (exec over WebSocket):
//! how the verifier makes a request from inside a pod and records a pod's interface, with no
//! access to the nodes. Both output streams are read as they come (the client's pipes are
//! bounded, so an unread stream would stall the command) and kept up to a cap.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, AttachedProcess};
use kube::Api;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::Error;

/// The most of a command's stdout kept (a capture's pcap is the largest).
const MAX_STDOUT: u64 = 512 << 20;
/// The most of its stderr kept.
const MAX_STDERR: u64 = 64 << 10;

/// What a finished command printed, and whether it succeeded.
#[derive(Debug, Clone)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// The API server's word on how it ended (`Success`, or the reason and exit code).
    pub status: Result<(), String>,
}

impl ExecOutput {
    /// This output if `command` (which ran in `pod`) succeeded, else an error naming what it
    /// said.
    pub fn succeeded(self, pod: &str, command: &str) -> Result<Self, Error> {
        match &self.status {
            Ok(()) => Ok(self),
            Err(status) => Err(Error::Exec {
                pod: pod.to_owned(),
                command: command.to_owned(),
                problem: format!("{status}: {}", self.stderr.trim()),
            }),
        }
    }
}

/// A command still running in a pod.
pub struct RunningExec {
    what: String,
    pod: String,
    process: AttachedProcess,
    stdout: JoinHandle<Vec<u8>>,
    stderr: JoinHandle<String>,
}

/// Starts `command` in `container` of pod `pod` and returns once it printed a stderr line
/// containing `ready` (within `timeout`), or at once without one.
pub async fn start(
    api: &Api<Pod>,
    pod: &str,
    container: &str,
    command: Vec<String>,
    ready: Option<&str>,
    timeout: Duration,
) -> Result<RunningExec, Error> {
    let what = command.join(" ");
    let failed = |problem: String| Error::Exec {
        pod: pod.to_owned(),
        command: what.clone(),
        problem,
    };
    let params = AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let mut process = api
        .exec(pod, command.clone(), &params)
        .await
        .map_err(Error::api(format!("exec `{what}` in pod {pod}")))?;
    let stdout = process.stdout().expect("stdout was asked for");
    let stderr = process.stderr().expect("stderr was asked for");
    let stdout = tokio::spawn(async move {
        let mut kept = Vec::new();
        let _ = stdout.take(MAX_STDOUT).read_to_end(&mut kept).await;
        kept
    });
    let (ready_tx, ready_rx) = oneshot::channel();
    let ready_line = ready.map(str::to_owned);
    let stderr = tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        let mut kept = String::new();
        let mut lines = BufReader::new(stderr.take(MAX_STDERR)).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if ready_line.as_deref().is_some_and(|r| line.contains(r)) {
                if let Some(tx) = ready_tx.take() {
                    let _ = tx.send(());
                }
            }
            kept.push_str(&line);
            kept.push('\n');
        }
        kept
    });
    let running = RunningExec {
        what: what.clone(),
        pod: pod.to_owned(),
        process,
        stdout,
        stderr,
    };
    if ready.is_some() {
        match tokio::time::timeout(timeout, ready_rx).await {
            Ok(Ok(())) => {}
            // The stream ended without the line: the command failed; say what it said.
            Ok(Err(_)) => {
                let output = running.finish(timeout).await?;
                return Err(failed(format!(
                    "it ended before it was ready: {}",
                    output.stderr.trim()
                )));
            }
            Err(_) => {
                running.process.abort();
                return Err(failed(format!("not ready after {} s", timeout.as_secs())));
            }
        }
    }
    Ok(running)
}

/// Runs `command` in `container` of pod `pod` to its end (within `timeout`).
pub async fn run(
    api: &Api<Pod>,
    pod: &str,
    container: &str,
    command: Vec<String>,
    timeout: Duration,
) -> Result<ExecOutput, Error> {
    start(api, pod, container, command, None, timeout)
        .await?
        .finish(timeout)
        .await
}

impl RunningExec {
    /// Waits (within `timeout`) for the command's end and what it printed.
    pub async fn finish(self, timeout: Duration) -> Result<ExecOutput, Error> {
        let RunningExec {
            what,
            pod,
            mut process,
            stdout,
            stderr,
        } = self;
        let status = process.take_status();
        let ended = async {
            let status = match status {
                Some(status) => status.await,
                None => None,
            };
            (
                status,
                stdout.await.unwrap_or_default(),
                stderr.await.unwrap_or_default(),
            )
        };
        let Ok((status, stdout, stderr)) = tokio::time::timeout(timeout, ended).await else {
            process.abort();
            return Err(Error::Exec {
                pod,
                command: what,
                problem: format!("still running after {} s", timeout.as_secs()),
            });
        };
        let status = match status {
            Some(s) if s.status.as_deref() == Some("Success") => Ok(()),
            Some(s) => Err(s
                .message
                .or(s.reason)
                .unwrap_or_else(|| "failed".to_owned())),
            None => Err("the API server gave no status".to_owned()),
        };
        Ok(ExecOutput {
            stdout,
            stderr,
            status,
        })
    }
}
