//! The direct engine: plain-TCP HTTP/1.1 (the instrument's common case) on one epoll loop per
//! thread, with no async runtime in between: mio's sockets (for the non-blocking connect) and
//! rustix's raw syscalls (epoll, send, recv) with no C library wrapper on the way.
//!
//! Why a second engine: on a loopback benchmark 80% of a generator's CPU is the kernel's, and
//! what is left is the generator's own bookkeeping. The tokio engine pays per request for a
//! task wake-up, a waker registration per read, a timeout wrapper and four clock reads; here a
//! request is a state change in a plain struct, one clock read per send and one per batch of
//! responses. The engines share the plan (`plan::Plan`), the response reader (`http1`) and
//! the recorder, so both measure the same thing the same way; TLS, HTTP/2 and gRPC stay on
//! the tokio engine.
//!
//! Waiting: sends are paced by a timerfd armed one wake-up lead before the due time, then a
//! spin (non-blocking polls) up to the due time, as the tokio engine's punctual timer does.
//! The open loop reads its sockets with kernel receive timestamps (`rx`): a response ends
//! when its last bytes reached the kernel, so neither the generator's wake-up after an answer
//! nor its schedule is ever part of a latency. That also lets it sleep on the timer alone and
//! read the answers that came in meanwhile when it wakes for the next send, one wake-up per
//! request instead of two. (On a 2-vCPU VM that did not lower the CPU per request at 5k rps:
//! there, a sleep to each slot and the wake of the idle target cost ~50 us a request whatever
//! the sender does, which `meshbench bench loadgen` measures as its `paced-floor`.) It waits
//! on the sockets too whenever a worker's next slot would come before that wake-up, and when
//! no send is ahead. The closed-style models wait on the sockets (an answer is what lets them
//! send), and send each next request as soon as the answer before it is read, before the rest
//! of the batch: a target that runs dry goes to sleep, and waking it costs the sender an
//! interrupt to the target's CPU. The timer then only guards the oldest request's timeout; it
//! is moved earlier when needed but never later, since reprogramming a CPU's timer is a trap
//! on a virtual machine and that deadline moves at every answer.

mod rx;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use meshbench_time::{now_ns, observe_wake, realtime_offset_ns, wake_lead_ns, DeadlineTimer};
use mio::net::TcpStream;
use rustix::event::epoll;
use rustix::event::{PollFd, PollFlags};

use crate::config::{LoadConfig, Protocol};
use crate::connection::Connector;
use crate::http1::{HeadMemo, Progress, ResponseReader, READ_CHUNK};
use crate::plan::Plan;
use crate::recorder::{Exchange, Recorder};
use crate::{Error, Outcome};

/// The timer's key in the epoll set; a socket's is its worker's index.
const TIMER: u64 = u64::MAX;
/// An epoll timeout that only collects what is ready.
const NO_WAIT: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// Whether the direct engine can run this configuration.
pub(crate) fn supports(config: &LoadConfig) -> bool {
    config.tls.is_none() && matches!(config.protocol, Protocol::Http1 { .. })
}

/// One request on its way.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    intended_ns: u64,
    sent_ns: u64,
    /// Open loop: when the worker's next slot comes.
    next_slot_ns: u64,
    measured: bool,
    worker_was_idle: bool,
}

enum Phase {
    /// Waiting for its next send time (an entry in the send queue).
    Due {
        intended_ns: u64,
        measured: bool,
    },
    Connecting(InFlight),
    Writing {
        request: InFlight,
        written: usize,
    },
    Reading {
        request: InFlight,
        reader: ResponseReader,
    },
    /// The plan has no more requests for this worker.
    Finished,
}

impl Phase {
    fn request(&self) -> Option<&InFlight> {
        match self {
            Phase::Connecting(r)
            | Phase::Writing { request: r, .. }
            | Phase::Reading { request: r, .. } => Some(r),
            Phase::Due { .. } | Phase::Finished => None,
        }
    }
}

