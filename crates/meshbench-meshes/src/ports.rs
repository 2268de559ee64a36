//! The well-known ports of lab and cluster components, as Istio numbers them.

use meshbench_netlab::SidecarCapture;

/// The well-known ports of lab components (the same in every pod and node; on loopback each
/// pod and node has its own address).
#[derive(Debug, Clone, Copy)]
pub struct Ports;

impl Ports {
    /// Istio's capture: everything the pod sends to 15001, everything it receives to 15006.
    pub fn sidecar_capture() -> SidecarCapture {
        SidecarCapture {
            outbound_port: Ports::OUTBOUND,
            inbound_port: Ports::INBOUND,
            outbound_only: None,
            inbound_only: None,
            inbound_ports_excluded: vec![],
        }
    }

    pub const APP: u16 = 8080;
    pub const OUTBOUND: u16 = 15001;
    pub const INBOUND: u16 = 15006;
    pub const HBONE: u16 = 15008;
    pub const CA: u16 = 15012;
    /// A proxy's admin endpoint (Prometheus metrics), where Istio's sidecars serve theirs.
    pub const ADMIN: u16 = 15090;
}
