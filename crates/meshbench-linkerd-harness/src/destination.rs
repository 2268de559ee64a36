//! `io.linkerd.proxy.destination.Destination`: `Get` answers a known service's authority
//! (`<name>:<port>`, the path the outbound policy's balancer names) with its one endpoint,
//! as Linkerd's destination controller answers for a meshed pod: the identity its proxy
//! presents and the HTTP/2 hint, so the client's proxy upgrades HTTP/1 to HTTP/2 between the
//! proxies. The stream then stays open, as a watch does. `GetProfile` is refused: the proxies
//! here are started with no profile suffixes and networks, so they never ask.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use linkerd2_proxy_api::destination::destination_server::Destination;
use linkerd2_proxy_api::destination::{
    protocol_hint, tls_identity, update, DestinationProfile, GetDestination, ProtocolHint,
    TlsIdentity, Update, WeightedAddr, WeightedAddrSet,
};
use tonic::{Request, Response, Status};

use crate::Service;

pub(crate) type Watch<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// One answer, then an open stream that never sends again: what a watch of an unchanging
/// object looks like.
pub(crate) fn one_then_open<T: Send + 'static>(first: T) -> Watch<T> {
    Box::pin(futures::StreamExt::chain(
        futures::stream::once(std::future::ready(Ok(first))),
        futures::stream::pending(),
    ))
}

#[derive(Clone)]
pub(crate) struct Destinations {
    pub services: Arc<Vec<Service>>,
}

/// `<name>:<port>` of a service, the path `Get` is asked for.
pub(crate) fn authority(service: &Service) -> String {
    format!("{}:{}", service.name, service.address.port())
}

/// The endpoint set of `service`: its one endpoint, its proxy's identity, the HTTP/2 hint.
fn endpoints(service: &Service) -> Result<Update, Status> {
    let name = crate::linkerd_name(&service.identity)
        .ok_or_else(|| Status::internal(format!("{} has no Linkerd name", service.identity)))?;
    let tls_identity = TlsIdentity {
        strategy: Some(tls_identity::Strategy::DnsLikeIdentity(
            tls_identity::DnsLikeIdentity { name: name.clone() },
        )),
        server_name: Some(tls_identity::DnsLikeIdentity { name }),
    };
    Ok(Update {
        update: Some(update::Update::Add(WeightedAddrSet {
            addrs: vec![WeightedAddr {
                addr: Some(service.endpoint.into()),
                weight: 1,
                metric_labels: Default::default(),
                tls_identity: Some(tls_identity),
                protocol_hint: Some(ProtocolHint {
                    protocol: Some(protocol_hint::Protocol::H2(protocol_hint::H2 {})),
                    opaque_transport: None,
                }),
                authority_override: None,
                http2: None,
                resource_ref: None,
            }],
            metric_labels: Default::default(),
        })),
    })
}

impl Destinations {
    fn get_now(&self, request: &GetDestination) -> Result<Watch<Update>, Status> {
        let service = self
            .services
            .iter()
            .find(|s| authority(s) == request.path)
            .ok_or_else(|| Status::not_found(format!("no service {:?}", request.path)))?;
        Ok(one_then_open(endpoints(service)?))
    }
}

#[tonic::async_trait]
impl Destination for Destinations {
    type GetStream = Watch<Update>;
    type GetProfileStream = Watch<DestinationProfile>;

    async fn get(
        &self,
        request: Request<GetDestination>,
    ) -> Result<Response<Self::GetStream>, Status> {
        self.get_now(request.get_ref()).map(Response::new)
    }

    async fn get_profile(
        &self,
        request: Request<GetDestination>,
    ) -> Result<Response<Self::GetProfileStream>, Status> {
        Err(Status::invalid_argument(format!(
            "no profiles here ({:?})",
            request.get_ref().path
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_known_authority_gets_its_endpoint_with_identity_and_hint() {
        let service = crate::policy::tests::service();
        let destinations = Destinations {
            services: Arc::new(vec![service.clone()]),
        };
        let mut stream = destinations
            .get_now(&GetDestination {
                scheme: "k8s".into(),
                path: "server.bench.svc.cluster.local:8080".into(),
                context_token: String::new(),
            })
            .unwrap();
        let Some(Ok(Update {
            update: Some(update::Update::Add(set)),
        })) = stream.next().await
        else {
            panic!("no endpoints")
        };
        let addr = &set.addrs[0];
        assert_eq!(
            std::net::SocketAddr::try_from(addr.addr.unwrap()).unwrap(),
            service.endpoint
        );
        let Some(tls_identity::Strategy::DnsLikeIdentity(id)) =
            addr.tls_identity.clone().unwrap().strategy
        else {
            panic!("no identity")
        };
        assert_eq!(
            id.name,
            "server.bench.serviceaccount.identity.linkerd.cluster.local"
        );
        assert!(matches!(
            addr.protocol_hint.as_ref().unwrap().protocol,
            Some(protocol_hint::Protocol::H2(_))
        ));
        let unknown = destinations.get_now(&GetDestination {
            scheme: "k8s".into(),
            path: "nope:1".into(),
            context_token: String::new(),
        });
        assert_eq!(unknown.err().unwrap().code(), tonic::Code::NotFound);
    }
}
