//! The certificate agent's configuration file (YAML): what `meshbench proxy cert-agent
//! --config FILE` reads and the lab writes beside each Envoy, and what the role's flags are
//! turned into. Relative paths are resolved against the file's directory.
//!
//! ```yaml
//! cert: pki/app.client.pem
//! key: pki/app.client.key
//! ca: pki/ca.pem
//! ca_endpoint: 10.244.1.1:15012
//! dir: client-envoy-svid.private
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meshbench_role::RoleConfig;
use serde::{Deserialize, Serialize};

use crate::{Error, DEFAULT_ROTATE_FRACTION};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertAgentFile {
    /// The workload's current SVID (leaf first) and its key.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Trust bundle of the CA service.
    pub ca: PathBuf,
    /// The CA service that renews the SVID.
    pub ca_endpoint: SocketAddr,
    /// Renew when this fraction of the SVID's remaining lifetime has passed.
    #[serde(default = "default_rotate_at")]
    pub rotate_at: f64,
    /// Where `cert.pem` and `key.pem` are published (links through `..data`).
    pub dir: PathBuf,
}

fn default_rotate_at() -> f64 {
    DEFAULT_ROTATE_FRACTION
}

impl CertAgentFile {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let file = <Self as RoleConfig>::load(path)?;
        file.validate()?;
        Ok(file)
    }

    /// Refuses a renewal point that is not a fraction strictly between 0 and 1.
    pub fn validate(&self) -> Result<(), Error> {
        if !(self.rotate_at > 0.0 && self.rotate_at < 1.0) {
            return Err(Error::InvalidName {
                field: "rotate_at",
                value: self.rotate_at.to_string(),
                reason: "must be a fraction between 0 and 1".into(),
            });
        }
        Ok(())
    }
}

impl RoleConfig for CertAgentFile {
    const COMMAND: &'static [&'static str] = &["proxy", "cert-agent"];

    fn resolve_paths(&mut self, base: &Path) {
        for p in [&mut self.cert, &mut self.key, &mut self.ca, &mut self.dir] {
            meshbench_role::resolve(p, base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back_and_a_bad_fraction_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        let mut file = CertAgentFile {
            cert: "a.pem".into(),
            key: "a.key".into(),
            ca: "/abs/ca.pem".into(),
            ca_endpoint: "127.0.0.1:15012".parse().unwrap(),
            rotate_at: 0.5,
            dir: "out".into(),
        };
        std::fs::write(&path, file.to_yaml()).unwrap();
        let read = CertAgentFile::load(&path).unwrap();
        assert_eq!(read.cert, dir.path().join("a.pem"));
        assert_eq!(read.ca, Path::new("/abs/ca.pem"));
        file.rotate_at = 1.5;
        std::fs::write(&path, file.to_yaml()).unwrap();
        let error = CertAgentFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("rotate_at"), "{error}");
    }
}
