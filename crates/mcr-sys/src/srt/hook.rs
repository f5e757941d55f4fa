//! The listen hook (`srt_listen_callback`): a Rust object that accepts or
//! rejects each caller of a listener before the handshake completes, and
//! may set that connection's options (passphrase, latency).
//!
//! libsrt calls it on the listener's receive-queue thread
//! (`CRcvQueue::worker_ProcessConnectionRequest` → `processConnectRequest`
//! → `newConnection` → `runAcceptHook`), so it must be quick. The
//! trampoline allocates nothing, never unwinds into C++ (a panic rejects
//! the caller with 1500), and rejects a stream id that is not UTF-8 with
//! 1400 without asking the hook.
//!
//! Lifetime. In libsrt 1.5.1 to 1.5.3 the hook is only reached through the
//! receive queue's `m_pListener`, read under `m_LSLock`; `srt_close` on a
//! listening socket calls `notListening()` → `removeListener()`, which takes
//! that lock and clears the pointer, so once `srt_close` has returned no
//! call is running or can start (api.cpp `CUDTUnited::close`, queue.cpp
//! `worker_ProcessConnectionRequest`, core.h `notListening`). That is
//! libsrt's code, not its documented contract (and later releases rewrote
//! that lock), so the binding does not depend on it for memory safety: the
//! opaque pointer libsrt holds is a [`HookSlot`] that is deliberately
//! leaked, one per listener that ever had a hook (a mutex and a pointer,
//! a few dozen bytes; listeners are few). When the socket is dropped the
//! slot is emptied after `srt_close`, which frees the hook object; a call
//! that came later anyway would find the slot empty and reject.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};

use super::ffi::{self, SRTSOCKET};
use super::options;
use super::{RejectCode, SrtError, SrtSocket};

/// Decides, for each caller of a listener, whether it may connect.
///
/// It runs on libsrt's receive thread for the listener's port, while that
/// thread handles no other packet: it must not block or do I/O, and should
/// not allocate. It must not drop the listener's [`SrtSocket`].
///
/// It may be asked more than once about the same caller: a caller repeats
/// its conclusion handshake (every 250 ms) until it gets an answer, and for
/// a refused attempt (by the hook, or by the key exchange after it) libsrt
/// keeps nothing, so each repeat reaches the hook again. (A repeat for a
/// connection already accepted is answered by libsrt without the hook,
/// api.cpp `newConnection` → `locatePeer`.) A hook that counts or reserves
/// (e.g. a slot per caller) must allow for that.
pub trait ListenHook: Send + Sync {
    /// Accepts the caller (`Ok`, after setting any per-connection options
    /// on `req`) or rejects it with a code the caller will read from
    /// [`SrtSocket::reject_reason`].
    fn decide(&self, req: &mut HookRequest<'_>) -> Result<(), RejectCode>;
}

/// A caller asking to connect, seen by a [`ListenHook`]: who it is, what
/// it asked for, and the new socket's options to set before the handshake
/// completes.
#[derive(Debug)]
pub struct HookRequest<'a> {
    socket: SRTSOCKET,
    peer: SocketAddr,
    stream_id: &'a str,
    handshake_version: i32,
}

impl HookRequest<'_> {
    /// The caller's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The stream id the caller sent (`SRTO_STREAMID`); empty if it sent
    /// none.
    pub fn stream_id(&self) -> &str {
        self.stream_id
    }

    /// The handshake version: 5 for SRT 1.3 and later; 4 (very old
    /// callers) carries no stream id.
    pub fn handshake_version(&self) -> i32 {
        self.handshake_version
    }

    /// The id of the socket that [`SrtSocket::accept`] will return if the
    /// connection completes.
    pub fn socket_id(&self) -> i32 {
        self.socket
    }

    /// The passphrase this connection must use (10 to 79 bytes). The key
    /// exchange is checked after the hook: a caller with another passphrase
    /// is refused then (it reads reason 10, Incorrect passphrase) and never
    /// reaches accept.
    pub fn set_passphrase(&mut self, passphrase: &str) -> Result<(), SrtError> {
        options::set_passphrase(self.socket, passphrase)
    }

    /// The AES key length for this connection: 16, 24 or 32 bytes.
    pub fn set_pbkeylen(&mut self, bytes: i32) -> Result<(), SrtError> {
        options::set_pbkeylen(self.socket, bytes)
    }

    /// This connection's receive latency and the latency it asks of the
    /// caller (`SRTO_LATENCY`, ms).
    pub fn set_latency_ms(&mut self, ms: i32) -> Result<(), SrtError> {
        options::set_i32(self.socket, ffi::SRTO_LATENCY, "SRTO_LATENCY", ms)
    }

    /// This connection's receive latency (`SRTO_RCVLATENCY`, ms).
    pub fn set_rcv_latency_ms(&mut self, ms: i32) -> Result<(), SrtError> {
        options::set_i32(self.socket, ffi::SRTO_RCVLATENCY, "SRTO_RCVLATENCY", ms)
    }

    /// The latency this connection asks of the caller's receiver
    /// (`SRTO_PEERLATENCY`, ms).
    pub fn set_peer_latency_ms(&mut self, ms: i32) -> Result<(), SrtError> {
        options::set_i32(self.socket, ffi::SRTO_PEERLATENCY, "SRTO_PEERLATENCY", ms)
    }

    /// How long this connection survives hearing nothing from the caller
    /// (`SRTO_PEERIDLETIMEO`, ms).
    pub fn set_peer_idle_timeout_ms(&mut self, ms: i32) -> Result<(), SrtError> {
        options::set_i32(self.socket, ffi::SRTO_PEERIDLETIMEO, "SRTO_PEERIDLETIMEO", ms)
    }

    /// The most this connection sends (`SRTO_MAXBW`, bytes/s), its
    /// retransmissions included.
    pub fn set_max_bw_bytes_per_s(&mut self, bytes_per_s: i64) -> Result<(), SrtError> {
        options::set_i64(self.socket, ffi::SRTO_MAXBW, "SRTO_MAXBW", bytes_per_s)
    }
}

