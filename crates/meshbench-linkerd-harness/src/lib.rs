//! A control-plane harness for linkerd2-proxy run outside Kubernetes, for the data plane
//! bench: not a mesh, only the answers a proxy asks for at start and keeps watching.
//!
//! - **Identity** (`io.linkerd.proxy.identity.Identity/Certify`): meshbench's CA signs the
//!   proxy's own CSR for the identity its token was given for (`certify`).
//! - **Policy**: outbound (`OutboundPolicies`), each known service address answered as
//!   Linkerd's policy controller answers for a Service: protocol detection, a default route,
//!   one balancer backend found through `Destination.Get`; inbound
//!   (`InboundServerPolicies`), every port open to the workloads the harness certifies, over
//!   mesh TLS only (`policy`).
//! - **Destination** (`Destination.Get`): a service's one endpoint, with the identity its
//!   proxy presents and the HTTP/2 protocol hint a meshed endpoint gets (`destination`).
//!
//! Served as plaintext gRPC on a loopback address, as a proxy speaks to a control plane it
//! finds on loopback (`parse_control_addr` in linkerd2-proxy: no TLS there); a harness on any
//! other address is refused. Limits are in `serve`.

mod certify;
mod destination;
mod error;
mod file;
mod names;
mod policy;
mod serve;

pub use error::Error;
pub use file::{LinkerdHarnessFile, ServiceFile, WorkloadFile};
pub use names::linkerd_name;
pub use serve::{
    bind, BoundHarness, HARNESS_MAX_CONNECTIONS, HARNESS_MAX_MESSAGE_BYTES, HARNESS_MAX_STREAMS,
};

use std::net::SocketAddr;
use std::time::Duration;

use meshbench_identity::SpiffeId;

/// A workload the harness certifies: whoever presents `token` is `identity`.
#[derive(Clone)]
pub struct Workload {
    pub identity: SpiffeId,
    pub token: String,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in a log line.
        f.debug_struct("Workload")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// A service the outbound proxies may be asked about: the address clients connect to, its
/// name, and its one endpoint with the identity the endpoint's proxy presents.
#[derive(Debug, Clone)]
pub struct Service {
    pub address: SocketAddr,
    /// `<name>.<ns>.svc.<cluster domain>`, without the port.
    pub name: String,
    pub endpoint: SocketAddr,
    pub identity: SpiffeId,
}

/// What the harness answers.
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    pub workloads: Vec<Workload>,
    pub services: Vec<Service>,
    /// The lifetime of the certificates it signs.
    pub ttl: Duration,
}
