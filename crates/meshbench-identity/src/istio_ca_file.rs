//! The configuration of `meshbench ca istio --config FILE` (YAML): meshbench's CA answering
//! Istio's certificate API. Tokens live in files of their own, never in the configuration;
//! relative paths are resolved against the file's directory.
//!
//! ```yaml
//! dir: pki
//! listen: 127.0.0.1:0
//! ttl: 24h
//! callers:
//!   - identity: spiffe://cluster.local/ns/bench/sa/server
//!     token_file: server.token
//! ip_addresses: [127.0.0.1]
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_role::RoleConfig;
use serde::{Deserialize, Serialize};

use crate::ca_server_file::{bad, refuse_zero};
use crate::istio_ca::{read_token_file, IstioCaCaller, IstioCaOptions};
use crate::spiffe::SpiffeId;
use crate::{Error, CA_HANDSHAKE_TIMEOUT, DEFAULT_SVID_TTL};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IstioCaCallerFile {
    /// The SPIFFE ID signed for whoever presents the token.
    pub identity: String,
    /// A file holding the bearer token (one line; surrounding whitespace is not part of it).
    pub token_file: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IstioCaFile {
    /// Directory of the CA (`ca.pem`, `ca.key`).
    pub dir: PathBuf,
    pub listen: SocketAddr,
    /// The longest lifetime it signs.
    #[serde(default = "default_ttl", with = "humantime_serde")]
    pub ttl: Duration,
    #[serde(default = "default_handshake_timeout", with = "humantime_serde")]
    pub handshake_timeout: Duration,
    pub callers: Vec<IstioCaCallerFile>,
    /// Names for the serving certificate beside istiod's own DNS name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_addresses: Vec<IpAddr>,
}

meshbench_role::serde_defaults! {
    default_ttl: Duration = DEFAULT_SVID_TTL,
    default_handshake_timeout: Duration = CA_HANDSHAKE_TIMEOUT,
}

impl IstioCaFile {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let file = <Self as RoleConfig>::load(path)?;
        file.validate()?;
        Ok(file)
    }

    /// Refuses a zero lifetime or timeout, no callers, or an identity that is not a SPIFFE
    /// ID, naming the field.
    pub fn validate(&self) -> Result<(), Error> {
        refuse_zero(&[
            ("ttl", self.ttl),
            ("handshake_timeout", self.handshake_timeout),
        ])?;
        if self.callers.is_empty() {
            return Err(bad("callers", "[]".into(), "name at least one caller"));
        }
        for caller in &self.callers {
            SpiffeId::parse(&caller.identity)?;
        }
        Ok(())
    }

    /// The callers with their tokens read.
    pub fn read_callers(&self) -> Result<Vec<IstioCaCaller>, Error> {
        self.callers
            .iter()
            .map(|caller| {
                Ok(IstioCaCaller {
                    token: read_token_file(&caller.token_file, "callers.token_file")?,
                    identity: SpiffeId::parse(&caller.identity)?,
                })
            })
            .collect()
    }

    pub fn options(&self) -> IstioCaOptions {
        IstioCaOptions {
            max_ttl: self.ttl,
            handshake_timeout: self.handshake_timeout,
            dns_names: self.dns_names.clone(),
            ip_addresses: self.ip_addresses.clone(),
        }
    }
}

impl RoleConfig for IstioCaFile {
    const COMMAND: &'static [&'static str] = &["ca", "istio"];

    fn resolve_paths(&mut self, base: &Path) {
        meshbench_role::resolve(&mut self.dir, base);
        for caller in &mut self.callers {
            meshbench_role::resolve(&mut caller.token_file, base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back_and_bad_fields_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("istio-ca.yaml");
        std::fs::write(dir.path().join("server.token"), "s3cret\n").unwrap();
        let file = IstioCaFile {
            dir: "pki".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            ttl: Duration::from_secs(3600),
            handshake_timeout: CA_HANDSHAKE_TIMEOUT,
            callers: vec![IstioCaCallerFile {
                identity: "spiffe://cluster.local/ns/bench/sa/server".into(),
                token_file: "server.token".into(),
            }],
            dns_names: vec![],
            ip_addresses: vec!["127.0.0.1".parse().unwrap()],
        };
        std::fs::write(&path, file.to_yaml()).unwrap();
        let read = IstioCaFile::load(&path).unwrap();
        assert_eq!(read.dir, dir.path().join("pki"));
        let callers = read.read_callers().unwrap();
        assert_eq!(callers[0].token, "s3cret");
        assert!(!format!("{callers:?}").contains("s3cret"));

        std::fs::write(&path, "dir: pki\nlisten: 127.0.0.1:0\ncallers: []\n").unwrap();
        let error = IstioCaFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("callers"), "{error}");
        std::fs::write(
            &path,
            "dir: pki\nlisten: 127.0.0.1:0\ncallers: [{identity: nope, token_file: t}]\n",
        )
        .unwrap();
        let error = IstioCaFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("nope"), "{error}");
        std::fs::write(dir.path().join("empty.token"), "\n").unwrap();
        std::fs::write(
            &path,
            "dir: pki\nlisten: 127.0.0.1:0\ncallers: [{identity: 'spiffe://cluster.local/ns/a/sa/b', token_file: empty.token}]\n",
        )
        .unwrap();
        let error = IstioCaFile::load(&path)
            .unwrap()
            .read_callers()
            .unwrap_err()
            .to_string();
        assert!(error.contains("empty.token"), "{error}");
    }
}
