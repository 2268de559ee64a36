//! The floor of an evenly paced sender on this machine: the least client CPU per request
//! that any generator can spend when it spaces requests evenly and the CPU is idle between
//! them. The sender here does nothing but what such a generator cannot avoid: it sleeps to
//! each send slot, reads whatever answer is waiting on the connection (without waiting),
//! and sends. No clock per request, no histogram, no parsing.
//!
//! Why it belongs in the benchmark: on a virtual machine a wake-up from idle and the wake of
//! an idle target on another CPU can cost tens of microseconds each, charged to the waker.
//! A tool that sends in bursts pays them once per burst, an evenly paced one once per
//! request; this row tells which of the two a ratio at a fixed rate is measuring.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use meshbench_time::now_ns;
use rustix::thread::clock_nanosleep_absolute;
use rustix::time::{clock_gettime, ClockId, Timespec};

use crate::process::pin_current_thread;
use crate::Error;

/// One paced run: what was sent and answered, and the sending thread's CPU time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PacedRun {
    pub requests: u64,
    pub seconds: f64,
    pub cpu_seconds: f64,
    /// Bytes of answers read: a check that the target answered, not a measurement.
    pub answer_bytes: u64,
}

fn thread_cpu_ns() -> u64 {
    let ts = clock_gettime(ClockId::ThreadCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn timespec(ns: u64) -> Timespec {
    Timespec {
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as _,
    }
}

/// Sends `rps` GET requests per second to `target` round-robin over `connections`
/// keep-alive connections for `duration`, on a thread pinned to `cpu`.
pub(crate) fn paced_floor(
    target: SocketAddr,
    rps: u32,
    connections: usize,
    duration: Duration,
    cpu: usize,
) -> Result<PacedRun, Error> {
    let io_err = move |source| Error::Io {
        path: target.to_string().into(),
        source,
    };
    let request = format!("GET / HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes();
    let mut streams = (0..connections.max(1))
        .map(|_| {
            let s = TcpStream::connect(target)?;
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(io_err)?;
    let worker = std::thread::spawn(move || -> Result<PacedRun, Error> {
        pin_current_thread(cpu)?;
        meshbench_time::tighten_timer_slack();
        let interval_ns = 1_000_000_000 / u64::from(rps.max(1));
        let count = duration.as_nanos() as u64 / interval_ns;
        let mut buf = vec![0u8; 64 * 1024];
        let mut answer_bytes = 0u64;
        let cpu_before = thread_cpu_ns();
        let start = now_ns();
        for i in 0..count {
            let slot = timespec(start + (i + 1) * interval_ns);
            while clock_nanosleep_absolute(ClockId::Monotonic, &slot)
                == Err(rustix::io::Errno::INTR)
            {}
            let turn = i as usize % streams.len();
            let stream = &mut streams[turn];
            match stream.read(&mut buf) {
                Ok(n) => answer_bytes += n as u64,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(io_err(e)),
            }
            stream.write_all(&request).map_err(io_err)?;
        }
        let seconds = (now_ns() - start) as f64 / 1e9;
        let cpu_seconds = (thread_cpu_ns() - cpu_before) as f64 / 1e9;
        Ok(PacedRun {
            requests: count,
            seconds,
            cpu_seconds,
            answer_bytes,
        })
    });
    worker
        .join()
        .map_err(|_| Error::Target("the paced sender panicked".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A target that answers each request line block with a fixed response, for the test.
    fn answering_target() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut pending = Vec::new();
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        pending.extend_from_slice(&buf[..n]);
                        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                            pending.drain(..end + 4);
                            if conn.write_all(answer).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn the_paced_sender_sends_its_schedule_and_reads_the_answers() {
        let target = answering_target();
        let allowed = rustix::thread::sched_getaffinity(None).unwrap();
        let cpu = (0..rustix::thread::CpuSet::MAX_CPU)
            .find(|&c| allowed.is_set(c))
            .unwrap();
        let run = paced_floor(target, 1000, 4, Duration::from_millis(300), cpu).unwrap();
        assert_eq!(run.requests, 300);
        assert!(
            run.seconds >= 0.3,
            "a schedule of 300 ms took {} s",
            run.seconds
        );
        // Each read takes what arrived since the connection's previous send, 4 ms ago: at
        // most the last answer on each connection is never read. 40 bytes an answer; a slow
        // machine may carry a few answers over to the connection's next turn.
        assert!(
            run.answer_bytes >= 250 * 40,
            "only {} bytes of answers to 300 requests",
            run.answer_bytes
        );
        assert!(run.cpu_seconds > 0.0);
    }
}
