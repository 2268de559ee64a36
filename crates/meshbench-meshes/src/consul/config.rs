//! What meshbench hands Consul: the agent's configuration, the config entries that make the
//! mesh (TLS 1.3 only, HTTP as the protocol, default deny and the intentions our policy
//! allows) and each workload's service registration with its transparent sidecar. All of it
//! is Consul's own JSON, written to files the `consul` CLI reads.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde_json::{json, Value};

use crate::configs::p;

/// The port of a sidecar's public (inbound, mTLS) listener: Consul on Kubernetes uses it.
pub(crate) const PUBLIC_LISTENER_PORT: u16 = 20000;
/// Consul's HTTP API.
pub(crate) const HTTP_PORT: u16 = 8500;
/// Consul's xDS (gRPC) port, over TLS.
pub(crate) const GRPC_TLS_PORT: u16 = 8503;
/// Envoy's admin listener, on the pod's loopback.
pub(crate) const ENVOY_ADMIN_PORT: u16 = 19000;

/// The agent: a dev-mode server (in-memory state, Connect on) bound to the first node, its
/// xDS only over TLS, its CA's trust domain `<cluster_id>.consul`.
pub(crate) struct AgentConfig<'a> {
    pub node_name: &'a str,
    pub bind: IpAddr,
    /// The node's address as the other nodes reach it.
    pub advertise: IpAddr,
    pub grpc_cert: &'a Path,
    pub grpc_key: &'a Path,
    pub ca: &'a Path,
    /// Where the agent writes its log (kept with the cell's results).
    pub log_file: &'a Path,
}

pub(crate) fn agent_config(agent: &AgentConfig<'_>) -> Value {
    json!({
        "node_name": agent.node_name,
        "bind_addr": agent.bind.to_string(),
        "client_addr": agent.bind.to_string(),
        "advertise_addr": agent.advertise.to_string(),
        // No plaintext xDS, no DNS: the sidecars reach the agent over TLS only.
        "ports": { "grpc": -1, "grpc_tls": GRPC_TLS_PORT, "dns": -1, "http": HTTP_PORT },
        "tls": {
            "grpc": {
                "cert_file": p(agent.grpc_cert),
                "key_file": p(agent.grpc_key),
                "ca_file": p(agent.ca),
                "verify_incoming": false,
            }
        },
        "disable_update_check": true,
        "log_level": "info",
        "log_file": p(agent.log_file),
    })
}

/// The root and key of a Connect CA meshbench made, as PEM.
pub(crate) struct ConnectCa {
    pub root_cert: String,
    pub private_key: String,
}

/// The agent's Connect block: the built-in CA provider with meshbench's root, so that the
/// identity checks can present certificates of Consul's own trust (an expired one, the wrong
/// service's) that Consul's API would never issue. Consul signs the sidecars' leaves from it.
pub(crate) fn connect_config(cluster_id: &str, ca: &ConnectCa) -> Value {
    json!({
        "connect": {
            "enabled": true,
            "ca_provider": "consul",
            "ca_config": {
                "cluster_id": cluster_id,
                "private_key": ca.private_key,
                "root_cert": ca.root_cert,
            },
        },
    })
}

/// `consul connect ca set-config`'s body for a rotation to `ca`'s root.
pub(crate) fn ca_set_config(cluster_id: &str, ca: &ConnectCa) -> Value {
    json!({
        "Provider": "consul",
        "ClusterID": cluster_id,
        "Config": { "PrivateKey": ca.private_key, "RootCert": ca.root_cert },
    })
}

/// The trust domain Consul derives from its cluster id.
pub(crate) fn trust_domain(cluster_id: &str) -> String {
    format!("{cluster_id}.consul")
}

/// The cluster id (a UUID) of every lab's Consul: it makes the trust domain
/// (`<cluster id>.consul`), so the identities are known before an agent runs. Each cell's
/// agent has a CA of its own; sharing the name across cells is what separate clusters do.
pub(crate) const CLUSTER_ID: &str = "6d657368-6265-4e63-8800-000000000001";

/// The SPIFFE ID Consul gives service `name` in the default namespace of datacenter `dc1`.
pub(crate) fn consul_spiffe_id(cluster_id: &str, service: &str) -> String {
    format!(
        "spiffe://{}/ns/default/dc/dc1/svc/{service}",
        trust_domain(cluster_id)
    )
}

/// The mesh-wide entry: TLS 1.3 only both ways (as every other mesh of the lab is run), and
/// outbound traffic to mesh destinations only. A sidecar's upstreams are the services its
/// intentions let it call; with passthrough, a call the intentions deny left the pod in
/// plaintext (as to a service outside the mesh) and was refused only by the destination's
/// sidecar, its request readable on the wire: seen in `verify`, so the sidecar drops it
/// instead. `permissive` lets a service take plaintext (Consul refuses `MutualTLSMode:
/// permissive` otherwise).
pub(crate) fn mesh_entry(permissive: bool) -> Value {
    json!({
        "Kind": "mesh",
        "AllowEnablingPermissiveMutualTLS": permissive,
        "TransparentProxy": { "MeshDestinationsOnly": true },
        "TLS": {
            "Incoming": { "TLSMinVersion": "TLSv1_3", "TLSMaxVersion": "TLSv1_3" },
            "Outgoing": { "TLSMinVersion": "TLSv1_3", "TLSMaxVersion": "TLSv1_3" },
        },
    })
}

