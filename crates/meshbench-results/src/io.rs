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
    let mut file = fs::File::create(&tmp).map_err(write_err)?;
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
