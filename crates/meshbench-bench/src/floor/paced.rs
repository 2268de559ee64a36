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
use std::net::SocketAddr;
use std::time::Duration;

use meshbench_time::now_ns;
use rustix::thread::clock_nanosleep_absolute;
use rustix::time::{ClockId, Timespec};

use super::{connect, get_request, io_error, thread_cpu_ns, FloorRun};
use crate::process::pin_current_thread;
use crate::Error;

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
) -> Result<FloorRun, Error> {
    let io_err = move |source| io_error(target, source);
    let request = get_request(target);
    let mut streams = connect(target, connections)?;
    let worker = std::thread::spawn(move || -> Result<FloorRun, Error> {
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
        Ok(FloorRun {
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
    use crate::floor::test_target::{allowed_cpu, answering_target, ANSWER};

    #[test]
    fn the_paced_sender_sends_its_schedule_and_reads_the_answers() {
        let target = answering_target();
        let run = paced_floor(target, 1000, 4, Duration::from_millis(300), allowed_cpu()).unwrap();
        assert_eq!(run.requests, 300);
        assert!(
            run.seconds >= 0.3,
            "a schedule of 300 ms took {} s",
            run.seconds
        );
        // Each read takes what arrived since the connection's previous send, 4 ms ago: at
        // most the last answer on each connection is never read. A slow machine may carry a
        // few answers over to the connection's next turn.
        assert!(
            run.answer_bytes >= 250 * ANSWER.len() as u64,
            "only {} bytes of answers to 300 requests",
            run.answer_bytes
        );
        assert!(run.cpu_seconds > 0.0);
    }
}
