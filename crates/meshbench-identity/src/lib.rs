//! Identity for meshbench: a built-in certificate authority that issues SPIFFE X.509 SVIDs
//! (ECDSA P-256, URI SAN `spiffe://<trust-domain>/ns/<ns>/sa/<sa>`), and the rustls client and
//! server configurations that present and verify them (TLS 1.3, aws-lc-rs).
//!
//! rustls verifies server certificates against DNS names; a mesh authenticates peers by SPIFFE
//! ID instead, so [`SpiffeServerVerifier`] checks the chain and then the URI SAN, as
//! linkerd2-proxy and ztunnel do.

mod ca;
mod ca_server;
mod ca_server_file;
mod cert_agent_file;
mod error;
mod files;
mod grpc;
mod istio_ca;
mod istio_ca_client;
mod istio_ca_file;
mod linkerd_identity;
mod linkerd_identity_client;
mod pem;
mod published;
mod rotation;
mod spiffe;
mod store;
mod tls;
mod tls_listener;
mod verifier;

pub use ca::{
    CertificateAuthority, IssueOptions, IssuedCa, IssuedSvid, SignedSvid, DEFAULT_SVID_TTL,
};
pub use ca_server::{
    bind_ca_server, ca_service_id, BoundCaServer, CA_HANDSHAKE_TIMEOUT, RENEW_PATH,
};
pub use ca_server_file::CaServerFile;
pub use cert_agent_file::CertAgentFile;
pub use error::Error;
pub use files::{create_private_dir, write_secret};
pub use istio_ca::{
    bind_istio_ca, proto as istio_ca_proto, read_token_file, same_secret, BoundIstioCa,
    IstioCaCaller, IstioCaOptions, ISTIOD_HOSTNAME, ISTIO_CA_KEEPALIVE, ISTIO_CA_MAX_CONNECTIONS,
    ISTIO_CA_MAX_MESSAGE_BYTES, ISTIO_CA_MAX_STREAMS,
};
pub use istio_ca_client::{
    request_istio_svid, IstioSvid, IstioSvidRequest, ISTIO_CA_REQUEST_TIMEOUT,
};
pub use istio_ca_file::{IstioCaCallerFile, IstioCaFile};
pub use linkerd_identity_client::{
    linkerd_csr, linkerd_key_and_csr, request_linkerd_certificate, LinkerdCertificate,
    LinkerdCertifyRequest, LINKERD_IDENTITY_REQUEST_TIMEOUT,
};
pub use pem::{load_certs, load_private_key};
pub use published::{PublishedSvid, PUBLISHED_CERT, PUBLISHED_KEY};
pub use rotation::{rotate_forever, CaClient, DEFAULT_ROTATE_FRACTION, RENEW_TIMEOUT};
pub use spiffe::{dns_names_of, not_after_unix, spiffe_ids_of, CertificateSummary, SpiffeId};
pub use store::{SvidPem, SvidRequest, SvidStore};
pub use tls::{
    client_config, client_config_by_name, client_config_for, client_config_with, server_config,
    server_config_for, server_config_with, CipherSuite, ClientTlsFiles, KeyExchange,
    ServerTlsFiles, TlsOptions,
};
pub use verifier::{SpiffeClientVerifier, SpiffeServerVerifier, TrustBundle};
