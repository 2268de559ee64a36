//! Floors: the least client CPU per request that a load generator can spend on this machine,
//! measured by bench threads that do only what no generator can avoid. Each floor tells how
//! much of a ratio against a peer is the kernel's (the same for every tool) and how much is
//! left for what a generator adds: timing, framing and recording each request.
//!
//! - [`paced`]: an evenly paced sender at a fixed rate (the `fixed-5k` case).
//! - [`closed`]: a closed loop over keep-alive connections (the `closed-loop-16` case).

pub(crate) mod closed;
pub(crate) mod paced;

use std::net::{SocketAddr, TcpStream};

use rustix::time::{clock_gettime, ClockId};

use crate::Error;

/// The row of the least CPU an evenly paced sender can spend here ([`paced`]).
pub(crate) const PACED_FLOOR: &str = "paced-floor";
/// The row of the least CPU a closed-loop client can spend here ([`closed`]).
pub(crate) const CLOSED_FLOOR: &str = "closed-floor";

/// One floor run: what was sent and answered, and the sending thread's CPU time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FloorRun {
    pub requests: u64,
    pub seconds: f64,
    pub cpu_seconds: f64,
    /// Bytes of answers read: a check that the target answered, not a measurement.
    pub answer_bytes: u64,
}

/// The calling thread's CPU time: a floor counts its own loop, not the bench around it.
fn thread_cpu_ns() -> u64 {
    let ts = clock_gettime(ClockId::ThreadCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The request every floor sends: what wrk sends for a URL with no path.
fn get_request(target: SocketAddr) -> Vec<u8> {
    format!("GET / HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes()
}

fn io_error(target: SocketAddr, source: std::io::Error) -> Error {
    Error::Io {
        path: target.to_string().into(),
        source,
    }
}

/// `count` non-blocking keep-alive connections to `target`, Nagle off as every peer has it.
fn connect(target: SocketAddr, count: usize) -> Result<Vec<TcpStream>, Error> {
    (0..count.max(1))
        .map(|_| {
            let s = TcpStream::connect(target)?;
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| io_error(target, e))
}

#[cfg(test)]
pub(crate) mod test_target {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener};

    /// The answer of [`answering_target`] to every request.
    pub(crate) const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

    /// A threaded target that answers each request head with [`ANSWER`].
    pub(crate) fn answering_target() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut pending = Vec::new();
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        pending.extend_from_slice(&buf[..n]);
                        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                            pending.drain(..end + 4);
                            if conn.write_all(ANSWER).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// A CPU this test may pin a thread to.
    pub(crate) fn allowed_cpu() -> usize {
        let allowed = rustix::thread::sched_getaffinity(None).unwrap();
        (0..rustix::thread::CpuSet::MAX_CPU)
            .find(|&c| allowed.is_set(c))
            .unwrap()
    }
}
