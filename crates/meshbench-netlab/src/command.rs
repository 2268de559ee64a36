//! Running the system's network tools (`ip`, `iptables`, `sysctl`), with their stderr in the
//! error when they fail. These are the tools Istio's init container and CNI plugins drive;
//! shelling out keeps every rule readable as the command a user would type.

use std::process::{Command, Stdio};

use crate::Error;

/// Runs `program args...` and returns its stdout.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, Error> {
    let rendered = || format!("{program} {}", args.join(" "));
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            command: rendered(),
            source,
        })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(Error::Command {
            command: rendered(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// `ip netns exec <netns> program args...`
pub(crate) fn run_in(netns: &str, program: &str, args: &[&str]) -> Result<String, Error> {
    let mut full = vec!["netns", "exec", netns, program];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// Whether `tool` is installed.
pub(crate) fn has_tool(tool: &str) -> bool {
    which(tool).is_some()
}

pub use meshbench_lab::which;
