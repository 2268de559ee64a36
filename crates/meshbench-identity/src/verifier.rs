//! Peer certificate verification by SPIFFE ID, as the SPIFFE X.509-SVID rules have it: a leaf
//! carries exactly one SPIFFE ID, and its chain must lead to a root *of that ID's trust
//! domain* (a trust bundle is per trust domain; a root of `evil.example` vouches for no
//! `cluster.local` identity). Each root names the trust domain it speaks for by its own URI
//! SAN `spiffe://<trust-domain>`, as the built-in CA's do; a root without one vouches for no
//! SPIFFE ID. Servers are then checked against the expected workload identity (or, with no
//! expectation, any ID of the local trust domain); DNS names are deliberately ignored.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::spiffe::{spiffe_ids_of, SpiffeId};
use crate::{load_certs, Error};

/// The roots of each trust domain a bundle file holds, the first one's being the local
/// trust domain.
#[derive(Debug, Clone)]
pub struct TrustBundle {
    domains: Vec<(String, Arc<RootCertStore>)>,
}

impl TrustBundle {
    /// Reads the roots of `path`, each filed under the trust domain its URI SAN names.
    pub fn load(path: &Path) -> Result<Self, Error> {
        Self::load_with_default(path, None)
    }

    /// As [`TrustBundle::load`], with roots that name no trust domain (istiod's self-signed
    /// root carries none) filed under `default_domain` when one is given: the domain of the
    /// identity the caller expects.
    pub fn load_with_default(path: &Path, default_domain: Option<&str>) -> Result<Self, Error> {
        let mut domains: Vec<(String, RootCertStore)> = Vec::new();
        for cert in load_certs(path)? {
            let Some(domain) = spiffe_ids_of(&cert)
                .first()
                .map(|id| id.trust_domain().to_owned())
                .or_else(|| default_domain.map(str::to_owned))
            else {
                continue;
            };
            let at = match domains.iter().position(|(d, _)| *d == domain) {
                Some(at) => at,
                None => {
                    domains.push((domain, RootCertStore::empty()));
                    domains.len() - 1
                }
            };
            domains[at].1.add(cert).map_err(|e| Error::MalformedPem {
                path: path.to_path_buf(),
                reason: format!("not a usable CA certificate: {e}"),
            })?;
        }
        if domains.is_empty() {
            return Err(Error::MalformedPem {
                path: path.to_path_buf(),
                reason: "no CA certificate names its trust domain (a URI SAN spiffe://<domain>)"
                    .to_owned(),
            });
        }
        Ok(TrustBundle {
            domains: domains
                .into_iter()
                .map(|(d, roots)| (d, Arc::new(roots)))
                .collect(),
        })
    }

    /// The trust domain of the bundle's first root: this workload's own.
    pub fn local_trust_domain(&self) -> &str {
        self.domains.first().map_or("", |(d, _)| d)
    }

    fn roots_for(&self, trust_domain: &str) -> Option<&Arc<RootCertStore>> {
        self.domains
            .iter()
            .find(|(d, _)| d == trust_domain)
            .map(|(_, roots)| roots)
    }
}

/// The one SPIFFE ID of an SVID: none or several is refused (X.509-SVID section 2).
fn single_spiffe_id(leaf: &CertificateDer<'_>) -> Result<SpiffeId, rustls::Error> {
    match <[SpiffeId; 1]>::try_from(spiffe_ids_of(leaf)) {
        Ok([id]) => Ok(id),
        Err(_) => Err(CertificateError::ApplicationVerificationFailure.into()),
    }
}

/// The signature checks both verifier traits ask for. They depend on the algorithms only,
/// not on the peer's trust domain, so both verifiers answer them as rustls's own do.
macro_rules! signatures_by_algorithms {
    () => {
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
    };
}

#[derive(Debug)]
pub struct SpiffeServerVerifier {
    bundle: TrustBundle,
    /// With no expected ID, the server's must be of this trust domain.
    trust_domain: Option<String>,
    expected: Option<SpiffeId>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl SpiffeServerVerifier {
    /// `trust_domain`: when `expected` is `None`, the leaf must still carry a SPIFFE ID of
    /// this trust domain (if given).
    pub fn new(
        bundle: TrustBundle,
        trust_domain: Option<String>,
        expected: Option<SpiffeId>,
    ) -> Self {
        SpiffeServerVerifier {
            bundle,
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
        let id = single_spiffe_id(end_entity)?;
        let roots =
            self.bundle
                .roots_for(id.trust_domain())
                .ok_or(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer,
                ))?;
        let parsed = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &parsed,
            roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        let acceptable = match (&self.expected, &self.trust_domain) {
            (Some(expected), _) => id == *expected,
            (None, Some(td)) => id.trust_domain() == td,
            (None, None) => true,
        };
        if acceptable {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(CertificateError::NotValidForName.into())
        }
    }

    signatures_by_algorithms!();
}

/// Client certificate verification for mesh peers: the chain is checked by rustls's WebPKI
/// verifier built over the roots of the client's own trust domain only, after the leaf's one
/// SPIFFE ID said which domain that is.
#[derive(Debug)]
pub struct SpiffeClientVerifier {
    domains: Vec<(String, Arc<dyn ClientCertVerifier>)>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl SpiffeClientVerifier {
    pub fn new(
        bundle: &TrustBundle,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, Error> {
        if bundle.domains.is_empty() {
            return Err(Error::Tls(rustls::Error::General(
                "empty trust bundle".into(),
            )));
        }
        let algorithms = provider.signature_verification_algorithms;
        let mut domains = Vec::new();
        for (domain, roots) in &bundle.domains {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                    .build()?;
            domains.push((domain.clone(), verifier));
        }
        Ok(SpiffeClientVerifier {
            domains,
            algorithms,
        })
    }
}

impl ClientCertVerifier for SpiffeClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // Offering no names lets a client with any SVID present it; the domain decides.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let id = single_spiffe_id(end_entity)?;
        let verifier = self
            .domains
            .iter()
            .find(|(d, _)| d == id.trust_domain())
            .map(|(_, v)| v)
            .ok_or(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ))?;
        verifier.verify_client_cert(end_entity, intermediates, now)
    }

    signatures_by_algorithms!();
}
