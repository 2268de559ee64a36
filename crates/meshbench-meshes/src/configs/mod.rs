//! What the third-party sidecars' configurations share, and those configurations re-exported
//! for the bench (each lives in its mesh's module). Generated from the lab's PKI: TLS 1.3 only,
//! client certificates required, HTTP proxying with pooled upstream connections. How much of
//! the peer's identity each proxy can check differs, and [`IdentityCheck`] says it:
//! Envoy matches the SPIFFE ID (URI SAN) both ways; HAProxy 2.6 and nginx match only DNS
//! names, so the lab's SVIDs carry `<sa>.<ns>.svc` as well and the outbound side checks that,
//! while their inbound side verifies the client's chain only.

pub use crate::envoy::config::{
    envoy_enrolled, envoy_inbound, envoy_outbound, envoy_svid_secret, EnvoyEnrollment, EnvoyTls,
    MeshDestination,
};
pub use crate::envoy::rbac::rbac_filters;
pub use crate::haproxy::config::{haproxy_inbound, haproxy_outbound};
pub use crate::nginx::config::{
    nginx_gateway, nginx_inbound, nginx_outbound, GatewayRoute, NginxTls,
};

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

pub(crate) fn p(path: &Path) -> String {
    path.display().to_string()
}
