//! Credentials for a registry as Docker's tools keep them: given on the command line, or in
//! the Docker config (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`): a
//! credential helper named for the registry (`credHelpers`) or for all (`credsStore`), run as
//! `docker-credential-<helper> get` with the registry on its stdin, else the `auths` entry's
//! `auth` (base64 of `user:password`) or `username` and `password`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;

use crate::Error;

/// The most a Docker config or a helper's answer may take.
const MAX_CONFIG: u64 = 1 << 20;

/// A user name and password (or token) for a registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

/// Never printed: a log or an error message must not carry a password.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Credentials {{ username: {:?}, password: <hidden> }}",
            self.username
        )
    }
}

/// The Docker config this user's tools read: `$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`.
pub fn default_docker_config() -> Option<PathBuf> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))?;
    Some(dir.join("config.json"))
}

/// The credentials `config` (a Docker config file, if it exists) holds for `registry`.
pub fn from_docker_config(config: &Path, registry: &str) -> Result<Option<Credentials>, Error> {
    let bad = |why: String| Error::DockerConfig {
        path: config.to_owned(),
        why,
    };
    let text = match std::fs::read(config) {
        Ok(text) if text.len() as u64 > MAX_CONFIG => {
            return Err(bad(format!("larger than {MAX_CONFIG} bytes")))
        }
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let json: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    // Docker Hub's entry is keyed by its old URL.
    let keys: Vec<String> = match registry {
        "docker.io" | "registry-1.docker.io" => vec![
            "https://index.docker.io/v1/".into(),
            "docker.io".into(),
            "index.docker.io".into(),
        ],
        _ => vec![
            registry.to_owned(),
            format!("https://{registry}"),
            format!("http://{registry}"),
        ],
    };
    let helper = keys
        .iter()
        .find_map(|k| json["credHelpers"][k].as_str())
        .or_else(|| json["credsStore"].as_str());
    if let Some(helper) = helper.filter(|h| !h.is_empty()) {
        return from_helper(helper, &keys[0]).map(Some);
    }
    let Some(entry) = keys
        .iter()
        .map(|k| &json["auths"][k])
        .find(|e| e.is_object())
    else {
        return Ok(None);
    };
    if let Some(auth) = entry["auth"].as_str().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .map_err(|e| bad(format!("auths[{registry}].auth: {e}")))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| bad(format!("auths[{registry}].auth is not UTF-8")))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| bad(format!("auths[{registry}].auth is not user:password")))?;
        return Ok(Some(Credentials {
            username: username.to_owned(),
            password: password.to_owned(),
        }));
    }
    match (entry["username"].as_str(), entry["password"].as_str()) {
        (Some(username), Some(password)) => Ok(Some(Credentials {
            username: username.to_owned(),
            password: password.to_owned(),
        })),
        _ if entry["identitytoken"].is_string() => Err(bad(format!(
            "auths[{registry}] holds an identity token (an OAuth refresh token), which \
             meshbench does not exchange; log in with a password or token instead"
        ))),
        _ => Ok(None),
    }
}

/// Asks `docker-credential-<helper>` for `server`'s credentials (the helper protocol's
/// `get`: the server on stdin, `{"Username", "Secret"}` on stdout).
fn from_helper(helper: &str, server: &str) -> Result<Credentials, Error> {
    let program = format!("docker-credential-{helper}");
    let failed = |why: String| Error::CredentialHelper {
        helper: program.clone(),
        why,
    };
    if !helper
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(failed("not a helper's name".into()));
    }
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(server.as_bytes())
            .map_err(|e| failed(e.to_string()))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| failed(e.to_string()))?;
    if !output.status.success() {
        return Err(failed(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim()
        )));
    }
    if output.stdout.len() as u64 > MAX_CONFIG {
        return Err(failed("its answer is too large".into()));
    }
    let answer: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| failed(e.to_string()))?;
    match (answer["Username"].as_str(), answer["Secret"].as_str()) {
        (Some(username), Some(secret)) => Ok(Credentials {
            username: username.to_owned(),
            password: secret.to_owned(),
        }),
        _ => Err(failed("its answer has no Username and Secret".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, json).unwrap();
        (dir, path)
    }

    #[test]
    fn a_docker_configs_auth_entry_gives_the_registrys_user_and_password() {
        let auth = base64::engine::general_purpose::STANDARD.encode("bench:s3cr:et");
        let (_dir, path) = config(&format!(
            r#"{{"auths": {{"127.0.0.1:5000": {{"auth": "{auth}"}},
                "https://index.docker.io/v1/": {{"username": "hub", "password": "pw"}}}}}}"#
        ));
        let found = from_docker_config(&path, "127.0.0.1:5000")
            .unwrap()
            .unwrap();
        assert_eq!(
            (found.username.as_str(), found.password.as_str()),
            ("bench", "s3cr:et")
        );
        let hub = from_docker_config(&path, "docker.io").unwrap().unwrap();
        assert_eq!(hub.username, "hub");
        assert_eq!(from_docker_config(&path, "other.example").unwrap(), None);
        assert!(!format!("{found:?}").contains("s3cr"));
    }

    #[test]
    fn no_config_is_no_credentials_and_a_broken_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            from_docker_config(&dir.path().join("absent.json"), "r.example").unwrap(),
            None
        );
        let (_dir, path) = config(r#"{"auths": {"r.example": {"auth": "!!"}}}"#);
        let e = from_docker_config(&path, "r.example").unwrap_err();
        assert!(e.to_string().contains("config.json"), "{e}");
        let (_dir, path) = config(r#"{"credsStore": "../evil"}"#);
        let e = from_docker_config(&path, "r.example").unwrap_err();
        assert!(e.to_string().contains("not a helper's name"), "{e}");
    }
}