struct Worker {
    idx: u64,
    stream: Option<TcpStream>,
    /// Requests on the current connection. A connection that may not carry another request
    /// is dropped when its request ends, so `stream` is `Some` only for a reusable one.
    requests_on_connection: u64,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    phase: Phase,
    sent: u64,
    free_since: u64,
    /// Tells a stale timeout entry from the current request's.
    generation: u64,
    /// Arrival of the last bytes read (CLOCK_REALTIME ns), when the socket timestamps.
    arrival_realtime_ns: Option<i64>,
    /// An event came that no read has followed to the socket's end: one while no request was
    /// reading (a connect completing, a close while idle), or the peer's end arriving with a
    /// response. What it announced gets no new edge, so the next request reads right after
    /// it is written instead of waiting for one.
    unread_readiness: bool,
}

/// What an event did to a worker.
enum Step {
    /// Still waiting for the socket.
    Pending,
    /// The request ended: its outcome, and whether the connection may be reused.
    Ended(Outcome, bool),
}

/// Runs this thread's share of the workers to completion.
pub(crate) fn run_thread(
    thread: u64,
    threads: u64,
    plan: Arc<Plan>,
    config: &LoadConfig,
) -> Result<Recorder, Error> {
    let connector = Connector::new(
        config.target.clone(),
        None,
        config.protocol,
        config.request.clone(),
    )?;
    let mut engine = DirectEngine::new(thread, threads, plan, &connector)?;
    engine.run()?;
    Ok(engine.recorder)
}

struct DirectEngine<'a> {
    plan: Arc<Plan>,
    connector: &'a Connector,
    epoll: OwnedFd,
    timer: DeadlineTimer,
    workers: Vec<Worker>,
    /// Workers waiting for their send time, earliest first.
    sends: BinaryHeap<Reverse<(u64, usize)>>,
    /// Requests' deadlines in send order (the timeout is the same for all, so this is also
    /// deadline order): (deadline, worker, generation).
    deadlines: VecDeque<(u64, usize, u64)>,
    in_flight: usize,
    unfinished: usize,
    /// Open loop: sockets timestamp arrivals and answers may wait for the next send's wake-up.
    lazy: bool,
    control: Vec<u8>,
    /// The last response head, shared by the thread's connections to the one target.
    head_memo: HeadMemo,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC, refreshed at every wake-up.
    realtime_offset_ns: i64,
    recorder: Recorder,
}

