//! What every plane's start shares: the bench's PKI (a CA and both workloads' SVIDs on disk),
//! the tools it runs, the context a pair is started in, and the running pair itself. A leaf
//! module: the planes (`planes`, `ztunnel`) use it, it uses none of them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use meshbench_identity::{CertificateAuthority, IssueOptions};
use meshbench_netlab::{run_in_netns, ScratchNetns};
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
    pub linkerd2_proxy: PathBuf,
}

/// A running pair: where the load generator sends, and the proxies to measure.
pub(crate) struct Pair {
    pub entry: SocketAddr,
    pub proxies: Vec<Daemon>,
    /// What the pair needs running but is not measured (a plane's own app, its CA).
    pub _support: Vec<Daemon>,
    /// The namespace the plane runs in, where the load generator must run too; deleted
    /// after every process in it was stopped.
    pub netns: Option<ScratchNetns>,
    /// Files the plane's processes read that must outlive them (removed last).
    pub _files: Option<tempfile::TempDir>,
}

impl Pair {
    /// A pair of proxies on the machine's loopback.
    pub(crate) fn on_loopback(entry: SocketAddr, proxies: Vec<Daemon>) -> Self {
        Pair {
            entry,
            proxies,
            _support: vec![],
            netns: None,
            _files: None,
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

/// `GET path` on `addr` from inside `ns`, as HTTP/1.0 (so the body comes whole, never
/// chunked): the status and the body as text, or `None` when nothing answers within a
/// second. For a proxy's own admin endpoints.
pub(crate) fn http_get_in(
    ns: &ScratchNetns,
    addr: SocketAddr,
    path: &str,
) -> Result<Option<(u16, String)>, Error> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    run_in_netns(ns.name(), move || {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = Vec::new();
        // An admin page is small; more than this is not one.
        stream.take(16 << 20).read_to_end(&mut answer).ok()?;
        let text = String::from_utf8_lossy(&answer);
        let status = text.get(9..12)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Some((status, body.to_owned()))
    })
    .map_err(Error::Netns)
}

/// Waits until `daemon` answers `GET path` on `addr` inside `ns` with 200 (its readiness
/// endpoint), failing if it exits first or is not ready within 20 s.
pub(crate) fn wait_http_ok(
    ns: &ScratchNetns,
    addr: SocketAddr,
    path: &str,
    daemon: &mut Daemon,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if matches!(http_get_in(ns, addr, path)?, Some((200, _))) {
            return Ok(());
        }
        daemon.check_running("exited before it was ready")?;
        if Instant::now() > deadline {
            return Err(daemon.died("not ready after 20 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An I/O error on `path`, as the planes report one.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A random token, as a service-account token would be: 32 bytes, hex.
pub(crate) fn token() -> Result<String, Error> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(io(Path::new("/dev/urandom")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A third-party proxy's own log (an access log included), appended to over every start of
/// its plane in the run: the record of what each case's connections crossed.
pub(crate) fn log_appending(path: &Path) -> Result<std::fs::File, Error> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(path))
}
