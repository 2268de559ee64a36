//! The CA service's configuration file (YAML): what `meshbench ca serve --config FILE` reads
//! and the lab writes, and what `ca serve`'s flags are turned into. A relative `dir` is
//! resolved against the file's directory.
//!
//! ```yaml
//! dir: pki
//! listen: 10.244.1.1:15012
//! ttl: 1h
//! handshake_timeout: 10s
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_role::RoleConfig;
use serde::{Deserialize, Serialize};

use crate::{Error, CA_HANDSHAKE_TIMEOUT, DEFAULT_SVID_TTL};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaServerFile {
    /// Directory of the CA (`ca.pem`, `ca.key`).
    pub dir: PathBuf,
    pub listen: SocketAddr,
    /// Lifetime of the SVIDs it signs.
    #[serde(default = "default_ttl", with = "humantime_serde")]
    pub ttl: Duration,
    /// From connecting to a finished TLS handshake (and to a complete request head).
    #[serde(default = "default_handshake_timeout", with = "humantime_serde")]
    pub handshake_timeout: Duration,
}

meshbench_role::serde_defaults! {
    default_ttl: Duration = DEFAULT_SVID_TTL,
    default_handshake_timeout: Duration = CA_HANDSHAKE_TIMEOUT,
}

pub(crate) fn bad(field: &'static str, value: String, reason: impl Into<String>) -> Error {
    Error::InvalidName {
        field,
        value,
        reason: reason.into(),
    }
}

/// Refuses a zero duration among `fields`, naming the field.
pub(crate) fn refuse_zero(fields: &[(&'static str, Duration)]) -> Result<(), Error> {
    match fields.iter().find(|(_, value)| value.is_zero()) {
        Some((field, _)) => Err(bad(field, "0s".into(), "must be longer than 0")),
        None => Ok(()),
    }
}

impl CaServerFile {
    /// The CA in `dir` serving on `listen`, with the default lifetime and timeout.
    pub fn new(dir: PathBuf, listen: SocketAddr) -> Self {
        CaServerFile {
            dir,
            listen,
            ttl: DEFAULT_SVID_TTL,
            handshake_timeout: CA_HANDSHAKE_TIMEOUT,
        }
    }

    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let file = <Self as RoleConfig>::load(path)?;
        file.validate()?;
        Ok(file)
    }

    /// Refuses a zero lifetime or timeout, naming the field.
    pub fn validate(&self) -> Result<(), Error> {
        refuse_zero(&[
            ("ttl", self.ttl),
            ("handshake_timeout", self.handshake_timeout),
        ])
    }
}

impl RoleConfig for CaServerFile {
    const COMMAND: &'static [&'static str] = &["ca", "serve"];

    fn resolve_paths(&mut self, base: &Path) {
        meshbench_role::resolve(&mut self.dir, base);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back_and_bad_fields_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.yaml");
        let mut file = CaServerFile::new("pki".into(), "127.0.0.1:0".parse().unwrap());
        file.ttl = Duration::from_millis(2500);
        std::fs::write(&path, file.to_yaml()).unwrap();
        let read = CaServerFile::load(&path).unwrap();
        assert_eq!(read.dir, dir.path().join("pki"));
        assert_eq!(read.ttl, file.ttl);

        std::fs::write(&path, "dir: pki\nlisten: 127.0.0.1:0\nttl: 0s\n").unwrap();
        let error = CaServerFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("ttl"), "{error}");
        std::fs::write(&path, "dir: pki\nlisten: 127.0.0.1:0\nport: 1\n").unwrap();
        let error = CaServerFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("port"), "{error}");
    }
}