impl<'a> DirectEngine<'a> {
    fn new(
        thread: u64,
        threads: u64,
        plan: Arc<Plan>,
        connector: &'a Connector,
    ) -> Result<Self, Error> {
        let epoll =
            epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| Error::Runtime(e.into()))?;
        let timer = DeadlineTimer::new().map_err(Error::Runtime)?;
        watch(&epoll, &timer, TIMER, epoll::EventFlags::IN).map_err(Error::Runtime)?;
        let workers: Vec<Worker> = (thread..plan.workers)
            .step_by(threads as usize)
            .map(|idx| Worker {
                idx,
                stream: None,
                requests_on_connection: 0,
                buf: Vec::new(),
                start: 0,
                end: 0,
                phase: Phase::Finished,
                sent: 0,
                free_since: plan.start_ns,
                generation: 0,
                arrival_realtime_ns: None,
                unread_readiness: false,
            })
            .collect();
        let lazy = plan.is_open_loop();
        Ok(DirectEngine {
            connector,
            recorder: Recorder::new(plan.keep_samples).watched(plan.live.clone()),
            plan,
            epoll,
            timer,
            unfinished: workers.len(),
            workers,
            sends: BinaryHeap::new(),
            deadlines: VecDeque::new(),
            in_flight: 0,
            lazy,
            control: rx::control_buffer(),
            head_memo: HeadMemo::default(),
            realtime_offset_ns: realtime_offset_ns(),
        })
    }

    fn run(&mut self) -> Result<(), Error> {
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); 256];
        for w in 0..self.workers.len() {
            self.plan_next(w, self.plan.start_ns);
        }
        while self.unfinished > 0 {
            let now = self.send_due(now_ns());
            self.expire(now);
            if self.unfinished == 0 {
                break;
            }
            let timeout = match self.wait_plan(now) {
                Wait::Spin => Some(&NO_WAIT),
                Wait::Sockets { wake_at } => {
                    match wake_at {
                        Some(Wake::Send(at)) => self.timer.arm_at(at),
                        Some(Wake::Timeout(at)) => self.timer.arm_by(at),
                        None => Ok(()),
                    }
                    .map_err(Error::Runtime)?;
                    None
                }
                Wait::TimerOnly { wake_at } => {
                    self.timer.arm_at(wake_at).map_err(Error::Runtime)?;
                    self.sleep_on_timer()?;
                    // What came in meanwhile, without blocking.
                    Some(&NO_WAIT)
                }
            };
            let ready = match epoll::wait(&self.epoll, &mut events, timeout) {
                Ok((ready, _)) => ready,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(Error::Runtime(e.into())),
            };
            let batch_ns = now_ns();
            if self.lazy {
                self.realtime_offset_ns = realtime_offset_ns();
            }
            for event in ready.iter() {
                let key = event.data.u64();
                if key == TIMER {
                    if let Some(asked) = self.timer.armed_ns() {
                        observe_wake(asked, batch_ns);
                    }
                    self.timer.fired();
                    continue;
                }
                self.on_ready(key as usize, event.flags, batch_ns);
                // A request that became due (the closed loop's next one) goes out now, not
                // after the rest of the batch: the target gets it before it runs dry and sleeps,
                // and waking it again would cost this thread an interrupt to its CPU.
                self.send_due(batch_ns);
            }
        }
        Ok(())
    }

    /// Blocks until the timer expires, whatever the sockets do.
    fn sleep_on_timer(&mut self) -> Result<(), Error> {
        let asked = self.timer.armed_ns();
        let mut fds = [PollFd::new(&self.timer, PollFlags::IN)];
        loop {
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(Error::Runtime(e.into())),
            }
        }
        if let Some(asked) = asked {
            observe_wake(asked, now_ns());
        }
        // The edge-triggered poll will report this expiry too; it must not count it again.
        self.timer.fired();
        Ok(())
    }

    /// How to wait for the next thing to do.
    fn wait_plan(&self, now: u64) -> Wait {
        let next_send = self.sends.peek().map(|Reverse((due, _))| *due);
        // Close to a send time: spin through it, as the punctual timer does.
        if let Some(due) = next_send {
            if due <= now + wake_lead_ns() {
                return Wait::Spin;
            }
        }
        let send_wake = next_send.map(|due| due - wake_lead_ns());
        let deadline = self.deadlines.front().map(|&(at, _, _)| at);
        let wake_at = match (send_wake, deadline) {
            (Some(send), Some(timeout)) if timeout < send => Some(Wake::Timeout(timeout)),
            (Some(send), _) => Some(Wake::Send(send)),
            (None, timeout) => timeout.map(Wake::Timeout),
        };
        // Only a send's wake-up collects answers: with no send ahead, the answers themselves
        // are what the loop waits for.
        if let (true, Some(wake), Some(_)) = (self.lazy, wake_at, send_wake) {
            let Wake::Send(wake_at) = wake else {
                return Wait::Sockets {
                    wake_at: Some(wake),
                };
            };
            // The oldest request in flight has the earliest next slot (slots go out in order).
            let earliest_slot = self
                .deadlines
                .front()
                .and_then(|&(_, w, _)| self.workers[w].phase.request())
                .map(|r| r.next_slot_ns);
            if earliest_slot.is_none_or(|slot| slot > wake_at) {
                return Wait::TimerOnly { wake_at };
            }
        }
        Wait::Sockets { wake_at }
    }

    /// Asks the plan for worker `w`'s next request.
    fn plan_next(&mut self, w: usize, now: u64) {
        let worker = &mut self.workers[w];
        match self
            .plan
            .next(worker.idx, worker.sent, worker.free_since, now)
        {
            Some((intended_ns, measured)) => {
                worker.phase = Phase::Due {
                    intended_ns,
                    measured,
                };
                self.sends.push(Reverse((intended_ns, w)));
            }
            None => {
                worker.phase = Phase::Finished;
                worker.stream = None;
                self.unfinished -= 1;
            }
        }
    }

    /// Sends every request that is due; returns the clock's last reading.
    fn send_due(&mut self, mut now: u64) -> u64 {
        while let Some(&Reverse((due, w))) = self.sends.peek() {
            if due > now {
                break;
            }
            self.sends.pop();
            let Phase::Due {
                intended_ns,
                measured,
            } = self.workers[w].phase
            else {
                continue;
            };
            // The send time of each request is its own clock read.
            now = now_ns();
            let worker = &self.workers[w];
            let next_slot_ns = if self.lazy {
                self.plan.slot_after_ns(worker.idx, worker.sent)
            } else {
                0
            };
            let request = InFlight {
                intended_ns,
                sent_ns: now,
                next_slot_ns,
                measured,
                worker_was_idle: self.workers[w].free_since <= intended_ns,
            };
            self.start(w, request);
        }
        now
    }

    /// Sends a request: on the worker's connection, or on a new one.
    fn start(&mut self, w: usize, request: InFlight) {
        self.in_flight += 1;
        let worker = &mut self.workers[w];
        worker.generation += 1;
        self.deadlines.push_back((
            request.sent_ns + self.plan.timeout.as_nanos() as u64,
            w,
            worker.generation,
        ));
        if worker.stream.is_none() {
            match self.connect(w) {
                Ok(()) => self.workers[w].phase = Phase::Connecting(request),
                Err(e) => {
                    self.workers[w].phase = Phase::Connecting(request);
                    self.end(w, Outcome::classify(&e), false, request.sent_ns);
                }
            }
            // The connection is writable once connected; the event continues the request.
            return;
        }
        worker.phase = Phase::Writing {
            request,
            written: 0,
        };
        if let Step::Ended(outcome, reusable) = self.write(w) {
            self.end(w, outcome, reusable, now_ns());
        }
    }

    fn connect(&mut self, w: usize) -> io::Result<()> {
        let stream = TcpStream::connect(self.connector.target().addr)?;
        stream.set_nodelay(true)?;
        if self.lazy {
            rx::enable_timestamps(&stream)?;
        }
        watch(
            &self.epoll,
            &stream,
            w as u64,
            epoll::EventFlags::IN | epoll::EventFlags::OUT | epoll::EventFlags::RDHUP,
        )?;
        let worker = &mut self.workers[w];
        worker.stream = Some(stream);
        worker.requests_on_connection = 0;
        worker.unread_readiness = false;
        worker.start = 0;
        worker.end = 0;
        Ok(())
    }

    /// A readiness event for worker `w`'s socket.
    fn on_ready(&mut self, w: usize, flags: epoll::EventFlags, now: u64) {
        let reading = matches!(self.workers[w].phase, Phase::Reading { .. });
        if !reading {
            self.workers[w].unread_readiness = true;
        }
        let step = match self.workers[w].phase {
            Phase::Connecting(request) => match self.connected(w) {
                Ok(true) => {
                    self.workers[w].phase = Phase::Writing {
                        request,
                        written: 0,
                    };
                    self.write(w)
                }
                Ok(false) => Step::Pending,
                Err(e) => Step::Ended(Outcome::classify(&e), false),
            },
            Phase::Writing { .. } => self.write(w),
            Phase::Reading { .. } => self.read(w),
            // A close or a stray readiness while idle: the next request's first read finds out.
            Phase::Due { .. } | Phase::Finished => Step::Pending,
        };
        // A read stops at a response's end, and the peer's end may be right behind it.
        let peer_end = epoll::EventFlags::RDHUP | epoll::EventFlags::HUP | epoll::EventFlags::ERR;
        if reading && flags.intersects(peer_end) {
            self.workers[w].unread_readiness = true;
        }
        self.after(w, step, now);
    }

    /// Ends the request when the step did; `now` is when the loop learnt of it.
    fn after(&mut self, w: usize, step: Step, now: u64) {
        if let Step::Ended(outcome, reusable) = step {
            let sent_ns = self.workers[w].phase.request().map_or(now, |r| r.sent_ns);
            // `now` was read when the batch of events began; a request sent within the batch
            // (closed models send as soon as an answer makes one due) was sent after it, and
            // ending it at `now` would put its end before its start.
            let now = if now < sent_ns { now_ns() } else { now };
            let done_ns = match self.workers[w].arrival_realtime_ns.take() {
                // The kernel's arrival time, never before the send nor after the loop saw it.
                Some(arrival) => {
                    let arrival = (arrival - self.realtime_offset_ns).max(0) as u64;
                    arrival.max(sent_ns).min(now)
                }
                None => now,
            };
            self.end(w, outcome, reusable, done_ns);
        }
    }

    /// Whether a non-blocking connect finished; its error if it failed.
    fn connected(&mut self, w: usize) -> io::Result<bool> {
        let stream = self.workers[w].stream.as_ref().expect("connecting");
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
        match stream.peer_addr() {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn write(&mut self, w: usize) -> Step {
        let worker = &mut self.workers[w];
        let Phase::Writing { request, written } = &mut worker.phase else {
            return Step::Pending;
        };
        let stream = worker.stream.as_mut().expect("a connection to write on");
        let bytes = self.connector.http1_request();
        while *written < bytes.len() {
            match send(stream, &bytes[*written..]) {
                Ok(0) => return Step::Ended(Outcome::ConnectionReset, false),
                Ok(n) => *written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Step::Ended(Outcome::classify(&e), false),
            }
        }
        let request = *request;
        worker.requests_on_connection += 1;
        worker.phase = Phase::Reading {
            request,
            reader: ResponseReader::new(self.connector.is_head()),
        };
        // No read until the socket says so: the last read left it empty (short or
        // `WouldBlock`), so the answer's arrival is a new edge; reading now would almost always
        // be a wasted syscall. Unless an edge came since that no read followed: a new
        // connection's, or a peer's close while the connection was idle.
        if worker.unread_readiness {
            return self.read(w);
        }
        Step::Pending
    }

    fn read(&mut self, w: usize) -> Step {
        let memo = &mut self.head_memo;
        let worker = &mut self.workers[w];
        worker.unread_readiness = false;
        let Phase::Reading { reader, .. } = &mut worker.phase else {
            return Step::Pending;
        };
        let stream = worker.stream.as_mut().expect("a connection to read from");
        // Bytes already buffered come first (a response split over reads).
        let mut drained = false;
        loop {
            if worker.end > worker.start {
                match reader.advance(&worker.buf[worker.start..worker.end], memo) {
                    Ok((consumed, Progress::Done { status, reusable })) => {
                        worker.start += consumed;
                        return Step::Ended(Outcome::Http(status), reusable);
                    }
                    Ok((consumed, Progress::NeedMore)) => worker.start += consumed,
                    Err(e) => return Step::Ended(Outcome::classify(&e), false),
                }
            }
            // A short read emptied the socket, and new data brings a new edge: no read just
            // to see `WouldBlock`.
            if drained {
                return Step::Pending;
            }
            if worker.start == worker.end {
                worker.start = 0;
                worker.end = 0;
            }
            if worker.buf.len() - worker.end < READ_CHUNK / 4 {
                // The unconsumed part moves to the front, then the buffer makes room.
                worker.buf.copy_within(worker.start..worker.end, 0);
                worker.end -= worker.start;
                worker.start = 0;
                let size = worker.end + READ_CHUNK;
                worker.buf.resize(size, 0);
            }
            let room = worker.buf.len() - worker.end;
            let received = if self.lazy {
                rx::receive(stream, &mut worker.buf[worker.end..], &mut self.control).map(
                    |(n, arrival)| {
                        worker.arrival_realtime_ns = arrival.or(worker.arrival_realtime_ns);
                        n
                    },
                )
            } else {
                recv(stream, &mut worker.buf[worker.end..])
            };
            match received {
                Ok(0) => {
                    return match reader.eof() {
                        Ok(Progress::Done { status, .. }) => {
                            Step::Ended(Outcome::Http(status), false)
                        }
                        Ok(Progress::NeedMore) => Step::Ended(Outcome::ConnectionReset, false),
                        Err(e) => Step::Ended(Outcome::classify(&e), false),
                    };
                }
                Ok(n) => {
                    worker.end += n;
                    drained = n < room;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Step::Ended(Outcome::classify(&e), false),
            }
        }
    }

    /// Records a finished request and plans the worker's next one.
    fn end(&mut self, w: usize, outcome: Outcome, reusable: bool, done_ns: u64) {
        let worker = &mut self.workers[w];
        let Some(&request) = worker.phase.request() else {
            return;
        };
        self.in_flight -= 1;
        let reusable = reusable
            && self.connector.keeps_connection_after(
                worker.requests_on_connection,
                self.plan.max_requests_per_connection,
            );
        if !reusable {
            worker.stream = None;
        }
        if request.measured {
            self.recorder.record(
                self.plan.window_start_ns,
                Exchange {
                    intended_ns: request.intended_ns,
                    sent_ns: request.sent_ns,
                    done_ns,
                    worker_was_idle: request.worker_was_idle,
                },
                outcome,
            );
        }
        worker.free_since = done_ns;
        worker.sent += 1;
        self.plan_next(w, done_ns);
    }

    /// Ends the requests whose timeout passed; their connections are never reused.
    fn expire(&mut self, now: u64) {
        while let Some(&(deadline, w, generation)) = self.deadlines.front() {
            let current = self.workers[w].generation == generation
                && self.workers[w].phase.request().is_some();
            if current && deadline > now {
                return;
            }
            self.deadlines.pop_front();
            if current {
                self.end(w, Outcome::Timeout, false, now);
            }
        }
    }
}

/// Adds `fd` to the epoll set, edge-triggered, under `key`. A closed socket leaves the set by
/// itself.
fn watch(epoll: &OwnedFd, fd: impl AsFd, key: u64, flags: epoll::EventFlags) -> io::Result<()> {
    epoll::add(
        epoll,
        fd,
        epoll::EventData::new_u64(key),
        flags | epoll::EventFlags::ET,
    )
    .map_err(io::Error::from)
}

/// `send(2)` straight to the kernel: the C library's wrapper is a thread-cancellation point
/// and makes two more calls around every syscall, on the path taken once per request.
fn send(stream: &TcpStream, bytes: &[u8]) -> io::Result<usize> {
    rustix::net::send(stream, bytes, rustix::net::SendFlags::NOSIGNAL).map_err(io::Error::from)
}

/// `recv(2)` straight to the kernel, for the same reason as [`send`].
fn recv(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    rustix::net::recv(stream, buf, rustix::net::RecvFlags::empty())
        .map(|(n, _)| n)
        .map_err(io::Error::from)
}

enum Wait {
    /// Poll without blocking.
    Spin,
    /// Sleep until a socket is ready or, when set, the timer fires.
    Sockets { wake_at: Option<Wake> },
    /// Sleep until the timer fires, then collect what the sockets have.
    TimerOnly { wake_at: u64 },
}

/// Why the loop's timer must fire.
#[derive(Debug, Clone, Copy)]
enum Wake {
    /// A send is due then (less the wake-up lead): the timer fires exactly there.
    Send(u64),
    /// The oldest request in flight times out then: the timer fires no later.
    Timeout(u64),
}
