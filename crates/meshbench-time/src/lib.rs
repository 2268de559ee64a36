//! The clock and timer of every meshbench measurement. Times are nanoseconds of
//! CLOCK_MONOTONIC, so a load generator's measurement window can be shared with resource
//! samplers in other processes on the same machine. Sleeps use a timerfd armed at an absolute
//! time: tokio's own timer rounds up to whole milliseconds, which would add up to a
//! millisecond to every corrected latency and to every server delay.

use std::num::NonZeroU64;
use std::os::fd::OwnedFd;

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

/// Lets the kernel wake this thread's timers within 1 µs instead of the default 50 µs slack.
/// Called on every thread whose sleeps are part of a measurement.
pub fn tighten_timer_slack() {
    // Best effort: a kernel that refuses only costs precision, which the results show.
    let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1_000));
}

/// A reusable one-shot timer with nanosecond resolution, integrated with tokio's reactor.
pub struct PreciseTimer {
    fd: AsyncFd<OwnedFd>,
}

impl PreciseTimer {
    pub fn new() -> std::io::Result<Self> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: an `OwnedFd` is a valid open descriptor that cannot be closed or replaced
        // while the `AsyncFd` owns it, and its `as_raw_fd` never changes.
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        Ok(PreciseTimer { fd })
    }

    /// Sleeps for `duration` from now.
    pub async fn sleep(&mut self, duration: std::time::Duration) -> std::io::Result<()> {
        self.sleep_until(now_ns() + duration.as_nanos() as u64)
            .await
    }

    /// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`; returns at once if it has.
    pub async fn sleep_until(&mut self, deadline_ns: u64) -> std::io::Result<()> {
        if now_ns() >= deadline_ns {
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
        timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::ABSTIME, &spec)?;
        loop {
            let mut guard = self.fd.readable().await?;
            let mut expirations = [0u8; 8];
            match rustix::io::read(guard.get_inner(), &mut expirations) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
