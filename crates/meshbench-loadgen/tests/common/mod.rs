//! Shared by the load generator's integration tests: a real echo server on loopback.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use meshbench_identity::ServerTlsFiles;
use meshbench_workload::{bind, Echo, EchoConfig, RoleService, ServeOptions};

/// An echo server on its own runtime thread, so it never shares a core's scheduler with the
/// generator under test. Stops when dropped.
pub struct EchoServer {
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

pub fn echo_server(delay: Duration, tls: Option<ServerTlsFiles>) -> EchoServer {
    let runtime = meshbench_workload::runtime(Some(1)).unwrap();
    let server = runtime
        .block_on(bind(&ServeOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls,
            drain_timeout: Duration::from_millis(100),
        }))
        .unwrap();
    let addr = server.local_addr();
    let service = RoleService::new(Echo::new(&EchoConfig::fixed(delay, 1024)));
    runtime.spawn(server.serve(service, std::future::pending()));
    EchoServer {
        addr,
        _runtime: runtime,
    }
}
