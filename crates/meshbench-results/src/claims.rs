//! The findings a profile's study published, as the profile declares them, so that a run's
//! results carry what they are to be checked against and a report rebuilt later checks the
//! same claims. Each claim is a statement in words and a check a program can judge; the
//! report's findings section (meshbench-report's `findings`) gives each one a verdict for the
//! run with the statistic behind it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One published finding and how to check it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The study it comes from: `E1` .. `E5` of the reference experiments.
    pub study: String,
    /// The finding in words, as a reader would state it.
    pub statement: String,
    /// What the study itself measured for this finding, in its own figures and conditions
    /// (E1 at 3200 rps: "+0.02 / +0.09 / +0.38 s"): shown beside the run's statistic where a
    /// reproduction is published. Absent where the study gave no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<String>,
    pub check: ClaimCheck,
}

/// A figure of a scenario at a point, as the findings compare them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimMetric {
    /// Latency quantiles and maximum (for E3's experimenter, its RTTs).
    P50,
    P99,
    Max,
    /// Achieved requests per second.
    Throughput,
    /// CPU cores of the client side (load generator and its proxy), as E1 splits it.
    ClientCpu,
    /// CPU cores of every sampled component.
    TotalCpu,
    /// CPU cores of the mesh's own processes (sidecars, node agents, control plane).
    MeshCpu,
    /// Memory of the mesh's own processes (MiB, each one's maximum, summed).
    MeshMemory,
    /// CPU cores of the mesh's data plane serving the client side, as E1 splits it: the
    /// client pods' proxies and the node agent on the client's node (within one node, the
    /// one agent serves both sides and counts on each). Only where the run names each
    /// component's node (the Kubernetes backend); elsewhere a point is not judged.
    ClientMeshCpu,
    /// The same for the server side: the other pods' proxies and their nodes' agents.
    ServerMeshCpu,
    /// Memory (MiB, each one's maximum, summed) of the mesh's data plane serving the client
    /// side, counted as `client-mesh-cpu` counts.
    ClientMeshMemory,
    /// The same for the server side.
    ServerMeshMemory,
    /// The capacity model's highest rate meeting the objective.
    Capacity,
}

impl ClaimMetric {
    pub fn name(self) -> &'static str {
        match self {
            ClaimMetric::P50 => "p50",
            ClaimMetric::P99 => "p99",
            ClaimMetric::Max => "max",
            ClaimMetric::Throughput => "throughput",
            ClaimMetric::ClientCpu => "client-cpu",
            ClaimMetric::TotalCpu => "total-cpu",
            ClaimMetric::MeshCpu => "mesh-cpu",
            ClaimMetric::MeshMemory => "mesh-memory",
            ClaimMetric::ClientMeshCpu => "client-mesh-cpu",
            ClaimMetric::ServerMeshCpu => "server-mesh-cpu",
            ClaimMetric::ClientMeshMemory => "client-mesh-memory",
            ClaimMetric::ServerMeshMemory => "server-mesh-memory",
            ClaimMetric::Capacity => "capacity",
        }
    }

    pub const ALL: [ClaimMetric; 13] = [
        ClaimMetric::P50,
        ClaimMetric::P99,
        ClaimMetric::Max,
        ClaimMetric::Throughput,
        ClaimMetric::ClientCpu,
        ClaimMetric::TotalCpu,
        ClaimMetric::MeshCpu,
        ClaimMetric::MeshMemory,
        ClaimMetric::ClientMeshCpu,
        ClaimMetric::ServerMeshCpu,
        ClaimMetric::ClientMeshMemory,
        ClaimMetric::ServerMeshMemory,
        ClaimMetric::Capacity,
    ];
}

/// A load point's axis along which a claim says a figure grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimAxis {
    Rps,
    Connections,
    Users,
    Services,
}

impl ClaimAxis {
    pub fn name(self) -> &'static str {
        match self {
            ClaimAxis::Rps => "rps",
            ClaimAxis::Connections => "connections",
            ClaimAxis::Users => "users",
            ClaimAxis::Services => "services",
        }
    }
}

/// What must hold, at every point (placement and load) where its scenarios were measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ClaimCheck {
    /// `scenario`'s figure is at most `max_percent` above `against`'s.
    AtMost {
        metric: ClaimMetric,
        scenario: String,
        against: String,
        max_percent: f64,
    },
    /// The figure rises along the list: `order[0]` < `order[1]` < ... (scenarios the run
    /// lacks are left out of the chain).
    Ordering {
        metric: ClaimMetric,
        order: Vec<String>,
    },
    /// The step from `larger[0]` to `larger[1]` changes the figure by more than the step from
    /// `smaller[0]` to `smaller[1]` (E1's decomposition: dropping HTTP parsing gains more than
    /// dropping mTLS).
    LargerStep {
        metric: ClaimMetric,
        larger: [String; 2],
        smaller: [String; 2],
    },
    /// The mesh's memory against connections is a line: R^2 of the least-squares fit at
    /// least `min_r_squared`, for each scenario listed that the run has.
    Linear {
        scenarios: Vec<String>,
        min_r_squared: f64,
    },
    /// What `scenario` adds to the figure over `against` grows along `axis`, each other axis
    /// held fixed.
    Grows {
        metric: ClaimMetric,
        scenario: String,
        against: String,
        axis: ClaimAxis,
    },
}

impl ClaimCheck {
    /// Every scenario the check names.
    pub fn scenarios(&self) -> Vec<&str> {
        match self {
            ClaimCheck::AtMost {
                scenario, against, ..
            }
            | ClaimCheck::Grows {
                scenario, against, ..
            } => vec![scenario, against],
            ClaimCheck::Ordering { order, .. } => order.iter().map(String::as_str).collect(),
            ClaimCheck::LargerStep {
                larger, smaller, ..
            } => larger.iter().chain(smaller).map(String::as_str).collect(),
            ClaimCheck::Linear { scenarios, .. } => scenarios.iter().map(String::as_str).collect(),
        }
    }
}
