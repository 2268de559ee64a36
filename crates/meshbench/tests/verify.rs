//! `meshbench verify` end to end on the netns lab: E3's six cases under our sidecar mesh
//! pass with the expected 200s, 403s and connection-level refusals, the impostor with the
//! experimenter's service account is kept out, enrolled paths are TLS on the wire while
//! unenrolled ones show the marker, bad identities are refused, certificates rotating under
//! load fail no request; our node agents (same-node traffic encrypted or not) pass too, by
//! capturing their nodes' traffic both ways, and the unencrypting one has its same-node
//! plaintext reported; Envoy enrolled as istiod configures it and Consul Connect (its own
//! control plane, CA and identities, our policy as intentions; in the mesh suite) pass; `baseline` (no mesh)
//! fails with exit code 1; nothing is left behind.

use std::path::Path;
use std::process::Command;

use meshbench_results::{read_json, MeshVerification, ProbeVerification, Verdict, VerifyReport};

fn verify(out: &Path, mesh: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["verify", "--mesh", mesh, "--out"])
        .arg(out)
        .output()
        .unwrap()
}

fn probe<'a>(report: &'a VerifyReport, case: u32, from: &str, to: &str) -> &'a ProbeVerification {
    probe_of(&report.meshes[0], case, from, to)
}

fn probe_of<'a>(
    mesh: &'a MeshVerification,
    case: u32,
    from: &str,
    to: &str,
) -> &'a ProbeVerification {
    mesh.cases
        .iter()
        .find(|c| c.case == case)
        .unwrap()
        .probes
        .iter()
        .find(|p| p.from == from && p.to == to)
        .unwrap()
}

