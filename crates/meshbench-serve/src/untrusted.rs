//! The results directory as untrusted ground. Anyone who can write there (another account, a
//! container with the directory mounted) may plant a symbolic link, a FIFO or a huge file
//! where a run's files should be, and the server runs as root. So every read below the results
//! root walks the path one component at a time with `openat(O_NOFOLLOW)`: a link anywhere under
//! the root is refused, never followed; only regular files are read (opened non-blocking, so a
//! FIFO cannot hang a worker), and at most [`READ_LIMIT`] bytes of them. The root itself is the
//! operator's choice and is followed.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

/// The most the server reads of any one file under the results directory (a results.json of
/// the largest built-in profile is a few MiB).
pub const READ_LIMIT: u64 = 256 << 20;

/// Why a file under the results directory was not read.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{0}: not found")]
    Missing(String),
    #[error("{0}: a symbolic link; links under the results directory are refused")]
    Link(String),
    #[error("{0}: not a regular file")]
    NotAFile(String),
    #[error("{0}: larger than {READ_LIMIT} bytes")]
    TooLarge(String),
    #[error("{0}: not a plain relative path")]
    BadPath(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Opens `relative` (a path of plain names) under `root`, following no link below the root;
/// the result is a regular file.
fn open(root: &Path, relative: &str) -> Result<std::fs::File, Refused> {
    let names: Vec<&std::ffi::OsStr> = Path::new(relative)
        .components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(Refused::BadPath(relative.to_owned())),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, dirs)) = names.split_last() else {
        return Err(Refused::BadPath(relative.to_owned()));
    };
    let mut dir: OwnedFd = rustix::fs::open(
        root,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Refused::Io {
        path: root.display().to_string(),
        source: e.into(),
    })?;
    for name in dirs {
        dir = rustix::fs::openat(
            &dir,
            *name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| refusal(&dir, name, relative, e))?;
    }
    let file = rustix::fs::openat(
        &dir,
        *last,
        OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| refusal(&dir, last, relative, e))?;
    let stat = rustix::fs::fstat(&file).map_err(|e| Refused::Io {
        path: relative.to_owned(),
        source: e.into(),
    })?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(Refused::NotAFile(relative.to_owned()));
    }
    Ok(std::fs::File::from(file))
}

/// Why `name` in `dir` could not be opened: a link is told apart from the other failures by
/// looking at it without following it (O_NOFOLLOW says ELOOP for a file, ENOTDIR with
/// O_DIRECTORY).
fn refusal(dir: &OwnedFd, name: &std::ffi::OsStr, relative: &str, errno: Errno) -> Refused {
    let link = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink);
    match errno {
        _ if link => Refused::Link(relative.to_owned()),
        Errno::NOENT | Errno::NOTDIR => Refused::Missing(relative.to_owned()),
        other => Refused::Io {
            path: relative.to_owned(),
            source: other.into(),
        },
    }
}

/// The whole of a regular file under `root`, refused past [`READ_LIMIT`].
pub fn read(root: &Path, relative: &str) -> Result<Vec<u8>, Refused> {
    let file = open(root, relative)?;
    let mut body = Vec::new();
    file.take(READ_LIMIT + 1)
        .read_to_end(&mut body)
        .map_err(|source| Refused::Io {
            path: relative.to_owned(),
            source,
        })?;
    if body.len() as u64 > READ_LIMIT {
        return Err(Refused::TooLarge(relative.to_owned()));
    }
    Ok(body)
}

/// A JSON document under `root`.
pub fn read_json<T: serde::de::DeserializeOwned>(root: &Path, relative: &str) -> Result<T, String> {
    let body = read(root, relative).map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| format!("{relative}: {e}"))
}

/// Whether `relative` names something under `root` (a link counts: it is listed, and refused
/// when read).
pub fn exists(root: &Path, relative: &str) -> bool {
    !matches!(
        open(root, relative),
        Err(Refused::Missing(_) | Refused::BadPath(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_and_climbing_paths_are_refused_and_plain_files_read() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root_path = root.path();
        std::fs::create_dir(root_path.join("run")).unwrap();
        std::fs::write(root_path.join("run/report.md"), "ok").unwrap();
        std::fs::write(outside.path().join("secret"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root_path.join("run/link.md"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), root_path.join("linked-run")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root_path.join("run/fifo.json"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();

        assert_eq!(read(root_path, "run/report.md").unwrap(), b"ok");
        assert!(matches!(
            read(root_path, "run/link.md"),
            Err(Refused::Link(_))
        ));
        assert!(matches!(
            read(root_path, "linked-run/secret"),
            Err(Refused::Link(_))
        ));
        assert!(matches!(
            read(root_path, "run/fifo.json"),
            Err(Refused::NotAFile(_))
        ));
        assert!(matches!(read(root_path, "run"), Err(Refused::NotAFile(_))));
        assert!(matches!(
            read(root_path, "run/none"),
            Err(Refused::Missing(_))
        ));
        for bad in ["../x", "/etc/passwd", "run/../run/report.md", ""] {
            assert!(
                matches!(read(root_path, bad), Err(Refused::BadPath(_))),
                "{bad}"
            );
        }
        assert!(exists(root_path, "run/link.md"));
        assert!(!exists(root_path, "run/none"));
    }
}
