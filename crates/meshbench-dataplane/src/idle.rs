//! Idle timeouts without a timer per connection. A registered tokio timer costs about a
//! kilobyte per connection, which with thousands of open connections is most of what the
//! hardening added to a proxy's memory. Instead, one clock thread per idle period bumps an
//! epoch and wakes every waiting connection once per period (`Notify::notify_waiters`); a
//! connection that saw no byte move across two ticks is idle. A connection is so closed
//! between one and two periods after its last byte, and between ticks its only cost per
//! event is one atomic load (a tick racing a connection's registration can delay its close
//! by one more period).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// The ticks of one idle period, shared by every connection of the process that uses it.
pub(crate) struct IdleClock {
    epoch: AtomicU64,
    tick: Notify,
}

/// Every clock made so far: a process has one or two periods, each with its thread for life.
static CLOCKS: Mutex<Vec<(Duration, &'static IdleClock)>> = Mutex::new(Vec::new());

impl IdleClock {
    /// The clock ticking every `period`, started on first use.
    pub(crate) fn every(period: Duration) -> &'static IdleClock {
        let mut clocks = CLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, clock)) = clocks.iter().find(|(p, _)| *p == period) {
            return clock;
        }
        let clock: &'static IdleClock = Box::leak(Box::new(IdleClock {
            epoch: AtomicU64::new(0),
            tick: Notify::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("meshbench-idle".into())
            .spawn(move || loop {
                std::thread::sleep(period);
                clock.epoch.fetch_add(1, Ordering::Release);
                clock.tick.notify_waiters();
            });
        if let Err(e) = spawned {
            // Without its thread the clock never ticks: idle connections are then only
            // closed by their peers. Said once, at start.
            tracing::error!(error = %e, "cannot start the idle clock; idle timeouts are off");
        }
        clocks.push((period, clock));
        clock
    }
}

/// One connection's view of an idle clock.
pub(crate) struct IdleWatch {
    clock: &'static IdleClock,
    /// Registered with the clock, so a tick wakes the connection's task.
    waiting: Pin<Box<Notified<'static>>>,
    /// `waiting` has been polled once: the clock holds the task's waker until the next tick,
    /// so it is not polled again (polling a registered waiter takes the clock's lock).
    registered: bool,
    seen_epoch: u64,
    /// Bytes moved at the last tick; `None` before the first.
    moved_at_tick: Option<u64>,
}

impl IdleWatch {
    pub(crate) fn new(period: Duration) -> Self {
        let clock = IdleClock::every(period);
        IdleWatch {
            clock,
            waiting: Box::pin(clock.tick.notified()),
            registered: false,
            seen_epoch: clock.epoch.load(Ordering::Acquire),
            moved_at_tick: None,
        }
    }

    /// Ready when `moved` (the connection's bytes so far) did not change across a whole
    /// period. Registers the task to be woken at the next tick.
    pub(crate) fn poll_idle(&mut self, cx: &mut Context<'_>, moved: u64) -> Poll<()> {
        let epoch = self.clock.epoch.load(Ordering::Acquire);
        if epoch != self.seen_epoch {
            self.seen_epoch = epoch;
            if self.moved_at_tick == Some(moved) {
                return Poll::Ready(());
            }
            self.moved_at_tick = Some(moved);
            self.waiting.set(self.clock.tick.notified());
            self.registered = false;
        }
        // The task of a connection keeps its waker, so one registration per tick suffices. A
        // tick between the epoch check and this registration is missed, and the next one
        // counts instead: at worst the connection closes a period later.
        if !self.registered {
            self.registered = true;
            if self.waiting.as_mut().poll(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
        }
        Poll::Pending
    }
}
