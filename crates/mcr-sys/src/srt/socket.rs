//! One SRT socket: bind, listen, accept, connect, send, receive, close.

use std::fmt;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::sync::OnceLock;

use super::ffi::{self, SRTSOCKET};
use super::hook::HookSlot;
use super::{RejectReason, SrtError, SrtStats};
use crate::sockaddr::{RawSockAddr, from_storage, zeroed_storage};

/// The state of an SRT socket (`srt_getsockstate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrtState {
    /// Created, not bound.
    Init,
    /// Bound, not yet listening or connecting.
    Opened,
    /// Listening.
    Listening,
    /// A connect is under way.
    Connecting,
    /// Connected.
    Connected,
    /// The connection broke (or a connect failed); close the socket.
    Broken,
    /// Being closed.
    Closing,
    /// Closed.
    Closed,
    /// libsrt does not know this id (any more).
    NonExistent,
    /// A value this binding does not know.
    Other(i32),
}

impl SrtState {
    /// The state of the socket with id `id`, which need not be one this
    /// process holds an [`SrtSocket`] for (a caller a listen hook let in,
    /// say): [`SrtState::NonExistent`] once libsrt has forgotten it.
    pub fn of(id: i32) -> SrtState {
        SrtState::from_raw(ffi::srt_getsockstate(id))
    }

    /// Whether the socket is gone or going: broken, closing, closed or
    /// forgotten.
    pub fn is_over(self) -> bool {
        matches!(
            self,
            SrtState::Broken | SrtState::Closing | SrtState::Closed | SrtState::NonExistent
        )
    }

    fn from_raw(s: i32) -> SrtState {
        match s {
            ffi::SRTS_INIT => SrtState::Init,
            ffi::SRTS_OPENED => SrtState::Opened,
            ffi::SRTS_LISTENING => SrtState::Listening,
            ffi::SRTS_CONNECTING => SrtState::Connecting,
            ffi::SRTS_CONNECTED => SrtState::Connected,
            ffi::SRTS_BROKEN => SrtState::Broken,
            ffi::SRTS_CLOSING => SrtState::Closing,
            ffi::SRTS_CLOSED => SrtState::Closed,
            ffi::SRTS_NONEXIST => SrtState::NonExistent,
            other => SrtState::Other(other),
        }
    }
}

/// What [`SrtSocket::send`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Queued whole for sending (this many bytes).
    Queued(usize),
    /// The send buffer is full (non-blocking socket, `SRT_EASYNCSND`):
    /// nothing was queued. Retry when epoll reports `OUT`, or drop.
    WouldBlock,
}

/// An SRT socket, closed (`srt_close`) when dropped. Every call is safe
/// from any thread: libsrt locks internally.
pub struct SrtSocket {
    id: SRTSOCKET,
    /// The listen hook's slot, once one is set (see hook.rs): emptied, not
    /// freed, after the socket closes.
    pub(super) hook: OnceLock<&'static HookSlot>,
}

impl fmt::Debug for SrtSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SrtSocket(@{})", self.id)
    }
}

impl SrtSocket {
    /// A new socket (`srt_create_socket`), starting libsrt first if needed.
    pub fn new() -> Result<SrtSocket, SrtError> {
        super::startup()?;
        let id = ffi::srt_create_socket();
        if id == ffi::SRT_INVALID_SOCK {
            return Err(SrtError::last("srt_create_socket"));
        }
        Ok(SrtSocket::from_id(id))
    }

    fn from_id(id: SRTSOCKET) -> SrtSocket {
        SrtSocket {
            id,
            hook: OnceLock::new(),
        }
    }

