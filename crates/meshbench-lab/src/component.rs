//! A running lab component with what the lab knows about it: its name and role in the
//! experiment (app, sidecar, node agent, control plane, load generator), its process and its
//! cgroup. Starting one waits until it serves: its ready line (meshbench roles) or a
//! listening socket in its own network namespace (third-party proxies).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Cgroup, ComponentProcess, Error, Launch, ReadyEvent, SampleTarget};

/// The tracing target of the lab's events: a component started (name, role, pid) or failed
/// (name, role, error).
pub const LAB_EVENTS: &str = "meshbench::lab";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// The component prints a JSON ready line (`meshbench` roles).
    ReadyLine,
    /// The component listens on this TCP port (seen from its own network namespace).
    Listening(u16),
    /// Runs to completion (a load generator); nothing to wait for.
    Started,
}

pub struct LabComponent {
    pub name: String,
    pub role: String,
    pub process: ComponentProcess,
    pub cgroup: Option<Cgroup>,
    pub ready: Option<ReadyEvent>,
}

impl LabComponent {
    /// Starts `program args` as `launch` says and waits until it is ready.
    pub async fn start(
        name: &str,
        role: &str,
        launch: &Launch,
        program: &Path,
        args: &[String],
        readiness: Readiness,
        timeout: Duration,
    ) -> Result<Self, Error> {
        let starting = async {
            let mut process = ComponentProcess::spawn_with(name, launch, program, args)?;
            let ready = match readiness {
                Readiness::ReadyLine => Some(process.wait_ready(timeout).await?),
                Readiness::Listening(port) => {
                    let pid = process.pid().unwrap_or(0);
                    let deadline = Instant::now() + timeout;
                    while !listens(pid, port) {
                        if let Some(e) = process.exited().await {
                            return Err(e);
                        }
                        if Instant::now() > deadline {
                            return Err(Error::NotReady {
                                component: name.to_owned(),
                                seconds: timeout.as_secs(),
                            });
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    None
                }
                Readiness::Started => None,
            };
            Ok(LabComponent {
                name: name.to_owned(),
                role: role.to_owned(),
                process,
                cgroup: launch.cgroup.clone(),
                ready,
            })
        };
        // Watchers (`meshbench serve`) show these as the lab's events.
        let started: LabComponent = starting.await.inspect_err(|e: &Error| {
            tracing::warn!(target: LAB_EVENTS, component = name, role, error = %e, "component failed");
        })?;
        tracing::info!(
            target: LAB_EVENTS,
            component = name,
            role,
            pid = started.process.pid().unwrap_or(0),
            "component started"
        );
        Ok(started)
    }

    pub fn sample_target(&self) -> Option<SampleTarget> {
        Some(SampleTarget {
            component: self.name.clone(),
            role: self.role.clone(),
            pid: self.process.pid()?,
            cgroup: self.cgroup.clone(),
        })
    }

    /// Stops the component (SIGTERM, then SIGKILL after `grace`) and removes its cgroup.
    pub async fn stop(self, grace: Duration) {
        self.process.stop(grace).await;
        if let Some(group) = self.cgroup {
            remove_group(&group).await;
        }
    }
}

/// Removes a group once the kernel has let go of its last process.
pub(crate) async fn remove_group(group: &Cgroup) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while group.remove().is_err() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether process `pid` sees a TCP socket listening on `port` in its network namespace.
fn listens(pid: u32, port: u16) -> bool {
    ["tcp", "tcp6"].iter().any(|table| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))
            .map(|text| {
                text.lines().skip(1).any(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    // local_address is HEXIP:HEXPORT; state 0A is LISTEN.
                    fields.len() > 3
                        && fields[3] == "0A"
                        && fields[1]
                            .rsplit_once(':')
                            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                            == Some(port)
                })
            })
            .unwrap_or(false)
    })
}