/// What libsrt's opaque pointer points at: leaked on purpose (see the
/// module's doc), emptied when the listener is dropped.
pub(super) struct HookSlot {
    hook: Mutex<Option<Arc<dyn ListenHook>>>,
}

impl HookSlot {
    fn set(&self, hook: Arc<dyn ListenHook>) {
        *self.hook.lock().unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    /// Drops the hook (a call in progress keeps its own reference).
    pub(super) fn clear(&self) {
        let old = self.hook.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(old);
    }

    /// The hook, if still set; the lock is held only to clone the `Arc`
    /// (no allocation), not while the hook runs.
    fn get(&self) -> Option<Arc<dyn ListenHook>> {
        self.hook.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl SrtSocket {
    /// Makes `hook` decide on every caller of this listener (set it before
    /// [`SrtSocket::listen`]). Setting another replaces it. The hook lives
    /// until this socket is dropped.
    pub fn set_listen_hook(&self, hook: Arc<dyn ListenHook>) -> Result<(), SrtError> {
        let slot: &'static HookSlot = self
            .hook
            .get_or_init(|| Box::leak(Box::new(HookSlot { hook: Mutex::new(None) })));
        slot.set(hook);
        let opaque = std::ptr::from_ref::<HookSlot>(slot).cast_mut().cast::<c_void>();
        // SAFETY: `trampoline` matches srt_listen_callback_fn and never
        // unwinds; `opaque` points to a leaked HookSlot, valid for the rest
        // of the process, which the trampoline only reads through `&`.
        let rc = unsafe { ffi::srt_listen_callback(self.id(), Some(trampoline), opaque) };
        if rc == ffi::SRT_ERROR {
            let e = SrtError::last(format!("srt_listen_callback @{}", self.id()));
            slot.clear();
            return Err(e);
        }
        Ok(())
    }
}

/// libsrt's listen callback: 0 accepts, -1 rejects (with the reason set on
/// the new socket).
unsafe extern "C" fn trampoline(
    opaque: *mut c_void,
    ns: SRTSOCKET,
    hsversion: c_int,
    peeraddr: *const libc::sockaddr,
    streamid: *const c_char,
) -> c_int {
    let decided = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `opaque` is the leaked HookSlot given to
        // srt_listen_callback in set_listen_hook; it is never freed.
        let slot = unsafe { &*opaque.cast_const().cast::<HookSlot>() };
        let Some(hook) = slot.get() else {
            return Err(RejectCode::INTERNAL_ERROR);
        };
        // SAFETY: libsrt passes the caller's address (a sockaddr_any, big
        // enough for the family it holds) for the duration of the call.
        let Some(peer) = (unsafe { peer_addr(peeraddr) }) else {
            return Err(RejectCode::BAD_REQUEST);
        };
        let stream_id = if streamid.is_null() {
            ""
        } else {
            // SAFETY: libsrt passes a NUL-terminated buffer of at most 513
            // bytes (runAcceptHook zeroes it first), valid during the call.
            match unsafe { CStr::from_ptr(streamid) }.to_str() {
                Ok(s) => s,
                Err(_) => return Err(RejectCode::BAD_REQUEST),
            }
        };
        let mut req = HookRequest {
            socket: ns,
            peer,
            stream_id,
            handshake_version: hsversion,
        };
        hook.decide(&mut req)
    }));
    match decided {
        Ok(Ok(())) => 0,
        Ok(Err(code)) => reject(ns, code),
        Err(_panic) => reject(ns, RejectCode::INTERNAL_ERROR),
    }
}

fn reject(ns: SRTSOCKET, code: RejectCode) -> c_int {
    // Codes below 1000 cannot be built (RejectCode::new), so libsrt takes it.
    let _ = ffi::srt_setrejectreason(ns, code.code());
    -1
}

/// Reads an IPv4 or IPv6 address from a sockaddr of unknown length.
///
/// # Safety
/// `p` is NULL or points to a sockaddr whose readable size covers the
/// structure of the family it holds (sockaddr_in or sockaddr_in6).
unsafe fn peer_addr(p: *const libc::sockaddr) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: every sockaddr starts with its family; read unaligned since
    // nothing promises the C side's alignment.
    let family = unsafe { std::ptr::read_unaligned(p.cast::<libc::sa_family_t>()) };
    let len = match libc::c_int::from(family) {
        libc::AF_INET => size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        _ => return None,
    };
    let mut storage = crate::sockaddr::zeroed_storage();
    // SAFETY: the caller guarantees `len` readable bytes for this family;
    // sockaddr_storage is larger than either structure.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&raw mut storage).cast::<u8>(), len) };
    crate::sockaddr::from_storage(&storage, crate::conv::socklen(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sockaddr::RawSockAddr;

    #[test]
    fn reads_both_families_from_a_bare_sockaddr() {
        for s in ["10.1.2.3:9000", "[fd00::7]:9001"] {
            let addr: SocketAddr = s.parse().expect("literal");
            let raw = RawSockAddr::new(addr);
            // SAFETY: test only; `raw` holds a full sockaddr of its family.
            assert_eq!(unsafe { peer_addr(raw.as_ptr()) }, Some(addr));
        }
        // SAFETY: test only; NULL is allowed.
        assert_eq!(unsafe { peer_addr(std::ptr::null()) }, None);
    }
}