    /// libsrt's id of this socket (what [`super::SrtEpoll::wait`] reports).
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Binds to `addr` (`srt_bind`); libsrt opens the UDP socket, in the
    /// network namespace of the calling thread. A second SRT socket bound
    /// to the same address and port shares that UDP socket.
    pub fn bind(&self, addr: SocketAddr) -> Result<(), SrtError> {
        let raw = RawSockAddr::new(addr);
        // SAFETY: `raw` holds a valid sockaddr of `raw.len()` bytes for the
        // duration of the call.
        let rc = unsafe { ffi::srt_bind(self.id, raw.as_ptr(), len_int(raw.len())) };
        if rc == ffi::SRT_ERROR {
            return Err(SrtError::last(format!("srt_bind @{} {addr}", self.id)));
        }
        Ok(())
    }

    /// Binds to a bound, unconnected UDP socket the caller made
    /// (`srt_bind_acquire`), e.g. one a supervisor keeps open across
    /// restarts and hands over.
    ///
    /// On success libsrt owns the descriptor: it makes it non-blocking (on
    /// the open file description, so every duplicate of it too) and closes
    /// it when the last SRT socket using it is gone, which is some time
    /// after [`Drop`] (libsrt's garbage collector runs about once a second).
    /// Keep a duplicate (`dup`) if the UDP socket must outlive libsrt's use.
    ///
    /// On failure the descriptor is not closed here, because libsrt 1.5.1
    /// may already have closed it (it does when setting up its queues fails
    /// after taking the socket, api.cpp `updateMux`): closing it again could
    /// close another thread's new descriptor. The checks made first (the
    /// socket is new, the descriptor is a bound, unconnected UDP socket
    /// below `FD_SETSIZE`) close it normally when they fail, so a leak needs
    /// libsrt itself to fail.
    pub fn bind_acquire(&self, udp: OwnedFd) -> Result<(), SrtError> {
        let op = || format!("srt_bind_acquire @{} fd {}", self.id, udp.as_raw_fd());
        if self.state() != SrtState::Init {
            return Err(SrtError::invalid(op(), "the SRT socket is already bound"));
        }
        // libsrt waits on the descriptor with select() (channel.cpp
        // recvfrom), which cannot take descriptors from FD_SETSIZE up.
        if usize::try_from(udp.as_raw_fd()).map_or(true, |fd| fd >= libc::FD_SETSIZE) {
            return Err(SrtError::invalid(
                op(),
                format!(
                    "libsrt polls its UDP socket with select(), which takes descriptors below {}",
                    libc::FD_SETSIZE
                ),
            ));
        }
        let sock = socket2::SockRef::from(&udp);
        match (sock.r#type(), sock.local_addr(), sock.peer_addr()) {
            (Ok(socket2::Type::DGRAM), Ok(local), Err(_)) if local.as_socket().is_some_and(|a| a.port() != 0) => {}
            (Ok(socket2::Type::DGRAM), Ok(_), Ok(_)) => {
                return Err(SrtError::invalid(
                    op(),
                    "the UDP socket is connected; libsrt needs an unconnected one",
                ));
            }
            _ => return Err(SrtError::invalid(op(), "not a bound IPv4 or IPv6 UDP socket")),
        }
        let op = op();
        let fd = udp.into_raw_fd();
        // SAFETY: `fd` is an open UDP socket whose ownership this call
        // hands to libsrt (into_raw_fd: nothing here closes it again).
        let rc = unsafe { ffi::srt_bind_acquire(self.id, fd) };
        if rc == ffi::SRT_ERROR {
            return Err(SrtError::last(op));
        }
        Ok(())
    }

    /// Listens (`srt_listen`); `backlog` handshakes may wait for
    /// [`SrtSocket::accept`], more are refused (`SRT_REJ_BACKLOG`).
    pub fn listen(&self, backlog: i32) -> Result<(), SrtError> {
        if ffi::srt_listen(self.id, backlog) == ffi::SRT_ERROR {
            return Err(SrtError::last(format!("srt_listen @{} backlog {backlog}", self.id)));
        }
        Ok(())
    }

