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
    let on_client_side = client_side(cell);
    cell.resources
        .iter()
        .filter(|r| !SHARED_ROLES.contains(&r.role.as_str()))
        .filter(|r| on_client_side(&r.component) == (side == Side::Client))
        .fold((0.0, 0.0), |(cpu, mem), r| {
            (cpu + r.cpu_cores_mean, mem + r.rss_mib_max)
        })
}

/// Whether a component is on the client side: the load generator's pod (`<pod>`) or one of
/// its containers (`<pod>-sidecar`, `<pod>-linkerd-proxy`).
fn client_side(cell: &Cell) -> impl Fn(&str) -> bool + '_ {
    let client_pods: Vec<&str> = cell
        .resources
        .iter()
        .filter(|r| r.role == "load-generator")
        .map(|r| r.component.as_str())
        .collect();
    move |component: &str| {
        client_pods.iter().any(|pod| {
            component == *pod
                || component
                    .strip_prefix(pod)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
    }
}

/// CPU cores (mean) and memory (MiB, max) of the mesh's data plane serving one side, as E1
/// splits it: the side's own proxies (role `sidecar`, named after their pod) and the node
/// agents on the side's nodes. Within one node the one agent serves both sides and counts on
/// each, as E1 reported ambient's ztunnel. `None` when a node agent or one of the side's pods
/// does not name its node (the local lab records none), so the agents cannot be split.
pub(crate) fn mesh_side(cell: &Cell, side: Side) -> Option<(f64, f64)> {
    let on_client_side = client_side(cell);
    let pods_of_side = cell
        .resources
        .iter()
        .filter(|r| !SHARED_ROLES.contains(&r.role.as_str()) && r.role != "sidecar")
        .filter(|r| on_client_side(&r.component) == (side == Side::Client));
    let mut nodes = vec![];
    for pod in pods_of_side {
        nodes.push(pod.node.as_deref()?);
    }
    let mut total = (0.0, 0.0);
    for r in &cell.resources {
        let serves = match r.role.as_str() {
            "sidecar" => on_client_side(&r.component) == (side == Side::Client),
            "node-agent" => nodes.contains(&r.node.as_deref()?),
            _ => false,
        };
        if serves {
            total.0 += r.cpu_cores_mean;
            total.1 += r.rss_mib_max;
        }
    }
    Some(total)
}
