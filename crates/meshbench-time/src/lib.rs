//! The clock and timer of every meshbench measurement. Times are nanoseconds of
//! CLOCK_MONOTONIC, so a load generator's measurement window can be shared with resource
//! samplers in other processes on the same machine. Sleeps use a timerfd armed at an absolute
//! time: tokio's own timer rounds up to whole milliseconds, which would add up to a
//! millisecond to every corrected latency and to every server delay.

use std::num::NonZeroU64;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::time::{
    clock_gettime, timerfd_create, timerfd_settime, ClockId, Itimerspec, TimerfdClockId,
    TimerfdFlags, TimerfdTimerFlags, Timespec,
};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Now, in nanoseconds of CLOCK_MONOTONIC.
pub fn now_ns() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How far CLOCK_REALTIME is ahead of CLOCK_MONOTONIC now, in nanoseconds: converts the
/// kernel's packet timestamps (realtime) to this crate's clock.
pub fn realtime_offset_ns() -> i64 {
    let ts = clock_gettime(ClockId::Realtime);
    let realtime = ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64;
    realtime - now_ns() as i64
}

/// Lets the kernel wake this thread's timers within 1 µs instead of the default 50 µs slack.
/// Called on every thread whose sleeps are part of a measurement.
pub fn tighten_timer_slack() {
    // Best effort: a kernel that refuses only costs precision, which the results show.
    let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1_000));
}

/// Wake-up lateness above which the lead stops growing: a generator never spends more than
/// this much of a core waiting in a yield loop before one send.
const MAX_WAKE_LEAD_NS: u64 = 200_000;
/// How far the lead moves per sleep: it tracks the median wake-up lateness.
const WAKE_LEAD_STEP_NS: u64 = 1_000;

thread_local! {
    /// This thread's estimate of how late the kernel wakes a sleeping thread (median).
    /// Shared by the thread's punctual timers, so it converges from all their sleeps.
    static WAKE_LEAD_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(10_000) };
}

/// How much earlier than a deadline this thread should ask to be woken so that it is running
/// at the deadline: the median lateness of its past wake-ups (see [`observe_wake`]).
pub fn wake_lead_ns() -> u64 {
    WAKE_LEAD_NS.get()
}

/// Records one wake-up: the thread asked to be woken at `asked_ns` and ran at `woke_ns`. The
/// lead moves one step towards the lateness, so it tracks the median.
pub fn observe_wake(asked_ns: u64, woke_ns: u64) {
    let lead = WAKE_LEAD_NS.get();
    let lateness = woke_ns.saturating_sub(asked_ns);
    let lead = if lateness > lead {
        (lead + WAKE_LEAD_STEP_NS).min(MAX_WAKE_LEAD_NS)
    } else {
        lead.saturating_sub(WAKE_LEAD_STEP_NS)
    };
    WAKE_LEAD_NS.set(lead);
}

/// A one-shot timerfd armed at absolute CLOCK_MONOTONIC times, for an event loop to wait on
/// (it becomes readable at expiry). Re-arming resets the expiration count, so an
/// edge-triggered poller sees every expiry without the count ever being read.
#[derive(Debug)]
pub struct DeadlineTimer {
    fd: OwnedFd,
    armed_ns: Option<u64>,
}

impl DeadlineTimer {
    pub fn new() -> std::io::Result<Self> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        Ok(DeadlineTimer { fd, armed_ns: None })
    }

    /// Arms the timer at `deadline_ns`; a timer already armed there is left alone (one
    /// syscall less per wait in a loop that recomputes the same deadline).
    pub fn arm_at(&mut self, deadline_ns: u64) -> std::io::Result<()> {
        if self.armed_ns == Some(deadline_ns) {
            return Ok(());
        }
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: (deadline_ns / 1_000_000_000) as _,
                tv_nsec: (deadline_ns % 1_000_000_000) as _,
            },
        };
        timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec)?;
        self.armed_ns = Some(deadline_ns);
        Ok(())
    }

    /// Makes sure the timer fires no later than `deadline_ns`, keeping an earlier expiry: for a
    /// deadline that only ever moves later (the oldest request's timeout), waking once too
    /// early costs less than re-arming at every move. Each arm that becomes the CPU's earliest
    /// timer reprograms its clock event device, which a virtual machine may trap.
    pub fn arm_by(&mut self, deadline_ns: u64) -> std::io::Result<()> {
        match self.armed_ns {
            Some(armed) if armed <= deadline_ns => Ok(()),
            _ => self.arm_at(deadline_ns),
        }
    }

    /// The deadline the timer is armed at, if it has not been seen to expire.
    pub fn armed_ns(&self) -> Option<u64> {
        self.armed_ns
    }

    /// Forgets the armed deadline after the timer fired, so the same deadline can be re-armed.
    pub fn fired(&mut self) {
        self.armed_ns = None;
    }
}

impl AsRawFd for DeadlineTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for DeadlineTimer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A reusable one-shot timer with nanosecond resolution, integrated with tokio's reactor.
pub struct PreciseTimer {
    fd: AsyncFd<DeadlineTimer>,
    punctual: bool,
}

