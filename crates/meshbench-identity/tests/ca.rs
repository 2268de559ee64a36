//! The built-in CA against real peers: openssl must verify what it issues and see the SPIFFE
//! ID, and a CA written to disk must load back and keep issuing in the same trust domain.

use std::process::Command;

use meshbench_identity::{load_certs, spiffe_ids_of, CertificateAuthority, IssueOptions, SpiffeId};
use meshbench_role::InputFault;
use meshbench_testkit::require_tool;
use rustls_pki_types::pem::PemObject;

#[test]
fn openssl_verifies_the_issued_chain_and_reads_the_spiffe_san() {
    let Some(openssl) = require_tool("openssl") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::init(dir.path(), "example.org").unwrap();
    let svid = ca
        .issue("payments", "api", &IssueOptions::default())
        .unwrap();
    let (cert, _key) = svid.write(dir.path(), "payments.api").unwrap();

    let openssl_verify = |cert: &std::path::Path| {
        Command::new(&openssl)
            .arg("verify")
            .arg("-CAfile")
            .arg(dir.path().join("ca.pem"))
            .arg(cert)
            .output()
            .unwrap()
    };
    let verify = openssl_verify(&cert);
    assert!(
        verify.status.success(),
        "openssl verify failed: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );

    let text = Command::new(&openssl)
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("URI:spiffe://example.org/ns/payments/sa/api"),
        "SPIFFE URI SAN missing:\n{text}"
    );
    assert!(text.contains("ASN1 OID: prime256v1"), "not P-256:\n{text}");
    assert!(text.contains("TLS Web Client Authentication"));
    assert!(text.contains("TLS Web Server Authentication"));

    // A certificate from another CA must not verify against this one.
    let other = tempfile::tempdir().unwrap();
    let stranger = CertificateAuthority::init(other.path(), "example.org")
        .unwrap()
        .issue("payments", "api", &IssueOptions::default())
        .unwrap();
    let (stranger_cert, _) = stranger.write(other.path(), "stranger").unwrap();
    let verify = openssl_verify(&stranger_cert);
    assert!(!verify.status.success(), "a foreign chain verified");
}

#[test]
fn a_ca_on_disk_loads_back_and_refuses_to_be_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let created = CertificateAuthority::init(dir.path(), "lab.test").unwrap();
    assert!(CertificateAuthority::init(dir.path(), "lab.test").is_err());

    let loaded = CertificateAuthority::load(dir.path()).unwrap();
    assert_eq!(loaded.trust_domain(), "lab.test");
    assert_eq!(loaded.cert_der(), created.cert_der());
    let svid = loaded
        .issue("default", "web", &IssueOptions::default())
        .unwrap();
    let (cert, _) = svid.write(dir.path(), "web").unwrap();
    let ids = spiffe_ids_of(&load_certs(&cert).unwrap()[0]);
    assert_eq!(
        ids,
        vec![SpiffeId::parse("spiffe://lab.test/ns/default/sa/web").unwrap()]
    );
}

#[test]
fn bad_names_are_rejected_with_the_offending_value() {
    let ca = CertificateAuthority::generate("lab.test").unwrap();
    let err = ca
        .issue("bad/ns", "web", &IssueOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("bad/ns"), "{err}");
    assert!(err.is_bad_input());
    let missing = tempfile::tempdir().unwrap();
    let err = CertificateAuthority::load(missing.path()).err().unwrap();
    assert!(err.to_string().contains("meshbench ca init"), "{err}");
}

#[test]
fn a_signing_request_gets_the_authenticated_identity_not_the_one_it_asks_for() {
    let ca = CertificateAuthority::generate("lab.test").unwrap();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut greedy = rcgen::CertificateParams::default();
    greedy.subject_alt_names = vec![rcgen::SanType::URI(
        "spiffe://lab.test/ns/kube-system/sa/admin"
            .try_into()
            .unwrap(),
    )];
    let csr = greedy.serialize_request(&key).unwrap().pem().unwrap();
    let caller = SpiffeId::parse("spiffe://lab.test/ns/default/sa/web").unwrap();
    let signed = ca.sign_request(&csr, &caller, None).unwrap();
    let leaf =
        rustls_pki_types::CertificateDer::from_pem_slice(signed.cert_pem.as_bytes()).unwrap();
    assert_eq!(spiffe_ids_of(&leaf), vec![caller]);

    let other_domain = SpiffeId::parse("spiffe://elsewhere.test/ns/default/sa/web").unwrap();
    let err = ca.sign_request(&csr, &other_domain, None).unwrap_err();
    assert!(err.to_string().contains("elsewhere.test"), "{err}");
    let err = ca
        .sign_request(
            "not a csr",
            &SpiffeId::parse("spiffe://lab.test/x").unwrap(),
            None,
        )
        .unwrap_err();
    assert!(err.is_bad_input(), "{err}");
}

/// The issuer a mesh's own CA runs under meshbench's root (Linkerd's identity controller):
/// openssl verifies it against the root and reads a P-256 key, `CA:TRUE, pathlen:0`, the two
/// signing key usages and the name as CN and DNS SAN.
#[test]
fn an_intermediate_verifies_against_the_root_and_may_sign_only_leaves() {
    let Some(openssl) = require_tool("openssl") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::init(dir.path(), "cluster.local").unwrap();
    let issuer = ca
        .issue_intermediate(
            "identity.linkerd.cluster.local",
            std::time::Duration::from_secs(3600),
        )
        .unwrap();
    let (cert, key) = issuer.write(dir.path(), "issuer").unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(&openssl).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let root = dir.path().join("ca.pem");
    let verified = run(&[
        "verify".as_ref(),
        "-CAfile".as_ref(),
        root.as_os_str(),
        cert.as_os_str(),
    ]);
    assert!(verified.contains(": OK"), "{verified}");
    let text = run(&[
        "x509".as_ref(),
        "-noout".as_ref(),
        "-text".as_ref(),
        "-in".as_ref(),
        cert.as_os_str(),
    ]);
    for expected in [
        "CA:TRUE, pathlen:0",
        "Certificate Sign, CRL Sign",
        "DNS:identity.linkerd.cluster.local",
        "NIST CURVE: P-256",
    ] {
        assert!(text.contains(expected), "{expected} not in {text}");
    }
    let subject = text
        .lines()
        .find(|l| l.trim_start().starts_with("Subject:"));
    assert!(
        subject.is_some_and(|l| l.contains("CN") && l.contains("identity.linkerd.cluster.local")),
        "{subject:?}"
    );
    let key_text = run(&[
        "pkey".as_ref(),
        "-noout".as_ref(),
        "-text".as_ref(),
        "-in".as_ref(),
        key.as_os_str(),
    ]);
    assert!(key_text.contains("prime256v1"), "{key_text}");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o077, 0, "the key is readable by others: {mode:o}");
}
