//! An SVID published as files for a proxy that reads its certificate from disk (Envoy's
//! `watched_directory`), as istio-agent and Kubernetes secret volumes do it: each version goes
//! into a directory of its own, then one rename swaps the `..data` link to it, so a reader
//! never sees a certificate without its key. `cert.pem` and `key.pem` link through `..data`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Error, SvidPem};

pub const PUBLISHED_CERT: &str = "cert.pem";
pub const PUBLISHED_KEY: &str = "key.pem";
const DATA_LINK: &str = "..data";

/// A directory an SVID is published into.
#[derive(Debug)]
pub struct PublishedSvid {
    dir: PathBuf,
    versions: AtomicU64,
}

impl PublishedSvid {
    pub fn new(dir: &Path) -> Self {
        PublishedSvid {
            dir: dir.to_owned(),
            versions: AtomicU64::new(0),
        }
    }

    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(PUBLISHED_CERT)
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.join(PUBLISHED_KEY)
    }

    /// Publishes `svid` as the current version; the previous version's files are removed.
    pub fn publish(&self, svid: &SvidPem) -> Result<(), Error> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| Error::Write { path, source }
        };
        let version = format!("..v{}", self.versions.fetch_add(1, Ordering::Relaxed));
        let version_dir = self.dir.join(&version);
        crate::files::create_private_dir(&version_dir)?;
        let cert = version_dir.join(PUBLISHED_CERT);
        std::fs::write(&cert, &svid.cert).map_err(io(&cert))?;
        crate::files::write_secret(&version_dir.join(PUBLISHED_KEY), svid.key.as_bytes())?;
        let previous = std::fs::read_link(self.dir.join(DATA_LINK)).ok();
        let staged = self.dir.join("..data.tmp");
        let _ = std::fs::remove_file(&staged);
        std::os::unix::fs::symlink(&version, &staged).map_err(io(&staged))?;
        let data = self.dir.join(DATA_LINK);
        std::fs::rename(&staged, &data).map_err(io(&data))?;
        for name in [PUBLISHED_CERT, PUBLISHED_KEY] {
            let link = self.dir.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new(DATA_LINK).join(name), &link)
                    .map_err(io(&link))?;
            }
        }
        if let Some(old) = previous.filter(|old| old.as_os_str() != version.as_str()) {
            let _ = std::fs::remove_dir_all(self.dir.join(old));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_publication_replaces_both_files_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let published = PublishedSvid::new(dir.path());
        for n in 0..3 {
            let svid = SvidPem {
                cert: format!("cert {n}"),
                key: format!("key {n}"),
            };
            published.publish(&svid).unwrap();
            assert_eq!(
                std::fs::read_to_string(published.cert_path()).unwrap(),
                svid.cert
            );
            assert_eq!(
                std::fs::read_to_string(published.key_path()).unwrap(),
                svid.key
            );
        }
        // Only the current version's directory is left.
        let versions = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("..v"))
            .count();
        assert_eq!(versions, 1);
    }
}
