//! meshbench's CA answering Istio's certificate API over real TLS and HTTP/2, called with the
//! gRPC client generated from the same interface: it signs the identity the bearer token was
//! given for and nothing else, and refuses what a stranger or an impersonator asks.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_identity::istio_ca_proto::istio_certificate_service_client::IstioCertificateServiceClient;
use meshbench_identity::istio_ca_proto::IstioCertificateRequest;
use meshbench_identity::{
    bind_istio_ca, request_istio_svid, spiffe_ids_of, CertificateAuthority, IstioCaCaller,
    IstioCaOptions, IstioSvidRequest, SpiffeId, ISTIO_CA_MAX_MESSAGE_BYTES,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tonic::Code;

const TOKEN: &str = "server-token-0123456789";

struct H2(http2::SendRequest<tonic::body::Body>);

impl tower_service::Service<http::Request<tonic::body::Body>> for H2 {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// A CSR whose key the test keeps, asking for `names` (which the CA must ignore).
fn csr(names: &[&str]) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = names
        .iter()
        .map(|n| rcgen::SanType::URI((*n).try_into().unwrap()))
        .collect();
    params.serialize_request(&key).unwrap().pem().unwrap()
}

struct Served {
    _dir: tempfile::TempDir,
    ca_pem: String,
    addr: std::net::SocketAddr,
    client: IstioCertificateServiceClient<H2>,
}

async fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::init(dir.path(), "cluster.local").unwrap();
    let ca_pem = ca.cert_pem().to_owned();
    let server = bind_istio_ca(
        ca,
        "127.0.0.1:0".parse().unwrap(),
        vec![IstioCaCaller {
            token: TOKEN.into(),
            identity: SpiffeId::parse("spiffe://cluster.local/ns/bench/sa/server").unwrap(),
        }],
        &IstioCaOptions {
            max_ttl: Duration::from_secs(3600),
            handshake_timeout: Duration::from_secs(5),
            dns_names: vec![],
            ip_addresses: vec!["127.0.0.1".parse().unwrap()],
        },
    )
    .await
    .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(std::future::pending()));

    // As ztunnel's CA client connects: the CA's root, the address's own name, ALPN h2.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .expect("the serving certificate verifies for the address the client dialed");
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(connection);
    let origin: http::Uri = format!("https://{addr}").parse().unwrap();
    Served {
        _dir: dir,
        ca_pem,
        addr,
        client: IstioCertificateServiceClient::with_origin(H2(sender), origin),
    }
}

fn request(csr: String, token: Option<&str>) -> tonic::Request<IstioCertificateRequest> {
    let mut request = tonic::Request::new(IstioCertificateRequest {
        csr,
        validity_duration: 600,
        metadata: None,
    });
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

#[tokio::test]
async fn the_token_s_identity_is_signed_whatever_the_csr_asks_for() {
    let mut served = serve().await;
    let answer = served
        .client
        .create_certificate(request(
            csr(&["spiffe://cluster.local/ns/istio-system/sa/istiod"]),
            Some(TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.cert_chain.len(), 2, "{:?}", answer.cert_chain);
    assert_eq!(answer.cert_chain[1], served.ca_pem, "the root comes last");
    let leaf = CertificateDer::from_pem_slice(answer.cert_chain[0].as_bytes()).unwrap();
    let ids: Vec<String> = spiffe_ids_of(&leaf).iter().map(|i| i.to_string()).collect();
    assert_eq!(ids, ["spiffe://cluster.local/ns/bench/sa/server"]);
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let validity = parsed.validity();
    let lifetime = validity.not_after.timestamp() - validity.not_before.timestamp();
    // The 600 s asked for, plus the CA's backdating of not_before.
    assert!((600..=600 + 600).contains(&lifetime), "{lifetime}");
}

#[tokio::test]
async fn meshbench_s_istio_client_gets_a_chain_it_can_present_and_names_a_refusal() {
    let served = serve().await;
    let request = IstioSvidRequest {
        address: served.addr.to_string(),
        server_name: served.addr.ip().to_string(),
        root_pem: served.ca_pem.clone(),
        identity: SpiffeId::parse("spiffe://cluster.local/ns/bench/sa/server").unwrap(),
        ttl: Duration::from_secs(60),
        cluster_id: "Kubernetes".into(),
    };
    let svid = request_istio_svid(&request, TOKEN).await.unwrap();
    assert_eq!(svid.root_pem.as_deref(), Some(served.ca_pem.as_str()));
    let leaf = CertificateDer::from_pem_slice(svid.chain_pem.as_bytes()).unwrap();
    assert_eq!(
        spiffe_ids_of(&leaf)[0].to_string(),
        "spiffe://cluster.local/ns/bench/sa/server"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now + 50..=now + 70).contains(&svid.not_after),
        "{}",
        svid.not_after
    );
    // The key matches the certificate: rustls accepts the pair as a client identity.
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(svid.key_pem.as_bytes()).unwrap();
    rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_client_auth_cert(vec![leaf], key)
    .unwrap();

    // Another identity than the token's: the CA signs the token's, and the client says so.
    let mut other = request.clone();
    other.identity = SpiffeId::parse("spiffe://cluster.local/ns/bench/sa/client").unwrap();
    let error = request_istio_svid(&other, TOKEN)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("not spiffe://cluster.local/ns/bench/sa/client"),
        "{error}"
    );
    let error = request_istio_svid(&request, "wrong")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("Unauthenticated"), "{error}");
}

#[tokio::test]
async fn strangers_impersonators_and_junk_are_refused_with_grpc_codes() {
    let mut served = serve().await;
    let mut code = async |request| {
        served
            .client
            .create_certificate(request)
            .await
            .expect_err("refused")
            .code()
    };
    assert_eq!(code(request(csr(&[]), None)).await, Code::Unauthenticated);
    assert_eq!(
        code(request(csr(&[]), Some("server-token-0123456780"))).await,
        Code::Unauthenticated
    );
    let mut impersonating = request(csr(&[]), Some(TOKEN));
    impersonating.get_mut().metadata = Some(prost_types::Struct {
        fields: [(
            "ImpersonatedIdentity".to_owned(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(
                    "spiffe://cluster.local/ns/bench/sa/client".into(),
                )),
            },
        )]
        .into(),
    });
    assert_eq!(code(impersonating).await, Code::PermissionDenied);
    assert_eq!(
        code(request("not a CSR".into(), Some(TOKEN))).await,
        Code::InvalidArgument
    );
    let huge = "A".repeat(ISTIO_CA_MAX_MESSAGE_BYTES + 1);
    assert_eq!(
        code(request(huge, Some(TOKEN))).await,
        Code::OutOfRange,
        "a message over the limit is not read"
    );
}

/// The checked-in code of Istio's and Linkerd's certificate APIs is what their `.proto` files
/// generate (the build compiles no protobuf code generator).
#[test]
fn the_checked_in_protobuf_code_is_current() {
    use meshbench_testkit::protobuf::{check_generated_code, Proto};
    check_generated_code(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        &[
            Proto {
                file: "istio_ca.proto",
                server: true,
            },
            Proto {
                file: "linkerd_identity.proto",
                server: false,
            },
        ],
    );
}
