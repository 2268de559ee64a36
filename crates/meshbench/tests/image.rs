//! `meshbench image build` as a container runtime meets its archive: an OCI image layout
//! whose blobs match their digests and whose config names the uncompressed layer, and a
//! layer that is a root on which the packed binaries start (run under `chroot`, the step a
//! runtime takes after unpacking). The same binaries give the same digests.

use std::io::Read;
use std::path::Path;
use std::process::Command;

use meshbench_testkit::{require_root, require_tool, run_ok};

fn sha256_hex(data: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Every member of the archive, by name.
fn members(archive: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut tar = tar::Archive::new(std::fs::File::open(archive).unwrap());
    tar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (name, data)
        })
        .collect()
}

fn build(out: &Path, extra: &[&str]) -> String {
    let output = run_ok(
        Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(["image", "build", "--out"])
            .arg(out)
            .args(extra),
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_image_is_an_oci_layout_whose_layer_runs_meshbench_and_envoy() {
    if !require_root("runs the image's binaries under chroot") {
        return;
    }
    let Some(chroot) = require_tool("chroot") else {
        return;
    };
    let with_envoy = require_tool("envoy").is_some();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("meshbench.oci.tar");
    let flags: &[&str] = if with_envoy { &["--with-envoy"] } else { &[] };
    let said = build(&archive, flags);
    assert!(said.contains("docker.io/library/meshbench:"), "{said}");

    let files = members(&archive);
    assert_eq!(files["oci-layout"], br#"{"imageLayoutVersion":"1.0.0"}"#);
    for (name, data) in &files {
        if let Some(hex) = name.strip_prefix("blobs/sha256/") {
            assert_eq!(sha256_hex(data), hex, "{name} does not match its digest");
        }
    }
    let blob = |digest: &serde_json::Value| {
        let hex = digest.as_str().unwrap().strip_prefix("sha256:").unwrap();
        &files[&format!("blobs/sha256/{hex}")]
    };
    let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
    let entry = &index["manifests"][0];
    assert_eq!(entry["platform"]["os"], "linux");
    let manifest: serde_json::Value = serde_json::from_slice(blob(&entry["digest"])).unwrap();
    let config: serde_json::Value =
        serde_json::from_slice(blob(&manifest["config"]["digest"])).unwrap();
    assert_eq!(
        config["config"]["Entrypoint"][0],
        "/usr/local/bin/meshbench"
    );
    let layer = blob(&manifest["layers"][0]["digest"]);
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(&layer[..])
        .read_to_end(&mut unpacked)
        .unwrap();
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        format!("sha256:{}", sha256_hex(&unpacked)),
        "the config names the uncompressed layer"
    );

    let rootfs = dir.path().join("rootfs");
    tar::Archive::new(&unpacked[..]).unpack(&rootfs).unwrap();
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains(":1337:1337:"), "the proxy user: {passwd}");
    let run_in_image = |binary: &str| {
        let output = run_ok(
            Command::new(&chroot)
                .arg(&rootfs)
                .args([binary, "--version"]),
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let version = run_in_image("/usr/local/bin/meshbench");
    assert!(version.starts_with("meshbench "), "{version}");
    if with_envoy {
        let version = run_in_image("/usr/local/bin/envoy");
        assert!(version.contains("version:"), "{version}");
    }

    // iptables with the extensions a sidecar's capture rules load, in a namespace of its own.
    let rules = rootfs.join("capture.rules");
    std::fs::write(
        &rules,
        "*nat\n:MESHBENCH_OUTPUT - [0:0]\n-A OUTPUT -p tcp -j MESHBENCH_OUTPUT\n\
         -A MESHBENCH_OUTPUT -m owner --uid-owner 1337 -j RETURN\n\
         -A MESHBENCH_OUTPUT -p tcp -j REDIRECT --to-ports 15001\nCOMMIT\n",
    )
    .unwrap();
    if let Some(unshare) = require_tool("unshare") {
        let root = rootfs.display();
        let iptables = "/usr/local/bin/xtables-nft-multi";
        let output = run_ok(Command::new(unshare).args([
            "--net",
            "sh",
            "-c",
            &format!(
                "chroot {root} {iptables} iptables-restore /capture.rules && \
                 chroot {root} iptables-nft-save -t nat"
            ),
        ]));
        let saved = String::from_utf8_lossy(&output.stdout);
        assert!(
            saved.contains("-A MESHBENCH_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
            "{saved}"
        );
    }

    // Reproducible: the same binaries, the same manifest.
    let again = dir.path().join("again.oci.tar");
    let said_again = build(&again, flags);
    let digest = |s: &str| s.rsplit_once("manifest ").map(|(_, d)| d.trim().to_owned());
    assert_eq!(digest(&said), digest(&said_again));
}

/// The image's config and its layer unpacked under `dir/rootfs`.
fn unpack(archive: &Path, dir: &Path) -> (serde_json::Value, std::path::PathBuf) {
    let files = members(archive);
    let blob = |digest: &serde_json::Value| {
        let hex = digest.as_str().unwrap().strip_prefix("sha256:").unwrap();
        files[&format!("blobs/sha256/{hex}")].clone()
    };
    let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&blob(&index["manifests"][0]["digest"])).unwrap();
    let config = serde_json::from_slice(&blob(&manifest["config"]["digest"])).unwrap();
    let layer = blob(&manifest["layers"][0]["digest"]);
    let rootfs = dir.join("rootfs");
    tar::Archive::new(flate2::read::GzDecoder::new(&layer[..]))
        .unpack(&rootfs)
        .unwrap();
    (config, rootfs)
}

#[test]
fn a_third_party_program_runs_from_where_its_upstream_image_puts_it() {
    if !require_root("runs the image's programs under chroot") {
        return;
    }
    let Some(chroot) = require_tool("chroot") else {
        return;
    };
    // A dynamically linked program of this machine stands in for ztunnel or istio-cni: what
    // is checked is the layout, the libraries and the entrypoint, not the program.
    let env = require_tool("env").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("NOTICE");
    std::fs::write(&notes, "not executable\n").unwrap();
    let archive = dir.path().join("tool.oci.tar");
    build(
        &archive,
        &[
            "--tag",
            "tool:1",
            "--file",
            &format!("{}=/opt/tool/bin/tool", env.display()),
            "--file",
            &format!("{}=/opt/tool/NOTICE", notes.display()),
            "--alias",
            "/usr/bin/tool-alias=/opt/tool/bin/tool",
            "--entrypoint",
            "/opt/tool/bin/tool",
            "--arg",
            "--null",
            "--user",
            "1337:1337",
        ],
    );
    let (config, rootfs) = unpack(&archive, dir.path());
    assert_eq!(config["config"]["User"], "1337:1337");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/opt/tool/bin/tool"])
    );
    assert_eq!(config["config"]["Cmd"], serde_json::json!(["--null"]));
    let link = std::fs::read_link(rootfs.join("usr/bin/tool-alias")).unwrap();
    assert_eq!(link, Path::new("/opt/tool/bin/tool"));
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| {
        std::fs::metadata(rootfs.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("opt/tool/bin/tool"), 0o755);
    assert_eq!(mode("opt/tool/NOTICE"), 0o644);
    // Started by its other name, from its own libraries in the image.
    let output = run_ok(Command::new(&chroot).arg(&rootfs).args([
        "/usr/bin/tool-alias",
        "-i",
        "PLACED=yes",
        "/opt/tool/bin/tool",
    ]));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "PLACED=yes\n");
}

#[test]
fn a_file_placed_outside_the_images_root_is_refused_as_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    for flags in [
        ["--file", "/bin/sh=/opt/../../etc/sh"],
        ["--file", "/bin/sh"],
        ["--alias", "relative=/bin/sh"],
        ["--entrypoint", "bin/sh"],
        ["--user", "istio"],
        ["--user", "1337:"],
        ["--user", "-1"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(["image", "build", "--out"])
            .arg(dir.path().join("x.tar"))
            .args(flags)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(flags[0]) || stderr.contains(flags[1]),
            "{flags:?}: {stderr}"
        );
        assert!(!dir.path().join("x.tar").exists());
    }
}

#[test]
fn a_malformed_tag_is_refused_as_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["image", "build", "--tag", "mesh bench", "--out"])
        .arg(dir.path().join("x.tar"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--tag \"mesh bench\""), "{stderr}");
    assert!(!dir.path().join("x.tar").exists());
}
