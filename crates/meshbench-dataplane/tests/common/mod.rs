//! The lab the sidecar tests share: a CA with the app's service accounts, one runtime, and
//! sidecars and apps started on it over loopback.

// Each test binary uses its own part of the lab.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use meshbench_dataplane::{
    run_sidecar, InboundConfig, Limits, OutboundRoute, ProxyMetrics, ProxyMode, Rotation,
    SidecarConfig, SidecarIdentity,
};
use meshbench_identity::{CertificateAuthority, IssueOptions, SpiffeId};
use meshbench_policy::Policy;
use meshbench_workload::{bind, Echo, EchoConfig, RoleService, ServeOptions};

pub struct Lab {
    _dir: tempfile::TempDir,
    pub runtime: tokio::runtime::Runtime,
    pub ca_dir: std::path::PathBuf,
    /// Metrics of the server-side (calculator) sidecars.
    pub metrics: Option<Arc<ProxyMetrics>>,
    /// SVID renewal for every sidecar the lab starts.
    pub rotation: Option<Rotation>,
}

impl Lab {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().to_path_buf();
        let ca = CertificateAuthority::init(&ca_dir, "cluster.local").unwrap();
        for sa in ["calculator", "experimenter", "security-checker"] {
            ca.issue("app", sa, &IssueOptions::default())
                .unwrap()
                .write(&ca_dir, sa)
                .unwrap();
        }
        Lab {
            _dir: dir,
            runtime: meshbench_workload::runtime(Some(1)).unwrap(),
            ca_dir,
            metrics: None,
            rotation: None,
        }
    }

    pub fn identity(&self, sa: &str) -> SidecarIdentity {
        let d: &Path = &self.ca_dir;
        SidecarIdentity {
            cert: d.join(format!("{sa}.pem")),
            key: d.join(format!("{sa}.key")),
            ca: d.join("ca.pem"),
            rotation: self.rotation.clone(),
        }
    }

    pub fn echo_app(&self) -> SocketAddr {
        let server = self
            .runtime
            .block_on(bind(&ServeOptions {
                listen: "127.0.0.1:0".parse().unwrap(),
                tls: None,
                drain_timeout: Duration::from_millis(100),
            }))
            .unwrap();
        let addr = server.local_addr();
        let service = RoleService::new(Echo::new(&EchoConfig::fixed(Duration::ZERO, 512)));
        self.runtime
            .spawn(server.serve(service, std::future::pending()));
        addr
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
        self.sidecar(SidecarConfig {
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
        })
        .0
        .unwrap()
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
