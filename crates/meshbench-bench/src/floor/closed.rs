//! The floor of a closed-loop client: the least CPU per request that any generator can spend
//! keeping one request outstanding on each of its keep-alive connections. The client here does
//! only what such a generator cannot avoid: it waits on epoll for connections with answer
//! bytes, reads them, and sends a connection's next request once its answer is complete. It
//! knows that by counting bytes, since the target's answers all have the length of the first
//! one (learnt once, before the run). One clock read per wake-up, to stop; no clock per
//! request, no parsing, no histogram; raw syscalls, not the C library's wrappers.

use std::io::{ErrorKind, Read, Write};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use meshbench_time::now_ns;
use rustix::event::epoll;
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};
use rustix::time::Timespec;

use super::{connect, get_request, io_error, thread_cpu_ns, FloorRun};
use crate::process::pin_current_thread;
use crate::Error;

/// How long the loop waits for any answer before it calls the target stuck.
const STALL: Timespec = Timespec {
    tv_sec: 5,
    tv_nsec: 0,
};

fn failed(reason: String) -> Error {
    Error::Output {
        tool: super::CLOSED_FLOOR.into(),
        reason,
    }
}

/// Keeps one GET request outstanding on each of `connections` connections to `target` for
/// `duration`, on a thread pinned to `cpu`, then waits for the last answers.
pub(crate) fn closed_floor(
    target: SocketAddr,
    connections: usize,
    duration: Duration,
    cpu: usize,
) -> Result<FloorRun, Error> {
    let request = get_request(target);
    let answer_len = answer_length(target, &request)?;
    let streams = connect(target, connections)?;
    let worker = std::thread::spawn(move || -> Result<FloorRun, Error> {
        pin_current_thread(cpu)?;
        let io_err = |e: Errno| io_error(target, e.into());
        let poller = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(io_err)?;
        for (i, stream) in streams.iter().enumerate() {
            epoll::add(
                &poller,
                stream,
                epoll::EventData::new_u64(i as u64),
                epoll::EventFlags::IN | epoll::EventFlags::ET,
            )
            .map_err(io_err)?;
        }
        let send =
            |stream: &TcpStream| match rustix::net::send(stream, &request, SendFlags::NOSIGNAL) {
                Ok(n) if n == request.len() => Ok(()),
                // One small request on an idle connection always fits its send buffer.
                Ok(n) => Err(failed(format!("a request went out in part ({n} bytes)"))),
                Err(e) => Err(io_err(e)),
            };
        // Answer bytes still due on each connection; 0 when it has nothing outstanding.
        let mut due = vec![answer_len; streams.len()];
        let mut outstanding = streams.len();
        let mut buf = vec![0u8; (answer_len as usize).clamp(16 * 1024, 256 * 1024)];
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); 64];
        let (mut requests, mut answer_bytes) = (0u64, 0u64);

        let cpu_before = thread_cpu_ns();
        let start = now_ns();
        let end = start + duration.as_nanos() as u64;
        let mut sending = true;
        for stream in &streams {
            send(stream)?;
        }
        while outstanding > 0 {
            let ready = match epoll::wait(&poller, &mut events, Some(&STALL)) {
                Ok((ready, _)) => ready,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(io_err(e)),
            };
            if ready.is_empty() {
                return Err(failed(format!(
                    "the target stopped answering ({outstanding} requests outstanding)"
                )));
            }
            for event in ready.iter() {
                let i = event.data.u64() as usize;
                // Edge-triggered: read until a short read says the socket is empty.
                loop {
                    let n = match rustix::net::recv(&streams[i], &mut buf[..], RecvFlags::empty()) {
                        Ok((0, _)) => return Err(failed("the target closed a connection".into())),
                        Ok((n, _)) => n as u64,
                        Err(Errno::AGAIN) => break,
                        Err(Errno::INTR) => continue,
                        Err(e) => return Err(io_err(e)),
                    };
                    answer_bytes += n;
                    if n > due[i] {
                        return Err(failed(format!(
                            "an answer longer than the first ({answer_len} bytes): this floor needs answers of one length"
                        )));
                    }
                    due[i] -= n;
                    if due[i] == 0 {
                        requests += 1;
                        if sending {
                            send(&streams[i])?;
                            due[i] = answer_len;
                        } else {
                            outstanding -= 1;
                        }
                    }
                    if (n as usize) < buf.len() {
                        break;
                    }
                }
            }
            if sending && now_ns() >= end {
                sending = false;
                outstanding = due.iter().filter(|&&d| d > 0).count();
            }
        }
        Ok(FloorRun {
            requests,
            seconds: (now_ns() - start) as f64 / 1e9,
            cpu_seconds: (thread_cpu_ns() - cpu_before) as f64 / 1e9,
            answer_bytes,
        })
    });
    worker
        .join()
        .map_err(|_| Error::Target("the closed-loop floor panicked".into()))?
}

/// The length of the target's answer to `request` (head and body), from one exchange on a
/// connection of its own. Needs a body framed by Content-Length, as the echo target's is.
fn answer_length(target: SocketAddr, request: &[u8]) -> Result<u64, Error> {
    let io_err = |e| io_error(target, e);
    let mut stream = TcpStream::connect(target).map_err(io_err)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io_err)?;
    stream.write_all(request).map_err(io_err)?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Err(failed("the target closed before answering".into())),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(e)),
        };
        answer.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut head = httparse::Response::new(&mut headers);
        let head_len = match head.parse(&answer) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => continue,
            Err(e) => return Err(failed(format!("a malformed answer: {e}"))),
        };
        let body_len = head
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| {
                std::str::from_utf8(h.value)
                    .ok()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .ok_or_else(|| failed("an answer without a Content-Length".into()))?;
        let total = head_len as u64 + body_len;
        if answer.len() as u64 >= total {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::floor::test_target::{allowed_cpu, answering_target, ANSWER};

    #[test]
    fn the_closed_loop_reads_every_answer_whole_and_keeps_each_connection_busy() {
        let target = answering_target();
        let run = closed_floor(target, 4, Duration::from_millis(200), allowed_cpu()).unwrap();
        assert!(run.requests >= 4, "only {} requests", run.requests);
        // Every request sent was answered and read to the byte: none cut short at the end.
        assert_eq!(run.answer_bytes, run.requests * ANSWER.len() as u64);
        assert!(run.seconds >= 0.2, "a 200 ms run took {} s", run.seconds);
        assert!(run.cpu_seconds > 0.0);
    }

    #[test]
    fn the_answer_length_counts_head_and_body() {
        let target = answering_target();
        let length = answer_length(target, &get_request(target)).unwrap();
        assert_eq!(length, ANSWER.len() as u64);
    }
}
