//! Clocks for the cycle: the real monotonic clock for runs, a virtual clock for tests.
//!
//! Everything below `io` takes time as plain nanoseconds; this module is the one place that
//! decides where "now" comes from and how to wait for a future instant. The virtual clock
//! makes a whole multi-bus cycle deterministic: waiting simply moves time forward.
//!
//! Must never: allocate, or sleep past the instant asked for by more than the OS's wakeup
//! latency (the real clock spins for the last stretch instead of oversleeping), or spin while
//! a simulated device is busy ([`Clock::wait_for_simulated_ns`] sleeps).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of monotonic time that can also wait for an instant.
pub trait Clock {
    /// Nanoseconds on a monotonic timeline.
    fn now_ns(&self) -> u64;
    /// Return at (or just after) `t_ns`. Returns at once when `t_ns` is in the past.
    fn wait_until_ns(&self, t_ns: u64);

    /// Return at (or just after) `t_ns` without giving up the CPU: for waits of a few
    /// microseconds (SPI hold times), where a sleep would overshoot by far more. The default
    /// waits as [`wait_until_ns`](Self::wait_until_ns) does (right for a virtual clock).
    fn spin_until_ns(&self, t_ns: u64) {
        self.wait_until_ns(t_ns)
    }

    /// Wait until `t_ns` or until one of `fds` becomes readable, whichever is first.
    /// The default ignores the descriptors (right for a virtual clock, where no device
    /// can be waited on).
    fn wait_readable_until_ns(&self, fds: &mut [libc::pollfd], t_ns: u64) {
        let _ = fds;
        self.wait_until_ns(t_ns)
    }

    /// Wait for a simulated device whose work ends at `t_ns`, allowing it to run up to
    /// `lead_ns` ahead of this clock. A simulated device has no hardware to poll: its result
    /// is ready as soon as it is computed, and only its timeline must not run away from the
    /// host's. A real clock therefore returns at once while the device is at most `lead_ns`
    /// ahead, and otherwise sleeps (an absolute `clock_nanosleep`, never a spin) until it is
    /// `lead_ns / 2` ahead, so a real-time thread driving a simulator costs no CPU while the
    /// device is "busy" and a late wakeup of up to `lead_ns / 2` costs the simulation nothing.
    /// `lead_ns` 0 catches up completely. The default waits as
    /// [`wait_until_ns`](Self::wait_until_ns) does (right for a virtual clock, where waiting
    /// is what moves time).
    fn wait_for_simulated_ns(&self, t_ns: u64, lead_ns: u64) {
        let _ = lead_ns;
        self.wait_until_ns(t_ns)
    }
}

/// `CLOCK_MONOTONIC`, sleeping with absolute deadlines and spinning for the last
/// `spin_ns` nanoseconds so that a wait ends close to its target even on a kernel whose
/// wakeup latency is tens of microseconds.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    /// Waits shorter than this are spun rather than slept.
    pub spin_ns: u64,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock { spin_ns: 100_000 }
    }
}

/// Read `CLOCK_MONOTONIC` in nanoseconds (the runtime's clock, so deadlines agree).
pub use rtloop_rt::periodic::now_ns as monotonic_now_ns;

/// Sleep until an absolute `CLOCK_MONOTONIC` instant (`clock_nanosleep` with `TIMER_ABSTIME`).
pub use rtloop_rt::periodic::sleep_until_ns as sleep_until_monotonic_ns;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        monotonic_now_ns()
    }

    fn spin_until_ns(&self, t_ns: u64) {
        while monotonic_now_ns() < t_ns {
            std::hint::spin_loop();
        }
    }

    fn wait_readable_until_ns(&self, fds: &mut [libc::pollfd], t_ns: u64) {
        let now = monotonic_now_ns();
        if t_ns <= now || fds.is_empty() {
            return self.wait_until_ns(t_ns);
        }
        let dt = t_ns - now;
        let ts = libc::timespec {
            tv_sec: (dt / 1_000_000_000) as libc::time_t,
            tv_nsec: (dt % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: `fds` is a valid, writable slice of pollfd for its whole length; `ts` is a
        // valid timespec; a null sigmask leaves the signal mask unchanged.
        unsafe {
            libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null());
        }
    }

    fn wait_for_simulated_ns(&self, t_ns: u64, lead_ns: u64) {
        if t_ns > monotonic_now_ns().saturating_add(lead_ns) {
            sleep_until_monotonic_ns(t_ns - lead_ns / 2);
        }
    }

    fn wait_until_ns(&self, t_ns: u64) {
        let now = monotonic_now_ns();
        if t_ns <= now {
            return;
        }
        if t_ns - now > self.spin_ns {
            sleep_until_monotonic_ns(t_ns - self.spin_ns);
        }
        while monotonic_now_ns() < t_ns {
            std::hint::spin_loop();
        }
    }
}

/// A clock that only moves when someone waits on it: deterministic time for tests and for
/// simulations that should run faster than real time. Clones share one timeline.
#[derive(Debug, Clone, Default)]
pub struct VirtualClock {
    now: Arc<AtomicU64>,
}

impl VirtualClock {
    /// A virtual clock starting at `start_ns`.
    pub fn new(start_ns: u64) -> Self {
        VirtualClock { now: Arc::new(AtomicU64::new(start_ns)) }
    }

    /// Move time forward by `dt_ns`.
    pub fn advance_ns(&self, dt_ns: u64) {
        self.now.fetch_add(dt_ns, Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn wait_until_ns(&self, t_ns: u64) {
        self.now.fetch_max(t_ns, Ordering::SeqCst);
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn wait_until_ns(&self, t_ns: u64) {
        (**self).wait_until_ns(t_ns)
    }
    fn spin_until_ns(&self, t_ns: u64) {
        (**self).spin_until_ns(t_ns)
    }
    fn wait_readable_until_ns(&self, fds: &mut [libc::pollfd], t_ns: u64) {
        (**self).wait_readable_until_ns(fds, t_ns)
    }
    fn wait_for_simulated_ns(&self, t_ns: u64, lead_ns: u64) {
        (**self).wait_for_simulated_ns(t_ns, lead_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_only_moves_forward() {
        let c = VirtualClock::new(100);
        c.wait_until_ns(50);
        assert_eq!(c.now_ns(), 100);
        c.wait_until_ns(250);
        assert_eq!(c.now_ns(), 250);
        let shared = c.clone();
        shared.advance_ns(10);
        assert_eq!(c.now_ns(), 260);
    }

    #[test]
    fn monotonic_wait_never_returns_early() {
        let c = MonotonicClock::default();
        let start = c.now_ns();
        let target = start + 300_000;
        c.wait_until_ns(target);
        assert!(c.now_ns() >= target);
    }
}
