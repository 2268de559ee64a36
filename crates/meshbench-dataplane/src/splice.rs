//! Copying bytes both ways between two streams without holding buffers while idle.
//!
//! `tokio::io::copy_bidirectional` keeps an 8 KiB buffer per direction for the whole life of a
//! connection: 16 KiB per proxied connection even when nothing moves, which is most of a
//! proxy's memory with many open connections. Here reads go into one scratch buffer per thread;
//! only bytes the writer could not take at once are copied into a buffer of their own, kept
//! until written. Like HAProxy's buffer pool, an idle connection costs no buffer.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::idle::IdleWatch;

/// Matches the largest TLS record's plaintext, so one read can take a whole record.
const SCRATCH_BYTES: usize = 16 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; SCRATCH_BYTES].into_boxed_slice());
}

/// Reads what `reader` has into the thread's scratch buffer and appends it to `out`: waiting
/// for data this way holds no buffer, and `out` grows only by what arrived. Returns the bytes
/// read, 0 at end of stream.
pub(crate) async fn read_appending<R>(reader: &mut R, out: &mut Vec<u8>) -> io::Result<usize>
where
    R: AsyncRead + Unpin + ?Sized,
{
    poll_fn(|cx| {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let mut buf = ReadBuf::new(&mut scratch[..]);
            ready!(Pin::new(&mut *reader).poll_read(cx, &mut buf))?;
            out.extend_from_slice(buf.filled());
            Poll::Ready(Ok(buf.filled().len()))
        })
    })
    .await
}

#[derive(Default)]
struct Direction {
    /// Bytes read but not yet written, and how far writing got.
    unwritten: Option<(Vec<u8>, usize)>,
    needs_flush: bool,
    read_done: bool,
    done: bool,
    transferred: u64,
}

impl Direction {
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut reader: Pin<&mut R>,
        mut writer: Pin<&mut W>,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if let Some((bytes, written)) = &mut self.unwritten {
                while *written < bytes.len() {
                    let n = ready!(writer.as_mut().poll_write(cx, &bytes[*written..]))?;
                    if n == 0 {
                        return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                    }
                    *written += n;
                }
                self.unwritten = None;
                self.needs_flush = true;
            }
            if self.read_done {
                ready!(writer.as_mut().poll_flush(cx))?;
                ready!(writer.as_mut().poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            let read = SCRATCH.with(|scratch| {
                let mut scratch = scratch.borrow_mut();
                let mut buf = ReadBuf::new(&mut scratch[..]);
                match reader.as_mut().poll_read(cx, &mut buf) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) if buf.filled().is_empty() => Poll::Ready(Ok(None)),
                    Poll::Ready(Ok(())) => {
                        let data = buf.filled();
                        // Hand the writer what it takes now; keep only the rest.
                        let taken = match writer.as_mut().poll_write(cx, data) {
                            Poll::Ready(Ok(0)) => {
                                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()))
                            }
                            Poll::Ready(Ok(n)) => n,
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Pending => 0,
                        };
                        let rest = (taken < data.len()).then(|| data[taken..].to_vec());
                        Poll::Ready(Ok(Some((data.len(), rest))))
                    }
                }
            });
            match read {
                Poll::Pending => {
                    // Nothing more to read now: push out whatever the writer buffered.
                    if self.needs_flush {
                        ready!(writer.as_mut().poll_flush(cx))?;
                        self.needs_flush = false;
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(None)) => self.read_done = true,
                Poll::Ready(Ok(Some((n, rest)))) => {
                    self.transferred += n as u64;
                    self.needs_flush = true;
                    self.unwritten = rest.map(|bytes| (bytes, 0));
                }
            }
        }
    }
}

/// Copies `a` to `b` and `b` to `a` until both directions reach end of stream (each shut
/// down on the other side as its reader ends), like `tokio::io::copy_bidirectional`, or until
/// no byte has moved either way for `idle` (then a `TimedOut` error). Returns the bytes
/// copied from `a` to `b` and from `b` to `a`.
///
/// Idleness is judged at the ticks of the process's idle clock (`IdleWatch`), not by a timer
/// per connection: a silent connection is closed between `idle` and twice `idle` after its
/// last byte.
pub(crate) async fn splice<A, B>(a: &mut A, b: &mut B, idle: Duration) -> io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut a_to_b = Direction::default();
    let mut b_to_a = Direction::default();
    let mut watch = IdleWatch::new(idle);
    poll_fn(|cx| {
        let forward = a_to_b.poll_copy(cx, Pin::new(&mut *a), Pin::new(&mut *b))?;
        let backward = b_to_a.poll_copy(cx, Pin::new(&mut *b), Pin::new(&mut *a))?;
        if let (Poll::Ready(()), Poll::Ready(())) = (forward, backward) {
            return Poll::Ready(Ok((a_to_b.transferred, b_to_a.transferred)));
        }
        let moved = a_to_b.transferred + b_to_a.transferred;
        match watch.poll_idle(cx, moved) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle",
            ))),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Writes `out` and then shuts down while reading everything the other end sends.
    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, out: &[u8]) -> Vec<u8> {
        let (mut r, mut w) = tokio::io::split(stream);
        let mut got = Vec::new();
        let reader = async {
            r.read_to_end(&mut got).await.unwrap();
        };
        let writer = async {
            w.write_all(out).await.unwrap();
            w.shutdown().await.unwrap();
        };
        tokio::join!(reader, writer);
        got
    }

    #[tokio::test]
    async fn copies_both_ways_through_small_pipes_and_propagates_end_of_stream() {
        // 64-byte pipes force partial writes and the leftover path.
        let (mut client, mut proxy_front) = tokio::io::duplex(64);
        let (mut proxy_back, mut server) = tokio::io::duplex(64);
        let proxy = tokio::spawn(async move {
            splice(&mut proxy_front, &mut proxy_back, Duration::from_secs(60)).await
        });
        let request: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let response: Vec<u8> = request.iter().rev().copied().collect();
        let (sent, expected) = (request.clone(), response.clone());
        let server_task = tokio::spawn(async move { exchange(&mut server, &expected).await });
        let answer = exchange(&mut client, &sent).await;
        assert_eq!(answer, response);
        assert_eq!(server_task.await.unwrap(), request);
        let (forward, backward) = proxy.await.unwrap().unwrap();
        assert_eq!((forward, backward), (200_000, 200_000));
    }

    #[tokio::test]
    async fn a_connection_silent_for_the_idle_timeout_is_closed_and_a_busy_one_is_not() {
        let (mut client, mut proxy_front) = tokio::io::duplex(64);
        let (mut proxy_back, mut server) = tokio::io::duplex(64);
        let idle = Duration::from_millis(500);
        let proxy =
            tokio::spawn(async move { splice(&mut proxy_front, &mut proxy_back, idle).await });
        // A byte every 150 ms keeps it open across several idle periods...
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            client.write_all(b"x").await.unwrap();
            let mut byte = [0u8];
            server.read_exact(&mut byte).await.unwrap();
        }
        assert!(!proxy.is_finished());
        // ...and silence closes it: between one and two periods later, three if a tick races.
        let silent_since = std::time::Instant::now();
        let error = tokio::time::timeout(idle * 10, proxy)
            .await
            .expect("closed while idle")
            .unwrap()
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(silent_since.elapsed() >= idle / 2);
    }
}