impl PreciseTimer {
    /// A timer that wakes when the kernel delivers its expiry: at or after the deadline, late
    /// by the machine's wake-up latency (tens of microseconds on an idle virtual CPU).
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: a `DeadlineTimer` owns its descriptor, which cannot be closed or replaced
        // while the `AsyncFd` owns the timer, and its `as_raw_fd` never changes.
        #[allow(unsafe_code)]
        let fd =
            unsafe { AsyncFd::register_with_interest(DeadlineTimer::new()?, Interest::READABLE) }
                .map_err(std::io::Error::from)?;
        Ok(PreciseTimer {
            fd,
            punctual: false,
        })
    }

    /// A timer for a load generator's send times: it asks the kernel to wake it early by the
    /// thread's median wake-up lateness, then yields to the runtime (which keeps serving other
    /// sockets) until the deadline. Sends then leave on time instead of one wake-up latency
    /// late, for about half a wake-up latency of CPU per sleep at most.
    pub fn punctual() -> std::io::Result<Self> {
        Ok(PreciseTimer {
            punctual: true,
            ..Self::new()?
        })
    }

    /// Sleeps for `duration` from now.
    pub async fn sleep(&mut self, duration: std::time::Duration) -> std::io::Result<()> {
        self.sleep_until(now_ns() + duration.as_nanos() as u64)
            .await
    }

    /// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`; returns at once if it has.
    pub async fn sleep_until(&mut self, deadline_ns: u64) -> std::io::Result<()> {
        let now = now_ns();
        if now >= deadline_ns {
            return Ok(());
        }
        if !self.punctual {
            return self.wait_for_expiry(deadline_ns).await;
        }
        let wake_at = deadline_ns - wake_lead_ns().min(deadline_ns - now);
        if wake_at > now {
            self.wait_for_expiry(wake_at).await?;
            observe_wake(wake_at, now_ns());
        }
        while now_ns() < deadline_ns {
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    async fn wait_for_expiry(&mut self, deadline_ns: u64) -> std::io::Result<()> {
        // Always re-armed: an expiry this timer's reactor registration has not seen yet would
        // otherwise be mistaken for this deadline's.
        self.fd.get_mut().fired();
        self.fd.get_mut().arm_at(deadline_ns)?;
        loop {
            let mut guard = self.fd.readable().await?;
            guard.clear_ready();
            if now_ns() >= deadline_ns {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::event::{poll, PollFd, PollFlags, Timespec as PollTimeout};

    /// Neither kind of timer may ever return before its deadline: a send before its intended
    /// time would make corrected latencies look better than they are.
    async fn never_early(mut timer: PreciseTimer) {
        for step_us in [50u64, 120, 400, 1_000, 3_000] {
            for _ in 0..20 {
                let deadline = now_ns() + step_us * 1_000;
                timer.sleep_until(deadline).await.unwrap();
                let woke = now_ns();
                assert!(woke >= deadline, "woke {} ns early", deadline - woke);
            }
        }
        // A deadline in the past returns at once.
        let past = now_ns() - 1_000;
        timer.sleep_until(past).await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn timers_never_wake_before_the_deadline() {
        tighten_timer_slack();
        never_early(PreciseTimer::new().unwrap()).await;
        never_early(PreciseTimer::punctual().unwrap()).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_punctual_sleep_lets_other_tasks_run() {
        // A lead of 3 ms (far above the cap, set by hand to widen the window): the punctual
        // timer wakes at +2 ms and waits in the runtime until +5 ms; a task due at +3 ms must
        // run inside that window, not after it.
        WAKE_LEAD_NS.set(3_000_000);
        let start = now_ns();
        let other = tokio::spawn(async move {
            let mut timer = PreciseTimer::new().unwrap();
            timer.sleep_until(start + 3_000_000).await.unwrap();
            now_ns()
        });
        let mut punctual = PreciseTimer::punctual().unwrap();
        punctual.sleep_until(start + 5_000_000).await.unwrap();
        let returned = now_ns();
        let other_ran = other.await.unwrap();
        assert!(
            other_ran < returned,
            "the other task ran {} us after the punctual sleep ended",
            (other_ran - returned) / 1_000
        );
        assert!(
            WAKE_LEAD_NS.get() < 3_000_000,
            "the lead adapts after a sleep"
        );
    }

    /// Whether the timer's fd becomes readable within `within_ms`.
    fn fires_within(timer: &DeadlineTimer, within_ms: i64) -> bool {
        let mut fds = [PollFd::new(timer, PollFlags::IN)];
        let timeout = PollTimeout {
            tv_sec: within_ms / 1000,
            tv_nsec: (within_ms % 1000) * 1_000_000,
        };
        poll(&mut fds, Some(&timeout)).unwrap() == 1
    }

    #[test]
    fn arm_by_keeps_an_earlier_expiry_and_moves_a_later_one() {
        let mut timer = DeadlineTimer::new().unwrap();
        let soon = now_ns() + 20_000_000;
        timer.arm_at(soon).unwrap();
        timer.arm_by(soon + 60_000_000_000).unwrap();
        assert_eq!(timer.armed_ns(), Some(soon));
        assert!(fires_within(&timer, 5_000), "the earlier expiry was lost");
        timer.fired();

        let mut timer = DeadlineTimer::new().unwrap();
        timer.arm_at(now_ns() + 60_000_000_000).unwrap();
        let soon = now_ns() + 20_000_000;
        timer.arm_by(soon).unwrap();
        assert_eq!(timer.armed_ns(), Some(soon));
        assert!(
            fires_within(&timer, 5_000),
            "the timer was not moved earlier"
        );
    }
}
