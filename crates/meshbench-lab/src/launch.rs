//! How a lab component is started: in which network namespace, in which cgroup, as which
//! user, on which CPUs. Each is a standard tool wrapping the next (`sh` joins the cgroup
//! before anything runs, `ip netns exec` enters the namespace and mounts its hosts file,
//! `taskset` pins, `setpriv` drops to the proxy user), so the component's own PID is the one
//! the lab sees and everything it forks is accounted to its group.

use std::path::Path;

use crate::cgroup::Cgroup;

#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// A named network namespace (`ip netns`).
    pub netns: Option<String>,
    pub cgroup: Option<Cgroup>,
    /// Run as this UID and GID (the mesh's proxy user, excluded from traffic capture).
    pub run_as: Option<u32>,
    /// A `taskset` CPU list, e.g. `1` or `0-1`.
    pub cpus: Option<String>,
}

impl Launch {
    /// The program and arguments that start `program args` this way.
    pub fn wrap(&self, program: &Path, args: &[String]) -> (String, Vec<String>) {
        let mut chain: Vec<String> = Vec::new();
        if let Some(group) = &self.cgroup {
            let joins: Vec<String> = group
                .procs_files()
                .iter()
                .map(|f| format!("echo $$ > '{}'", f.display()))
                .collect();
            chain.extend([
                "sh".into(),
                "-c".into(),
                format!("{} && exec \"$@\"", joins.join(" && ")),
                "meshbench-launch".into(),
            ]);
        }
        if let Some(ns) = &self.netns {
            chain.extend(["ip".into(), "netns".into(), "exec".into(), ns.clone()]);
        }
        if let Some(cpus) = &self.cpus {
            chain.extend(["taskset".into(), "-c".into(), cpus.clone()]);
        }
        if let Some(uid) = self.run_as {
            chain.extend([
                "setpriv".into(),
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
            ]);
        }
        chain.push(program.display().to_string());
        chain.extend(args.iter().cloned());
        let program = chain.remove(0);
        (program, chain)
    }
}

/// Where `tool` is: on PATH, or in the sbin directories a non-login root PATH may lack. The
/// one lookup of installed tools, for the lab, the meshes, the bench and the tests' skips.
pub fn which(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(std::path::PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_launch_is_the_program_itself() {
        let (program, args) = Launch::default().wrap(Path::new("/bin/echo"), &["hi".into()]);
        assert_eq!(program, "/bin/echo");
        assert_eq!(args, ["hi"]);
    }

    #[test]
    fn wrappers_nest_namespace_then_cpus_then_user() {
        let launch = Launch {
            netns: Some("mb-abc-pod".into()),
            cgroup: None,
            run_as: Some(1337),
            cpus: Some("1".into()),
        };
        let (program, args) = launch.wrap(Path::new("/bin/true"), &[]);
        assert_eq!(program, "ip");
        assert_eq!(
            args.join(" "),
            "netns exec mb-abc-pod taskset -c 1 setpriv --reuid=1337 --regid=1337 --clear-groups /bin/true"
        );
    }
}
