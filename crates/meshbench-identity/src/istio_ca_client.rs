//! Asking an Istio CA (istiod, or `meshbench ca istio`) for an SVID, as ztunnel and
//! istio-agent do: a fresh ECDSA P-256 key, a CSR naming the identity, and
//! `IstioCertificateService/CreateCertificate` over TLS with the caller's bearer token. The
//! verifier uses it to present the mesh's own certificates (valid, and expired) to its proxies.

use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::istio_ca::proto::istio_certificate_service_client::IstioCertificateServiceClient;
use crate::istio_ca::proto::IstioCertificateRequest;
use crate::spiffe::SpiffeId;
use crate::Error;

/// How long one request may take, from connect to the answer.
pub const ISTIO_CA_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// What the CA signed, as PEM: the leaf and any intermediates (what a proxy presents), the
/// root the chain ends in, and the key that never left this process.
#[derive(Clone)]
pub struct IstioSvid {
    pub chain_pem: String,
    pub root_pem: Option<String>,
    pub key_pem: String,
    /// The leaf's notAfter, in Unix seconds.
    pub not_after: i64,
}

/// Where the CA is and what to ask it.
#[derive(Debug, Clone)]
pub struct IstioSvidRequest {
    /// `host:port`.
    pub address: String,
    /// The name its serving certificate must carry (`istiod.istio-system.svc`).
    pub server_name: String,
    /// The root that serving certificate chains to, PEM.
    pub root_pem: String,
    /// The identity asked for; the CA decides from the token, and the answer is checked.
    pub identity: SpiffeId,
    /// Lifetime asked for (istiod caps it at its maximum).
    pub ttl: Duration,
    /// The `ClusterID` header istiod reads to pick the cluster that reviews the token.
    pub cluster_id: String,
}

impl std::fmt::Debug for IstioSvid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of log lines.
        f.debug_struct("IstioSvid")
            .field("chain_pem", &self.chain_pem)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

fn failed(address: &str, reason: impl std::fmt::Display) -> Error {
    Error::IstioCa {
        address: address.to_owned(),
        reason: reason.to_string(),
    }
}

/// Asks the CA for `request.identity`, presenting `token`; the signed chain and its key.
pub async fn request_istio_svid(
    request: &IstioSvidRequest,
    token: &str,
) -> Result<IstioSvid, Error> {
    tokio::time::timeout(ISTIO_CA_REQUEST_TIMEOUT, request_once(request, token))
        .await
        .map_err(|_| {
            failed(
                &request.address,
                format!("no answer within {} s", ISTIO_CA_REQUEST_TIMEOUT.as_secs()),
            )
        })?
}

async fn request_once(request: &IstioSvidRequest, token: &str) -> Result<IstioSvid, Error> {
    let address = request.address.as_str();
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = vec![rcgen::SanType::URI(
        request
            .identity
            .to_string()
            .try_into()
            .map_err(|e| failed(address, format!("identity: {e}")))?,
    )];
    let csr = params.serialize_request(&key)?.pem()?;

    let (channel, origin) = crate::grpc::connect(address, &request.server_name, &request.root_pem)
        .await
        .map_err(|e| failed(address, e))?;
    let mut client = IstioCertificateServiceClient::with_origin(channel, origin);
    let mut call = tonic::Request::new(IstioCertificateRequest {
        csr,
        validity_duration: i64::try_from(request.ttl.as_secs()).unwrap_or(i64::MAX),
        metadata: None,
    });
    let header = |value: String| {
        value
            .parse::<tonic::metadata::AsciiMetadataValue>()
            .map_err(|_| failed(address, "a header value is not ASCII"))
    };
    call.metadata_mut()
        .insert("authorization", header(format!("Bearer {}", token.trim()))?);
    call.metadata_mut()
        .insert("clusterid", header(request.cluster_id.clone())?);
    let answer = client
        .create_certificate(call)
        .await
        .map_err(|status| {
            failed(
                address,
                format!("{:?}: {}", status.code(), status.message()),
            )
        })?
        .into_inner();
    let Some((leaf, rest)) = answer.cert_chain.split_first() else {
        return Err(failed(address, "an empty certificate chain"));
    };
    let leaf_der = CertificateDer::from_pem_slice(leaf.as_bytes())
        .map_err(|e| failed(address, format!("the leaf: {e}")))?;
    let got = crate::spiffe_ids_of(&leaf_der);
    if !got.contains(&request.identity) {
        return Err(failed(
            address,
            format!(
                "signed {:?}, not {}",
                got.iter().map(ToString::to_string).collect::<Vec<_>>(),
                request.identity
            ),
        ));
    }
    let not_after = crate::not_after_unix(&leaf_der)
        .ok_or_else(|| failed(address, "the leaf has no readable validity"))?;
    // The chain ends in the root (when it has more than the leaf); the proxy presents the rest.
    let (intermediates, root) = match rest.split_last() {
        Some((root, intermediates)) => (intermediates, Some(root.clone())),
        None => (rest, None),
    };
    let chain_pem = std::iter::once(leaf)
        .chain(intermediates)
        .map(|pem| format!("{}\n", pem.trim_end()))
        .collect();
    Ok(IstioSvid {
        chain_pem,
        root_pem: root,
        key_pem: key.serialize_pem(),
        not_after,
    })
}
