//! What every plane's start shares: the bench's PKI (a CA and both workloads' SVIDs on disk),
//! the tools it runs, the context a pair is started in, and the running pair itself. A leaf
//! module: the planes (`planes`, `ztunnel`) use it, it uses none of them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use meshbench_identity::{CertificateAuthority, IssueOptions};
use meshbench_netlab::ScratchNetns;
use meshbench_role::RoleConfig;

use crate::process::Daemon;
use crate::Error;

pub(crate) const NAMESPACE: &str = "bench";
const TRUST_DOMAIN: &str = "cluster.local";

/// The CA and the two workloads' SVIDs, on disk where the peers can read them.
pub(crate) struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub(crate) fn create(dir: &Path) -> Result<Self, Error> {
        let io = |source| Error::Io {
            path: dir.to_path_buf(),
            source,
        };
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io)?;
        }
        std::fs::create_dir_all(dir).map_err(io)?;
        let identity = |e: meshbench_identity::Error| Error::Target(format!("bench PKI: {e}"));
        let ca = CertificateAuthority::init(dir, TRUST_DOMAIN).map_err(identity)?;
        for sa in ["client", "server"] {
            let svid = ca
                .issue(
                    NAMESPACE,
                    sa,
                    &IssueOptions {
                        // HAProxy checks the server by DNS name; see meshbench_meshes::configs.
                        dns_names: vec![Pki::dns_name(sa)],
                        ..IssueOptions::default()
                    },
                )
                .map_err(identity)?;
            svid.write(dir, sa).map_err(identity)?;
            // HAProxy wants the certificate and its key in one file.
            meshbench_identity::write_secret(
                &dir.join(format!("{sa}.combined.pem")),
                format!("{}{}", svid.cert_pem, svid.key_pem).as_bytes(),
            )
            .map_err(identity)?;
        }
        Ok(Pki {
            dir: dir.to_path_buf(),
        })
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub(crate) fn dns_name(sa: &str) -> String {
        format!("{sa}.{NAMESPACE}.svc")
    }

    pub(crate) fn id(sa: &str) -> String {
        format!("spiffe://{TRUST_DOMAIN}/ns/{NAMESPACE}/sa/{sa}")
    }
}

pub(crate) struct Tools {
    pub meshbench: PathBuf,
    pub haproxy: PathBuf,
    pub envoy: PathBuf,
    pub ztunnel: PathBuf,
}

/// A running pair: where the load generator sends, and the proxies to measure.
pub(crate) struct Pair {
    pub entry: SocketAddr,
    pub proxies: Vec<Daemon>,
    /// What the pair needs running but is not measured (a plane's own app, its CA).
    pub _support: Vec<Daemon>,
    /// The namespace the plane runs in, where the load generator must run too; deleted
    /// last, after every process in it was stopped.
    pub netns: Option<ScratchNetns>,
}

impl Pair {
    /// A pair of proxies on the machine's loopback.
    pub(crate) fn on_loopback(entry: SocketAddr, proxies: Vec<Daemon>) -> Self {
        Pair {
            entry,
            proxies,
            _support: vec![],
            netns: None,
        }
    }
}

pub(crate) struct PairContext<'a> {
    pub tools: &'a Tools,
    pub pki: &'a Pki,
    pub app: SocketAddr,
    pub cpu: usize,
    pub work_dir: &'a Path,
    /// The echo app's response size, for a plane that starts an app of its own.
    pub response_bytes: u64,
}

impl PairContext<'_> {
    pub(crate) fn write(&self, name: &str, contents: &str) -> Result<PathBuf, Error> {
        let path = self.work_dir.join(name);
        std::fs::write(&path, contents).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    pub(crate) fn log(&self, name: &str) -> PathBuf {
        self.work_dir.join(format!("{name}.log"))
    }

    /// Writes `config` and starts the meshbench role it configures; reads its ready line.
    pub(crate) fn meshbench<C: RoleConfig>(
        &self,
        name: &str,
        config: &C,
    ) -> Result<(Daemon, serde_json::Value), Error> {
        let path = self.write(&format!("{name}.yaml"), &config.to_yaml())?;
        let mut command = Command::new(&self.tools.meshbench);
        command.args(C::command_line(&path)).stdout(Stdio::piped());
        let mut daemon = Daemon::spawn(&mut command, self.cpu, name, &self.log(name))?;
        let ready = daemon.ready_line()?;
        Ok((daemon, ready))
    }
}
