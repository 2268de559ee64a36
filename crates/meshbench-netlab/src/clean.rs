//! `meshbench lab clean`: removes whatever labs left behind when their run could not tear
//! down (SIGKILL, power loss): processes in lab namespaces or cgroups, the namespaces, their
//! `/etc/netns` files and the cgroups.

use crate::command::{has_tool, run};
use crate::netns::delete_netns;
use crate::{Error, LAB_PREFIX};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanReport {
    pub namespaces: Vec<String>,
    pub processes_killed: Vec<u32>,
    pub cgroups: Vec<String>,
}

impl CleanReport {
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && self.processes_killed.is_empty() && self.cgroups.is_empty()
    }
}

/// Cleans every lab, or only lab `only` (its id).
pub fn clean_all(only: Option<&str>) -> Result<CleanReport, Error> {
    let mut report = CleanReport::default();
    let prefix = match only {
        Some(id) => format!("{LAB_PREFIX}{id}-"),
        None => LAB_PREFIX.to_owned(),
    };
    if has_tool("ip") {
        let listing = run("ip", &["netns", "list"])?;
        // Pods before nodes before the fabric does not matter to the kernel, but deleting
        // every namespace of a lab is what leaves no veth behind.
        for name in listing
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&prefix))
        {
            report.processes_killed.extend(delete_netns(name)?);
            report.namespaces.push(name.to_owned());
        }
    }
    // Files of namespaces that are already gone.
    if let Ok(entries) = std::fs::read_dir("/etc/netns") {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let path = entry.path();
                std::fs::remove_dir_all(&path).map_err(|source| Error::Io { path, source })?;
            }
        }
    }
    if let Some(fs) = meshbench_lab::CgroupFs::detect() {
        let wanted =
            |dir: &std::path::Path| only.is_none_or(|id| dir.file_name().is_some_and(|n| n == id));
        for dir in fs.lab_dirs().into_iter().filter(|d| wanted(d)) {
            report
                .processes_killed
                .extend(meshbench_lab::destroy_lab_dir(&dir)?);
            report.cgroups.push(dir.display().to_string());
        }
    }
    report.processes_killed.sort_unstable();
    report.processes_killed.dedup();
    Ok(report)
}
