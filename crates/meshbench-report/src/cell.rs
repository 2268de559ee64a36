//! What every table reads of one cell: whether its scenario is the baseline, its errors, and
//! the resources of its client and server sides.

use meshbench_results::Cell;

pub const BASELINE: &str = "baseline";

/// Requests that did not end in a 2xx response (or a gRPC OK).
pub fn error_count(cell: &Cell) -> u64 {
    cell.load
        .outcomes
        .iter()
        .filter(|(k, _)| !meshbench_results::is_success_outcome(k))
        .map(|(_, n)| n)
        .sum()
}

/// Roles of components shared by the mesh rather than belonging to one pod.
pub(crate) const SHARED_ROLES: [&str; 2] = ["node-agent", "control-plane"];

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// CPU cores (mean) and memory (MiB, max) of one side, as E1 splits them: the client is the
/// pod of the load generator (whatever application makes the requests: `meshbench load`,
/// E3's experimenter) with its proxy (`<pod>-sidecar`); the server is every other pod's app
/// and proxy (the echo server, the calculator, E4's counters).
pub(crate) fn side(cell: &Cell, side: Side) -> (f64, f64) {
    let client_pods: Vec<&str> = cell
        .resources
        .iter()
        .filter(|r| r.role == "load-generator")
        .map(|r| r.component.as_str())
        .collect();
    let on_client_side = |component: &str| {
        client_pods.iter().any(|pod| {
            component == *pod
                || component
                    .strip_prefix(pod)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
    };
    cell.resources
        .iter()
        .filter(|r| !SHARED_ROLES.contains(&r.role.as_str()))
        .filter(|r| on_client_side(&r.component) == (side == Side::Client))
        .fold((0.0, 0.0), |(cpu, mem), r| {
            (cpu + r.cpu_cores_mean, mem + r.rss_mib_max)
        })
}
