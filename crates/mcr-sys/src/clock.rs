//! `CLOCK_MONOTONIC` in nanoseconds, absolute sleeps, timer slack, and the
//! kernel's receive timestamps brought onto the monotonic clock.
//!
//! `CLOCK_MONOTONIC` is shared by every network namespace of a host, so a
//! sender's timestamp and a receiver's clock reading compare directly.

use std::io;

/// Nanoseconds on `clock` (one that always exists on Linux).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call, and
    // every clock passed here always exists, so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime({clock}) failed");
    timespec_to_ns(&ts)
}

/// Nanoseconds on `CLOCK_MONOTONIC`.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds on `CLOCK_REALTIME` (the clock of the kernel's receive
/// timestamps).
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// How far `CLOCK_REALTIME` is ahead of `CLOCK_MONOTONIC`, in
/// nanoseconds, now: what turns the kernel's receive timestamps (taken on
/// the real-time clock) into monotonic time. Read again for each batch, it
/// follows any step of the real-time clock.
pub fn realtime_offset_ns() -> i64 {
    let mono = i128::from(clock_ns(libc::CLOCK_MONOTONIC));
    let real = i128::from(clock_ns(libc::CLOCK_REALTIME));
    i64::try_from(real - mono).unwrap_or(0)
}

/// A kernel receive timestamp (`CLOCK_REALTIME`, ns) on the monotonic
/// clock, given [`realtime_offset_ns`]; never later than `now`, the
/// monotonic time it was read at.
pub fn arrival_monotonic_ns(realtime_ns: u64, offset_ns: i64, now: u64) -> u64 {
    let mono = i128::from(realtime_ns) - i128::from(offset_ns);
    u64::try_from(mono.max(0)).unwrap_or(u64::MAX).min(now)
}

/// CPU time this thread has used, user and system, in nanoseconds
/// (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn timespec_to_ns(ts: &libc::timespec) -> u64 {
    // Every clock read here is past its epoch: both fields are non-negative.
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (returns at once if it
/// already has). Signals do not cut the sleep short.
pub fn sleep_until_ns(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(deadline_ns / 1_000_000_000).unwrap_or(libc::time_t::MAX),
        // Below 10^9: always fits.
        tv_nsec: libc::c_long::try_from(deadline_ns % 1_000_000_000).unwrap_or(0),
    };
    loop {
        // SAFETY: `ts` is a valid timespec; with TIMER_ABSTIME the remainder
        // pointer is not used, so passing null is allowed.
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        // clock_nanosleep returns the error number instead of setting errno.
        if rc != libc::EINTR {
            return;
        }
    }
}

/// Sets this thread's timer slack: how late the kernel may wake it from a
/// sleep so it can coalesce wake-ups. The default, 50 µs, is too coarse for
/// pacing packets.
pub fn set_timer_slack_ns(slack_ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long by value and touches
    // no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, slack_ns as libc::c_ulong, 0, 0, 0) };
    crate::check(rc).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_advances_and_sleep_reaches_its_deadline() {
        let a = monotonic_ns();
        let deadline = a + 2_000_000;
        sleep_until_ns(deadline);
        let b = monotonic_ns();
        assert!(b >= deadline, "woke at {b}, before the deadline {deadline}");
    }

    #[test]
    fn a_deadline_in_the_past_returns_at_once() {
        sleep_until_ns(0);
    }

    #[test]
    fn timer_slack_can_be_set() {
        set_timer_slack_ns(1).expect("PR_SET_TIMERSLACK");
    }

    #[test]
    fn a_realtime_stamp_lands_on_the_monotonic_clock() {
        let offset = realtime_offset_ns();
        let now = monotonic_ns();
        let stamp = u64::try_from(i128::from(now) - 5_000 + i128::from(offset)).expect("after 1970");
        assert_eq!(arrival_monotonic_ns(stamp, offset, now), now - 5_000);
        // A stamp from the future (a clock step) is clamped to `now`.
        assert_eq!(arrival_monotonic_ns(u64::MAX, offset, now), now);
        assert_eq!(arrival_monotonic_ns(0, i64::MAX, now), 0);
    }
}
