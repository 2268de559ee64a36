//! Lab components as child processes. A component announces readiness with one JSON line on
//! stdout (`{"event":"ready","addr":"127.0.0.1:41234"}`); the lab waits for it with a deadline
//! and kills the child when its handle is dropped, so no component outlives a failed or
//! interrupted run. Each child's end is watched through a pidfd, so that a component that
//! dies during a cell (killed, crashed, OOM-killed) is dated to the moment it died rather than
//! to when the lab next looked.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

use crate::{Error, Launch};

/// The line a component prints on stdout once it serves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadyEvent {
    pub event: String,
    /// The component's main (inbound) address.
    pub addr: Option<String>,
    /// Outbound listeners, for proxies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbound: Vec<String>,
    /// Admin endpoint (metrics), for proxies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
}

impl ReadyEvent {
    pub fn ready(addr: Option<String>) -> Self {
        ReadyEvent {
            event: "ready".to_owned(),
            addr,
            outbound: Vec::new(),
            admin: None,
        }
    }
}

pub struct ComponentProcess {
    name: String,
    child: Child,
    stderr: Option<ChildStderr>,
    /// When the child ended, set by its pidfd's watcher (unset while it runs, or where the
    /// kernel has no pidfds).
    ended_at: Arc<OnceLock<SystemTime>>,
}

/// How a component that ended on its own ended.
#[derive(Debug, Clone)]
pub struct Ended {
    /// As the OS says it: `signal: 9 (SIGKILL)`, `exit status: 1`.
    pub status: String,
    /// When it ended: its pidfd's report, or when the lab found it ended.
    pub at: SystemTime,
    /// The end of what it wrote on stderr.
    pub stderr: String,
}

/// How much of a dead component's stderr an [`Ended`] keeps, and how long the lab waits for
/// it (a grandchild may still hold the pipe).
const ENDED_STDERR_BYTES: usize = 2048;
const ENDED_STDERR_WAIT: Duration = Duration::from_secs(1);

/// Dates the end of process `pid` through a pidfd, which becomes readable when it exits.
fn watch_end(pid: Option<u32>) -> Arc<OnceLock<SystemTime>> {
    let ended = Arc::new(OnceLock::new());
    let pidfd = pid
        .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
        // `AsyncFd::new` is deprecated because a `T` that does not own its descriptor could
        // close it while registered; an `OwnedFd` inside the `AsyncFd` lives exactly as long
        // as the registration, which is the safety `register` asks for (unsafe code is not
        // allowed in this workspace).
        .and_then(|fd| {
            #[allow(deprecated)]
            tokio::io::unix::AsyncFd::new(fd).ok()
        });
    if let Some(pidfd) = pidfd {
        let set = ended.clone();
        tokio::spawn(async move {
            if pidfd.readable().await.is_ok() {
                let _ = set.set(SystemTime::now());
            }
        });
    }
    ended
}

impl ComponentProcess {
    /// Starts `program args...` with stdout piped for the ready line and stderr kept for
    /// error messages.
    pub fn spawn(name: &str, program: &Path, args: &[String]) -> Result<Self, Error> {
        Self::spawn_with(name, &Launch::default(), program, args)
    }

    /// Starts `program args...` in the namespace, cgroup, user and CPUs `launch` names.
    pub fn spawn_with(
        name: &str,
        launch: &Launch,
        program: &Path,
        args: &[String],
    ) -> Result<Self, Error> {
        let (program, args) = launch.wrap(program, args);
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| Error::Spawn {
            component: name.to_owned(),
            source,
        })?;
        let stderr = child.stderr.take();
        let ended_at = watch_end(child.id());
        Ok(ComponentProcess {
            name: name.to_owned(),
            child,
            stderr,
            ended_at,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the component's ready line.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<ReadyEvent, Error> {
        let stdout = self
            .child
            .stdout
            .take()
            .expect("stdout is piped and read once");
        let mut lines = BufReader::new(stdout).lines();
        let line = match tokio::time::timeout(timeout, lines.next_line()).await {
            Err(_) => {
                return Err(Error::NotReady {
                    component: self.name.clone(),
                    seconds: timeout.as_secs(),
                })
            }
            Ok(Ok(Some(line))) => line,
            Ok(_) => return Err(self.exited_early().await),
        };
        // Keep draining stdout so a chatty child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        serde_json::from_str::<ReadyEvent>(&line)
            .ok()
            .filter(|e| e.event == "ready")
            .ok_or_else(|| Error::BadReadyLine {
                component: self.name.clone(),
                line,
            })
    }

    /// If the component has exited: the error saying how, with its stderr.
    pub async fn exited(&mut self) -> Option<Error> {
        match self.child.try_wait() {
            Ok(Some(_)) | Err(_) => Some(self.exited_early().await),
            Ok(None) => None,
        }
    }

    /// How the component ended, if it has ended on its own (before anyone stopped it).
    pub async fn ended(&mut self) -> Option<Ended> {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => status.to_string(),
            Ok(None) => return None,
            Err(e) => e.to_string(),
        };
        let at = self.ended_at.get().copied().unwrap_or_else(SystemTime::now);
        let stderr = tokio::time::timeout(ENDED_STDERR_WAIT, self.take_stderr())
            .await
            .unwrap_or_default();
        let cut = stderr.floor_char_boundary(stderr.len().saturating_sub(ENDED_STDERR_BYTES));
        Some(Ended {
            status,
            at,
            stderr: stderr[cut..].to_owned(),
        })
    }

    async fn exited_early(&mut self) -> Error {
        let status = match self.child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        };
        Error::ExitedEarly {
            component: self.name.clone(),
            status,
            stderr: self.take_stderr().await,
        }
    }

    async fn take_stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut stderr) = self.stderr.take() {
            let _ = stderr.read_to_string(&mut text).await;
        }
        text.trim().to_owned()
    }

    /// Waits for a component that runs to completion (a load generator) and fails with its
    /// stderr if it did not exit successfully.
    pub async fn wait_success(mut self) -> Result<(), Error> {
        let mut stderr = self.stderr.take();
        let drain = tokio::spawn(async move {
            let mut text = String::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_string(&mut text).await;
            }
            text
        });
        let status = self.child.wait().await.map_err(|source| Error::Spawn {
            component: self.name.clone(),
            source,
        })?;
        let stderr = drain.await.unwrap_or_default();
        if status.success() {
            Ok(())
        } else {
            Err(Error::Failed {
                component: self.name,
                status: status.to_string(),
                stderr: stderr.trim().to_owned(),
            })
        }
    }

    /// Stops the component: SIGTERM for a graceful drain, SIGKILL if it lingers.
    pub async fn stop(mut self, grace: Duration) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}
