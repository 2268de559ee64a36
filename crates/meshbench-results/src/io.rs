//! Reading and atomically writing result documents, so a crash or Ctrl-C never leaves a
//! half-written `results.json` behind; and the gzip-compressed copies a repository keeps
//! (`meshbench publish keep`), read back with a cap on what they may expand to.

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
    #[error(
        "{path} expands to more than {limit} bytes: not a meshbench document kept by \
         `meshbench publish keep`"
    )]
    TooLarge { path: PathBuf, limit: u64 },
}

/// The most a compressed document may expand to (1 GiB): a small file that expands without
/// end (a gzip bomb) is refused rather than filling memory. A run's results are tens of MiB.
pub const MAX_EXPANDED_BYTES: u64 = 1 << 30;

/// gzip's first two bytes.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Serializes `value` as pretty JSON next to `path` and renames it into place: readers see
/// either the previous document or the new one, never a torn write.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let write_err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut json = serde_json::to_vec_pretty(value).map_err(|e| write_err(e.into()))?;
    json.push(b'\n');
    write_bytes_atomic(path, &json)
}

/// Writes `bytes` to `path` through a temporary file made anew (never through a link planted
/// at its name) and renamed into place, as [`write_json_atomic`] does.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let write_err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
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
    file.write_all(bytes).map_err(write_err)?;
    file.sync_all().map_err(write_err)?;
    fs::rename(&tmp, path).map_err(write_err)
}

pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let bytes = fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &bytes)
}

fn parse<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|source| Error::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a document plain or gzip-compressed (told apart by gzip's magic bytes, not the
/// name), expanding at most [`MAX_EXPANDED_BYTES`].
pub fn read_json_any<T: DeserializeOwned>(path: &Path) -> Result<T, Error> {
    read_json_limited(path, MAX_EXPANDED_BYTES)
}

fn read_json_limited<T: DeserializeOwned>(path: &Path, limit: u64) -> Result<T, Error> {
    use std::io::Read;
    let read_err = |source| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    let bytes = fs::read(path).map_err(read_err)?;
    if !bytes.starts_with(&GZIP_MAGIC) {
        return parse(path, &bytes);
    }
    let mut expanded = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(limit + 1)
        .read_to_end(&mut expanded)
        .map_err(read_err)?;
    if expanded.len() as u64 > limit {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    parse(path, &expanded)
}

/// Writes `value` as compact JSON, gzip-compressed at the best ratio, atomically: the copy of
/// a run's results a repository keeps (a tenth of the pretty document or less).
pub fn write_json_gz_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let write_err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    let json = serde_json::to_vec(value).map_err(|e| write_err(e.into()))?;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&json).map_err(write_err)?;
    let compressed = encoder.finish().map_err(write_err)?;
    write_bytes_atomic(path, &compressed)
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

    #[test]
    fn a_kept_copy_reads_back_as_the_document_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let value = serde_json::json!({"cells": [1, 2, 3], "name": "E1"});
        let plain = dir.path().join("results.json");
        let kept = dir.path().join("run-1.json.gz");
        write_json_atomic(&plain, &value).unwrap();
        write_json_gz_atomic(&kept, &value).unwrap();
        assert!(std::fs::read(&kept).unwrap().starts_with(&GZIP_MAGIC));
        for path in [&plain, &kept] {
            let read: serde_json::Value = read_json_any(path).unwrap();
            assert_eq!(read, value);
        }
    }

    #[test]
    fn a_compressed_file_that_expands_past_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bomb.json.gz");
        // A JSON string of 64 KiB of spaces compresses to a few hundred bytes.
        let value = serde_json::Value::String(" ".repeat(64 << 10));
        write_json_gz_atomic(&path, &value).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() < 1024);
        let err = read_json_limited::<serde_json::Value>(&path, 4096).unwrap_err();
        assert!(matches!(err, Error::TooLarge { limit: 4096, .. }), "{err}");
        let truncated = dir.path().join("cut.json.gz");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
        assert!(read_json_any::<serde_json::Value>(&truncated).is_err());
    }

    proptest::proptest! {
        /// Whatever a kept file holds (gzip's magic followed by anything, or anything at all),
        /// reading it gives a document or an error, never a panic.
        #[test]
        fn any_bytes_read_as_a_document_or_an_error(
            gzip in proptest::bool::ANY,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("kept.json.gz");
            let mut bytes = if gzip { GZIP_MAGIC.to_vec() } else { vec![] };
            bytes.extend(body);
            std::fs::write(&path, bytes).unwrap();
            let _ = read_json_limited::<serde_json::Value>(&path, 4096);
        }
    }
}
