//! meshbench's reference mesh data plane, on the stack the best data planes use (tokio,
//! rustls with aws-lc-rs): the lower bound every real mesh is compared with.
//!
//! The sidecar: inbound protocol detection, mTLS termination with the peer's SPIFFE ID from its
//! verified certificate, peer authentication and authorization by the shared policy engine;
//! outbound mTLS to the destination's sidecar, verified by the destination's SPIFFE ID. In L4
//! mode bytes are spliced; in L7 mode HTTP is parsed, every request is authorized (403 on
//! deny) and forwarded over pooled upstream connections.
//!
//! The node agent: one per node, holding every local workload's SVID, tunnelling between nodes
//! as HTTP/2 CONNECT streams over pooled mTLS connections (HBONE).

mod admin;
mod error;
mod http1;
mod idle;
mod inbound;
mod l7;
mod lean_tls;
mod metrics;
mod node_agent;
mod outbound;
mod serving;
mod sidecar;
mod sidecar_config;
mod sidecar_file;
mod splice;
mod upstream;

pub use admin::{bind_admin, serve_admin};
pub use error::Error;
pub use metrics::ProxyMetrics;
pub use node_agent::{
    hbone_server_name, run_node_agent, BoundNodeAgent, LocalWorkload, NodeAgentConfig,
    NodeAgentFile, OutboundListener, RemoteWorkload, ServiceEndpoint, TransparentListeners,
    DEFAULT_HBONE_PORT,
};
pub use serving::Limits;
pub use sidecar::{run_sidecar, BoundSidecar};
pub use sidecar_config::{
    InboundConfig, OutboundRoute, ProxyMode, Rotation, SidecarConfig, SidecarIdentity,
    TransparentOutbound,
};
pub use sidecar_file::{
    IdentityFiles, InboundListener, MeshedDestination, Mode, OutboundListener as SidecarOutbound,
    SidecarFile, TlsChoice, TransparentListener,
};
