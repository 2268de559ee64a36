//! Shared by the load generator's integration tests: a real echo server on loopback.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use meshbench_identity::{
    client_config, CertificateAuthority, ClientTlsFiles, IssueOptions, ServerTlsFiles, SpiffeId,
};
use meshbench_workload::{bind, grpc_echo_service, Echo, EchoConfig, GrpcEchoConfig, Mix};
use meshbench_workload::{BoundServer, RoleService, ServeOptions};

/// An echo server on its own runtime thread, so it never shares a core's scheduler with the
/// generator under test. Stops when dropped.
pub struct EchoServer {
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

pub fn echo_server(delay: Duration, tls: Option<ServerTlsFiles>) -> EchoServer {
    echo_server_with(EchoConfig::fixed(delay, 1024), tls)
}

pub fn echo_server_with(config: EchoConfig, tls: Option<ServerTlsFiles>) -> EchoServer {
    serve_on_own_runtime(tls, |server| async move {
        let service = RoleService::new(Echo::new(&config));
        server.serve(service, std::future::pending()).await;
    })
}

/// The grpc-echo role (Fortio's ping service and grpc.health.v1), answering at once.
pub fn grpc_echo_server(tls: Option<ServerTlsFiles>) -> EchoServer {
    let config = GrpcEchoConfig {
        delay: Mix::always(Duration::ZERO),
        response_size: None,
    };
    serve_on_own_runtime(tls, |server| async move {
        let service = grpc_echo_service(&config).await;
        server.serve(service, std::future::pending()).await;
    })
}

fn serve_on_own_runtime<F: std::future::Future<Output = ()> + Send + 'static>(
    tls: Option<ServerTlsFiles>,
    serve: impl FnOnce(BoundServer) -> F,
) -> EchoServer {
    let runtime = meshbench_workload::runtime(Some(1)).unwrap();
    let server = runtime
        .block_on(bind(&ServeOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls,
            drain_timeout: Duration::from_millis(100),
        }))
        .unwrap();
    let addr = server.local_addr();
    runtime.spawn(serve(server));
    EchoServer {
        addr,
        _runtime: runtime,
    }
}

/// Distinct SVIDs from one CA under `dir`: the server's files (client certificates required)
/// and a client config that presents the client's SVID and accepts only the server's ID.
pub fn mtls(dir: &Path) -> (ServerTlsFiles, Arc<rustls::ClientConfig>) {
    let ca = CertificateAuthority::init(dir, "cluster.local").unwrap();
    let issue = |sa: &str| {
        ca.issue("default", sa, &IssueOptions::default())
            .unwrap()
            .write(dir, sa)
            .unwrap()
    };
    let (server_cert, server_key) = issue("server");
    let (client_cert, client_key) = issue("client");
    let ca_pem = dir.join("ca.pem");
    let client = client_config(
        &ClientTlsFiles {
            cert: Some(client_cert),
            key: Some(client_key),
            ca: ca_pem.clone(),
            expect_server_id: Some(
                SpiffeId::parse("spiffe://cluster.local/ns/default/sa/server").unwrap(),
            ),
        },
        &[],
    )
    .unwrap();
    let server = ServerTlsFiles {
        cert: server_cert,
        key: server_key,
        client_ca: Some(ca_pem),
    };
    (server, Arc::new(client))
}
