//! A description of the machine and build for every result (each result describes itself): kernel, CPU, cores, memory,
//! meshbench version and commit, and whether this is a release build.

use crate::Environment;

/// Facts fixed at build time, passed in by the binary that was built.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: String,
    pub git_commit: String,
    pub profile: String,
}

pub fn describe_environment(build: &BuildInfo) -> Environment {
    let uname = rustix::system::uname();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_total_mib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024);
    Environment {
        hostname: uname.nodename().to_string_lossy().into_owned(),
        os: uname.sysname().to_string_lossy().into_owned(),
        kernel: uname.release().to_string_lossy().into_owned(),
        cpu_model,
        cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        memory_total_mib,
        meshbench_version: build.version.clone(),
        git_commit: build.git_commit.clone(),
        build_profile: build.profile.clone(),
        command_line: std::env::args().collect(),
        cluster_meshes: vec![],
    }
}
