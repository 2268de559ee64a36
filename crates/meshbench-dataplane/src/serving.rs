//! What every proxy of the data plane does the same way: bind a listener (a port conflict is
//! an error before anything runs), accept connections onto their own tasks within a
//! connection limit, back off when the process is out of descriptors, keep an SVID renewed
//! while serving, and the timeouts and caps every listener applies (`Limits`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use meshbench_identity::{rotate_forever, CaClient, SvidStore};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
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
    Ok(meshbench_net::bind(addr).await?)
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

/// The timeouts and caps of every listener of the data plane, so that a peer that sends
/// nothing, too little or too much cannot hold the proxy's memory or descriptors. SECURITY.md
/// lists them with their defaults; `meshbench proxy` takes each as a flag.
/// In a config file, durations are written as `10s`, `300ms`, `5m`; a field left out keeps
/// its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// From accept to the first bytes and a finished TLS handshake (HBONE: and the CONNECT
    /// request). Default 10 s.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// From the first byte of an HTTP/1.1 request head to its end. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// How long a connection may move no byte in either direction (between requests, or
    /// waiting for an answer) before it is closed. Default 300 s.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Dialing an upstream: connect and TLS handshake. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Connections served at once per listener; more wait in the kernel's accept queue.
    /// Default 10000.
    pub max_connections: usize,
    /// Connections a proxy opens to one upstream at once (Envoy's circuit breaker
    /// `max_connections`); a request that finds none free within `connect_timeout` gets a
    /// 503. For the node agent: tunnels its HBONE port carries to one local app at once,
    /// over every peer and connection; one past it is answered 503 at once. Default 1024.
    pub max_upstream_connections: usize,
    /// Concurrent HTTP/2 streams per L7 downstream connection. Default 100.
    pub max_streams_per_connection: u32,
    /// Concurrent HBONE tunnels per connection between node agents; the sending pool opens
    /// another connection past it. Default 1000 (ztunnel's is 100: each further HBONE
    /// connection costs about 0.4 MiB per agent here, so 1000 tunnels over ten connections
    /// cost a node-agent pair 8 MiB more than over one).
    pub max_tunnels_per_connection: u32,
}

impl Limits {
    /// Refuses limits no listener can work with, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        let durations = [
            ("handshake_timeout", self.handshake_timeout),
            ("header_read_timeout", self.header_read_timeout),
            ("idle_timeout", self.idle_timeout),
            ("connect_timeout", self.connect_timeout),
        ];
        if let Some((field, _)) = durations.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("limits.{field}: must be longer than 0"));
        }
        let counts = [
            ("max_connections", self.max_connections as u64),
            (
                "max_upstream_connections",
                self.max_upstream_connections as u64,
            ),
            (
                "max_streams_per_connection",
                u64::from(self.max_streams_per_connection),
            ),
            (
                "max_tunnels_per_connection",
                u64::from(self.max_tunnels_per_connection),
            ),
        ];
        if let Some((field, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(format!("limits.{field}: must be at least 1"));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            max_upstream_connections: 1024,
            max_streams_per_connection: 100,
            max_tunnels_per_connection: 1000,
        }
    }
}

pin_project_lite::pin_project! {
    /// A connection's task holding its place under the listener's cap. A struct, not an
    /// async block around the handler's future: such a block stores the future twice (as
    /// the captured value and as the awaited one), a kilobyte more per open connection.
    struct Slotted<F> {
        #[pin]
        served: F,
        _slot: tokio::sync::OwnedSemaphorePermit,
    }
}

impl<F: Future<Output = ()>> Future for Slotted<F> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        std::task::ready!(self.project().served.poll(cx));
        CONNECTIONS_CLOSED.fetch_add(1, Ordering::Relaxed);
        std::task::Poll::Ready(())
    }
}

/// Connections that ended, process-wide: the memory trimmer's cue.
static CONNECTIONS_CLOSED: AtomicU64 = AtomicU64::new(0);
/// How often the trimmer looks whether connections ended since its last trim.
const TRIM_PERIOD: Duration = Duration::from_secs(5);

/// Gives memory that closed connections freed back to the system, for the proxy's life.
/// glibc's allocator keeps freed heap pages (1000 unfinished 60 KB request heads left 70 MB
/// behind after they closed); `malloc_trim` returns them. It walks the heap, so it runs at
/// most once a period, and only after connections ended: at the first period that sees them
/// end, and once more a period after the last of them, since a connection is counted just
/// before its task (and its buffers) is dropped, and a trim between the two would otherwise
/// leave that memory held until some other connection ends.
pub(crate) async fn return_freed_memory() {
    let mut seen = CONNECTIONS_CLOSED.load(Ordering::Relaxed);
    let mut once_more = false;
    loop {
        tokio::time::sleep(TRIM_PERIOD).await;
        let closed = CONNECTIONS_CLOSED.load(Ordering::Relaxed);
        let ended = closed != seen;
        if ended || once_more {
            trim_heap();
        }
        once_more = ended;
        seen = closed;
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim takes a padding size and touches only the allocator's own state,
    // under the allocator's own locks; it has no precondition on the caller.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

pub(crate) async fn accept_loop<F, Fut>(listener: TcpListener, max_connections: usize, handle: F)
where
    F: Fn(tokio::net::TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    let mut listener = meshbench_net::PatientListener::new(listener, "data plane");
    loop {
        // At the limit, stop accepting: new connections wait in the kernel's queue, as with
        // HAProxy's maxconn, instead of costing a task each.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = listener.accept().await;
        tokio::spawn(Slotted {
            served: handle(stream, peer),
            _slot: slot,
        });
    }
}
