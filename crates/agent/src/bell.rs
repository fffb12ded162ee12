//! Bells: the lockstep hand-off between a spine and its agent without busy-polling.
//!
//! A bell is a `u32` of the shared header that one side adds 1 to when the other side has
//! something to look at, beside a count of the sleepers on it. A side with nothing to do
//! sleeps on the bell with the Linux futex call (`FUTEX_WAIT` on the shared mapping, so it
//! works across processes); the other side rings it — one atomic add — and makes the
//! `FUTEX_WAKE` system call only when the count says someone sleeps. So an idle spine or
//! agent costs no CPU, and a free-running spine, which never sleeps on its bell, never pays
//! the system call.
//!
//! No wake-up is lost: a sleeper reads the bell *before* it looks for work, raises the
//! sleeper count, and sleeps only while the bell still holds what it read (the kernel
//! compares atomically with going to sleep); a ringer adds to the bell *before* it reads the
//! count. Either the sleeper sees the new value and does not sleep, or the ringer sees the
//! sleeper and wakes it (sequentially consistent operations on both words). Every sleep is
//! also bounded by its caller's timeout, so a peer that never rings (an agent written
//! without bells) only makes the hand-off slower, never stuck.

use core::sync::atomic::{AtomicU32, Ordering};

/// Ring `bell`: add 1, and wake every sleeper when `sleepers` says there is one.
pub(crate) fn ring(bell: &AtomicU32, sleepers: &AtomicU32) {
    bell.fetch_add(1, Ordering::SeqCst);
    if sleepers.load(Ordering::SeqCst) != 0 {
        // SAFETY: `bell` is a live, aligned u32 (inside a mapping its owner keeps mapped);
        // FUTEX_WAKE only reads the address to find the sleepers, and ignores the other
        // arguments.
        unsafe {
            libc::syscall(libc::SYS_futex, bell.as_ptr(), libc::FUTEX_WAKE, i32::MAX, core::ptr::null::<u8>(), 0, 0)
        };
    }
}

/// The bell's value now, to pass to [`sleep`] after looking for work.
pub(crate) fn value(bell: &AtomicU32) -> u32 {
    bell.load(Ordering::SeqCst)
}

/// Sleep on `bell` while it still holds `seen`, at most `timeout_ns`, counted in `sleepers`
/// meanwhile. Returns at once if the bell moved since `seen` was read; may also return early
/// (a signal, a spurious wake-up): callers look again and sleep again.
pub(crate) fn sleep(bell: &AtomicU32, sleepers: &AtomicU32, seen: u32, timeout_ns: u64) {
    sleepers.fetch_add(1, Ordering::SeqCst);
    if bell.load(Ordering::SeqCst) == seen {
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000).min(i32::MAX as u64) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: `bell` is a live, aligned u32 inside a shared mapping its owner keeps
        // mapped for the call; `ts` outlives the call; FUTEX_WAIT (not private: the word is
        // shared between processes) compares the word with `seen` and sleeps at most `ts`.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                bell.as_ptr(),
                libc::FUTEX_WAIT,
                seen,
                &ts as *const libc::timespec,
                core::ptr::null::<u32>(),
                0,
            )
        };
    }
    sleepers.fetch_sub(1, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_ring_wakes_a_sleeper_at_once_and_a_moved_bell_never_sleeps() {
        let words = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        // The bell moved since it was read: no sleep at all.
        let seen = value(&words[0]);
        ring(&words[0], &words[1]);
        let t = Instant::now();
        sleep(&words[0], &words[1], seen, 5_000_000_000);
        assert!(t.elapsed() < Duration::from_secs(2), "slept on a bell that had moved");
        // A sleeper is woken by a ring long before its timeout.
        let seen = value(&words[0]);
        let w = Arc::clone(&words);
        let sleeper = std::thread::spawn(move || {
            let t = Instant::now();
            sleep(&w[0], &w[1], seen, 20_000_000_000);
            t.elapsed()
        });
        while words[1].load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        ring(&words[0], &words[1]);
        let slept = sleeper.join().unwrap();
        assert!(slept < Duration::from_secs(10), "the ring did not wake the sleeper ({slept:?})");
        assert_eq!(words[1].load(Ordering::SeqCst), 0, "the sleeper count is back at 0");
    }

    #[test]
    fn a_sleep_ends_at_its_timeout() {
        let words = [AtomicU32::new(7), AtomicU32::new(0)];
        let t = Instant::now();
        sleep(&words[0], &words[1], 7, 20_000_000);
        assert!(t.elapsed() >= Duration::from_millis(15));
    }
}
