//! The loopback backend: no privileges, no namespaces. Every pod gets its own 127.R.k.p
//! address (Linux routes all of 127/8 to `lo`), so components of different pods can use the
//! same ports, as in a cluster; there is no capture, so clients dial proxies' ports
//! explicitly, and nothing crosses a real link.

use meshbench_topology::Topology;

use crate::plan::AddressPlan;
use crate::Error;

#[derive(Debug, Clone)]
pub struct LoopbackLab {
    pub(crate) id: String,
    pub(crate) topology: Topology,
    pub(crate) plan: AddressPlan,
}

impl LoopbackLab {
    pub fn create(id: &str, topology: &Topology) -> Result<Self, Error> {
        // The second octet from the lab id keeps concurrent labs (parallel tests) apart.
        let second_octet =
            2 + (id.bytes().fold(0u32, |h, b| h.wrapping_mul(31) + b as u32) % 250) as u8;
        Ok(LoopbackLab {
            id: id.to_owned(),
            topology: topology.clone(),
            plan: AddressPlan::loopback(topology, second_octet)?,
        })
    }
}
