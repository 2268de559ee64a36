//! What an experiment deploys, independent of the platform that deploys it: the
//! [`Topology`] model (nodes, workloads, services, pods), and the studies' applications that
//! are more than a client and a server, modelled once for every part of meshbench that needs
//! them ([`e3`]: the runner's zero-trust-app cells, the verifier, the tests).

pub mod e3;
mod topology;

pub use topology::{Error, Pod, Service, Topology, Workload};
