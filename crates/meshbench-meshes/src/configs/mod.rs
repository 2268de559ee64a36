//! What the third-party sidecars' configurations share, and those configurations re-exported
//! for the bench (each lives in its mesh's module). Generated from the lab's PKI: TLS 1.3 only,
//! client certificates required; HTTP proxying with pooled upstream connections, or, for the
//! bench's like-for-like peers of an L4 sidecar, TCP proxying ([`ProxyMode`]). How much of
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

/// What a HAProxy or Envoy sidecar pair does with a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Parses HTTP and sends requests over pooled upstream connections (HAProxy `mode http`
    /// with `http-reuse always`, Envoy's HTTP connection manager): a thousand client
    /// connections may share a handful of mTLS connections between the proxies.
    Http,
    /// Copies bytes, each client connection over an mTLS connection of its own (HAProxy `mode
    /// tcp`, Envoy's `tcp_proxy`): the work of an L4 sidecar.
    Tcp,
}

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
