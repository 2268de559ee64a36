//! Idle upstream connections of the HTTP/1.1 path: plain byte streams (no client state, no
//! buffers), last in first out, shared by every downstream connection as soon as a response
//! has been read to its end, like HAProxy's `http-reuse safe`.

use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, ReadBuf};

use crate::upstream::{Ready, UpstreamConnector, UpstreamStream};

pub(crate) struct Http1Pool {
    connector: UpstreamConnector,
    idle: Mutex<Vec<UpstreamStream>>,
}

/// A connection taken from the pool or opened for one exchange.
pub(crate) struct Lease {
    pub stream: UpstreamStream,
    /// Taken from the pool: the upstream may have closed it just as it was sent a request.
    pub reused: bool,
}

impl Http1Pool {
    pub(crate) fn new(connector: UpstreamConnector) -> Self {
        Http1Pool {
            connector,
            idle: Mutex::default(),
        }
    }

    /// The warmest idle connection still open, or a new one; at the connection cap, the
    /// first to come back or room for a new one.
    pub(crate) async fn checkout(&self) -> io::Result<Lease> {
        let take_idle = || {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            std::iter::from_fn(|| idle.pop())
                .find_map(|mut stream| still_open(&mut stream).then_some(stream))
        };
        match self.connector.idle_or_slot(take_idle).await? {
            Ready::Idle(stream) => Ok(Lease {
                stream,
                reused: true,
            }),
            Ready::Slot(slot) => Ok(Lease {
                stream: self.connector.connect_in(slot).await?,
                reused: false,
            }),
        }
    }

    pub(crate) async fn open(&self) -> io::Result<Lease> {
        Ok(Lease {
            stream: self.connector.connect().await?,
            reused: false,
        })
    }

    /// Takes back a connection whose last response was read to its end.
    pub(crate) fn give_back(&self, stream: UpstreamStream) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(stream);
        self.connector.returned();
    }
}

/// Whether an idle connection can take a request: the upstream has neither closed it nor
/// sent anything unasked. A read that would block says so; TLS messages without data (session
/// tickets) are consumed on the way.
fn still_open(stream: &mut UpstreamStream) -> bool {
    let mut probe = [0u8; 64];
    let mut buf = ReadBuf::new(&mut probe);
    let mut cx = Context::from_waker(Waker::noop());
    matches!(Pin::new(stream).poll_read(&mut cx, &mut buf), Poll::Pending)
}
