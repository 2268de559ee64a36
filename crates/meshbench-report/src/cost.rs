//! E5's cost model, fed only with measured numbers: monthly cost = pods x (CPU cores x price
//! per core-month + memory GiB x price per GiB-month). A mesh's cost per pod is what its cell
//! measured beyond the baseline's at the same point (client side + server side + shared
//! agents and control plane, as E1 splits them), divided over the cell's two application
//! pods. Where a run has no baseline at a point, the mesh's own processes (sidecars, agents,
//! control plane) are used instead, and the table says so. Only constant-rate points count:
//! at equal load the difference is the mesh's cost.

use meshbench_results::RunResult;

use crate::analysis::Analysis;
use crate::cell::BASELINE;
use crate::tables::{figures, Figures, Table};

/// Pods in a cell: the load generator's and the server's.
const PODS_PER_CELL: f64 = 2.0;
const MONTHS_PER_YEAR: f64 = 12.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    pub pods: u64,
    /// Per CPU core and month.
    pub cpu_per_core_month: f64,
    /// Per GiB of memory and month.
    pub memory_per_gib_month: f64,
}

fn totals(f: &Figures) -> (f64, f64) {
    (
        f.client_cpu + f.server_cpu + f.shared_cpu,
        f.client_mib + f.server_mib + f.shared_mib,
    )
}

/// One row per constant-rate (point, scenario) other than the baseline. Closed-loop points
/// are left out: there every scenario carries a different load, so their resources are not
/// an overhead at equal work.
pub fn cost_table(result: &RunResult, prices: Prices) -> Table {
    let analysis = Analysis::of(result);
    let all = figures(&analysis);
    let mut rows = vec![];
    for f in all
        .iter()
        .filter(|f| f.scenario != BASELINE && f.load.rps > 0.0)
    {
        let base = all
            .iter()
            .find(|b| b.scenario == BASELINE && b.placement == f.placement && b.load == f.load);
        let (cpu, mib, basis) = match base {
            Some(base) => {
                let ((cpu, mib), (base_cpu, base_mib)) = (totals(f), totals(base));
                (
                    cpu - base_cpu,
                    mib - base_mib,
                    "difference to baseline, all components",
                )
            }
            None => {
                let group = analysis.groups.iter().find(|g| {
                    g.scenario == f.scenario
                        && g.point.placement == f.placement
                        && g.point.load == f.load
                });
                (
                    group.map_or(0.0, |g| g.mesh_cpu()),
                    group.map_or(0.0, |g| g.mesh_mib()),
                    "mesh processes only (no baseline at this point)",
                )
            }
        };
        let (cpu_per_pod, gib_per_pod) = (cpu / PODS_PER_CELL, mib / PODS_PER_CELL / 1024.0);
        let monthly = prices.pods as f64
            * (cpu_per_pod * prices.cpu_per_core_month + gib_per_pod * prices.memory_per_gib_month);
        rows.push(vec![
            crate::analysis::Point {
                placement: f.placement.clone(),
                load: f.load,
            }
            .label(),
            f.scenario.clone(),
            f.repetitions.to_string(),
            format!("{:.0}", cpu_per_pod * 1000.0),
            format!("{:.1}", mib / PODS_PER_CELL),
            format!("{monthly:.2}"),
            format!("{:.2}", monthly * MONTHS_PER_YEAR),
            basis.to_owned(),
        ]);
    }
    Table {
        title: format!("Mesh cost for {} pods", prices.pods),
        note: format!(
            "At {} per core-month and {} per GiB-month, from the measured overhead per pod (CPU: \
             mean over the load window; memory: each process's maximum RSS).",
            prices.cpu_per_core_month, prices.memory_per_gib_month
        ),
        headers: [
            "load",
            "scenario",
            "repetitions",
            "CPU per pod (millicores)",
            "memory per pod (MiB)",
            "monthly cost",
            "yearly cost",
            "measured as",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}
