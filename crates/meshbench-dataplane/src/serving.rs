//! What every proxy of the data plane does the same way: bind a listener (a port conflict is
//! an error before anything runs), accept connections onto their own tasks, and keep an SVID
//! renewed while serving.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use meshbench_identity::{rotate_forever, CaClient, SvidStore};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::metrics::ProxyMetrics;
use crate::Error;

/// Where a connection REDIRECTed by iptables was headed (`SO_ORIGINAL_DST`).
pub(crate) fn original_destination(stream: &tokio::net::TcpStream) -> std::io::Result<SocketAddr> {
    let socket = socket2::SockRef::from(stream);
    let addr = match stream.local_addr()? {
        SocketAddr::V4(_) => socket.original_dst_v4()?,
        SocketAddr::V6(_) => socket.original_dst_v6()?,
    };
    addr.as_socket()
        .ok_or_else(|| std::io::Error::other("original destination is not an IP address"))
}

pub(crate) async fn listen(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// Renews `store` through `client` for as long as `tasks` runs, recording each renewal.
pub(crate) fn spawn_rotation(
    tasks: &mut JoinSet<()>,
    store: Arc<SvidStore>,
    client: CaClient,
    fraction: f64,
    metrics: Option<Arc<ProxyMetrics>>,
) {
    tasks.spawn(rotate_forever(store, client, fraction, move |store| {
        if let Some(m) = &metrics {
            m.certificate_rotated(store.not_after_unix());
        }
    }));
}

pub(crate) async fn accept_loop<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(tokio::net::TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(handle(stream, peer));
            }
            Err(e) => {
                // Out of descriptors or similar: keep serving what is established.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
