//! Every mesh the lab offers, in the order results and verifications list them. Adding a mesh
//! is its module (`src/<mesh>/`, implementing [`crate::MeshAdapter`]) and one line here.

use crate::adapter::MeshAdapter;

pub(crate) const MODULES: &[&[&dyn MeshAdapter]] = &[
    crate::baseline::SCENARIOS,
    crate::app_mtls::SCENARIOS,
    crate::sidecar::SCENARIOS,
    crate::node_agent::SCENARIOS,
    crate::envoy::SCENARIOS,
    crate::haproxy::SCENARIOS,
    crate::nginx::SCENARIOS,
    crate::consul::SCENARIOS,
    crate::istio::SCENARIOS,
    crate::linkerd::SCENARIOS,
    crate::cilium::SCENARIOS,
];
