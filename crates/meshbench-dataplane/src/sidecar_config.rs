//! What a sidecar is given to run: its identity, its inbound and outbound listeners, its mode
//! and its limits. Read by the sidecar and by each of its listeners.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use meshbench_identity::{SpiffeId, TlsOptions};
use meshbench_policy::Policy;

use crate::metrics::ProxyMetrics;
use crate::serving::Limits;

/// The workload's SVID and the trust bundle it verifies peers with.
#[derive(Debug, Clone)]
pub struct SidecarIdentity {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// Renew the SVID through a CA service; without it the SVID is used until it expires.
    pub rotation: Option<Rotation>,
}

#[derive(Debug, Clone)]
pub struct Rotation {
    /// The CA service (`meshbench ca serve`).
    pub ca_endpoint: SocketAddr,
    /// Renew when this fraction of the remaining lifetime has passed.
    pub fraction: f64,
}

#[derive(Debug, Clone)]
pub struct InboundConfig {
    pub listen: SocketAddr,
    /// The local app the sidecar fronts.
    pub app: SocketAddr,
    /// Connections arrive REDIRECTed by iptables: L4 forwards each to the app's address at
    /// the port it was originally sent to, and policy sees that port.
    pub transparent: bool,
}

/// The listener iptables REDIRECTs the app's outbound connections to. Each connection's
/// original destination picks its route; destinations outside the mesh are passed through
/// in plaintext (Istio's `ALLOW_ANY`).
#[derive(Debug, Clone)]
pub struct TransparentOutbound {
    pub listen: SocketAddr,
    /// Meshed destinations and the identity each must present.
    pub destinations: Vec<(SocketAddr, Option<SpiffeId>)>,
}

#[derive(Debug, Clone)]
pub struct OutboundRoute {
    pub listen: SocketAddr,
    /// The destination's inbound sidecar.
    pub upstream: SocketAddr,
    /// The identity the destination must present; any SPIFFE ID of the trust domain if `None`.
    pub upstream_id: Option<SpiffeId>,
}

/// What the sidecar understands of the traffic it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Bytes are spliced; authorization by identity and port, deny closes the connection.
    L4,
    /// HTTP/1.1 and HTTP/2 parsed; per-request authorization with method and path, deny is a
    /// 403; upstream connections pooled.
    L7,
}

#[derive(Debug, Clone)]
pub struct SidecarConfig {
    pub namespace: String,
    pub workload: String,
    /// Required when `mtls` is on.
    pub identity: Option<SidecarIdentity>,
    /// Off: plaintext between sidecars (E1's throughput decomposition).
    pub mtls: bool,
    /// Cipher suites and key exchange offered between sidecars (TLS 1.3 only).
    pub tls: TlsOptions,
    pub mode: ProxyMode,
    /// `None`: no metrics are recorded (what metrics cost is part of E1's decomposition).
    pub metrics: Option<Arc<ProxyMetrics>>,
    pub policy: Arc<Policy>,
    pub inbound: Option<InboundConfig>,
    pub outbound: Vec<OutboundRoute>,
    pub transparent_outbound: Option<TransparentOutbound>,
    /// Timeouts and caps of every listener.
    pub limits: Limits,
}
