//! Server certificate verification by SPIFFE ID: the chain must lead to the trust bundle, and
//! the leaf's URI SAN must be the expected workload identity (or, with no expectation, any
//! SPIFFE ID of the bundle's trust domain). DNS names are deliberately ignored.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::spiffe::{spiffe_ids_of, SpiffeId};

#[derive(Debug)]
pub struct SpiffeServerVerifier {
    roots: Arc<RootCertStore>,
    trust_domain: Option<String>,
    expected: Option<SpiffeId>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl SpiffeServerVerifier {
    /// `trust_domain`: when `expected` is `None`, the leaf must still carry a SPIFFE ID of
    /// this trust domain (if given).
    pub fn new(
        roots: Arc<RootCertStore>,
        trust_domain: Option<String>,
        expected: Option<SpiffeId>,
    ) -> Self {
        SpiffeServerVerifier {
            roots,
            trust_domain,
            expected,
            algorithms: rustls::crypto::aws_lc_rs::default_provider()
                .signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for SpiffeServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let parsed = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        let ids = spiffe_ids_of(end_entity);
        let [id] = ids.as_slice() else {
            // An SVID carries exactly one SPIFFE ID.
            return Err(CertificateError::NotValidForName.into());
        };
        let acceptable = match (&self.expected, &self.trust_domain) {
            (Some(expected), _) => id == expected,
            (None, Some(td)) => id.trust_domain() == td,
            (None, None) => true,
        };
        if acceptable {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(CertificateError::NotValidForName.into())
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
