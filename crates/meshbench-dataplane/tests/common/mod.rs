//! The lab the sidecar tests share: a CA with the app's service accounts, one runtime, and
//! sidecars and apps started on it over loopback.

// Each test binary uses its own part of the lab.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use meshbench_dataplane::{
    run_sidecar, InboundConfig, Limits, OutboundRoute, ProxyMetrics, ProxyMode, Rotation,
    SidecarConfig, SidecarIdentity,
};
use meshbench_fixtures::TestPki;
use meshbench_identity::SpiffeId;
use meshbench_policy::Policy;

/// STRICT mTLS in namespace `app`, and no `/admin/*` for anyone at the calculator (an L7
/// rule).
pub const STRICT_NO_ADMIN: &str = include_str!("../policies/strict-no-admin.yaml");

pub struct Lab {
    pki: TestPki,
    pub runtime: tokio::runtime::Runtime,
    pub ca_dir: std::path::PathBuf,
    /// Metrics of the server-side (calculator) sidecars.
    pub metrics: Option<Arc<ProxyMetrics>>,
    /// SVID renewal for every sidecar the lab starts.
    pub rotation: Option<Rotation>,
}

impl Lab {
    pub fn new() -> Self {
        let pki = TestPki::e3();
        let ca_dir = pki.dir().to_path_buf();
        Lab {
            pki,
            runtime: meshbench_workload::runtime(Some(1)).unwrap(),
            ca_dir,
            metrics: None,
            rotation: None,
        }
    }

    pub fn identity(&self, sa: &str) -> SidecarIdentity {
        SidecarIdentity {
            cert: self.pki.cert(sa),
            key: self.pki.key(sa),
            ca: self.pki.ca(),
            rotation: self.rotation.clone(),
        }
    }

    pub fn echo_app(&self) -> SocketAddr {
        meshbench_fixtures::echo_app(&self.runtime)
    }

    pub fn sidecar(&self, config: SidecarConfig) -> (Option<SocketAddr>, Vec<SocketAddr>) {
        let bound = self.runtime.block_on(run_sidecar(config)).unwrap();
        let addrs = (bound.inbound_addr(), bound.outbound_addrs());
        self.runtime.spawn(bound.serve(std::future::pending()));
        addrs
    }

    /// The calculator's inbound sidecar in front of an echo app.
    pub fn calculator(&self, policy: &str, mtls: bool) -> SocketAddr {
        self.calculator_in(policy, mtls, ProxyMode::L4)
    }

    pub fn calculator_in(&self, policy: &str, mtls: bool, mode: ProxyMode) -> SocketAddr {
        self.calculator_for(self.echo_app(), policy, mtls, mode)
    }

    /// The calculator's inbound sidecar in front of `app`.
    pub fn calculator_for(
        &self,
        app: SocketAddr,
        policy: &str,
        mtls: bool,
        mode: ProxyMode,
    ) -> SocketAddr {
        let config = self.calculator_config(app, policy, mtls, mode);
        self.sidecar(config).0.unwrap()
    }

    /// The calculator's inbound sidecar in front of `app`, as [`Lab::calculator_for`] starts it.
    pub fn calculator_config(
        &self,
        app: SocketAddr,
        policy: &str,
        mtls: bool,
        mode: ProxyMode,
    ) -> SidecarConfig {
        SidecarConfig {
            namespace: "app".into(),
            workload: "calculator".into(),
            identity: Some(self.identity("calculator")),
            mtls,
            tls: Default::default(),
            mode,
            metrics: self.metrics.clone(),
            policy: Arc::new(Policy::from_yaml(policy).unwrap()),
            inbound: Some(InboundConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                app,
                transparent: false,
            }),
            outbound: vec![],
            transparent_outbound: None,
            limits: Limits::default(),
        }
    }

    /// A client's outbound sidecar routing to `upstream`, expecting `upstream_sa`.
    pub fn client(
        &self,
        sa: &str,
        upstream: SocketAddr,
        upstream_sa: &str,
        mtls: bool,
    ) -> SocketAddr {
        self.client_in(sa, upstream, upstream_sa, mtls, ProxyMode::L4)
    }

    /// An L7 client sidecar with mTLS to an L7 calculator sidecar.
    pub fn l7_client(&self, sa: &str, calculator: SocketAddr) -> SocketAddr {
        self.client_in(sa, calculator, "calculator", true, ProxyMode::L7)
    }

    pub fn client_in(
        &self,
        sa: &str,
        upstream: SocketAddr,
        upstream_sa: &str,
        mtls: bool,
        mode: ProxyMode,
    ) -> SocketAddr {
        self.sidecar(SidecarConfig {
            namespace: "app".into(),
            workload: sa.into(),
            identity: Some(self.identity(sa)),
            mtls,
            tls: Default::default(),
            mode,
            metrics: None,
            policy: Arc::new(Policy::from_yaml("{}").unwrap()),
            inbound: None,
            outbound: vec![OutboundRoute {
                listen: "127.0.0.1:0".parse().unwrap(),
                upstream,
                upstream_id: Some(
                    SpiffeId::for_workload("cluster.local", "app", upstream_sa).unwrap(),
                ),
            }],
            transparent_outbound: None,
            limits: Limits::default(),
        })
        .1[0]
    }
}
