//! Configuration files for the third-party sidecar pairs, generated from the bench's PKI:
//! TLS 1.3 only, client certificates required, HTTP proxying with pooled upstream connections.
//! Envoy also checks the peer's SPIFFE ID; HAProxy 2.6 can only verify the chain (it matches
//! DNS names, not URI SANs), which the report says.

use std::path::Path;

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// The client-side HAProxy: plaintext HTTP in, mTLS to the server-side HAProxy.
pub(crate) fn haproxy_outbound(listen: u16, upstream: u16, crt: &Path, ca: &Path) -> String {
    format!(
        "{}\nfrontend outbound\n  bind 127.0.0.1:{listen}\n  default_backend upstream\n\
         backend upstream\n  http-reuse always\n  server inbound 127.0.0.1:{upstream} ssl crt {} \
         ca-file {} verify required ssl-min-ver TLSv1.3 ssl-max-ver TLSv1.3\n",
        haproxy_common(),
        p(crt),
        p(ca)
    )
}

/// The server-side HAProxy: mTLS in (client certificate required), plaintext to the app.
pub(crate) fn haproxy_inbound(listen: u16, app: u16, crt: &Path, ca: &Path) -> String {
    format!(
        "{}\nfrontend inbound\n  bind 127.0.0.1:{listen} ssl crt {} ca-file {} verify required \
         ssl-min-ver TLSv1.3 ssl-max-ver TLSv1.3\n  default_backend app\n\
         backend app\n  http-reuse always\n  server app 127.0.0.1:{app}\n",
        haproxy_common(),
        p(crt),
        p(ca)
    )
}

fn haproxy_common() -> &'static str {
    "global\n  nbthread 1\n  maxconn 8000\n\
     defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n"
}

const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
const UPSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const DOWNSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";

pub(crate) struct EnvoyTls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub ca: &'a Path,
    /// The SPIFFE ID the peer must present.
    pub peer_id: &'a str,
}

fn envoy_common_tls(tls: &EnvoyTls<'_>, indent: &str) -> String {
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

fn envoy_listener(name: &str, listen: u16, cluster: &str, transport: &str) -> String {
    format!(
        "  - name: {name}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {listen} }} }}
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
{transport}"
    )
}

fn envoy_cluster(name: &str, port: u16, transport: &str) -> String {
    format!(
        "  - name: {name}
    type: STATIC
    connect_timeout: 5s
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
{transport}"
    )
}

/// The client-side Envoy: plaintext HTTP in, mTLS to the server-side Envoy, which must
/// present the server's SPIFFE ID.
pub(crate) fn envoy_outbound(listen: u16, upstream: u16, tls: &EnvoyTls<'_>) -> String {
    let transport = format!(
        "    transport_socket:\n      name: envoy.transport_sockets.tls\n      typed_config:\n        \"@type\": {UPSTREAM_TLS}\n{}",
        envoy_common_tls(tls, "        ")
    );
    format!(
        "static_resources:\n  listeners:\n{}  clusters:\n{}",
        envoy_listener("outbound", listen, "upstream", ""),
        envoy_cluster("upstream", upstream, &transport)
    )
}

/// The server-side Envoy: mTLS in (client certificate with the client's SPIFFE ID required),
/// plaintext to the app.
pub(crate) fn envoy_inbound(listen: u16, app: u16, tls: &EnvoyTls<'_>) -> String {
    let transport = format!(
        "      transport_socket:\n        name: envoy.transport_sockets.tls\n        typed_config:\n          \"@type\": {DOWNSTREAM_TLS}\n          require_client_certificate: true\n{}",
        envoy_common_tls(tls, "          ")
    );
    format!(
        "static_resources:\n  listeners:\n{}  clusters:\n{}",
        envoy_listener("inbound", listen, "app", &transport),
        envoy_cluster("app", app, "")
    )
}
