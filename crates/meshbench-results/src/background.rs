//! What a machine runs anyway: each machine's CPU with no cell running, measured by the
//! runner before the first cell and again before each later round, so that a cell's CPU
//! outside its components can be judged against the platform's own background (a cluster's
//! kubelets, container runtimes, API server and control planes) rather than against zero.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One measurement of every machine's background.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Background {
    /// RFC 3339, UTC, when the measurement began.
    pub started_at: String,
    /// How many cells had finished when it was taken: it is the background of
    /// `cells[before_cell..]`, up to the next measurement.
    pub before_cell: u32,
    /// The length of each reading in `machines[].cores`, in seconds.
    pub interval_seconds: f64,
    pub machines: Vec<MachineBackground>,
}

/// One machine's background: its processes' CPU over consecutive intervals.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineBackground {
    /// As a cell's `MachineCpu::source`: `/proc/stat` (the root cgroup where readable), or
    /// `kubelet-summary`.
    pub source: String,
    /// The Kubernetes node read; absent for the local lab's machine.
    pub node: Option<String>,
    /// Other nodes on the same kernel, as in a cell's `MachineCpu`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_machine_nodes: Vec<String>,
    pub cpus: u32,
    /// Busy cores of every process on the machine (interrupts outside a task not counted,
    /// as a cell's `other` does not count them), the mean over each interval in turn.
    pub cores: Vec<f64>,
}

impl MachineBackground {
    /// Mean busy cores over the whole measurement; `None` without readings.
    pub fn mean_cores(&self) -> Option<f64> {
        (!self.cores.is_empty()).then(|| self.cores.iter().sum::<f64>() / self.cores.len() as f64)
    }

    /// Whether it is the machine that a cell's machine reading on `node` read.
    pub fn is_machine_of(&self, node: Option<&str>) -> bool {
        self.node.as_deref() == node
            || node.is_some_and(|n| self.same_machine_nodes.iter().any(|m| m == n))
    }
}

impl Background {
    /// The measurement that applies to the cell at `index` (in the order cells ran): the last
    /// one taken before it.
    pub fn for_cell(backgrounds: &[Background], index: usize) -> Option<&Background> {
        backgrounds
            .iter()
            .filter(|b| b.before_cell as usize <= index)
            .max_by_key(|b| b.before_cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_takes_the_last_background_before_it() {
        let at = |before_cell| Background {
            started_at: String::new(),
            before_cell,
            interval_seconds: 1.0,
            machines: vec![],
        };
        let all = [at(0), at(6), at(12)];
        assert_eq!(Background::for_cell(&all, 0).unwrap().before_cell, 0);
        assert_eq!(Background::for_cell(&all, 5).unwrap().before_cell, 0);
        assert_eq!(Background::for_cell(&all, 6).unwrap().before_cell, 6);
        assert_eq!(Background::for_cell(&all, 40).unwrap().before_cell, 12);
        assert!(Background::for_cell(&all[1..], 3).is_none());
    }
}
