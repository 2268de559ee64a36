//! Consul's control plane in the lab: `consul agent -dev` on the first node, counted as the
//! mesh's control plane, and the `consul` CLI run against it from the node (registrations,
//! config entries, Envoy bootstraps) or from a pod (its transparent capture).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use meshbench_identity::CertificateAuthority;
use meshbench_lab::{LabComponent, Readiness};
use serde_json::Value;

use super::config::{self, AgentConfig};
use crate::lab::Place;
use crate::{Error, LabContext};

/// How long the agent may take to elect itself leader and initialize its CA.
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one CLI call may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a sidecar may take to receive its upstreams from xDS with healthy endpoints.
/// 30 s was once too short while the test suite's cluster ran beside the lab: the listener
/// and cluster were in place, the upstream's endpoint not yet healthy.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);

/// A running agent and how to reach it.
pub(crate) struct ConsulAgent {
    /// The node the agent runs on, where the CLI runs too.
    node: String,
    consul: PathBuf,
    /// `http://<node>:8500`, the API the CLI uses.
    pub http_addr: String,
    /// `<node>:8503`, the xDS (gRPC over TLS) the sidecars use.
    pub grpc_addr: String,
    /// The CA that signed the agent's gRPC certificate.
    pub grpc_ca: PathBuf,
}

impl ConsulAgent {
    /// The agent of `lab` (on its first node), whether or not it runs yet.
    pub fn of(lab: &LabContext<'_>, consul: &Path) -> Result<ConsulAgent, Error> {
        let node = lab.net.topology().nodes[0].clone();
        let reach = lab.net.node_ip(&node)?;
        Ok(ConsulAgent {
            node,
            consul: consul.to_path_buf(),
            http_addr: format!("http://{reach}:{}", config::HTTP_PORT),
            grpc_addr: format!("{reach}:{}", config::GRPC_TLS_PORT),
            grpc_ca: lab.pki.ca.clone(),
        })
    }

    /// Starts the agent on the lab's first node, with a gRPC certificate from the lab's CA
    /// and, as its Connect CA, a root meshbench made (see [`super::ca_dir`]), and waits until
    /// it leads and its CA answers. The agent's process is the component.
    pub async fn start(
        lab: &LabContext<'_>,
        consul: &Path,
    ) -> Result<(ConsulAgent, LabComponent), Error> {
        let agent = ConsulAgent::of(lab, consul)?;
        let node = agent.node.clone();
        let bind = lab.net.node_bind_ip(&node)?;
        let reach = lab.net.node_ip(&node)?;
        // The agent's xDS certificate, from the lab's CA, which the sidecars are given to
        // trust (Envoy checks the chain).
        let tls_dir = lab.proxy_dir(&format!("consul-tls{}", crate::PRIVATE_SUFFIX))?;
        let svid = lab
            .pki
            .issue_now("consul", "consul-server", Duration::from_secs(86400))?;
        let (grpc_cert, grpc_key) = svid.write(&tls_dir, "consul-server")?;
        let public = config::agent_config(&AgentConfig {
            node_name: &node,
            bind,
            advertise: reach,
            grpc_cert: &grpc_cert,
            grpc_key: &grpc_key,
            ca: &lab.pki.ca,
            log_file: &lab.proxy_dir("consul")?.join("consul.log"),
        });
        let file = lab.write("consul-agent.json", &pretty(&public))?;
        // The Connect CA's key goes in a file of its own, kept out of the results.
        let ca = connect_ca(&super::ca_dir(lab.pki))?;
        let connect = config::connect_config(config::CLUSTER_ID, &ca);
        let private = tls_dir.join("consul-connect-ca.json");
        write_private(&private, &pretty(&connect))?;
        let args = vec![
            "agent".to_owned(),
            "-dev".to_owned(),
            "-config-file".to_owned(),
            file.display().to_string(),
            "-config-file".to_owned(),
            private.display().to_string(),
        ];
        let component = lab
            .start(
                "consul",
                "control-plane",
                Place::Node(&node),
                false,
                consul,
                args,
                Readiness::Listening(config::HTTP_PORT),
            )
            .await?;
        agent.wait_for_ca(lab).await?;
        Ok((agent, component))
    }