/// Verifies `meshes`, which must pass (exit code 0): the directory, report and verify.md.
fn passing_verification(meshes: &str) -> (tempfile::TempDir, VerifyReport, String) {
    let dir = tempfile::tempdir().unwrap();
    let output = verify(dir.path(), meshes);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: VerifyReport = read_json(&dir.path().join("verify.json"))
        .unwrap_or_else(|e| panic!("{e}; stderr: {stderr}"));
    let md = std::fs::read_to_string(dir.path().join("verify.md")).unwrap();
    assert!(report.passed, "{md}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    (dir, report, md)
}

/// The tests take turns, so that "nothing left behind" is checked against everything the test
/// created and no other test's live lab.
static ONE_LAB_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `checks` alone on the machine, if it can make labs with captures; then nothing of
/// theirs may be left.
fn in_a_lab_of_its_own(checks: impl FnOnce()) {
    if !meshbench_testkit::require_netns() || meshbench_testkit::require_tool("tcpdump").is_none() {
        return;
    }
    let _turn = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let labs_before = meshbench_testkit::lab_namespaces();
    checks();
    meshbench_testkit::assert_no_lab_left_since(&labs_before);
}

#[test]
fn our_meshes_pass_e3s_zero_trust_matrix_and_no_mesh_fails_it() {
    in_a_lab_of_its_own(|| {
        sidecar_mesh_passes_with_proof_on_the_wire();
        node_agent_meshes_pass_and_report_same_node_plaintext();
        envoy_enrolled_as_istio_does_passes_with_rbac_from_our_policy();
        proxies_that_cannot_read_identities_are_reported_not_verified();
        without_a_mesh_the_rules_fail_and_the_exit_code_says_so();
        a_run_with_verify_carries_its_verification_in_its_report();
    });
}

/// Consul is built from the Go module proxy (scripts/consul-build), hence the mesh suite.
#[test]
#[ignore = "mesh suite (scripts/test --cluster): Consul comes from scripts/consul-build"]
fn consul_connect_passes_e3s_zero_trust_matrix() {
    in_a_lab_of_its_own(consul_connect_passes_with_our_policy_as_intentions_and_its_own_identities);
}

fn sidecar_mesh_passes_with_proof_on_the_wire() {
    let (dir, report, md) = passing_verification("meshbench-sidecar");
    assert!(dir.path().join("verify.html").is_file());
    // The verdicts at a glance: every case's probes, the identity checks and the encrypted
    // paths, counted from the tables after it.
    let glance = md
        .lines()
        .find(|l| l.starts_with("| meshbench-sidecar |"))
        .unwrap_or_else(|| panic!("no row for the mesh at a glance: {md}"));
    assert!(
        glance.starts_with("| meshbench-sidecar | 6/6 | 6/6 | 6/6 | 6/6 | 6/6 | 6/6 |")
            && glance.ends_with("| pass |"),
        "{glance}"
    );
    let mesh = &report.meshes[0];
    assert_eq!(mesh.cases.len(), 6);
    assert!(mesh.cases.iter().all(|c| c.probes.len() == 6));

    // Case 1, nothing enrolled: every call goes through, in clear.
    for p in &mesh.cases[0].probes {
        assert_eq!(p.observed, "http_200", "{p:?}");
        assert!(p.wire.as_ref().unwrap().marker_seen, "{p:?}");
    }
    // Case 2, everything enrolled.
    let allowed = probe(&report, 2, "experimenter", "calculator");
    assert_eq!(allowed.observed, "http_200");
    let wire = allowed.wire.as_ref().unwrap();
    assert_eq!(wire.path, "inter-node");
    assert!(
        wire.connections >= 1 && wire.tls_connections == wire.connections,
        "{wire:?}"
    );
    assert_eq!(wire.tls_versions, ["TLSv1.3"]);
    assert!(!wire.marker_seen);
    // Authorization at L7 answers 403; the checker is authenticated but not the experimenter.
    assert_denied_at_l7(&report);
    let itself = probe(&report, 2, "security-checker", "security-checker");
    assert_eq!(itself.observed, "http_200");
    let same_node = itself.wire.as_ref().unwrap();
    assert_eq!(same_node.path, "same-node");
    assert!(
        same_node.encryption_expected && !same_node.marker_seen,
        "{same_node:?}"
    );
    // The bypass E3 observed: the experimenter's service account without the mesh.
    let impostor = probe(&report, 2, "impostor", "calculator");
    assert!(
        !impostor.expected_allowed && !impostor.observed_allowed,
        "{impostor:?}"
    );
    // Case 4: an unenrolled experimenter is refused by the STRICT calculator.
    let unenrolled = probe(&report, 4, "experimenter", "calculator");
    assert!(!unenrolled.observed_allowed, "{unenrolled:?}");
    // Case 3: enrolled callers reach the unenrolled calculator in plaintext.
    let passthrough = probe(&report, 3, "experimenter", "calculator");
    assert_eq!(passthrough.observed, "http_200");
    assert!(passthrough.wire.as_ref().unwrap().marker_seen);

    let checks: Vec<(&str, &str, Verdict)> = mesh
        .identity
        .iter()
        .map(|c| (c.name.as_str(), c.expected.as_str(), c.verdict))
        .collect();
    for name in [
        "valid-identity",
        "no-client-certificate",
        "other-trust-domain",
        "expired-certificate",
        "forged-identity-header",
        "rotation-under-load",
    ] {
        assert!(
            checks
                .iter()
                .any(|(n, _, v)| *n == name && *v == Verdict::Pass),
            "{name}: {checks:?}"
        );
    }
    assert_calculator_presented_its_svid(mesh);
}

fn node_agent_meshes_pass_and_report_same_node_plaintext() {
    let (_dir, report, md) =
        passing_verification("meshbench-node-agent,meshbench-node-agent-plain-same-node");
    let [encrypting, plain] = &report.meshes[..] else {
        panic!("two meshes: {md}");
    };
    for mesh in [encrypting, plain] {
        assert!(mesh.error.is_none(), "{mesh:?}");
        // Between nodes both tunnel over HBONE.
        let allowed = probe_of(mesh, 2, "experimenter", "calculator");
        assert_eq!(allowed.observed, "http_200");
        let wire = allowed.wire.as_ref().unwrap();
        assert!(
            wire.tls_connections >= 1 && wire.tls_connections == wire.connections,
            "{wire:?}"
        );
        assert!(!wire.marker_seen);
        // L4 authorization: the wrong identity is refused at the connection, no 403.
        let denied = probe_of(mesh, 2, "security-checker", "calculator");
        assert!(!denied.observed_allowed, "{denied:?}");
        assert_ne!(denied.observed, "http_403");
        // The node captures inbound too: unenrolled callers meet STRICT.
        for case in [2, 4] {
            let impostor = probe_of(mesh, case, "impostor", "calculator");
            assert!(!impostor.observed_allowed, "{impostor:?}");
        }
        // Enrolled callers reach an unenrolled calculator in plaintext.
        assert_eq!(
            probe_of(mesh, 3, "experimenter", "calculator").observed,
            "http_200"
        );
        assert!(mesh.identity.iter().all(|c| c.verdict == Verdict::Pass));
        assert_calculator_presented_its_svid(mesh);
    }
    // Same node: the encrypting agent tunnels to itself over TLS; the other carries the
    // request in clear, and the report says so.
    let tunnelled = probe_of(encrypting, 2, "security-checker", "security-checker");
    let wire = tunnelled.wire.as_ref().unwrap();
    assert_eq!(wire.path, "same-node");
    assert!(
        wire.encryption_expected && wire.tls_connections >= 1 && !wire.marker_seen,
        "{wire:?}"
    );
    let clear = probe_of(plain, 2, "security-checker", "security-checker");
    assert_eq!(clear.observed, "http_200");
    let wire = clear.wire.as_ref().unwrap();
    assert!(!wire.encryption_expected && wire.marker_seen, "{wire:?}");
    assert!(
        wire.note
            .as_deref()
            .is_some_and(|n| n.contains("does not encrypt traffic within a node")),
        "{wire:?}"
    );
    assert!(md.contains("does not encrypt traffic within a node"));
}

fn envoy_enrolled_as_istio_does_passes_with_rbac_from_our_policy() {
    if meshbench_testkit::require_tool("envoy").is_none() {
        return;
    }
    let (_dir, report, _) = passing_verification("envoy-sidecar");
    // Our policy as Envoy RBAC: L7 denials are 403s, the DENY of other namespaces included.
    assert_denied_at_l7(&report);
    let allowed = probe(&report, 2, "experimenter", "calculator");
    assert_eq!(allowed.observed, "http_200");
    let wire = allowed.wire.as_ref().unwrap();
    assert!(wire.tls_connections >= 1 && !wire.marker_seen, "{wire:?}");
    // STRICT: no plaintext filter chain, so the impostor is refused at the connection.
    let impostor = probe(&report, 2, "impostor", "calculator");
    assert!(!impostor.observed_allowed, "{impostor:?}");
    // The certificate agent renews the SVIDs and Envoy picks them up without a restart.
    let rotation = report.meshes[0]
        .identity
        .iter()
        .find(|c| c.name == "rotation-under-load")
        .unwrap();
    assert_eq!(rotation.verdict, Verdict::Pass, "{rotation:?}");
}

/// A real third-party mesh with its control plane: Consul's agent signs the sidecars'
/// certificates with Consul's SPIFFE IDs, our policy reaches Envoy as intentions enumerated
/// per pair of services, and the identity checks present certificates of Consul's trust.
fn consul_connect_passes_with_our_policy_as_intentions_and_its_own_identities() {
    if meshbench_testkit::require_tool("consul").is_none()
        || meshbench_testkit::require_tool("envoy").is_none()
    {
        return;
    }
    let (_dir, report, md) = passing_verification("consul-connect");
    let mesh = &report.meshes[0];
    assert!(
        mesh.notes
            .iter()
            .any(|n| n.contains("one intention per pair")),
        "{:?}",
        mesh.notes
    );
    assert!(md.contains("one intention per pair"), "{md}");
    let allowed = probe(&report, 2, "experimenter", "calculator");
    assert_eq!(allowed.observed, "http_200");
    let wire = allowed.wire.as_ref().unwrap();
    assert!(wire.tls_connections >= 1 && !wire.marker_seen, "{wire:?}");
    assert_eq!(wire.tls_versions, ["TLSv1.3"], "{wire:?}");
    for checker in ["security-checker", "external-checker"] {
        let denied = probe(&report, 2, checker, "calculator");
        assert!(!denied.observed_allowed, "{denied:?}");
    }
    let impostor = probe(&report, 2, "impostor", "calculator");
    assert!(!impostor.observed_allowed, "{impostor:?}");
    // The calculator's sidecar presents the identity Consul gives it.
    let valid = mesh.identity.iter().find(|c| c.name == "valid-identity");
    let server_id = valid
        .and_then(|c| c.server_id.as_deref())
        .unwrap_or_default();
    assert!(
        server_id.starts_with("spiffe://")
            && server_id.ends_with(".consul/ns/default/dc/dc1/svc/calculator"),
        "{valid:?}"
    );
    // Its CA was rotated under load: the certificate changed and no request failed.
    let rotation = mesh
        .identity
        .iter()
        .find(|c| c.name == "rotation-under-load")
        .unwrap();
    assert_eq!(rotation.verdict, Verdict::Pass, "{rotation:?}");
    assert!(
        rotation.description.contains("CA was rotated"),
        "{rotation:?}"
    );
}

fn proxies_that_cannot_read_identities_are_reported_not_verified() {
    let dir = tempfile::tempdir().unwrap();
    let output = verify(dir.path(), "haproxy-sidecar,nginx-sidecar");
    assert_eq!(output.status.code(), Some(1));
    let report: VerifyReport = read_json(&dir.path().join("verify.json")).unwrap();
    assert!(!report.passed);
    for mesh in &report.meshes {
        let error = mesh.error.as_deref().unwrap_or_default();
        assert!(error.contains("never its SPIFFE ID"), "{mesh:?}");
        assert!(mesh.cases.is_empty());
    }
}

fn without_a_mesh_the_rules_fail_and_the_exit_code_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let output = verify(dir.path(), "baseline");
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: VerifyReport = read_json(&dir.path().join("verify.json")).unwrap();
    assert!(!report.passed);
    let impostor = probe(&report, 2, "impostor", "calculator");
    assert_eq!(impostor.observed, "http_200");
    assert_eq!(impostor.verdict, Verdict::Fail);
    // At a glance, the cases the policy denies in are counted failed, case 1 is not.
    let md = std::fs::read_to_string(dir.path().join("verify.md")).unwrap();
    let glance = md
        .lines()
        .find(|l| l.starts_with("| baseline |"))
        .unwrap_or_else(|| panic!("no row for baseline at a glance: {md}"));
    assert!(
        glance.starts_with("| baseline | 6/6 | 2/6 (FAIL) |") && glance.ends_with("| FAIL |"),
        "{glance}"
    );
}