    /// Takes the next connected caller, with its address (`srt_accept`).
    /// On a non-blocking listener `None` means none is waiting; call it when
    /// epoll reports `IN`, since libsrt logs an error line ("no pending
    /// connection available at the moment") for each call that finds none.
    pub fn accept(&self) -> Result<Option<(SrtSocket, SocketAddr)>, SrtError> {
        let mut storage = zeroed_storage();
        let mut len = len_int(crate::conv::socklen_of::<libc::sockaddr_storage>());
        // SAFETY: `storage` has `len` writable bytes; libsrt writes the
        // peer's address there and its length to `len`.
        let id = unsafe { ffi::srt_accept(self.id, (&raw mut storage).cast(), &raw mut len) };
        if id == ffi::SRT_INVALID_SOCK {
            if super::error::last_code() == ffi::SRT_EASYNCRCV {
                ffi::srt_clearlasterror();
                return Ok(None);
            }
            return Err(SrtError::last(format!("srt_accept @{}", self.id)));
        }
        let sock = SrtSocket::from_id(id);
        let len = libc::socklen_t::try_from(len).unwrap_or(0);
        match from_storage(&storage, len) {
            Some(addr) => Ok(Some((sock, addr))),
            None => Err(SrtError::invalid(
                format!("srt_accept @{}", self.id),
                format!("accepted @{id} from an address that is neither IPv4 nor IPv6"),
            )),
        }
    }

    /// Connects to a listener at `addr` (`srt_connect`). A non-blocking
    /// socket returns at once: epoll reports `OUT` when connected, `ERR`
    /// when refused or timed out ([`SrtSocket::reject_reason`] says why).
    /// libsrt raises `IN` and `OUT` together with `ERR` (to wake every
    /// waiter), so look at `ERR` first.
    pub fn connect(&self, addr: SocketAddr) -> Result<(), SrtError> {
        let raw = RawSockAddr::new(addr);
        // SAFETY: `raw` holds a valid sockaddr of `raw.len()` bytes for the
        // duration of the call.
        let rc = unsafe { ffi::srt_connect(self.id, raw.as_ptr(), len_int(raw.len())) };
        if rc == ffi::SRT_ERROR {
            return Err(SrtError::last(format!("srt_connect @{} {addr}", self.id)));
        }
        Ok(())
    }

    /// Sends one message (`srt_sendmsg2` with default controls: no TTL,
    /// the send time taken now). In live mode it must fit the payload size
    /// (1316 bytes by default).
    pub fn send(&self, msg: &[u8]) -> Result<Sent, SrtError> {
        let Ok(len) = i32::try_from(msg.len()) else {
            return Err(SrtError::invalid(
                format!("srt_sendmsg2 @{}", self.id),
                "the message is over 2 GiB",
            ));
        };
        // SAFETY: srt_msgctrl_default is an immutable, initialised global
        // of libsrt; reading it copies it.
        let mut ctrl = unsafe { ffi::srt_msgctrl_default };
        // SAFETY: `msg` has `len` readable bytes and `ctrl` is a valid
        // SRT_MSGCTRL; libsrt copies the data before returning.
        let rc = unsafe { ffi::srt_sendmsg2(self.id, msg.as_ptr().cast(), len, &raw mut ctrl) };
        if rc == ffi::SRT_ERROR {
            if super::error::last_code() == ffi::SRT_EASYNCSND {
                ffi::srt_clearlasterror();
                return Ok(Sent::WouldBlock);
            }
            return Err(SrtError::last(format!("srt_sendmsg2 @{} {} bytes", self.id, msg.len())));
        }
        Ok(Sent::Queued(usize::try_from(rc).unwrap_or(0)))
    }

