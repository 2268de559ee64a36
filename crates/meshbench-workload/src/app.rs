//! Every workload this crate serves, as one value: [`App`], served by
//! [`BoundServer::serve_app`].
//!
//! Why it exists is where the servers compile. [`BoundServer::serve`] is generic over the
//! service, and Rust compiles a generic where it is used: called from the binary's crate, each
//! role's whole server (hyper's connection state machine, TLS, the accept loop) would compile
//! there, at that crate's optimisation level, which is low because the CLI is off the data
//! path. Matched here, every instance compiles in this crate, at the workloads' own level.

use std::future::Future;
use std::pin::Pin;

use crate::{
    grpc_echo_service, Analyzer, BoundServer, Calculator, Counter, Echo, Experimenter,
    GrpcEchoConfig, Role, RoleService, SecurityChecker,
};

/// Resolves when the server should stop taking connections and drain.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A workload, configured and ready to serve.
// One per process, moved once into its server: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum App {
    Echo(Echo),
    GrpcEcho(GrpcEchoConfig),
    Calculator(Calculator),
    Analyzer(Analyzer),
    Experimenter(Experimenter),
    SecurityChecker(SecurityChecker),
    Counter(Counter),
}

impl App {
    /// The role's name in logs and health answers.
    pub fn name(&self) -> &'static str {
        match self {
            App::Echo(_) => Echo::NAME,
            App::GrpcEcho(_) => "grpc-echo",
            App::Calculator(_) => Calculator::NAME,
            App::Analyzer(_) => Analyzer::NAME,
            App::Experimenter(_) => Experimenter::NAME,
            App::SecurityChecker(_) => SecurityChecker::NAME,
            App::Counter(_) => Counter::NAME,
        }
    }
}

impl BoundServer {
    /// Serves `app` until `shutdown` resolves, then drains in-flight connections.
    ///
    /// Boxed behind `dyn Future` and never inlined, so the caller cannot name, and so cannot
    /// instantiate, the server inside: an `async fn` here was inlined into the binary's crate,
    /// taking every role's hyper stack with it (seen in that crate's symbols).
    #[inline(never)]
    pub fn serve_app(
        self,
        app: App,
        shutdown: Shutdown,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let service = match app {
                App::GrpcEcho(config) => {
                    let service = grpc_echo_service(&config).await;
                    return self.serve(service, shutdown).await;
                }
                App::Echo(role) => RoleService::new(role),
                App::Calculator(role) => RoleService::new(role),
                App::Analyzer(role) => RoleService::new(role),
                App::Experimenter(role) => RoleService::new(role),
                App::SecurityChecker(role) => RoleService::new(role),
                App::Counter(role) => RoleService::new(role),
            };
            self.serve(service, shutdown).await
        })
    }
}
