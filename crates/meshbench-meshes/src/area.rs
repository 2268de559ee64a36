//! Where the proxy user reads its configs and keys and writes its outputs. Sidecars and node
//! agents run as [`PROXY_UID`] (the capture leaves that user's traffic alone), and the results
//! directory can be anywhere its owner likes, under a 0700 home or a `mktemp -d` directory,
//! which the proxy user cannot traverse. So a run gets an area of its own under
//! `/run/meshbench` (root's, 0711: traversable, not listable), in which the PKI and each
//! cell's proxy files belong to the proxy user and are private to it. When a cell ends, its
//! outputs (metrics, logs) are copied into the cell's directory in the results; keys never
//! leave the area, and the area is removed with the run.
//!
//! Without root there is no proxy user to hand files to (every component runs as the caller),
//! and the area is a private directory inside the results.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use meshbench_netlab::PROXY_UID;

use crate::Error;

/// Where every run's area is made when running as root.
pub const AREAS_ROOT: &str = "/run/meshbench";

/// A directory of the area whose name ends so is never copied into the results: it holds a
/// workload's key (a certificate agent's published SVID).
pub const PRIVATE_SUFFIX: &str = ".private";

/// A run's area; removed when dropped.
#[derive(Debug)]
pub struct ProxyArea {
    root: PathBuf,
    /// Whether files are handed to the proxy user (running as root).
    hand_over: bool,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl ProxyArea {
    /// A fresh area for a run writing its results to `results_dir`.
    pub fn create(results_dir: &Path) -> Result<Self, Error> {
        static AREAS: AtomicU64 = AtomicU64::new(0);
        if !rustix::process::geteuid().is_root() {
            let root = results_dir.join(".proxy-area");
            if root.exists() {
                std::fs::remove_dir_all(&root).map_err(io(&root))?;
            }
            meshbench_identity::create_private_dir(&root)?;
            return Ok(ProxyArea {
                root,
                hand_over: false,
            });
        }
        let base = Path::new(AREAS_ROOT);
        std::fs::create_dir_all(base).map_err(io(base))?;
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o711)).map_err(io(base))?;
        let root = base.join(format!(
            "run-{}-{}",
            std::process::id(),
            AREAS.fetch_add(1, Ordering::Relaxed)
        ));
        if root.exists() {
            std::fs::remove_dir_all(&root).map_err(io(&root))?;
        }
        std::fs::DirBuilder::new()
            .mode(0o711)
            .create(&root)
            .map_err(io(&root))?;
        Ok(ProxyArea {
            root,
            hand_over: true,
        })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// A directory of the area (`path` relative to it, or already inside it) that only the
    /// proxy user (and root) may enter.
    pub fn private_dir(&self, path: impl AsRef<Path>) -> Result<PathBuf, Error> {
        let dir = self.root.join(path);
        meshbench_identity::create_private_dir(&dir)?;
        self.give(&dir)?;
        Ok(dir)
    }

    /// Makes `path` the proxy user's (when running as root).
    pub fn give(&self, path: &Path) -> Result<(), Error> {
        if self.hand_over {
            std::os::unix::fs::chown(path, Some(PROXY_UID), Some(PROXY_UID)).map_err(io(path))?;
        }
        Ok(())
    }

    /// Writes `contents` to `dir/name` (a directory of the area), owned by the proxy user and
    /// readable by it only.
    pub fn write(&self, dir: &Path, name: &str, contents: &[u8]) -> Result<PathBuf, Error> {
        let path = dir.join(name);
        meshbench_identity::write_secret(&path, contents)?;
        self.give(&path)?;
        Ok(path)
    }
}

impl Drop for ProxyArea {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            tracing::warn!(area = %self.root.display(), error = %e, "proxy area not removed");
        }
    }
}

/// Removes the areas of runs whose process is gone (killed before it could remove its
/// own); returns them. `meshbench lab clean` calls it.
pub fn clean_stale_areas() -> Vec<PathBuf> {
    let mut removed = vec![];
    let Ok(entries) = std::fs::read_dir(AREAS_ROOT) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("run-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let running = Path::new(&format!("/proc/{pid}")).exists();
        if !running && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

/// Copies what the proxies of a cell wrote (every subdirectory of `cell_area` but the
/// private ones, regular files only) into `into`, the cell's directory in the results.
pub fn collect_outputs(cell_area: &Path, into: &Path) -> Result<(), Error> {
    let Ok(entries) = std::fs::read_dir(cell_area) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || name.to_string_lossy().ends_with(PRIVATE_SUFFIX) {
            continue;
        }
        let target = into.join(&name);
        std::fs::create_dir_all(&target).map_err(io(&target))?;
        for file in std::fs::read_dir(entry.path())
            .map_err(io(&entry.path()))?
            .flatten()
        {
            if file.file_type().is_ok_and(|t| t.is_file()) {
                let to = target.join(file.file_name());
                std::fs::copy(file.path(), &to).map_err(io(&to))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_collected_and_private_dirs_are_not() {
        let results = tempfile::tempdir().unwrap();
        let area = ProxyArea::create(results.path()).unwrap();
        let cell = area.private_dir("cells/one").unwrap();
        let metrics = area
            .private_dir("cells/one/server-sidecar.metrics")
            .unwrap();
        area.write(&metrics, "metrics.prom", b"# EOF\n").unwrap();
        let svid = area
            .private_dir(format!("cells/one/server-envoy-svid{PRIVATE_SUFFIX}"))
            .unwrap();
        area.write(&svid, "key.pem", b"secret").unwrap();
        area.write(&cell, "server-envoy.yaml", b"config").unwrap();

        let into = results.path().join("cell");
        collect_outputs(&cell, &into).unwrap();
        let collected = std::fs::read(into.join("server-sidecar.metrics/metrics.prom")).unwrap();
        assert_eq!(collected, b"# EOF\n");
        assert!(!into
            .join(format!("server-envoy-svid{PRIVATE_SUFFIX}"))
            .exists());
        let root = area.path().to_path_buf();
        drop(area);
        assert!(!root.exists());
    }
}
