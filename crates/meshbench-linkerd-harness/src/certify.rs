//! `io.linkerd.proxy.identity.Identity/Certify`: the proxy sends the identity it wants, its
//! token and a DER CSR of its own P-256 key; the harness signs it with meshbench's CA when the
//! token was given for that identity. The leaf carries the Linkerd name as its one SAN, a DNS
//! name (what linkerd2-proxy checks against `LINKERD2_PROXY_IDENTITY_LOCAL_NAME`, and what
//! Linkerd's controller issues: no URI), and chains straight to the CA, the proxies' trust
//! anchor. The CSR's own names
//! are ignored, as Linkerd's controller refuses any but the identity: a proxy cannot widen
//! what it is.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use linkerd2_proxy_api::identity::identity_server::Identity;
use linkerd2_proxy_api::identity::{CertifyRequest, CertifyResponse};
use meshbench_identity::{same_secret, CertificateAuthority, SpiffeId};
use tonic::{Request, Response, Status};

use crate::Workload;

#[derive(Clone)]
pub(crate) struct Certifier {
    pub ca: Arc<CertificateAuthority>,
    pub workloads: Arc<Vec<Workload>>,
    pub ttl: Duration,
}

impl Certifier {
    /// The identity the token was given for. The proxy sends its token file's bytes as they
    /// are; a trailing newline is not part of the token.
    fn caller(&self, token: &[u8]) -> Result<&SpiffeId, Status> {
        let token = token.trim_ascii();
        self.workloads
            .iter()
            .find(|w| same_secret(w.token.as_bytes(), token))
            .map(|w| &w.identity)
            .ok_or_else(|| Status::unauthenticated("unknown token"))
    }

    fn certify_now(&self, request: &CertifyRequest) -> Result<CertifyResponse, Status> {
        let id = self.caller(&request.token)?;
        let name = crate::linkerd_name(id)
            .ok_or_else(|| Status::internal(format!("{id} has no Linkerd name")))?;
        if request.identity != name {
            return Err(Status::permission_denied(format!(
                "the token is for {name}, not {:?}",
                request.identity
            )));
        }
        let (signed, leaf) = self
            .ca
            .sign_der_request_for_dns(&request.certificate_signing_request, id, &name, self.ttl)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let valid_until = UNIX_EPOCH
            + Duration::from_secs(u64::try_from(signed.not_after.unix_timestamp()).unwrap_or(0));
        tracing::debug!(%name, not_after = %signed.not_after, "certified a linkerd2-proxy");
        Ok(CertifyResponse {
            leaf_certificate: leaf,
            intermediate_certificates: vec![],
            valid_until: Some(valid_until.into()),
        })
    }
}

#[tonic::async_trait]
impl Identity for Certifier {
    async fn certify(
        &self,
        request: Request<CertifyRequest>,
    ) -> Result<Response<CertifyResponse>, Status> {
        self.certify_now(request.get_ref()).map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certifier() -> Certifier {
        let ca = CertificateAuthority::generate("cluster.local").unwrap();
        Certifier {
            ca: Arc::new(ca),
            workloads: Arc::new(vec![Workload {
                identity: SpiffeId::parse("spiffe://cluster.local/ns/bench/sa/client").unwrap(),
                token: "s3cret".into(),
            }]),
            ttl: Duration::from_secs(3600),
        }
    }

    fn request(identity: &str, token: &str) -> CertifyRequest {
        let key = rcgen::KeyPair::generate().unwrap();
        CertifyRequest {
            identity: identity.into(),
            token: token.as_bytes().to_vec(),
            certificate_signing_request: meshbench_identity::linkerd_csr(identity, &key).unwrap(),
        }
    }

    const CLIENT: &str = "client.bench.serviceaccount.identity.linkerd.cluster.local";

    #[test]
    fn a_proxy_gets_its_own_name_and_nothing_else_for_its_token() {
        let answer = certifier()
            .certify_now(&request(CLIENT, "s3cret\n"))
            .unwrap();
        let leaf = rustls_pki_types::CertificateDer::from(answer.leaf_certificate);
        assert_eq!(meshbench_identity::dns_names_of(&leaf), vec![CLIENT]);
        assert!(meshbench_identity::spiffe_ids_of(&leaf).is_empty());
        assert!(answer.valid_until.unwrap().seconds > 0);
    }

    #[test]
    fn another_identity_or_token_or_a_broken_csr_is_refused() {
        let c = certifier();
        let other = "server.bench.serviceaccount.identity.linkerd.cluster.local";
        assert_eq!(
            c.certify_now(&request(other, "s3cret")).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        assert_eq!(
            c.certify_now(&request(CLIENT, "guess")).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        let mut broken = request(CLIENT, "s3cret");
        broken.certificate_signing_request.truncate(20);
        assert_eq!(
            c.certify_now(&broken).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
