//! The policy API linkerd2-proxy requires (`LINKERD2_PROXY_POLICY_SVC_ADDR`).
//!
//! - **Outbound** (`OutboundPolicies.Watch`, per original destination): a known service's
//!   address is answered with the shape Linkerd's policy controller gives a Service with no
//!   routes of its own (`to_proto` and `default_outbound_service_route` in linkerd2's
//!   `policy-controller/grpc`): protocol detection with a 10 s timeout, one default HTTP
//!   route (prefix `/`) for HTTP/1 and HTTP/2 and one opaque route, all to one backend, a
//!   peak-EWMA balancer (30 ms default RTT, 10 s decay; queue of 100, 3 s fail-fast) whose
//!   endpoints come from `Destination.Get`. Any other address is NotFound, which the proxy
//!   takes as "forward as it is, without mesh TLS": the harness never hides such a fallback
//!   behind an answer.
//! - **Inbound** (`InboundServerPolicies.WatchPort`): every port of every workload detects
//!   its protocol (10 s) and admits only the workloads the harness certifies, over mesh TLS
//!   (localhost is always admitted by the proxy itself).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use linkerd2_proxy_api::inbound::inbound_server_policies_server::InboundServerPolicies;
use linkerd2_proxy_api::inbound::{self, PortSpec};
use linkerd2_proxy_api::meta::{metadata, Metadata, Resource};
use linkerd2_proxy_api::outbound::outbound_policies_server::OutboundPolicies;
use linkerd2_proxy_api::outbound::{self, traffic_spec, OutboundPolicy, TrafficSpec};
use linkerd2_proxy_api::{http_route, net};
use tonic::{Request, Response, Status};

use crate::destination::{authority, one_then_open, Watch};
use crate::{Service, Workload};

/// How long either side waits for the first bytes to detect a protocol (the policy
/// controller's value).
const DETECT_TIMEOUT: Duration = Duration::from_secs(10);

fn proto_duration(d: Duration) -> Option<prost_types::Duration> {
    d.try_into().ok()
}

fn default_meta(name: &str) -> Option<Metadata> {
    Some(Metadata {
        kind: Some(metadata::Kind::Default(name.to_owned())),
    })
}

/// `<name>.<ns>.svc...` split into its Service name and namespace.
fn service_ref(service: &Service) -> (String, String) {
    let mut parts = service.name.split('.');
    let name = parts.next().unwrap_or_default().to_owned();
    let namespace = parts.next().unwrap_or_default().to_owned();
    (name, namespace)
}

fn service_meta(service: &Service) -> Option<Metadata> {
    let (name, namespace) = service_ref(service);
    Some(Metadata {
        kind: Some(metadata::Kind::Resource(Resource {
            group: "core".into(),
            kind: "Service".into(),
            name,
            namespace,
            section: String::new(),
            port: u32::from(service.address.port()),
        })),
    })
}

fn balancer(service: &Service) -> outbound::Backend {
    use outbound::backend::{balance_p2c, endpoint_discovery, BalanceP2c, EndpointDiscovery};
    outbound::Backend {
        metadata: service_meta(service),
        queue: Some(outbound::Queue {
            capacity: 100,
            failfast_timeout: proto_duration(Duration::from_secs(3)),
        }),
        kind: Some(outbound::backend::Kind::Balancer(BalanceP2c {
            discovery: Some(EndpointDiscovery {
                kind: Some(endpoint_discovery::Kind::Dst(
                    endpoint_discovery::DestinationGet {
                        path: authority(service),
                    },
                )),
            }),
            load: Some(balance_p2c::Load::PeakEwma(balance_p2c::PeakEwma {
                default_rtt: proto_duration(Duration::from_millis(30)),
                decay: proto_duration(Duration::from_secs(10)),
            })),
        })),
    }
}

