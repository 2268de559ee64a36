//! The CSR the verifier sends Linkerd's identity controller passes the controller's own checks
//! (`checkCSR` in linkerd2's `pkg/identity`): exactly one DNS name, the identity; a common name
//! that is the identity; no URI, IP or e-mail names; signed by the key it names.

use meshbench_identity::linkerd_csr;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

#[test]
fn the_csr_names_the_identity_once_as_linkerd_requires() {
    let identity = "experimenter.app.serviceaccount.identity.linkerd.cluster.local";
    let key = rcgen::KeyPair::generate().unwrap();
    let der = linkerd_csr(identity, &key).unwrap();
    let (rest, csr) = X509CertificationRequest::from_der(&der).unwrap();
    assert!(rest.is_empty());
    csr.verify_signature().expect("signed by the key it names");

    let info = &csr.certification_request_info;
    let common_names: Vec<&str> = info
        .subject
        .iter_common_name()
        .map(|cn| cn.as_str().unwrap())
        .collect();
    assert_eq!(common_names, [identity]);

    let names: Vec<String> = csr
        .requested_extensions()
        .into_iter()
        .flatten()
        .filter_map(|ext| match ext {
            ParsedExtension::SubjectAlternativeName(san) => Some(san),
            _ => None,
        })
        .flat_map(|san| san.general_names.iter())
        .map(|name| match name {
            GeneralName::DNSName(dns) => format!("dns:{dns}"),
            other => format!("other:{other:?}"),
        })
        .collect();
    assert_eq!(names, [format!("dns:{identity}")]);
}
