//! Waiting on many SRT sockets at once (libsrt's own epoll, for SRT socket
//! ids only: system descriptors added to it are polled coarsely, so they
//! are not supported here).

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

use super::SrtError;
use super::ffi::{self, SRT_EPOLL_EVENT};

/// Readiness flags of an SRT socket (`SRT_EPOLL_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Events(u32);

impl Events {
    /// Nothing.
    pub const NONE: Events = Events(0);
    /// A message can be received; on a listener, a caller can be accepted.
    pub const IN: Events = Events(ffi::SRT_EPOLL_IN);
    /// A message can be sent; after a non-blocking connect, connected.
    pub const OUT: Events = Events(ffi::SRT_EPOLL_OUT);
    /// The socket failed (a connect refused or timed out, a connection
    /// broken): the next operation will fail. libsrt reports `IN` and `OUT`
    /// with it, so check `ERR` first.
    pub const ERR: Events = Events(ffi::SRT_EPOLL_ERR);
    /// Edge-triggered: each readiness is reported once.
    pub const ET: Events = Events(ffi::SRT_EPOLL_ET);

    /// The flags as libsrt stores them.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Events) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set.
    pub const fn intersects(self, other: Events) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    fn as_c(self) -> i32 {
        self.0.cast_signed()
    }
}

impl BitOr for Events {
    type Output = Events;
    fn bitor(self, rhs: Events) -> Events {
        Events(self.0 | rhs.0)
    }
}

impl BitOrAssign for Events {
    fn bitor_assign(&mut self, rhs: Events) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Events::IN, "IN"),
            (Events::OUT, "OUT"),
            (Events::ERR, "ERR"),
            (Events::ET, "ET"),
        ];
        let mut rest = self.0;
        let mut first = true;
        for (flag, name) in names {
            if self.contains(flag) {
                write!(f, "{}{name}", if first { "" } else { "|" })?;
                first = false;
                rest &= !flag.0;
            }
        }
        if rest != 0 || first {
            write!(f, "{}{rest:#x}", if first { "" } else { "|" })?;
        }
        Ok(())
    }
}

/// At most this many ready sockets are reported by one
/// [`SrtEpoll::wait`]; the others (level-triggered, or edge-triggered ones
/// not yet reported) come with the next call.
pub const MAX_EVENTS_PER_WAIT: usize = 256;

/// An SRT epoll container (`srt_epoll_create`), released on drop. Waiting
/// with no socket in it is allowed (it just times out).
pub struct SrtEpoll {
    eid: i32,
}

impl fmt::Debug for SrtEpoll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SrtEpoll({})", self.eid)
    }
}

impl SrtEpoll {
    /// A new, empty container, starting libsrt first if needed.
    pub fn new() -> Result<SrtEpoll, SrtError> {
        super::startup()?;
        let eid = ffi::srt_epoll_create();
        if eid < 0 {
            return Err(SrtError::last("srt_epoll_create"));
        }
        let ep = SrtEpoll { eid };
        if ffi::srt_epoll_set(eid, ffi::SRT_EPOLL_ENABLE_EMPTY) < 0 {
            return Err(SrtError::last(format!("srt_epoll_set {eid} SRT_EPOLL_ENABLE_EMPTY")));
        }
        Ok(ep)
    }

    /// Watches socket `id` ([`super::SrtSocket::id`]) for `events`.
    ///
    /// Add a socket before it can become ready: libsrt 1.5 checks the
    /// current state on adding only for a connected socket (core.cpp
    /// `CUDT::addEPoll`), so a listener whose callers are already queued,
    /// or a socket that already failed, is not reported until its next
    /// change. Add a listener before [`super::SrtSocket::listen`], or try
    /// accepting once after adding it.
    pub fn add(&self, id: i32, events: Events) -> Result<(), SrtError> {
        let ev = events.as_c();
        // SAFETY: `ev` is an int libsrt reads during the call.
        let rc = unsafe { ffi::srt_epoll_add_usock(self.eid, id, &raw const ev) };
        if rc < 0 {
            return Err(SrtError::last(format!(
                "srt_epoll_add_usock {} @{id} {events:?}",
                self.eid
            )));
        }
        Ok(())
    }

    /// Changes the events watched for socket `id`.
    pub fn update(&self, id: i32, events: Events) -> Result<(), SrtError> {
        let ev = events.as_c();
        // SAFETY: as in add.
        let rc = unsafe { ffi::srt_epoll_update_usock(self.eid, id, &raw const ev) };
        if rc < 0 {
            return Err(SrtError::last(format!(
                "srt_epoll_update_usock {} @{id} {events:?}",
                self.eid
            )));
        }
        Ok(())
    }

    /// Stops watching socket `id` (a closed socket leaves by itself).
    pub fn remove(&self, id: i32) -> Result<(), SrtError> {
        if ffi::srt_epoll_remove_usock(self.eid, id) < 0 {
            return Err(SrtError::last(format!("srt_epoll_remove_usock {} @{id}", self.eid)));
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` (0: just look; -1: forever) for watched
    /// sockets to become ready (`srt_epoll_uwait`). Replaces the contents
    /// of `ready` with (socket id, events) pairs and returns their number:
    /// 0 on timeout, at most [`MAX_EVENTS_PER_WAIT`].
    pub fn wait(&self, ready: &mut Vec<(i32, Events)>, timeout_ms: i64) -> Result<usize, SrtError> {
        ready.clear();
        let mut buf = [SRT_EPOLL_EVENT::default(); MAX_EVENTS_PER_WAIT];
        let cap = i32::try_from(buf.len()).unwrap_or(i32::MAX);
        // SAFETY: `buf` has room for `cap` events; libsrt writes at most
        // that many (it returns cap + 1 when more were ready).
        let rc = unsafe { ffi::srt_epoll_uwait(self.eid, buf.as_mut_ptr(), cap, timeout_ms) };
        if rc < 0 {
            return Err(SrtError::last(format!("srt_epoll_uwait {}", self.eid)));
        }
        let n = usize::try_from(rc).unwrap_or(0).min(buf.len());
        ready.extend(buf[..n].iter().map(|e| (e.fd, Events(e.events.cast_unsigned()))));
        Ok(n)
    }
}

impl Drop for SrtEpoll {
    fn drop(&mut self) {
        let _ = ffi::srt_epoll_release(self.eid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_combine_and_print() {
        let e = Events::IN | Events::ERR;
        assert!(e.contains(Events::IN) && e.intersects(Events::ERR | Events::OUT));
        assert!(!e.contains(Events::OUT));
        assert_eq!(format!("{e:?}"), "IN|ERR");
        assert_eq!(format!("{:?}", Events::NONE), "0x0");
        assert_eq!(format!("{:?}", Events::ET | Events(0x10)), "ET|0x10");
        assert_eq!(Events::ET.as_c(), i32::MIN);
    }

    #[test]
    fn an_empty_container_times_out() {
        let ep = SrtEpoll::new().expect("epoll");
        let mut ready = vec![(1, Events::IN)];
        assert_eq!(ep.wait(&mut ready, 10).expect("empty is allowed"), 0);
        assert!(ready.is_empty());
        let e = ep.add(0x3fff_fff0, Events::IN).expect_err("no such socket");
        assert!(e.is_closed(), "{e}");
    }
}
