//! Builders meshbench's integration tests share, so each test says what it checks rather
//! than how to set up a PKI or an app: [`TestPki`] (a CA and SVIDs, E3's by default),
//! [`e3_policy`], [`echo_app`], [`closed_loop`] request runs, and the node agent's
//! [`local_workload`] and [`node_agent_file`]. Everything binds `127.0.0.1:0` and lives in a
//! temporary directory removed with its owner.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_dataplane::{LocalWorkload, NodeAgentFile};
use meshbench_identity::{CertificateAuthority, ClientTlsFiles, IssueOptions, ServerTlsFiles};
use meshbench_loadgen::{LoadConfig, LoadModel, Stop, Target};
use meshbench_topology::e3;
use meshbench_workload::{bind, Echo, EchoConfig, RoleService, ServeOptions};

/// The trust domain of every fixture.
pub const TRUST_DOMAIN: &str = "cluster.local";

/// Any free loopback port.
pub const ANY: &str = "127.0.0.1:0";

/// A CA and SVIDs written as `<sa>.pem`/`<sa>.key` beside `ca.pem`, in a temporary directory.
pub struct TestPki {
    dir: tempfile::TempDir,
    pub namespace: String,
}

impl TestPki {
    /// E3's application: the calculator, the experimenter and the security checker in
    /// namespace `app`.
    pub fn e3() -> Self {
        TestPki::new(e3::APP, &[e3::CALCULATOR, e3::EXPERIMENTER, e3::CHECKER])
    }

    pub fn new(namespace: &str, service_accounts: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca = CertificateAuthority::init(dir.path(), TRUST_DOMAIN).expect("a new CA");
        for sa in service_accounts {
            ca.issue(namespace, sa, &IssueOptions::default())
                .and_then(|svid| svid.write(dir.path(), sa))
                .expect("an SVID");
        }
        TestPki {
            dir,
            namespace: namespace.to_owned(),
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    pub fn cert(&self, sa: &str) -> PathBuf {
        self.path(&format!("{sa}.pem"))
    }

    pub fn key(&self, sa: &str) -> PathBuf {
        self.path(&format!("{sa}.key"))
    }

    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// `sa`'s SVID served to clients that must present one of this CA's.
    pub fn server_files(&self, sa: &str) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: self.cert(sa),
            key: self.key(sa),
            client_ca: Some(self.ca()),
        }
    }

    /// A client trusting this CA, presenting `sa`'s SVID (`None`: no certificate at all).
    pub fn client_files(&self, sa: Option<&str>) -> ClientTlsFiles {
        ClientTlsFiles {
            cert: sa.map(|sa| self.cert(sa)),
            key: sa.map(|sa| self.key(sa)),
            ca: self.ca(),
            expect_server_id: None,
        }
    }
}

/// E3's zero-trust policy in the fixtures' trust domain.
pub fn e3_policy() -> String {
    e3::zero_trust_policy(TRUST_DOMAIN)
}

/// An echo app answering 512 bytes at once, served on `runtime`; its address.
pub fn echo_app(runtime: &tokio::runtime::Runtime) -> SocketAddr {
    let server = runtime
        .block_on(bind(&ServeOptions {
            listen: ANY.parse().expect("a socket address"),
            tls: None,
            drain_timeout: Duration::from_millis(100),
        }))
        .expect("binding the echo app");
    let addr = server.local_addr();
    let service = RoleService::new(Echo::new(&EchoConfig::fixed(Duration::ZERO, 512)));
    runtime.spawn(server.serve(service, std::future::pending()));
    addr
}

/// `requests` GETs to `addr` over `connections` keep-alive connections, each sent when the
/// previous one on its connection ended, with a 2 s timeout.
pub fn closed_loop(addr: SocketAddr, requests: u64, connections: u32) -> LoadConfig {
    let mut config = LoadConfig::open_loop(
        Target::parse(&format!("http://{addr}/")).expect("a URL"),
        1.0,
        connections,
        Duration::from_secs(1),
    );
    config.model = LoadModel::ClosedLoop;
    config.stop = Stop::Requests(requests);
    config.timeout = Duration::from_secs(2);
    config
}

/// `sa` of the PKI's namespace as one of a node agent's local workloads, reached at
/// `address`.
pub fn local_workload(pki: &TestPki, sa: &str, address: SocketAddr) -> LocalWorkload {
    LocalWorkload {
        namespace: pki.namespace.clone(),
        name: sa.into(),
        service_account: sa.into(),
        cert: pki.cert(sa),
        key: pki.key(sa),
        address,
    }
}

/// A node agent of `node` trusting the PKI's CA, taking HBONE on any loopback port.
pub fn node_agent_file(pki: &TestPki, node: &str, workloads: Vec<LocalWorkload>) -> NodeAgentFile {
    let mut file = NodeAgentFile::new(node, pki.ca(), ANY.parse().expect("a socket address"));
    file.workloads = workloads;
    file
}
