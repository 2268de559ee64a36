//! The configuration of `meshbench harness linkerd --config FILE` (YAML). Tokens live in
//! files of their own, never in the configuration; relative paths are resolved against the
//! file's directory.
//!
//! ```yaml
//! dir: pki                 # meshbench's CA (ca.pem, ca.key)
//! listen: 127.0.0.1:0      # loopback only
//! ttl: 24h
//! workloads:
//!   - identity: spiffe://cluster.local/ns/bench/sa/client
//!     token_file: client.token
//! services:
//!   - address: 10.200.0.2:8080
//!     name: server.bench.svc.cluster.local
//!     endpoint: 10.200.0.2:8080
//!     identity: spiffe://cluster.local/ns/bench/sa/server
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_identity::SpiffeId;
use meshbench_role::RoleConfig;
use serde::{Deserialize, Serialize};

use crate::{Error, HarnessOptions, Service, Workload};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub identity: String,
    /// A file holding the token (surrounding whitespace is not part of it).
    pub token_file: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceFile {
    /// The address clients connect to (the proxies' original destination).
    pub address: SocketAddr,
    /// `<name>.<ns>.svc.<cluster domain>`.
    pub name: String,
    pub endpoint: SocketAddr,
    /// The SPIFFE ID of the endpoint's workload; its proxy presents the Linkerd name of it.
    pub identity: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkerdHarnessFile {
    /// Directory of the CA (`ca.pem`, `ca.key`).
    pub dir: PathBuf,
    pub listen: SocketAddr,
    /// The lifetime of the certificates it signs.
    #[serde(default = "default_ttl", with = "humantime_serde")]
    pub ttl: Duration,
    pub workloads: Vec<WorkloadFile>,
    #[serde(default)]
    pub services: Vec<ServiceFile>,
}

meshbench_role::serde_defaults! {
    default_ttl: Duration = meshbench_identity::DEFAULT_SVID_TTL,
}

fn invalid(field: &'static str, value: impl ToString, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn account_id(field: &'static str, text: &str) -> Result<SpiffeId, Error> {
    let id = SpiffeId::parse(text)?;
    if crate::linkerd_name(&id).is_none() {
        return Err(invalid(
            field,
            text,
            "not a service account's ID (/ns/<ns>/sa/<sa>)",
        ));
    }
    Ok(id)
}

impl LinkerdHarnessFile {
    /// Reads and checks a config file, and the token files it names.
    pub fn load(path: &Path) -> Result<(Self, HarnessOptions), Error> {
        let file = <Self as RoleConfig>::load(path)?;
        let options = file.options()?;
        Ok((file, options))
    }

    /// What the harness answers, the tokens read; an invalid field is named.
    pub fn options(&self) -> Result<HarnessOptions, Error> {
        if self.ttl.is_zero() {
            return Err(invalid("ttl", "0s", "must be longer than 0"));
        }
        if self.workloads.is_empty() {
            return Err(invalid("workloads", "[]", "name at least one workload"));
        }
        let workloads = self
            .workloads
            .iter()
            .map(|w| {
                Ok(Workload {
                    identity: account_id("workloads.identity", &w.identity)?,
                    token: meshbench_identity::read_token_file(
                        &w.token_file,
                        "workloads.token_file",
                    )?,
                })
            })
            .collect::<Result<_, Error>>()?;
        let services = self
            .services
            .iter()
            .map(|s| {
                if s.name.split('.').count() < 3 || s.name.contains(':') {
                    return Err(invalid(
                        "services.name",
                        &s.name,
                        "give <name>.<ns>.svc.<cluster domain>, without a port",
                    ));
                }
                Ok(Service {
                    address: s.address,
                    name: s.name.clone(),
                    endpoint: s.endpoint,
                    identity: account_id("services.identity", &s.identity)?,
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(HarnessOptions {
            workloads,
            services,
            ttl: self.ttl,
        })
    }
}

impl RoleConfig for LinkerdHarnessFile {
    const COMMAND: &'static [&'static str] = &["harness", "linkerd"];

    fn resolve_paths(&mut self, base: &Path) {
        meshbench_role::resolve(&mut self.dir, base);
        for workload in &mut self.workloads {
            meshbench_role::resolve(&mut workload.token_file, base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back_and_bad_fields_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("harness.yaml");
        std::fs::write(dir.path().join("client.token"), "s3cret\n").unwrap();
        let file = LinkerdHarnessFile {
            dir: "pki".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            ttl: Duration::from_secs(3600),
            workloads: vec![WorkloadFile {
                identity: "spiffe://cluster.local/ns/bench/sa/client".into(),
                token_file: "client.token".into(),
            }],
            services: vec![ServiceFile {
                address: "10.200.0.2:8080".parse().unwrap(),
                name: "server.bench.svc.cluster.local".into(),
                endpoint: "10.200.0.2:8080".parse().unwrap(),
                identity: "spiffe://cluster.local/ns/bench/sa/server".into(),
            }],
        };
        std::fs::write(&path, file.to_yaml()).unwrap();
        let (read, options) = LinkerdHarnessFile::load(&path).unwrap();
        assert_eq!(read.dir, dir.path().join("pki"));
        assert_eq!(options.workloads[0].token, "s3cret");
        assert!(!format!("{options:?}").contains("s3cret"));

        let bad = |yaml: &str| {
            std::fs::write(&path, yaml).unwrap();
            LinkerdHarnessFile::load(&path).err().unwrap().to_string()
        };
        let base = "dir: pki\nlisten: 127.0.0.1:0\n";
        assert!(bad(&format!("{base}workloads: []\n")).contains("workloads"));
        let e = bad(&format!(
            "{base}workloads: [{{identity: 'spiffe://cluster.local/x', token_file: client.token}}]\n"
        ));
        assert!(e.contains("spiffe://cluster.local/x"), "{e}");
        let e = bad(&format!(
            "{base}workloads: [{{identity: 'spiffe://cluster.local/ns/a/sa/b', token_file: client.token}}]\nservices: [{{address: '10.0.0.1:80', name: 'web:80', endpoint: '10.0.0.1:80', identity: 'spiffe://cluster.local/ns/a/sa/b'}}]\n"
        ));
        assert!(e.contains("web:80"), "{e}");
        std::fs::write(dir.path().join("empty.token"), "\n").unwrap();
        let e = bad(&format!(
            "{base}workloads: [{{identity: 'spiffe://cluster.local/ns/a/sa/b', token_file: empty.token}}]\n"
        ));
        assert!(e.contains("empty.token"), "{e}");
    }
}
