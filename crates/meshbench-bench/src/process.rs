//! Running a peer tool as a measured child: pinned to a CPU (the child inherits the affinity
//! of the thread that forks it), with its CPU time taken from the kernel's accounting of
//! reaped children (getrusage RUSAGE_CHILDREN), so every tool is measured the same way.

use std::process::{Child, Command, Output, Stdio};

use nix::sys::resource::{getrusage, UsageWho};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::Error;

/// Spawns `command` with the calling thread temporarily pinned to `cpu`.
pub(crate) fn spawn_pinned(command: &mut Command, cpu: usize, tool: &str) -> Result<Child, Error> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin_err = |source| Error::Pin { cpu, cores, source };
    let previous = sched_getaffinity(None).map_err(|e| pin_err(e.into()))?;
    let mut only = CpuSet::new();
    only.set(cpu);
    sched_setaffinity(None, &only).map_err(|e| pin_err(e.into()))?;
    let spawned = command.spawn();
    sched_setaffinity(None, &previous).map_err(|e| pin_err(e.into()))?;
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
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
