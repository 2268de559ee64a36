//! Writing secrets to disk so that no other user can read them at any moment: a key file is
//! created with mode 0600 before its first byte is written (a temporary file, renamed into
//! place, so a reader never sees half a key either), in directories created 0700.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;

/// Creates `dir` with mode 0700 (an existing directory keeps its mode). Missing parents are
/// created as usual: they hold no secret, and other users (a proxy's) may need to pass them.
pub fn create_private_dir(dir: &Path) -> Result<(), Error> {
    let err = |source| Error::Write {
        path: dir.to_path_buf(),
        source,
    };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        created => created.map_err(err),
    }
}

/// Writes `contents` to `path` readable and writable by its owner only, from the first byte:
/// into a new 0600 file beside it, then renamed over `path`. Missing parent directories are
/// created 0700.
pub fn write_secret(path: &Path, contents: &[u8]) -> Result<(), Error> {
    static STAGED: AtomicU64 = AtomicU64::new(0);
    let err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = dir {
        create_private_dir(dir)?;
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let staged = path.with_file_name(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        STAGED.fetch_add(1, Ordering::Relaxed)
    ));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&staged)
        .and_then(|mut file| {
            file.write_all(contents)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&staged, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    written.map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_secret_is_private_from_its_first_byte_and_replaces_an_open_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new/dir/key.pem");
        write_secret(&path, b"first").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        // A world-readable file in its place is replaced, not written into.
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_secret(&path, b"second").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let leftovers = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "no staged file is left behind");
    }
}
