//! Running a peer tool as a measured child: pinned to a CPU (the child inherits the affinity
//! of the thread that forks it), with its CPU time taken from the kernel's accounting of
//! reaped children (getrusage RUSAGE_CHILDREN), so every tool is measured the same way.

use std::process::{Child, Command, Output, Stdio};

use nix::sys::resource::{getrusage, UsageWho};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use meshbench_loadgen::LoadSpec;
use meshbench_netlab::ScratchNetns;
use meshbench_results::LoadReport;
use meshbench_role::RoleConfig;
use meshbench_workload::{WorkloadApp, WorkloadFile};

use crate::Error;

fn pin_error(cpu: usize, source: rustix::io::Errno) -> Error {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Error::Pin {
        cpu,
        cores,
        source: source.into(),
    }
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin_current_thread(cpu: usize) -> Result<(), Error> {
    let mut only = CpuSet::new();
    only.set(cpu);
    sched_setaffinity(None, &only).map_err(|e| pin_error(cpu, e))
}

/// Spawns `command` with the calling thread temporarily pinned to `cpu`.
pub(crate) fn spawn_pinned(command: &mut Command, cpu: usize, tool: &str) -> Result<Child, Error> {
    let previous = sched_getaffinity(None).map_err(|e| pin_error(cpu, e))?;
    pin_current_thread(cpu)?;
    let spawned = command.spawn();
    sched_setaffinity(None, &previous).map_err(|e| pin_error(cpu, e))?;
    spawned.map_err(|source| Error::Spawn {
        tool: tool.to_owned(),
        source,
    })
}

pub(crate) struct Measured {
    pub output: Output,
    pub cpu_seconds: f64,
}

fn children_cpu_seconds() -> f64 {
    getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

/// Runs `command` to completion on `cpu` and measures its CPU time.
pub(crate) fn run_measured(
    command: &mut Command,
    cpu: usize,
    tool: &str,
) -> Result<Measured, Error> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let before = children_cpu_seconds();
    let child = spawn_pinned(command, cpu, tool)?;
    let output = child.wait_with_output().map_err(|source| Error::Spawn {
        tool: tool.to_owned(),
        source,
    })?;
    let cpu_seconds = children_cpu_seconds() - before;
    if !output.status.success() {
        return Err(Error::Failed {
            tool: tool.to_owned(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(Measured {
        output,
        cpu_seconds,
    })
}

/// Runs `meshbench load` on `cpu` from `spec` (written beside its JSON result as
/// `<name>.load.yaml`) and reads its report; the CPU time is the generator's own.
pub(crate) fn run_meshbench_load(
    meshbench: &std::path::Path,
    mut spec: LoadSpec,
    dir: &std::path::Path,
    name: &str,
    cpu: usize,
    netns: Option<&ScratchNetns>,
) -> Result<(LoadReport, f64), Error> {
    let json = dir.join(format!("{name}.json"));
    let config = dir.join(format!("{name}.load.yaml"));
    spec.output.json = Some(json.clone());
    spec.output.quiet = true;
    std::fs::write(&config, spec.to_yaml()).map_err(|source| Error::Io {
        path: config.clone(),
        source,
    })?;
    let mut command = command_in(netns, meshbench, LoadSpec::command_line(&config));
    let run = run_measured(&mut command, cpu, "meshbench load")?;
    let report = meshbench_results::read_json(&json).map_err(|e| Error::Output {
        tool: "meshbench load".into(),
        reason: e.to_string(),
    })?;
    Ok((report, run.cpu_seconds))
}

/// A tool's version line, for the record.
pub(crate) fn version_of(tool: &std::path::Path, args: &[&str]) -> String {
    Command::new(tool)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A long-running peer (a proxy, a server) pinned to a CPU, measured from /proc while it runs
/// and killed when dropped.
pub(crate) struct Daemon {
    child: Child,
    pub name: String,
    log: std::path::PathBuf,
}

impl Daemon {
    /// Spawns `command` pinned to `cpu`, its stderr going to `log` (a pipe nobody reads
    /// could fill up and stall the daemon mid-measurement).
    pub(crate) fn spawn(
        command: &mut Command,
        cpu: usize,
        name: &str,
        log: &std::path::Path,
    ) -> Result<Self, Error> {
        let log_file = std::fs::File::create(log).map_err(|source| Error::Io {
            path: log.to_path_buf(),
            source,
        })?;
        command.stdin(Stdio::null()).stderr(log_file);
        let child = spawn_pinned(command, cpu, name)?;
        Ok(Daemon {
            child,
            name: name.to_owned(),
            log: log.to_path_buf(),
        })
    }

    /// The first line the daemon prints: meshbench components announce their addresses so.
    pub(crate) fn ready_line(&mut self) -> Result<serde_json::Value, Error> {
        use std::io::{BufRead, BufReader};
        let stdout = self
            .child
            .stdout
            .take()
            .ok_or_else(|| Error::Target(format!("{}: stdout is not piped", self.name)))?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| Error::Target(format!("{}: {e}", self.name)))?;
        serde_json::from_str(&line).map_err(|_| self.died(&format!("no ready line (got {line:?})")))
    }

    /// Waits until `addr` accepts connections, failing if the daemon exits first.
    pub(crate) fn wait_listening(&mut self, addr: std::net::SocketAddr) -> Result<(), Error> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(addr).is_ok() {
                return Ok(());
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return Err(self.died("exited before listening"));
            }
            if std::time::Instant::now() > deadline {
                return Err(self.died(&format!("not listening on {addr} after 20 s")));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// An error naming how the daemon ended, if it has.
    pub(crate) fn check_running(&mut self, what: &str) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(Some(_)) => Err(self.died(what)),
            _ => Ok(()),
        }
    }

    pub(crate) fn died(&mut self, what: &str) -> Error {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let stderr = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Error::Target(format!("{}: {what}: {}", self.name, tail.join("\n")))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn rss_bytes(&self) -> u64 {
        meshbench_lab::sample_process(self.child.id()).map_or(0, |s| s.rss_bytes)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `program args`, inside `netns` when one is given (same PID: `ip netns exec` execs).
pub(crate) fn command_in(
    netns: Option<&ScratchNetns>,
    program: &std::path::Path,
    args: Vec<String>,
) -> Command {
    match netns {
        None => {
            let mut command = Command::new(program);
            command.args(args);
            command
        }
        Some(ns) => {
            let (wrapper, full) = ns.wrap(program, &args);
            let mut command = Command::new(wrapper);
            command.args(full);
            command
        }
    }
}

/// The echo app every bench targets: one thread, pinned to `cpu`, on an ephemeral loopback
/// port (of `netns` when one is given).
pub(crate) fn start_echo(
    meshbench: &std::path::Path,
    cpu: usize,
    response_bytes: u64,
    log: &std::path::Path,
    netns: Option<&ScratchNetns>,
) -> Result<(Daemon, std::net::SocketAddr), Error> {
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    start_echo_on(meshbench, cpu, response_bytes, log, netns, loopback)
}

/// The echo app on `listen` (an ephemeral port when its port is 0).
pub(crate) fn start_echo_on(
    meshbench: &std::path::Path,
    cpu: usize,
    response_bytes: u64,
    log: &std::path::Path,
    netns: Option<&ScratchNetns>,
    listen: std::net::SocketAddr,
) -> Result<(Daemon, std::net::SocketAddr), Error> {
    let mut file = WorkloadFile::new(
        listen,
        WorkloadApp::fixed_echo(std::time::Duration::ZERO, response_bytes),
    );
    file.threads = Some(1);
    let config = log.with_extension("yaml");
    std::fs::write(&config, file.to_yaml()).map_err(|source| Error::Io {
        path: config.clone(),
        source,
    })?;
    let mut command = command_in(netns, meshbench, WorkloadFile::command_line(&config));
    command.stdout(Stdio::piped());
    let mut app = Daemon::spawn(&mut command, cpu, "echo app", log)?;
    let ready = app.ready_line()?;
    let addr = ready["addr"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| Error::Target(format!("echo app ready line {ready}")))?;
    Ok((app, addr))
}

/// A loopback port free now, for peers that cannot report the port they bound (HAProxy).
pub(crate) fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| Error::Io {
            path: "127.0.0.1:0".into(),
            source,
        })
}