    /// Replaces the Connect CA's root with a new one of the same trust domain (`consul connect
    /// ca set-config`): Consul cross-signs, keeps trusting the old root, and every sidecar
    /// receives a leaf from the new one.
    pub async fn rotate_ca(&self, lab: &LabContext<'_>) -> Result<(), Error> {
        let base = super::ca_dir(lab.pki);
        let mut n = 1;
        let dir = loop {
            let dir = base.with_file_name(format!("consul-ca-rotated-{n}"));
            if !dir.exists() {
                break dir;
            }
            n += 1;
        };
        let ca = connect_ca(&dir)?;
        let file = dir.join("set-config.json");
        write_private(
            &file,
            &pretty(&config::ca_set_config(config::CLUSTER_ID, &ca)),
        )?;
        self.run(
            lab,
            &[
                "connect",
                "ca",
                "set-config",
                "-config-file",
                &file.display().to_string(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Polls until the agent has a leader and its CA has a root: before that, config entries
    /// and leaf certificates are refused.
    async fn wait_for_ca(&self, lab: &LabContext<'_>) -> Result<(), Error> {
        let deadline = Instant::now() + LEADER_TIMEOUT;
        loop {
            match self.run(lab, &["connect", "ca", "get-config"]).await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Writes config entries (`consul config write`), one file each.
    pub async fn write_entries(
        &self,
        lab: &LabContext<'_>,
        name: &str,
        entries: &[Value],
    ) -> Result<(), Error> {
        for (i, entry) in entries.iter().enumerate() {
            let file = lab.write(&format!("consul-{name}-{i}.json"), &pretty(entry))?;
            self.run(lab, &["config", "write", &file.display().to_string()])
                .await?;
        }
        Ok(())
    }

    /// Registers a service and its sidecar (`consul services register`).
    pub async fn register(
        &self,
        lab: &LabContext<'_>,
        id: &str,
        registration: &Value,
    ) -> Result<(), Error> {
        let file = lab.write(&format!("consul-service-{id}.json"), &pretty(registration))?;
        self.run(lab, &["services", "register", &file.display().to_string()])
            .await?;
        Ok(())
    }

    /// The Envoy bootstrap of `service_id`'s sidecar (`consul connect envoy -bootstrap`),
    /// written for the proxy user to read.
    pub async fn envoy_bootstrap(
        &self,
        lab: &LabContext<'_>,
        service_id: &str,
    ) -> Result<PathBuf, Error> {
        let admin = format!("127.0.0.1:{}", config::ENVOY_ADMIN_PORT);
        let ca = self.grpc_ca.display().to_string();
        let bootstrap = self
            .run(
                lab,
                &[
                    "connect",
                    "envoy",
                    "-sidecar-for",
                    service_id,
                    "-bootstrap",
                    "-grpc-addr",
                    &format!("https://{}", self.grpc_addr),
                    "-grpc-ca-file",
                    &ca,
                    "-admin-bind",
                    &admin,
                ],
            )
            .await?;
        lab.write(&format!("{service_id}-envoy-bootstrap.json"), &bootstrap)
    }

    /// Consul's own transparent capture of `pod`'s traffic into its sidecar
    /// (`consul connect redirect-traffic`), run in the pod's network namespace.
    pub async fn redirect_traffic(
        &self,
        lab: &LabContext<'_>,
        pod: &str,
        proxy_id: &str,
    ) -> Result<(), Error> {
        let launch = lab.net.launch_in_pod(pod)?;
        let uid = meshbench_netlab::PROXY_UID.to_string();
        self.run_with(
            &launch,
            &[
                "connect",
                "redirect-traffic",
                "-proxy-id",
                proxy_id,
                "-proxy-uid",
                &uid,
            ],
        )
        .await?;
        Ok(())
    }

    /// Polls `consul troubleshoot proxy` against the sidecar in `pod` until every check of
    /// the path to `upstream` passes: the transparent listener matches it, the cluster has
    /// healthy endpoints, the certificates are valid. Before that, calls to the service fail
    /// or pass by the mesh.
    pub async fn wait_for_upstream(
        &self,
        lab: &LabContext<'_>,
        pod: &str,
        upstream: std::net::IpAddr,
    ) -> Result<(), Error> {
        let launch = lab.net.launch_in_pod(pod)?;
        let admin = format!("127.0.0.1:{}", config::ENVOY_ADMIN_PORT);
        let ip = upstream.to_string();
        let args = [
            "troubleshoot",
            "proxy",
            "-envoy-admin-endpoint",
            &admin,
            "-upstream-ip",
            &ip,
        ];
        let deadline = Instant::now() + UPSTREAM_TIMEOUT;
        loop {
            let checked = self.run_with(&launch, &args).await;
            if checked.as_deref().is_ok_and(troubleshooting_passed) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let mut stderr = match checked {
                    Ok(out) => out,
                    Err(e) => e.to_string(),
                };
                // Which health checks hold endpoints back, as the catalog has them: the
                // troubleshooter names the cluster, not the reason.
                let critical = self
                    .run(lab, &["watch", "-type=checks", "-state=critical"])
                    .await
                    .unwrap_or_else(|e| e.to_string());
                stderr.push_str("\ncritical checks in the catalog: ");
                stderr.push_str(critical.trim());
                return Err(Error::Command {
                    command: format!("consul {} (in pod {pod})", args.join(" ")),
                    status: format!(
                        "the path to {upstream} was not ready after {UPSTREAM_TIMEOUT:?}"
                    ),
                    stderr,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Runs `consul <args>` on the agent's node against the agent; its stdout.
    pub async fn run(&self, lab: &LabContext<'_>, args: &[&str]) -> Result<String, Error> {
        let launch = lab.net.launch_on_node(&self.node)?;
        self.run_with(&launch, args).await
    }

    async fn run_with(
        &self,
        launch: &meshbench_lab::Launch,
        args: &[&str],
    ) -> Result<String, Error> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (program, argv) = launch.wrap(&self.consul, &args);
        let command_line = format!("consul {}", args.join(" "));
        let output = tokio::time::timeout(
            CLI_TIMEOUT,
            tokio::process::Command::new(&program)
                .args(&argv)
                .env("CONSUL_HTTP_ADDR", &self.http_addr)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| Error::Command {
            command: command_line.clone(),
            status: format!("no answer in {CLI_TIMEOUT:?}"),
            stderr: String::new(),
        })?
        .map_err(|source| Error::Io {
            path: PathBuf::from(&program),
            source,
        })?;
        if !output.status.success() {
            return Err(Error::Command {
                command: command_line,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// Whether `consul troubleshoot proxy` passed every check: some lines start with its ` ✓ `
/// and none with its ` ! ` (colours stripped).
fn troubleshooting_passed(output: &str) -> bool {
    let lines: Vec<String> = output.lines().map(strip_colours).collect();
    lines.iter().any(|l| l.starts_with(" ✓ ")) && !lines.iter().any(|l| l.starts_with(" ! "))
}

/// `line` without ANSI colour sequences (`ESC [ ... m`).
fn strip_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The CA kept in `dir` (made there the first time), as PEM: certificate, key.
fn connect_ca(dir: &Path) -> Result<config::ConnectCa, Error> {
    let ca = match CertificateAuthority::load(dir) {
        Ok(ca) => ca,
        Err(_) => CertificateAuthority::init(dir, &config::trust_domain(config::CLUSTER_ID))?,
    };
    let (_, key_file) = CertificateAuthority::files(dir);
    let key = std::fs::read_to_string(&key_file).map_err(|source| Error::Io {
        path: key_file,
        source,
    })?;
    Ok(config::ConnectCa {
        root_cert: ca.cert_pem().to_owned(),
        private_key: key,
    })
}

/// Writes `contents` readable by its owner only (it holds a CA key).
fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn troubleshooting_passes_only_when_every_check_did() {
        let passed = "==> Validation\n\u{1b}[32m ✓ Certificates are valid\u{1b}[0m\n \
                      ✓ Listener for upstream \"10.96.0.3\" found\n";
        assert!(troubleshooting_passed(passed));
        let failed = " ✓ Certificates are valid\n\u{1b}[31m ! No healthy endpoints for \
                      cluster \"x\"\u{1b}[0m\n";
        assert!(!troubleshooting_passed(failed));
        assert!(!troubleshooting_passed(""));
        assert_eq!(strip_colours("\u{1b}[31m ! bad\u{1b}[0m"), " ! bad");
    }
}