fn http_route(backend: &outbound::Backend) -> outbound::HttpRoute {
    use outbound::http_route::{distribution, Distribution, RouteBackend, Rule};
    outbound::HttpRoute {
        metadata: default_meta("http"),
        hosts: vec![],
        rules: vec![Rule {
            matches: vec![http_route::HttpRouteMatch {
                path: Some(http_route::PathMatch {
                    kind: Some(http_route::path_match::Kind::Prefix("/".into())),
                }),
                ..Default::default()
            }],
            backends: Some(Distribution {
                kind: Some(distribution::Kind::FirstAvailable(
                    distribution::FirstAvailable {
                        backends: vec![RouteBackend {
                            backend: Some(backend.clone()),
                            filters: vec![],
                            ..Default::default()
                        }],
                    },
                )),
            }),
            timeouts: Some(Default::default()),
            ..Default::default()
        }],
    }
}

fn opaque_route(backend: &outbound::Backend) -> outbound::OpaqueRoute {
    use outbound::opaque_route::{distribution, Distribution, RouteBackend, Rule};
    outbound::OpaqueRoute {
        metadata: default_meta("opaq"),
        rules: vec![Rule {
            backends: Some(Distribution {
                kind: Some(distribution::Kind::FirstAvailable(
                    distribution::FirstAvailable {
                        backends: vec![RouteBackend {
                            backend: Some(backend.clone()),
                            filters: vec![],
                        }],
                    },
                )),
            }),
            filters: vec![],
        }],
    }
}

/// The policy of a Service without routes of its own.
pub(crate) fn service_policy(service: &Service) -> OutboundPolicy {
    use outbound::proxy_protocol::{Detect, Http1, Http2, Kind, Opaque};
    let backend = balancer(service);
    let route = http_route(&backend);
    OutboundPolicy {
        metadata: service_meta(service),
        protocol: Some(outbound::ProxyProtocol {
            kind: Some(Kind::Detect(Detect {
                timeout: proto_duration(DETECT_TIMEOUT),
                opaque: Some(Opaque {
                    routes: vec![opaque_route(&backend)],
                }),
                http1: Some(Http1 {
                    routes: vec![route.clone()],
                    failure_accrual: None,
                }),
                http2: Some(Http2 {
                    routes: vec![route],
                    failure_accrual: None,
                }),
            })),
        }),
    }
}

#[derive(Clone)]
pub(crate) struct Policies {
    pub services: Arc<Vec<Service>>,
    pub workloads: Arc<Vec<Workload>>,
}

impl Policies {
    fn outbound(&self, spec: &TrafficSpec) -> Result<OutboundPolicy, Status> {
        let target = match &spec.target {
            Some(traffic_spec::Target::Addr(addr)) => SocketAddr::try_from(*addr)
                .map_err(|_| Status::invalid_argument("target: not an IP address"))?,
            Some(traffic_spec::Target::Authority(a)) => {
                return Err(Status::not_found(format!("no service by name ({a:?})")))
            }
            None => return Err(Status::invalid_argument("no target")),
        };
        self.services
            .iter()
            .find(|s| s.address == target)
            .map(service_policy)
            .ok_or_else(|| Status::not_found(format!("no service at {target}")))
    }

    /// Every port: protocol detection, the certified workloads over mesh TLS.
    fn inbound(&self) -> Result<inbound::Server, Status> {
        use inbound::authn::permit_mesh_tls::{Clients, PermitClientIdentities};
        use inbound::authn::{Permit, PermitMeshTls};
        let identities = self
            .workloads
            .iter()
            .filter_map(|w| crate::linkerd_name(&w.identity))
            .map(|name| inbound::Identity { name })
            .collect();
        Ok(inbound::Server {
            protocol: Some(inbound::ProxyProtocol {
                kind: Some(inbound::proxy_protocol::Kind::Detect(
                    inbound::proxy_protocol::Detect {
                        timeout: proto_duration(DETECT_TIMEOUT),
                        http_routes: vec![],
                        http_local_rate_limit: None,
                    },
                )),
            }),
            server_ips: vec![],
            authorizations: vec![inbound::Authz {
                networks: everywhere(),
                authentication: Some(inbound::Authn {
                    permit: Some(Permit::MeshTls(PermitMeshTls {
                        clients: Some(Clients::Identities(PermitClientIdentities {
                            identities,
                            suffixes: vec![],
                        })),
                    })),
                }),
                labels: HashMap::new(),
                metadata: default_meta("bench-workloads"),
            }],
            labels: HashMap::from([
                ("name".to_owned(), "bench-workloads".to_owned()),
                ("kind".to_owned(), "default".to_owned()),
            ]),
        })
    }
}

