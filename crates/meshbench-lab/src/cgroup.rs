//! Per-component cgroups, for CPU and memory that include every process a component forks
//! (nginx workers, Envoy's threads) and a working set the way kubelet and cAdvisor compute it
//! (usage minus inactive file cache).
//!
//! cgroup v1 (this machine: `cpuacct` and `memory` hierarchies) and v2 (one unified tree) are
//! both supported. Every lab's groups live under `meshbench/<lab>/` in each hierarchy so
//! `meshbench lab clean` finds what a crashed run left behind.

use std::path::{Path, PathBuf};

use crate::Error;

/// Where meshbench's groups live inside each hierarchy.
const ROOT_GROUP: &str = "meshbench";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupFs {
    V1 { cpuacct: PathBuf, memory: PathBuf },
    V2 { root: PathBuf },
}

impl CgroupFs {
    /// The cgroup filesystem this machine offers for accounting, if any is writable.
    pub fn detect() -> Option<CgroupFs> {
        let base = Path::new("/sys/fs/cgroup");
        if base.join("cgroup.controllers").exists() {
            return Some(CgroupFs::V2 {
                root: base.to_path_buf(),
            });
        }
        let cpuacct = ["cpuacct", "cpu,cpuacct"]
            .iter()
            .map(|d| base.join(d))
            .find(|p| p.join("cpuacct.usage").exists())?;
        let memory = base.join("memory");
        memory
            .join("memory.usage_in_bytes")
            .exists()
            .then_some(CgroupFs::V1 { cpuacct, memory })
    }

