//! `meshbench image push` against a real registry on loopback (Debian's `docker-registry`,
//! the distribution project's own server): over plain HTTP when asked and over HTTPS with a
//! private CA, with htpasswd authentication answered from a Docker config's `auths`, from a
//! credential helper and from --password-stdin; the registry then serves the manifest under
//! the tag, with the digest the archive has; a second push finds every blob there; bad
//! references, archives and credentials are refused with what was wrong.

mod distribution;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use distribution::Registry;
use meshbench_testkit::{require_tool, run_ok};

const USER: &str = "bench";
const PASSWORD: &str = "pushes-images";

fn meshbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_meshbench"))
}

/// `image push` of `archive` to `reference` with `args`; its output.
fn push(archive: &Path, reference: &str, args: &[&str]) -> std::process::Output {
    meshbench()
        .args(["image", "push", reference, "--archive"])
        .arg(archive)
        .args(args)
        .output()
        .unwrap()
}

/// A Docker config whose `auths` has the test user for `registry`.
fn docker_config(dir: &Path, registry: &str) -> PathBuf {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let path = dir.join("config.json");
    std::fs::write(
        &path,
        format!(r#"{{"auths": {{"{registry}": {{"auth": "{auth}"}}}}}}"#),
    )
    .unwrap();
    path
}

/// The manifest's digest the registry serves under `reference`'s tag, asked with curl.
fn served_digest(
    curl: &Path,
    base: &str,
    repository: &str,
    tag: &str,
    ca: Option<&Path>,
) -> String {
    let mut command = Command::new(curl);
    command
        .args(["-sS", "-f", "-I", "-u", &format!("{USER}:{PASSWORD}")])
        .args(["-H", "Accept: application/vnd.oci.image.manifest.v1+json"]);
    if let Some(ca) = ca {
        command.arg("--cacert").arg(ca);
    }
    let output = run_ok(command.arg(format!("{base}/v2/{repository}/manifests/{tag}")));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("docker-content-digest: ")
                .map(|d| d.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&output.stdout)))
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn image_push_reaches_a_real_registry_over_http_and_https_with_each_kind_of_credentials() {
    let (Some(_), Some(htpasswd_tool), Some(openssl), Some(curl)) = (
        require_tool("docker-registry"),
        require_tool("htpasswd"),
        require_tool("openssl"),
        require_tool("curl"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("meshbench.oci.tar");
    let built = run_ok(
        meshbench()
            .args(["image", "build", "--without-iptables", "--out"])
            .arg(&archive),
    );
    let built = String::from_utf8_lossy(&built.stdout);
    let manifest = built
        .split("manifest ")
        .nth(1)
        .map(str::trim)
        .unwrap_or_else(|| panic!("{built}"))
        .to_owned();
    let htpasswd = dir.path().join("htpasswd");
    let hashed = run_ok(Command::new(&htpasswd_tool).args(["-Bbn", USER, PASSWORD]));
    std::fs::write(&htpasswd, &hashed.stdout).unwrap();

    // Plain HTTP, as asked.
    let registry = Registry::start("127.0.0.1", Some(&htpasswd), None);
    let reference = format!("{}/bench/meshbench:under-test", registry.addr);
    // Without credentials the registry's challenge goes unanswered.
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "{}").unwrap();
    let refused = push(
        &archive,
        &reference,
        &["--plain-http", "--docker-config", empty.to_str().unwrap()],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("refused access") && stderr(&refused).contains("none were given"),
        "{}",
        stderr(&refused)
    );
    // Credentials from the Docker config's `auths`.
    let config = docker_config(dir.path(), &registry.addr);
    let pushed = push(
        &archive,
        &reference,
        &["--plain-http", "--docker-config", config.to_str().unwrap()],
    );
    assert!(pushed.status.success(), "{}", stderr(&pushed));
    let said = String::from_utf8_lossy(&pushed.stdout);
    assert!(said.contains(&format!("@{manifest}")), "{said}");
    assert!(said.contains("0 already there"), "{said}");
    let base = format!("http://{}", registry.addr);
    assert_eq!(
        served_digest(&curl, &base, "bench/meshbench", "under-test", None),
        manifest
    );
    // Again, from a credential helper Docker's config names: every blob is there already.
    let helpers = tempfile::tempdir().unwrap();
    let helper = helpers.path().join("docker-credential-meshbenchtest");
    std::fs::write(
        &helper,
        format!("#!/bin/sh\nread server\nprintf '{{\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}'\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let helper_config = dir.path().join("helper.json");
    std::fs::write(&helper_config, r#"{"credsStore": "meshbenchtest"}"#).unwrap();
    let path = format!(
        "{}:{}",
        helpers.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let again = meshbench()
        .args(["image", "push", &reference, "--plain-http", "--archive"])
        .arg(&archive)
        .arg("--docker-config")
        .arg(&helper_config)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", stderr(&again));
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("0 blobs uploaded"), "{said}");
    // A wrong password on stdin is refused by the registry.
    let mut wrong = meshbench()
        .args([
            "image",
            "push",
            &reference,
            "--plain-http",
            "--username",
            USER,
            "--password-stdin",
            "--archive",
        ])
        .arg(&archive)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wrong
        .stdin
        .take()
        .unwrap()
        .write_all(b"not-the-password\n")
        .unwrap();
    let wrong = wrong.wait_with_output().unwrap();
    assert_eq!(wrong.status.code(), Some(1), "{}", stderr(&wrong));
    assert!(
        stderr(&wrong).contains("refused the credentials"),
        "{}",
        stderr(&wrong)
    );
    drop(registry);

    // HTTPS with a private CA: refused until that CA is trusted.
    let (ca, ca_key) = (dir.path().join("ca.crt"), dir.path().join("ca.key"));
    let (cert, key) = (
        dir.path().join("registry.crt"),
        dir.path().join("registry.key"),
    );
    let (csr, ext) = (
        dir.path().join("registry.csr"),
        dir.path().join("registry.ext"),
    );
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run_ok(
        Command::new(&openssl)
            .args(["req", "-x509"])
            .args(ec)
            .args([
                "-days",
                "1",
                "-subj",
                "/CN=meshbench test registry CA",
                "-keyout",
            ])
            .arg(&ca_key)
            .arg("-out")
            .arg(&ca),
    );
    run_ok(
        Command::new(&openssl)
            .arg("req")
            .args(ec)
            .args(["-subj", "/CN=127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&csr),
    );
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run_ok(
        Command::new(&openssl)
            .args(["x509", "-req", "-days", "1", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(&ca)
            .arg("-CAkey")
            .arg(&ca_key)
            .arg("-CAcreateserial")
            .arg("-extfile")
            .arg(&ext)
            .arg("-out")
            .arg(&cert),
    );
    let registry = Registry::start("127.0.0.1", Some(&htpasswd), Some((&cert, &key)));
    let reference = format!("{}/meshbench:tls", registry.addr);
    let config = docker_config(dir.path(), &registry.addr);
    let untrusted = push(
        &archive,
        &reference,
        &["--docker-config", config.to_str().unwrap()],
    );
    assert_eq!(untrusted.status.code(), Some(1), "{}", stderr(&untrusted));
    assert!(
        stderr(&untrusted).to_lowercase().contains("certificate"),
        "{}",
        stderr(&untrusted)
    );
    let trusted = push(
        &archive,
        &reference,
        &[
            "--docker-config",
            config.to_str().unwrap(),
            "--ca-certs",
            ca.to_str().unwrap(),
        ],
    );
    assert!(trusted.status.success(), "{}", stderr(&trusted));
    let base = format!("https://{}", registry.addr);
    assert_eq!(
        served_digest(&curl, &base, "meshbench", "tls", Some(&ca)),
        manifest
    );

    // Bad input: exit code 2, naming what was wrong.
    for (reference, archive, wrong) in [
        (
            "Not/A:Reference",
            archive.clone(),
            "image reference \"Not/A:Reference\"",
        ),
        (
            "127.0.0.1:5000/x:y",
            dir.path().join("absent.tar"),
            "absent.tar",
        ),
        ("127.0.0.1:5000/x:y", config.clone(), "not an image archive"),
    ] {
        let output = push(&archive, reference, &["--plain-http"]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains(wrong),
            "{wrong}: {}",
            stderr(&output)
        );
    }
}