/// Every IPv4 and every IPv6 address.
fn everywhere() -> Vec<inbound::Network> {
    [
        std::net::IpAddr::from([0u8; 4]),
        std::net::IpAddr::from([0u16; 8]),
    ]
    .into_iter()
    .map(|ip| inbound::Network {
        net: Some(net::IpNetwork {
            ip: Some(ip.into()),
            prefix_len: 0,
        }),
        except: vec![],
    })
    .collect()
}

#[tonic::async_trait]
impl OutboundPolicies for Policies {
    type WatchStream = Watch<OutboundPolicy>;

    async fn get(&self, request: Request<TrafficSpec>) -> Result<Response<OutboundPolicy>, Status> {
        self.outbound(request.get_ref()).map(Response::new)
    }

    async fn watch(
        &self,
        request: Request<TrafficSpec>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.outbound(request.get_ref())
            .map(|policy| Response::new(one_then_open(policy)))
    }
}

#[tonic::async_trait]
impl InboundServerPolicies for Policies {
    type WatchPortStream = Watch<inbound::Server>;

    async fn get_port(
        &self,
        _request: Request<PortSpec>,
    ) -> Result<Response<inbound::Server>, Status> {
        self.inbound().map(Response::new)
    }

    async fn watch_port(
        &self,
        _request: Request<PortSpec>,
    ) -> Result<Response<Self::WatchPortStream>, Status> {
        self.inbound()
            .map(|server| Response::new(one_then_open(server)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use meshbench_identity::SpiffeId;

    pub(crate) fn service() -> Service {
        Service {
            address: "10.200.0.2:8080".parse().unwrap(),
            name: "server.bench.svc.cluster.local".into(),
            endpoint: "10.200.0.2:8080".parse().unwrap(),
            identity: SpiffeId::parse("spiffe://cluster.local/ns/bench/sa/server").unwrap(),
        }
    }

    fn policies() -> Policies {
        Policies {
            services: Arc::new(vec![service()]),
            workloads: Arc::new(vec![Workload {
                identity: SpiffeId::parse("spiffe://cluster.local/ns/bench/sa/client").unwrap(),
                token: "t".into(),
            }]),
        }
    }

    fn spec(addr: &str) -> TrafficSpec {
        TrafficSpec {
            source_workload: "bench:client".into(),
            target: Some(traffic_spec::Target::Addr(
                addr.parse::<SocketAddr>().unwrap().into(),
            )),
        }
    }

    #[test]
    fn a_service_s_address_gets_a_balancer_through_destination_and_others_not_found() {
        let policy = policies().outbound(&spec("10.200.0.2:8080")).unwrap();
        let text = format!("{policy:?}");
        assert!(
            text.contains("path: \"server.bench.svc.cluster.local:8080\""),
            "{text}"
        );
        assert!(text.contains("PeakEwma"), "{text}");
        let other = policies().outbound(&spec("10.200.0.9:8080")).unwrap_err();
        assert_eq!(other.code(), tonic::Code::NotFound);
    }

    #[test]
    fn inbound_admits_the_certified_workloads_over_mesh_tls_only() {
        let server = policies().inbound().unwrap();
        let text = format!("{server:?}");
        assert!(
            text.contains("client.bench.serviceaccount.identity.linkerd.cluster.local"),
            "{text}"
        );
        assert!(!text.contains("Unauthenticated"), "{text}");
        assert_eq!(server.authorizations[0].networks.len(), 2);
    }
}
