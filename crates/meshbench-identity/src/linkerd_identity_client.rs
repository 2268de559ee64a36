//! Asking Linkerd's identity controller for a certificate, as linkerd2-proxy does: a fresh
//! ECDSA P-256 key, a DER CSR whose one DNS name is the identity, and
//! `io.linkerd.proxy.identity.Identity/Certify` over TLS with the workload's service-account
//! token (audience `identity.l5d.io`). Linkerd's identities are DNS names
//! (`<sa>.<ns>.serviceaccount.identity.linkerd.<trust domain>`), not SPIFFE IDs, and the
//! controller signs for its own configured lifetime: a request names no lifetime. The verifier
//! uses it to present Linkerd's own certificates to its proxies.

use std::time::Duration;

use rustls_pki_types::CertificateDer;

use crate::linkerd_identity::proto::identity_client::IdentityClient;
use crate::linkerd_identity::proto::CertifyRequest;
use crate::Error;

/// How long one request may take, from connect to the answer.
pub const LINKERD_IDENTITY_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Where the identity controller is and what to ask it.
#[derive(Debug, Clone)]
pub struct LinkerdCertifyRequest {
    /// `host:port` (the proxies' `LINKERD2_PROXY_IDENTITY_SVC_ADDR`).
    pub address: String,
    /// The identity its serving certificate carries (`LINKERD2_PROXY_IDENTITY_SVC_NAME`).
    pub server_name: String,
    /// The trust anchors, PEM: the controller's serving certificate and the ones it issues
    /// chain to them.
    pub trust_anchors_pem: String,
    /// The identity asked for; the controller checks it against the token.
    pub identity: String,
}

/// What the controller signed, as PEM: the leaf and its intermediates (what a proxy presents)
/// and the key that never left this process.
#[derive(Clone)]
pub struct LinkerdCertificate {
    pub chain_pem: String,
    pub key_pem: String,
    /// The leaf's notAfter, in Unix seconds.
    pub not_after: i64,
}

impl std::fmt::Debug for LinkerdCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of log lines.
        f.debug_struct("LinkerdCertificate")
            .field("chain_pem", &self.chain_pem)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

fn failed(address: &str, reason: impl std::fmt::Display) -> Error {
    Error::LinkerdIdentity {
        address: address.to_owned(),
        reason: reason.to_string(),
    }
}

/// A CSR as the controller accepts one (`checkCSR` in linkerd2's `pkg/identity`): exactly one
/// DNS name, the identity; a common name that is empty or the identity; no URI, IP or e-mail
/// names. DER.
pub fn linkerd_csr(identity: &str, key: &rcgen::KeyPair) -> Result<Vec<u8>, Error> {
    let mut params = rcgen::CertificateParams::new(vec![identity.to_owned()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, identity);
    Ok(params.serialize_request(key)?.der().to_vec())
}

/// What Linkerd's `proxy-identity` writes for a proxy before it starts: a fresh ECDSA P-256
/// key as PKCS#8 DER (`key.p8`) and a CSR for `identity` made with it (`csr.der`).
pub fn linkerd_key_and_csr(identity: &str) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let key = rcgen::KeyPair::generate()?;
    let csr = linkerd_csr(identity, &key)?;
    Ok((key.serialize_der(), csr))
}

/// Asks the controller for `request.identity`, presenting `token`; the signed chain and its
/// key.
pub async fn request_linkerd_certificate(
    request: &LinkerdCertifyRequest,
    token: &str,
) -> Result<LinkerdCertificate, Error> {
    tokio::time::timeout(LINKERD_IDENTITY_REQUEST_TIMEOUT, certify(request, token))
        .await
        .map_err(|_| {
            failed(
                &request.address,
                format!(
                    "no answer within {} s",
                    LINKERD_IDENTITY_REQUEST_TIMEOUT.as_secs()
                ),
            )
        })?
}

async fn certify(
    request: &LinkerdCertifyRequest,
    token: &str,
) -> Result<LinkerdCertificate, Error> {
    let address = request.address.as_str();
    let key = rcgen::KeyPair::generate()?;
    let csr = linkerd_csr(&request.identity, &key)?;
    let (channel, origin) =
        crate::grpc::connect(address, &request.server_name, &request.trust_anchors_pem)
            .await
            .map_err(|e| failed(address, e))?;
    let answer = IdentityClient::with_origin(channel, origin)
        .certify(CertifyRequest {
            identity: request.identity.clone(),
            token: token.trim().as_bytes().to_vec(),
            certificate_signing_request: csr,
        })
        .await
        .map_err(|status| {
            failed(
                address,
                format!("{:?}: {}", status.code(), status.message()),
            )
        })?
        .into_inner();
    let leaf = CertificateDer::from(answer.leaf_certificate);
    let names = crate::spiffe::dns_names_of(&leaf);
    if !names.iter().any(|n| n == &request.identity) {
        return Err(failed(
            address,
            format!("signed {names:?}, not {}", request.identity),
        ));
    }
    let not_after = crate::not_after_unix(&leaf)
        .ok_or_else(|| failed(address, "the leaf has no readable validity"))?;
    let chain: Vec<pem::Pem> = std::iter::once(leaf.to_vec())
        .chain(answer.intermediate_certificates)
        .map(|der| pem::Pem::new("CERTIFICATE", der))
        .collect();
    let chain_pem = pem::encode_many_config(
        &chain,
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    );
    Ok(LinkerdCertificate {
        chain_pem,
        key_pem: key.serialize_pem(),
        not_after,
    })
}
