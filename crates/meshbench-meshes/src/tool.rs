//! The third-party binaries a mesh runs: where they are, how to install them, which version
//! they report.

use std::path::PathBuf;

/// A third-party binary a mesh runs, and how to install it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub binary: &'static str,
    pub install: &'static str,
    /// The arguments that print its version.
    pub version_args: &'static [&'static str],
}

impl Tool {
    pub const fn new(
        binary: &'static str,
        install: &'static str,
        version_args: &'static [&'static str],
    ) -> Self {
        Tool {
            binary,
            install,
            version_args,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mesh {mesh} is unavailable: {why}")]
pub struct Unavailable {
    pub mesh: String,
    pub why: String,
    /// The command that installs what is missing (empty when no command can).
    pub install: String,
}

impl Unavailable {
    /// `tool` is not on the PATH.
    pub fn missing_tool(mesh: &str, tool: Tool) -> Self {
        Unavailable {
            mesh: mesh.into(),
            why: format!(
                "`{}` is not installed; install it with: {}",
                tool.binary, tool.install
            ),
            install: tool.install.into(),
        }
    }
}

/// Where `tool` is, or why `mesh` cannot run here.
pub(crate) fn binary(mesh: &str, tool: Tool) -> Result<PathBuf, Unavailable> {
    meshbench_netlab::which(tool.binary).ok_or_else(|| Unavailable::missing_tool(mesh, tool))
}

/// A version line without the binary's path some tools start it with (`/usr/local/bin/envoy
/// version: <sha>/1.40.0/Clean/RELEASE/BoringSSL`), its spaces collapsed.
fn version_of_line(line: &str) -> String {
    let line = line.split_once(" version: ").map_or(line, |(_, v)| v);
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) fn tool_version(tool: Tool) -> String {
    let Some(path) = meshbench_netlab::which(tool.binary) else {
        return "not installed".into();
    };
    match std::process::Command::new(&path)
        .args(tool.version_args)
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&out.stderr).lines())
            .map(str::trim)
            .find(|line| !line.is_empty())
            .map(version_of_line)
            .unwrap_or_else(|| format!("no version from `{}`", path.display())),
        Err(e) => format!("cannot run `{}`: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_line_loses_the_binarys_path() {
        assert_eq!(
            version_of_line("/usr/local/bin/envoy  version: abc/1.40.0/Clean/RELEASE/BoringSSL"),
            "abc/1.40.0/Clean/RELEASE/BoringSSL"
        );
        assert_eq!(version_of_line("Consul  v1.22.7"), "Consul v1.22.7");
    }
}
