//! The distribution project's registry (Debian's `docker-registry`) for the tests that push
//! to one and pull from one: started on an address of the test's choosing with a port the
//! kernel picks, optionally with htpasswd users and TLS, killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running registry.
pub struct Registry {
    child: Child,
    /// `host:port`, as it listens.
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts `docker-registry` on `host` (the kernel picks the port), with htpasswd
    /// authentication where `htpasswd` gives the users, with TLS where `tls` gives its
    /// certificate and key.
    pub fn start(host: &str, htpasswd: Option<&Path>, tls: Option<(&Path, &Path)>) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let auth = htpasswd
            .map(|path| {
                format!(
                    "auth:\n  htpasswd:\n    realm: meshbench-test\n    path: {}\n",
                    path.display()
                )
            })
            .unwrap_or_default();
        let tls = tls
            .map(|(cert, key)| {
                format!(
                    "  tls:\n    certificate: {}\n    key: {}\n",
                    cert.display(),
                    key.display()
                )
            })
            .unwrap_or_default();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    \
                 rootdirectory: {}\n{auth}http:\n  addr: {host}:0\n{tls}",
                dir.path().join("data").display(),
            ),
        )
        .unwrap();
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // It says where it listens once its socket is open: "listening on <host>:<port>".
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on ") {
                    let addr: String = line[at + "listening on ".len()..]
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '"' && *c != ',')
                        .collect();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the registry said where it listens");
        Registry {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
