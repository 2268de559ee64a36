//! The harness over a real socket and HTTP/2, called with the gRPC clients linkerd2-proxy's
//! own protocol crate generates: it certifies the proxy its token was given for and nothing
//! else, answers a known service's policy and endpoints and nothing more, and refuses what a
//! stranger, an impersonator or a flood of bytes asks.

use std::time::Duration;

use futures::StreamExt;
use linkerd2_proxy_api::destination::destination_client::DestinationClient;
use linkerd2_proxy_api::destination::{update, GetDestination};
use linkerd2_proxy_api::identity::identity_client::IdentityClient;
use linkerd2_proxy_api::identity::CertifyRequest;
use linkerd2_proxy_api::inbound::inbound_server_policies_client::InboundServerPoliciesClient;
use linkerd2_proxy_api::inbound::PortSpec;
use linkerd2_proxy_api::outbound::outbound_policies_client::OutboundPoliciesClient;
use linkerd2_proxy_api::outbound::{traffic_spec, TrafficSpec};
use meshbench_identity::{CertificateAuthority, SpiffeId};
use meshbench_linkerd_harness::{
    bind, HarnessOptions, Service, Workload, HARNESS_MAX_MESSAGE_BYTES,
};
use tonic::transport::Channel;
use tonic::Code;

const TOKEN: &str = "client-token-0123456789";
const CLIENT: &str = "client.bench.serviceaccount.identity.linkerd.cluster.local";

fn id(text: &str) -> SpiffeId {
    SpiffeId::parse(text).unwrap()
}

async fn serve() -> (tempfile::TempDir, Channel) {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::init(dir.path(), "cluster.local").unwrap();
    let options = HarnessOptions {
        workloads: vec![Workload {
            identity: id("spiffe://cluster.local/ns/bench/sa/client"),
            token: TOKEN.into(),
        }],
        services: vec![Service {
            address: "10.200.0.2:8080".parse().unwrap(),
            name: "server.bench.svc.cluster.local".into(),
            endpoint: "10.200.0.2:8080".parse().unwrap(),
            identity: id("spiffe://cluster.local/ns/bench/sa/server"),
        }],
        ttl: Duration::from_secs(3600),
    };
    let harness = bind(ca, "127.0.0.1:0".parse().unwrap(), options)
        .await
        .unwrap();
    let addr = harness.local_addr().unwrap();
    tokio::spawn(harness.serve(std::future::pending()));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (dir, channel)
}

fn certify(identity: &str, token: &str) -> CertifyRequest {
    let (_key, csr) = meshbench_identity::linkerd_key_and_csr(identity).unwrap();
    CertifyRequest {
        identity: identity.into(),
        token: token.as_bytes().to_vec(),
        certificate_signing_request: csr,
    }
}

#[tokio::test]
async fn a_proxy_is_certified_for_its_token_s_identity_and_strangers_are_refused() {
    let (_dir, channel) = serve().await;
    let mut identity = IdentityClient::new(channel);
    let answer = identity
        .certify(certify(CLIENT, TOKEN))
        .await
        .unwrap()
        .into_inner();
    let leaf = rustls_pki_types::CertificateDer::from(answer.leaf_certificate);
    assert_eq!(meshbench_identity::dns_names_of(&leaf), vec![CLIENT]);
    assert!(answer.valid_until.is_some());

    let mut code = async |request| identity.certify(request).await.unwrap_err().code();
    assert_eq!(
        code(certify(CLIENT, "client-token-0123456780")).await,
        Code::Unauthenticated
    );
    assert_eq!(
        code(certify(
            "server.bench.serviceaccount.identity.linkerd.cluster.local",
            TOKEN
        ))
        .await,
        Code::PermissionDenied
    );
    let mut junk = certify(CLIENT, TOKEN);
    junk.certificate_signing_request = b"not a CSR".to_vec();
    assert_eq!(code(junk).await, Code::InvalidArgument);
    let mut huge = certify(CLIENT, TOKEN);
    huge.certificate_signing_request = vec![0; HARNESS_MAX_MESSAGE_BYTES + 1];
    assert_eq!(
        code(huge).await,
        Code::OutOfRange,
        "a message over the limit is not read"
    );
}

#[tokio::test]
async fn a_known_service_is_routed_through_its_endpoint_with_identity_and_others_are_not_found() {
    let (_dir, channel) = serve().await;
    let spec = |addr: &str| TrafficSpec {
        source_workload: r#"{"ns":"bench","pod":"client"}"#.into(),
        target: Some(traffic_spec::Target::Addr(
            addr.parse::<std::net::SocketAddr>().unwrap().into(),
        )),
    };
    let mut policies = OutboundPoliciesClient::new(channel.clone());
    let mut watch = policies
        .watch(spec("10.200.0.2:8080"))
        .await
        .unwrap()
        .into_inner();
    let policy = watch.next().await.unwrap().unwrap();
    assert!(format!("{policy:?}").contains("server.bench.svc.cluster.local:8080"));
    // The watch stays open after its answer.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), watch.next())
            .await
            .is_err()
    );
    let unknown = policies.watch(spec("10.200.0.9:8080")).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    let mut destinations = DestinationClient::new(channel.clone());
    let mut endpoints = destinations
        .get(GetDestination {
            scheme: "k8s".into(),
            path: "server.bench.svc.cluster.local:8080".into(),
            context_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let Some(update::Update::Add(set)) = endpoints.next().await.unwrap().unwrap().update else {
        panic!("no endpoints");
    };
    assert!(format!("{:?}", set.addrs[0].tls_identity)
        .contains("server.bench.serviceaccount.identity.linkerd.cluster.local"));

    let mut inbound = InboundServerPoliciesClient::new(channel);
    let server = inbound
        .watch_port(PortSpec {
            workload: r#"{"ns":"bench","pod":"server"}"#.into(),
            port: 8080,
        })
        .await
        .unwrap()
        .into_inner()
        .next()
        .await
        .unwrap()
        .unwrap();
    assert!(format!("{server:?}").contains(CLIENT));
}

#[tokio::test]
async fn a_harness_on_an_address_beyond_loopback_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::init(dir.path(), "cluster.local").unwrap();
    let options = HarnessOptions {
        workloads: vec![],
        services: vec![],
        ttl: Duration::from_secs(60),
    };
    let error = bind(ca, "0.0.0.0:0".parse().unwrap(), options)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("listen") && error.contains("0.0.0.0:0"),
        "{error}"
    );
}