    /// Receives one message into `buf` (`srt_recvmsg2`); `None` when none
    /// is ready on a non-blocking socket (`SRT_EASYNCRCV`). `buf` must hold
    /// the largest message ([`super::LIVE_MAX_PAYLOAD_BYTES`] in live mode).
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>, SrtError> {
        let len = i32::try_from(buf.len()).unwrap_or(i32::MAX);
        // SAFETY: `buf` has at least `len` writable bytes; a NULL control
        // block is allowed (srt.h: "NULL is acceptable").
        let rc = unsafe { ffi::srt_recvmsg2(self.id, buf.as_mut_ptr().cast(), len, std::ptr::null_mut()) };
        if rc == ffi::SRT_ERROR {
            if super::error::last_code() == ffi::SRT_EASYNCRCV {
                ffi::srt_clearlasterror();
                return Ok(None);
            }
            return Err(SrtError::last(format!("srt_recvmsg2 @{}", self.id)));
        }
        Ok(Some(usize::try_from(rc).unwrap_or(0)))
    }

    /// The socket's state (`srt_getsockstate`).
    pub fn state(&self) -> SrtState {
        SrtState::from_raw(ffi::srt_getsockstate(self.id))
    }

    /// Why the connection was refused or broken (`srt_getrejectreason`).
    /// Read it soon after epoll reports `ERR`: libsrt forgets a broken
    /// socket a few seconds later and then reports `UNKNOWN`.
    pub fn reject_reason(&self) -> RejectReason {
        RejectReason(ffi::srt_getrejectreason(self.id))
    }

    /// The peer's address (`srt_getpeername`).
    pub fn peer(&self) -> Result<SocketAddr, SrtError> {
        self.address(ffi::srt_getpeername, "srt_getpeername")
    }

    /// This socket's own address (`srt_getsockname`), e.g. the port the
    /// system chose.
    pub fn local_addr(&self) -> Result<SocketAddr, SrtError> {
        self.address(ffi::srt_getsockname, "srt_getsockname")
    }

    fn address(
        &self,
        call: unsafe extern "C" fn(SRTSOCKET, *mut libc::sockaddr, *mut i32) -> i32,
        name: &str,
    ) -> Result<SocketAddr, SrtError> {
        let mut storage = zeroed_storage();
        let mut len = len_int(crate::conv::socklen_of::<libc::sockaddr_storage>());
        // SAFETY: `call` is srt_getpeername or srt_getsockname, which write
        // at most `len` bytes of address into `storage` and the length
        // written into `len`.
        let rc = unsafe { call(self.id, (&raw mut storage).cast(), &raw mut len) };
        if rc == ffi::SRT_ERROR {
            return Err(SrtError::last(format!("{name} @{}", self.id)));
        }
        from_storage(&storage, libc::socklen_t::try_from(len).unwrap_or(0))
            .ok_or_else(|| SrtError::invalid(format!("{name} @{}", self.id), "not an IPv4 or IPv6 address"))
    }

    /// The connection's statistics (`srt_bistats`, not cleared,
    /// instantaneous buffer values).
    pub fn stats(&self) -> Result<SrtStats, SrtError> {
        let mut raw = ffi::SRT_TRACEBSTATS::default();
        // SAFETY: `raw` is a writable SRT_TRACEBSTATS, whose layout
        // abi_check.c pins to the header's.
        let rc = unsafe { ffi::srt_bistats(self.id, &raw mut raw, 0, 1) };
        if rc == ffi::SRT_ERROR {
            return Err(SrtError::last(format!("srt_bistats @{}", self.id)));
        }
        Ok(SrtStats::from_raw(&raw))
    }
}

impl Drop for SrtSocket {
    fn drop(&mut self) {
        // A listener's hook is never called once srt_close has returned
        // (hook.rs explains); the slot is emptied after it, so the hook
        // object is freed and a call that came anyway would find nothing.
        let _ = ffi::srt_close(self.id);
        if let Some(slot) = self.hook.get() {
            slot.clear();
        }
    }
}

/// A socket-address length as the `int` libsrt takes (it is at most
/// sizeof(sockaddr_storage), 128).
fn len_int(len: libc::socklen_t) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}