/// HTTP as every service's protocol: what L7 intentions need, and the HTTP proxying our
/// other sidecars do.
pub(crate) fn proxy_defaults() -> Value {
    json!({
        "Kind": "proxy-defaults",
        "Name": "global",
        "Config": { "protocol": "http" },
    })
}

/// Service intentions for `destination`: each source with its action, in order. `*` names
/// every service.
pub(crate) fn intentions(destination: &str, sources: &[(&str, &str)]) -> Value {
    json!({
        "Kind": "service-intentions",
        "Name": destination,
        "Sources": sources
            .iter()
            .map(|(name, action)| json!({ "Name": name, "Action": action }))
            .collect::<Vec<_>>(),
    })
}

/// A workload's registration (`consul services register`): its app at `address`, reached
/// through `virtual_address` (its Kubernetes-style ClusterIP, which Consul's transparent
/// outbound listeners match on), and its sidecar with its public listener, in transparent
/// mode with the outbound listener on `outbound_port`.
pub(crate) fn service_registration(
    name: &str,
    id: &str,
    address: IpAddr,
    app_port: u16,
    virtual_address: Option<SocketAddr>,
    outbound_port: u16,
) -> Value {
    let mut service = json!({
        "name": name,
        "id": id,
        "address": address.to_string(),
        "port": app_port,
        "connect": {
            "sidecar_service": {
                "port": PUBLIC_LISTENER_PORT,
                "proxy": {
                    "mode": "transparent",
                    "local_service_address": "127.0.0.1",
                    "transparent_proxy": { "outbound_listener_port": outbound_port },
                },
                // Consul's default listening check, every second rather than every ten:
                // until it passes, the sidecar is no healthy endpoint of its service.
                //
                // Without Consul's default alias check (the sidecar as healthy as its app):
                // the apps register no checks, so it could only ever say that the app is
                // registered, and Consul 1.22's node-local alias check can miss its first
                // evaluation and stay critical until its one-minute refresh, which kept
                // the sidecar's endpoint unhealthy for that minute (seen in CI: "No healthy
                // endpoints", the alias critical with no output). On Kubernetes, consul-k8s
                // syncs the pod's readiness into Consul as the health instead.
                "checks": [
                    {
                        "name": "Connect Sidecar Listening",
                        "tcp": SocketAddr::new(address, PUBLIC_LISTENER_PORT).to_string(),
                        "interval": "1s",
                    },
                ],
            }
        },
    });
    if let Some(virtual_address) = virtual_address {
        // On the sidecar too: the transparent outbound listeners match the addresses of the
        // upstream's proxy instances, as consul-k8s registers them.
        let tagged = json!({
            "virtual": { "address": virtual_address.ip().to_string(), "port": virtual_address.port() }
        });
        service["tagged_addresses"] = tagged.clone();
        service["connect"]["sidecar_service"]["tagged_addresses"] = tagged;
    }
    json!({ "service": service })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_consuls_spiffe_ids_in_a_uuid_trust_domain() {
        let groups: Vec<usize> = CLUSTER_ID.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert_eq!(
            consul_spiffe_id(CLUSTER_ID, "calculator"),
            format!("spiffe://{CLUSTER_ID}.consul/ns/default/dc/dc1/svc/calculator")
        );
    }

    #[test]
    fn a_registration_makes_a_transparent_sidecar_reached_at_the_services_virtual_address() {
        let reg = service_registration(
            "calculator",
            "calculator-1",
            "10.1.0.5".parse().unwrap(),
            8080,
            Some("10.96.0.3:80".parse().unwrap()),
            15001,
        );
        let service = &reg["service"];
        assert_eq!(
            service["tagged_addresses"]["virtual"]["address"],
            "10.96.0.3"
        );
        assert_eq!(service["tagged_addresses"]["virtual"]["port"], 80);
        let sidecar = &service["connect"]["sidecar_service"];
        assert_eq!(
            sidecar["tagged_addresses"]["virtual"]["address"],
            "10.96.0.3"
        );
        let proxy = &service["connect"]["sidecar_service"]["proxy"];
        assert_eq!(proxy["mode"], "transparent");
        assert_eq!(proxy["transparent_proxy"]["outbound_listener_port"], 15001);
        assert_eq!(
            service["connect"]["sidecar_service"]["port"],
            PUBLIC_LISTENER_PORT
        );
    }

    #[test]
    fn intentions_keep_their_sources_in_order() {
        let entry = intentions("server", &[("client", "allow"), ("*", "deny")]);
        assert_eq!(entry["Kind"], "service-intentions");
        assert_eq!(entry["Sources"][0]["Name"], "client");
        assert_eq!(entry["Sources"][1]["Action"], "deny");
    }
}
