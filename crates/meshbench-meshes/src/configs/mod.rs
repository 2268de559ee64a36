//! The third-party proxies as building blocks the meshes and the bench share: their
//! configurations, and how each binary is found and started (Envoy's, which `envoy-sidecar`
//! and `consul-connect` both run; HAProxy's and nginx's). Generated from the lab's PKI: TLS 1.3 only,
//! client certificates required; HTTP proxying with pooled upstream connections, or, for the
//! bench's like-for-like peers of an L4 sidecar, TCP proxying ([`ProxyMode`]). How much of
//! the peer's identity each proxy can check differs, and [`IdentityCheck`] says it:
//! Envoy matches the SPIFFE ID (URI SAN) both ways; HAProxy 2.6 and nginx match only DNS
//! names, so the lab's SVIDs carry `<sa>.<ns>.svc` as well and the outbound side checks that,
//! while their inbound side verifies the client's chain only.

pub(crate) mod envoy;
pub(crate) mod envoy_rbac;
pub(crate) mod haproxy;
pub(crate) mod nginx;

pub use crate::description::IdentityCheck;
pub use envoy::{
    envoy_args, envoy_enrolled, envoy_inbound, envoy_outbound, envoy_svid_secret, EnvoyEnrollment,
    EnvoyTls, MeshDestination,
};
pub use envoy_rbac::rbac_filters;
pub use haproxy::{haproxy_args, haproxy_inbound, haproxy_outbound};
pub use nginx::{nginx_gateway, nginx_inbound, nginx_outbound, GatewayRoute, NginxTls};

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

pub(crate) fn p(path: &Path) -> String {
    path.display().to_string()
}
