//! Binding and serving the harness: one plaintext HTTP/2 listener on loopback carrying the
//! identity, policy and destination services, with the limits a listener needs even where
//! only the bench's proxies reach it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use linkerd2_proxy_api::destination::destination_server::DestinationServer;
use linkerd2_proxy_api::identity::identity_server::IdentityServer;
use linkerd2_proxy_api::inbound::inbound_server_policies_server::InboundServerPoliciesServer;
use linkerd2_proxy_api::outbound::outbound_policies_server::OutboundPoliciesServer;
use meshbench_identity::CertificateAuthority;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::certify::Certifier;
use crate::destination::Destinations;
use crate::policy::Policies;
use crate::{Error, HarnessOptions};

/// A CSR, a policy or an endpoint set is a few KiB; a message much larger is not one.
pub const HARNESS_MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Streams one connection may have open: a proxy watches a policy per port and per
/// destination it meets, a handful in the bench.
pub const HARNESS_MAX_STREAMS: u32 = 128;
/// Connections served at once; more wait in the accept queue. A proxy keeps one per service.
pub const HARNESS_MAX_CONNECTIONS: usize = 64;
/// A connection that answers no HTTP/2 ping within this long after one is sent is dropped;
/// pings go out after this long without a frame.
const KEEPALIVE: Duration = Duration::from_secs(30);

pub struct BoundHarness {
    listener: TcpListener,
    ca: CertificateAuthority,
    opts: HarnessOptions,
}

/// Binds the harness on `listen`, which must be a loopback address: linkerd2-proxy speaks to
/// a loopback control plane without TLS, and certificates are not handed out in the clear
/// anywhere else.
pub async fn bind(
    ca: CertificateAuthority,
    listen: SocketAddr,
    opts: HarnessOptions,
) -> Result<BoundHarness, Error> {
    if !listen.ip().is_loopback() {
        return Err(Error::Invalid {
            field: "listen",
            value: listen.to_string(),
            reason: "the harness serves plaintext; give a loopback address".into(),
        });
    }
    for service in &opts.services {
        if crate::linkerd_name(&service.identity).is_none() {
            return Err(Error::Invalid {
                field: "services.identity",
                value: service.identity.to_string(),
                reason: "not a service account's ID (/ns/<ns>/sa/<sa>)".into(),
            });
        }
    }
    let listener = meshbench_net::bind(listen).await?;
    Ok(BoundHarness { listener, ca, opts })
}

impl BoundHarness {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let workloads = Arc::new(self.opts.workloads);
        let services = Arc::new(self.opts.services);
        let certifier = Certifier {
            ca: Arc::new(self.ca),
            workloads: workloads.clone(),
            ttl: self.opts.ttl,
        };
        let policies = Policies {
            services: services.clone(),
            workloads,
        };
        let destinations = Destinations { services };
        macro_rules! limited {
            ($server:expr) => {
                $server
                    .max_decoding_message_size(HARNESS_MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(HARNESS_MAX_MESSAGE_BYTES)
            };
        }
        let routes = tonic::service::Routes::new(limited!(IdentityServer::new(certifier)))
            .add_service(limited!(OutboundPoliciesServer::new(policies.clone())))
            .add_service(limited!(InboundServerPoliciesServer::new(policies)))
            .add_service(limited!(DestinationServer::new(destinations)));
        let slots = Arc::new(Semaphore::new(HARNESS_MAX_CONNECTIONS));
        let mut listener = meshbench_net::PatientListener::new(self.listener, "linkerd harness");
        let accept = async {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = listener.accept().await;
                let serving = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .max_concurrent_streams(HARNESS_MAX_STREAMS)
                    .max_header_list_size(16 * 1024)
                    .keep_alive_interval(KEEPALIVE)
                    .keep_alive_timeout(KEEPALIVE)
                    .serve_connection(
                        TokioIo::new(tcp),
                        hyper_util::service::TowerToHyperService::new(routes.clone()),
                    );
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Err(e) = serving.await {
                        tracing::debug!(%peer, error = %e, "linkerd harness: connection ended");
                    }
                });
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = shutdown => {}
        }
    }
}
