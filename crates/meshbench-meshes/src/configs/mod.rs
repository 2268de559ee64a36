//! Configuration files for third-party sidecars, generated from the lab's PKI: TLS 1.3 only,
//! client certificates required, HTTP proxying with pooled upstream connections. How much of
//! the peer's identity each proxy can check differs, and [`IdentityCheck`] says it:
//! Envoy matches the SPIFFE ID (URI SAN) both ways; HAProxy 2.6 and nginx match only DNS
//! names, so the lab's SVIDs carry `<sa>.<ns>.svc` as well and the outbound side checks that,
//! while their inbound side verifies the client's chain only.

mod envoy;
mod envoy_rbac;
mod haproxy;
mod nginx;

pub use envoy::{
    envoy_enrolled, envoy_inbound, envoy_outbound, envoy_svid_secret, EnvoyEnrollment, EnvoyTls,
    MeshDestination,
};
pub use envoy_rbac::rbac_filters;
pub use haproxy::{haproxy_inbound, haproxy_outbound};
pub use nginx::{nginx_gateway, nginx_inbound, nginx_outbound, GatewayRoute, NginxTls};

use std::path::Path;

/// What a proxy verifies about its peer beyond the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityCheck {
    SpiffeId,
    DnsName,
    ChainOnly,
}

impl IdentityCheck {
    pub fn describe(self) -> &'static str {
        match self {
            IdentityCheck::SpiffeId => "SPIFFE ID",
            IdentityCheck::DnsName => "DNS SAN mirroring the SPIFFE ID",
            IdentityCheck::ChainOnly => "chain only",
        }
    }
}

fn p(path: &Path) -> String {
    path.display().to_string()
}