    /// `cgroup-v1` or `cgroup-v2`, as results name the source of a figure.
    pub fn source(&self) -> &'static str {
        match self {
            CgroupFs::V1 { .. } => "cgroup-v1",
            CgroupFs::V2 { .. } => "cgroup-v2",
        }
    }

    /// CPU time of every task on the machine (the root group's exact scheduler accounting,
    /// where /proc/stat only samples ticks), nanoseconds; `None` where unreadable.
    pub fn root_cpu_ns(&self) -> Option<u64> {
        match self {
            CgroupFs::V1 { cpuacct, .. } => std::fs::read_to_string(cpuacct.join("cpuacct.usage"))
                .ok()?
                .trim()
                .parse()
                .ok(),
            CgroupFs::V2 { root } => std::fs::read_to_string(root.join("cpu.stat"))
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok())
                .map(|us| us * 1000),
        }
    }

    fn hierarchies(&self) -> Vec<PathBuf> {
        match self {
            CgroupFs::V1 { cpuacct, memory } => vec![cpuacct.clone(), memory.clone()],
            CgroupFs::V2 { root } => vec![root.clone()],
        }
    }

    /// Creates `meshbench/<lab>/<component>` in every hierarchy.
    pub fn create(&self, lab: &str, component: &str) -> Result<Cgroup, Error> {
        let relative = Path::new(ROOT_GROUP).join(lab).join(component);
        if let CgroupFs::V2 { root } = self {
            // Controllers must be enabled on every ancestor for memory.* files to appear.
            for dir in [
                root.clone(),
                root.join(ROOT_GROUP),
                root.join(ROOT_GROUP).join(lab),
            ] {
                create_dir(&dir)?;
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+cpu +memory");
            }
        }
        let dirs = self
            .hierarchies()
            .into_iter()
            .map(|h| h.join(&relative))
            .collect::<Vec<_>>();
        for dir in &dirs {
            for ancestor in [dir.parent().and_then(Path::parent), dir.parent()]
                .into_iter()
                .flatten()
            {
                create_dir(ancestor)?;
            }
            create_dir(dir)?;
        }
        Ok(Cgroup {
            fs: self.clone(),
            dirs,
        })
    }

    /// Every lab directory (`meshbench/<lab>`) present in any hierarchy.
    pub fn lab_dirs(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for h in self.hierarchies() {
            if let Ok(entries) = std::fs::read_dir(h.join(ROOT_GROUP)) {
                found.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
        }
        found
    }
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(Error::Cgroup {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// One component's group, in every hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    fs: CgroupFs,
    dirs: Vec<PathBuf>,
}

/// Cumulative CPU and current memory of a group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CgroupReading {
    pub cpu_ns: u64,
    /// Usage minus inactive file pages (kubelet's `container_memory_working_set_bytes`).
    pub working_set_bytes: u64,
}

impl Cgroup {
    pub fn source(&self) -> &'static str {
        self.fs.source()
    }

    /// The `cgroup.procs` files a process writes its PID to in order to join.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    pub fn add(&self, pid: u32) -> Result<(), Error> {
        for file in self.procs_files() {
            std::fs::write(&file, pid.to_string()).map_err(|source| Error::Cgroup {
                path: file.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .procs_files()
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .flat_map(|text| {
                text.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    pub fn read(&self) -> Option<CgroupReading> {
        let read = |path: PathBuf| std::fs::read_to_string(path).ok();
        let stat_field = |text: &str, key: &str| {
            text.lines().find_map(|l| {
                l.strip_prefix(key)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        };
        match &self.fs {
            CgroupFs::V1 { .. } => {
                let cpu_ns = read(self.dirs[0].join("cpuacct.usage"))?
                    .trim()
                    .parse()
                    .ok()?;
                let usage: u64 = read(self.dirs[1].join("memory.usage_in_bytes"))?
                    .trim()
                    .parse()
                    .ok()?;
                let stat = read(self.dirs[1].join("memory.stat")).unwrap_or_default();
                let inactive = stat_field(&stat, "total_inactive_file").unwrap_or(0);
                Some(CgroupReading {
                    cpu_ns,
                    working_set_bytes: usage.saturating_sub(inactive),
                })
            }
            CgroupFs::V2 { .. } => {
                let dir = &self.dirs[0];
                let cpu = read(dir.join("cpu.stat"))?;
                let cpu_ns = stat_field(&cpu, "usage_usec")? * 1000;
                let usage: u64 = read(dir.join("memory.current"))
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(0);
                let stat = read(dir.join("memory.stat")).unwrap_or_default();
                let inactive = stat_field(&stat, "inactive_file").unwrap_or(0);
                Some(CgroupReading {
                    cpu_ns,
                    working_set_bytes: usage.saturating_sub(inactive),
                })
            }
        }
    }

    /// Removes the group's directories; the group must be empty (its processes gone).
    pub fn remove(&self) -> Result<(), Error> {
        for dir in &self.dirs {
            remove_dir(dir)?;
        }
        Ok(())
    }
}

fn remove_dir(dir: &Path) -> Result<(), Error> {
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Cgroup {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// Kills every process left in a lab directory's groups and removes the groups, children
/// first. Returns the PIDs it killed.
pub fn destroy_lab_dir(dir: &Path) -> Result<Vec<u32>, Error> {
    let mut killed = Vec::new();
    let mut leaves: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    leaves.push(dir.to_path_buf());
    for leaf in &leaves {
        let procs = std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                if rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok() {
                    killed.push(pid as u32);
                }
            }
        }
    }
    for leaf in &leaves {
        // A killed process leaves its group only once the kernel has reaped it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match remove_dir(leaf) {
                Ok(()) => break,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(killed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_in_its_own_group_is_accounted_and_removed() {
        let Some(fs) = CgroupFs::detect() else {
            eprintln!("skipped: no writable cgroup filesystem with cpu and memory accounting");
            return;
        };
        let lab = format!("test-{}", std::process::id());
        let group = match fs.create(&lab, "spinner") {
            Ok(g) => g,
            Err(e) => {
                eprintln!("skipped: cannot create cgroups here ({e})");
                return;
            }
        };
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        group.add(child.id()).unwrap();
        assert_eq!(group.pids(), vec![child.id()]);
        child.wait().unwrap();
        let reading = group.read().expect("readable group");
        assert!(reading.cpu_ns > 0, "{reading:?}");
        let lab_dir = group.dirs[0].parent().unwrap().to_path_buf();
        for dir in fs.lab_dirs().into_iter().filter(|d| d.ends_with(&lab)) {
            destroy_lab_dir(&dir).unwrap();
        }
        assert!(!lab_dir.exists());
    }
}
