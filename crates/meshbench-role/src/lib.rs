//! How meshbench's roles are started: from a typed config, never from argv written by a
//! library. Each role (`load`, `workload`, `proxy sidecar`, `proxy node-agent`,
//! `proxy cert-agent`, `ca serve`) owns a serde struct in its own crate and implements
//! [`RoleConfig`] for it. Whoever starts the role (the lab, the bench, later a Kubernetes
//! manifest) builds the struct, writes it as YAML and runs [`RoleConfig::command_line`]; the
//! binary's subcommand reads the same struct back with `--config FILE`, and its human flags
//! are mapped onto that struct too. So the orchestrator and the role share a type Cargo can
//! see, instead of flag names that must match a clap struct in the binary.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// serde's message names the field and the value at fault.
    #[error("config file {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// An error that says whose fault it is: the user's input (a flag, a file, a field: the
/// process exits 2 and the message names what to fix) or the machine (exit 1). Every
/// library's error type implements it, so the binary asks one question of each cause.
pub trait InputFault: std::error::Error + 'static {
    fn is_bad_input(&self) -> bool;
}

/// A config file that cannot be read or does not parse is always the input's fault.
impl InputFault for Error {
    fn is_bad_input(&self) -> bool {
        true
    }
}

/// The functions serde's `#[serde(default = "name")]` calls (it takes a function's name, not
/// a value), one line each: `serde_defaults! { yes: bool = true, port: u16 = 8080 }`.
#[macro_export]
macro_rules! serde_defaults {
    ($($name:ident: $ty:ty = $value:expr),* $(,)?) => {
        $(fn $name() -> $ty {
            $value
        })*
    };
}

/// A role's config file: what the role's process reads with `--config FILE`.
pub trait RoleConfig: Serialize + DeserializeOwned {
    /// The subcommand that reads this config: `meshbench <COMMAND...> --config FILE`.
    const COMMAND: &'static [&'static str];

    /// Makes relative paths in the file relative to the file's directory, so a config can
    /// travel with the files it names.
    fn resolve_paths(&mut self, _base: &Path) {}

    fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).expect("a role config serializes to YAML")
    }

    /// Reads and parses a config file; an error names the file, and serde's names the field.
    fn load(path: &Path) -> Result<Self, Error> {
        let mut config: Self = read_yaml(path)?;
        if let Some(base) = path.parent() {
            config.resolve_paths(base);
        }
        Ok(config)
    }

    /// The arguments that start this role from `config_file` (the binary not included).
    fn command_line(config_file: &Path) -> Vec<String> {
        Self::COMMAND
            .iter()
            .map(|s| (*s).to_owned())
            .chain(["--config".to_owned(), config_file.display().to_string()])
            .collect()
    }
}

/// A YAML file parsed into `T`; an error names the file, and serde's names the field.
pub fn read_yaml<T: DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_yaml_ng::from_str(&text).map_err(|e| Error::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Resolves `path` against `base` when it is relative.
pub fn resolve(path: &mut PathBuf, base: &Path) {
    if path.is_relative() {
        *path = base.join(&*path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Probe {
        file: PathBuf,
        count: u32,
    }

    impl RoleConfig for Probe {
        const COMMAND: &'static [&'static str] = &["probe", "run"];
        fn resolve_paths(&mut self, base: &Path) {
            resolve(&mut self.file, base);
        }
    }

    #[test]
    fn a_config_round_trips_and_its_relative_paths_follow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.yaml");
        let probe = Probe {
            file: "data.bin".into(),
            count: 3,
        };
        std::fs::write(&path, probe.to_yaml()).unwrap();
        let read = Probe::load(&path).unwrap();
        assert_eq!(read.file, dir.path().join("data.bin"));
        assert_eq!(read.count, 3);
        assert_eq!(
            Probe::command_line(&path),
            ["probe", "run", "--config", &path.display().to_string()]
        );
    }

    #[test]
    fn a_bad_field_is_named_with_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.yaml");
        std::fs::write(&path, "file: x\ncount: -1\n").unwrap();
        let err = Probe::load(&path).unwrap_err().to_string();
        assert!(err.contains("probe.yaml") && err.contains("count"), "{err}");
        std::fs::write(&path, "file: x\ncount: 1\ncolour: red\n").unwrap();
        let err = Probe::load(&path).unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
        let missing = Probe::load(&dir.path().join("nope.yaml")).unwrap_err();
        assert!(matches!(missing, Error::Read { .. }));
    }
}
