//! meshbench's reference mesh data plane, on the stack the best data planes use (tokio,
//! rustls with aws-lc-rs): the lower bound every real mesh is compared with.
//!
//! This module set holds the sidecar's L4 path: inbound protocol detection, mTLS termination
//! with the peer's SPIFFE ID from its verified certificate, peer authentication and
//! authorization by the shared policy engine, and byte splicing to the app; outbound mTLS to
//! the destination's sidecar, verified by the destination's SPIFFE ID.

mod error;
mod inbound;
mod outbound;
mod sidecar;

pub use error::Error;
pub use sidecar::{
    run_sidecar, BoundSidecar, InboundConfig, OutboundRoute, SidecarConfig, SidecarIdentity,
};
