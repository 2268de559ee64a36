//! Envoy sidecars: an HTTP connection manager per listener, static clusters, the peer's
//! SPIFFE ID matched as a URI SAN in both directions.

use std::net::SocketAddr;
use std::path::Path;

use super::p;

const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
const UPSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const DOWNSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";

pub struct EnvoyTls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub ca: &'a Path,
    /// The SPIFFE ID the peer must present.
    pub peer_id: &'a str,
}

fn common_tls(tls: &EnvoyTls<'_>, indent: &str) -> String {
    let lines = [
        "common_tls_context:".to_owned(),
        "  tls_params: { tls_minimum_protocol_version: TLSv1_3, tls_maximum_protocol_version: TLSv1_3 }".to_owned(),
        "  tls_certificates:".to_owned(),
        format!(
            "  - {{ certificate_chain: {{ filename: \"{}\" }}, private_key: {{ filename: \"{}\" }} }}",
            p(tls.cert),
            p(tls.key)
        ),
        "  validation_context:".to_owned(),
        format!("    trusted_ca: {{ filename: \"{}\" }}", p(tls.ca)),
        format!(
            "    match_typed_subject_alt_names: [{{ san_type: URI, matcher: {{ exact: \"{}\" }} }}]",
            tls.peer_id
        ),
    ];
    lines.iter().map(|l| format!("{indent}{l}\n")).collect()
}

fn listener(name: &str, listen: SocketAddr, cluster: &str, transport: &str) -> String {
    format!(
        "  - name: {name}
    address: {{ socket_address: {{ address: {}, port_value: {} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          \"@type\": {HCM}
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - name: all
              domains: [\"*\"]
              routes:
              - {{ match: {{ prefix: \"/\" }}, route: {{ cluster: {cluster}, timeout: 0s }} }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ \"@type\": {ROUTER} }}
{transport}",
        listen.ip(),
        listen.port()
    )
}

fn cluster(name: &str, to: SocketAddr, transport: &str) -> String {
    format!(
        "  - name: {name}
    type: STATIC
    connect_timeout: 5s
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: {}, port_value: {} }} }} }}
{transport}",
        to.ip(),
        to.port()
    )
}

/// Plaintext HTTP in on `listen`, mTLS to `upstream`, which must present `tls.peer_id`.
pub fn envoy_outbound(listen: SocketAddr, upstream: SocketAddr, tls: &EnvoyTls<'_>) -> String {
    let transport = format!(
        "    transport_socket:\n      name: envoy.transport_sockets.tls\n      typed_config:\n        \"@type\": {UPSTREAM_TLS}\n{}",
        common_tls(tls, "        ")
    );
    format!(
        "static_resources:\n  listeners:\n{}  clusters:\n{}",
        listener("outbound", listen, "upstream", ""),
        cluster("upstream", upstream, &transport)
    )
}

/// mTLS in on `listen` (client certificate with `tls.peer_id` required), plaintext to `app`.
pub fn envoy_inbound(listen: SocketAddr, app: SocketAddr, tls: &EnvoyTls<'_>) -> String {
    let transport = format!(
        "      transport_socket:\n        name: envoy.transport_sockets.tls\n        typed_config:\n          \"@type\": {DOWNSTREAM_TLS}\n          require_client_certificate: true\n{}",
        common_tls(tls, "          ")
    );
    format!(
        "static_resources:\n  listeners:\n{}  clusters:\n{}",
        listener("inbound", listen, "app", &transport),
        cluster("app", app, "")
    )
}
