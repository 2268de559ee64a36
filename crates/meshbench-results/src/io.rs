//! Reading and atomically writing result documents, so a crash or Ctrl-C never leaves a
//! half-written `results.json` behind.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid meshbench document: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// Serializes `value` as pretty JSON next to `path` and renames it into place: readers see
/// either the previous document or the new one, never a torn write.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let write_err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    let json = serde_json::to_vec_pretty(value).map_err(|e| write_err(e.into()))?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = dir {
        fs::create_dir_all(dir).map_err(write_err)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    // The temporary file is made anew, never opened through what is there: a link planted
    // at its name (by anyone who can write the directory) is removed, not followed, and
    // O_EXCL refuses one planted again in between, so nothing outside is truncated.
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(write_err(e)),
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(write_err)?;
    file.write_all(&json).map_err(write_err)?;
    file.write_all(b"\n").map_err(write_err)?;
    file.sync_all().map_err(write_err)?;
    fs::rename(&tmp, path).map_err(write_err)
}

pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let bytes = fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| Error::Parse {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_planted_at_the_temporary_name_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let path = dir.path().join("results.json");
        std::os::unix::fs::symlink(&victim, dir.path().join("results.json.tmp")).unwrap();
        write_json_atomic(&path, &serde_json::json!({"a": 1})).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        let written: serde_json::Value = read_json(&path).unwrap();
        assert_eq!(written["a"], 1);
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
