//! The accept loop both CA services share: at most so many connections at once (the rest
//! wait in the accept queue), each TLS handshake finished by a deadline, a failed one logged
//! and dropped, and each handshaken connection handed to its own task until `shutdown`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

pub(crate) struct TlsListener {
    pub listener: TcpListener,
    pub acceptor: TlsAcceptor,
    /// Names the service in log lines ("CA", "Istio CA").
    pub what: &'static str,
    pub max_connections: usize,
    pub handshake_timeout: Duration,
}

impl TlsListener {
    /// Serves until `shutdown` resolves, running `serve(tls, peer)` in its own task for each
    /// connection whose handshake finished in time.
    pub(crate) async fn serve<F, Fut>(self, shutdown: impl Future<Output = ()>, serve: F)
    where
        F: Fn(TlsStream<TcpStream>, SocketAddr) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let serve = Arc::new(serve);
        let slots = Arc::new(Semaphore::new(self.max_connections));
        let mut listener = meshbench_net::PatientListener::new(self.listener, self.what);
        let what = self.what;
        let accept = async {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = listener.accept().await;
                let (acceptor, serve) = (self.acceptor.clone(), serve.clone());
                let deadline = tokio::time::Instant::now() + self.handshake_timeout;
                tokio::spawn(async move {
                    let _slot = slot;
                    match meshbench_net::handshake_by(deadline, acceptor.accept(tcp)).await {
                        Ok(tls) => serve(tls, peer).await,
                        Err(e) => tracing::info!(%peer, error = %e, "{what}: TLS handshake failed"),
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
