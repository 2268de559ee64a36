//! What a dynamically linked executable needs to start on another root: its interpreter
//! (`PT_INTERP`) and the closure of its `DT_NEEDED` libraries, found as the dynamic loader
//! finds them (the object's RUNPATH, or RPATH without one, then the directories of
//! `/etc/ld.so.conf`, then the default ones). Nothing is executed: the files are read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::Error;

/// The default search directories of glibc's loader on Debian-like systems, after those of
/// `/etc/ld.so.conf`.
const DEFAULT_DIRS: [&str; 6] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// Files an executable loads, by the path the loader asks for.
#[derive(Debug, Default)]
pub struct Closure {
    /// The interpreter and every library, each at the path the loader opens.
    pub files: BTreeSet<PathBuf>,
    /// Whether the executable itself finds a library relative to its own directory (`$ORIGIN`
    /// in its RUNPATH, as LLVM's tools do): in an image it must then sit at its own path.
    pub origin_relative: bool,
}

/// The interpreter and libraries `executable` needs, recursively.
pub fn closure(executable: &Path) -> Result<Closure, Error> {
    let search = loader_dirs();
    let mut closure = Closure::default();
    let mut pending = vec![executable.to_path_buf()];
    let mut seen = BTreeSet::new();
    while let Some(object) = pending.pop() {
        if !seen.insert(object.clone()) {
            continue;
        }
        let data = std::fs::read(&object).map_err(|source| Error::Read(object.clone(), source))?;
        let elf = goblin::elf::Elf::parse(&data).map_err(|e| Error::NotElf {
            path: object.clone(),
            reason: e.to_string(),
        })?;
        if let Some(interpreter) = elf.interpreter {
            closure.files.insert(PathBuf::from(interpreter));
        }
        let origin = object.parent().unwrap_or(Path::new("/"));
        // RUNPATH wins over RPATH, as in the loader.
        let own: Vec<(PathBuf, bool)> = match elf.runpaths.is_empty() {
            true => &elf.rpaths,
            false => &elf.runpaths,
        }
        .iter()
        .flat_map(|list| list.split(':'))
        .map(|dir| {
            let relative = dir.contains("$ORIGIN");
            let dir = PathBuf::from(dir.replace("$ORIGIN", &origin.to_string_lossy()));
            (without_dot_dot(dir), relative)
        })
        .collect();
        let is_executable = object == executable;
        for name in &elf.libraries {
            let (found, relative) = own
                .iter()
                .cloned()
                .chain(search.iter().map(|dir| (dir.clone(), false)))
                .map(|(dir, relative)| (dir.join(name), relative))
                .find(|(candidate, _)| candidate.is_file())
                .ok_or_else(|| Error::MissingLibrary {
                    library: (*name).to_owned(),
                    needed_by: object.clone(),
                })?;
            closure.origin_relative |= is_executable && relative;
            closure.files.insert(found.clone());
            pending.push(found);
        }
    }
    Ok(closure)
}

/// `dir` with its `..` resolved the way the loader's open resolves them (through the real
/// directories, links included), so that the image holds each library at a path without
/// them (`$ORIGIN/../lib` is the usual case); unchanged when it has none or does not exist.
fn without_dot_dot(dir: PathBuf) -> PathBuf {
    if dir
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        dir.canonicalize().unwrap_or(dir)
    } else {
        dir
    }
}

/// The directories `/etc/ld.so.conf` names (following its `include` globs one level deep,
/// which is how Debian uses them), then the defaults.
fn loader_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    read_conf(Path::new("/etc/ld.so.conf"), &mut dirs, 0);
    dirs.extend(DEFAULT_DIRS.iter().map(PathBuf::from));
    dirs
}

fn read_conf(path: &Path, dirs: &mut Vec<PathBuf>, depth: u8) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.strip_prefix("include ") {
            Some(pattern) if depth < 2 => {
                for file in glob_conf(pattern.trim()) {
                    read_conf(&file, dirs, depth + 1);
                }
            }
            Some(_) => {}
            None => dirs.push(PathBuf::from(line)),
        }
    }
}

/// `/etc/ld.so.conf.d/*.conf`-style patterns: a directory and a `*` suffix match.
fn glob_conf(pattern: &str) -> Vec<PathBuf> {
    let path = Path::new(pattern);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return vec![];
    };
    let name = name.to_string_lossy();
    let suffix = name.strip_prefix('*').unwrap_or(&name).to_owned();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(&suffix))
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_needs_libc_and_an_interpreter() {
        let me = std::env::current_exe().unwrap();
        let closure = closure(&me).unwrap();
        let names: Vec<String> = closure
            .files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().any(|n| n.starts_with("libc.so")), "{names:?}");
        assert!(names.iter().any(|n| n.starts_with("ld-linux")), "{names:?}");
    }

    /// rustc finds librustc_driver through `$ORIGIN/../lib`, as LLVM's tools do: the
    /// toolchain that builds this test is the test's subject.
    fn rustc() -> PathBuf {
        let sysroot = std::process::Command::new(std::env::var("RUSTC").unwrap_or("rustc".into()))
            .args(["--print", "sysroot"])
            .output()
            .unwrap();
        let sysroot = String::from_utf8(sysroot.stdout).unwrap();
        Path::new(sysroot.trim()).join("bin/rustc")
    }

    #[test]
    fn a_library_found_beside_the_executable_is_at_a_path_without_dot_dot() {
        let rustc = rustc().canonicalize().unwrap();
        let closure = closure(&rustc).unwrap();
        assert!(closure.origin_relative);
        let driver = closure
            .files
            .iter()
            .find(|p| p.to_string_lossy().contains("librustc_driver"))
            .unwrap_or_else(|| panic!("{:?}", closure.files));
        assert!(
            !driver
                .components()
                .any(|c| c == std::path::Component::ParentDir),
            "{driver:?}"
        );
        assert_eq!(
            driver.parent(),
            rustc
                .parent()
                .unwrap()
                .parent()
                .map(|p| p.join("lib"))
                .as_deref()
        );
        // This test binary has no RUNPATH of its own.
        let me = std::env::current_exe().unwrap();
        assert!(!super::closure(&me).unwrap().origin_relative);
    }

    #[test]
    fn a_file_that_is_not_elf_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let err = closure(&script).unwrap_err().to_string();
        assert!(err.contains("run.sh"), "{err}");
    }
}