fn a_run_with_verify_carries_its_verification_in_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let output = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args([
            "run",
            "--profile",
            "smoke",
            "--scenarios",
            "baseline,meshbench-sidecar",
            "--verify",
            "--out",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: VerifyReport = read_json(&out_dir.join("verify/verify.json")).unwrap();
    // Only the scenario that can enroll E3's application is verified; baseline is not.
    let meshes: Vec<&str> = report.meshes.iter().map(|m| m.mesh.as_str()).collect();
    assert_eq!(meshes, ["meshbench-sidecar"]);
    assert!(report.passed);
    for name in ["report.md", "report.html"] {
        let text = std::fs::read_to_string(out_dir.join(name)).unwrap();
        assert!(
            text.contains("PASS for meshbench-sidecar")
                && text.contains("Verification, meshbench-sidecar: case 2"),
            "{name}"
        );
    }
    // `meshbench report` keeps the section.
    std::fs::remove_file(out_dir.join("report.md")).unwrap();
    let regenerated = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .arg("report")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(regenerated.status.success());
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(md.contains("Verification, meshbench-sidecar: identity checks"));
}

#[test]
fn a_mesh_verify_cannot_run_is_bad_input() {
    let output = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["verify", "--mesh", "istio"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--mesh: cannot verify \"istio\""),
        "{stderr}"
    );
}

/// E3's case 2 as an L7 data plane enforces it: the checkers are authenticated (or not) but
/// their requests are refused with 403, not at the connection.
fn assert_denied_at_l7(report: &VerifyReport) {
    for checker in ["security-checker", "external-checker"] {
        let answer = &probe(report, 2, checker, "calculator").observed;
        assert_eq!(answer, "http_403", "{checker}");
    }
}

/// The identity check's valid case saw the calculator's own SPIFFE ID.
fn assert_calculator_presented_its_svid(mesh: &MeshVerification) {
    let valid = mesh.identity.iter().find(|c| c.name == "valid-identity");
    assert_eq!(
        valid.and_then(|c| c.server_id.as_deref()),
        Some("spiffe://cluster.local/ns/app/sa/calculator")
    );
}
