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
        let own: Vec<PathBuf> = match elf.runpaths.is_empty() {
            true => &elf.rpaths,
            false => &elf.runpaths,
        }
        .iter()
        .flat_map(|list| list.split(':'))
        .map(|dir| PathBuf::from(dir.replace("$ORIGIN", &origin.to_string_lossy())))
        .collect();
        for name in &elf.libraries {
            let found = own
                .iter()
                .chain(&search)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
                .ok_or_else(|| Error::MissingLibrary {
                    library: (*name).to_owned(),
                    needed_by: object.clone(),
                })?;
            closure.files.insert(found.clone());
            pending.push(found);
        }
    }
    Ok(closure)
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

    #[test]
    fn a_file_that_is_not_elf_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let err = closure(&script).unwrap_err().to_string();
        assert!(err.contains("run.sh"), "{err}");
    }
}
