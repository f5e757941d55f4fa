//! Every `unsafe` block and raw syscall of MCR lives here, behind safe types.
//!
//! Each `unsafe` block carries a `SAFETY:` comment naming the invariant it
//! relies on; the rest of the workspace forbids `unsafe` outright.
//!
//! What is here now: the monotonic clock and absolute sleeps ([`clock`]),
//! readiness for many sockets ([`epoll`]),
//! batched UDP I/O with `sendmmsg`/`recvmmsg` ([`mmsg`]), AF_PACKET frame
//! sockets ([`packet`]), socket addresses in
//! the kernel's layout ([`sockaddr`]), socket options that `socket2` does not
//! cover ([`sockopt`]), interface lookups ([`iface`]), process helpers
//! ([`process`]), AF_PACKET receive rings with fanout and filters
//! ([`ring`]),
//! counters in shared memory ([`shm`]), UDP through io_uring (`uring`, with the `uring` feature),
//! descriptors passed between processes ([`fdpass`]) and handed from one
//! mcrd to the next ([`handover`]),
//! users, groups and capabilities
//! ([`privilege`]), network namespaces
//! ([`netns`]), and SRT through the system's libsrt 1.5 with hand-written
//! bindings ([`srt`]: sockets, the listen hook that accepts or rejects
//! callers, SRT's epoll and statistics), and RIST through the system's
//! librist 0.2 ([`rist`]: senders and receivers, their peers and
//! statistics). build.rs links both libraries with pkg-config and checks
//! the mirrored structs against their headers.

#![warn(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]

pub mod bpf;
mod cabi;
pub mod clock;
mod conv;
pub mod epoll;
pub mod fdpass;
pub mod handover;
pub mod iface;
pub mod membership;
mod mmap;
pub mod mmsg;
pub mod netlink;
pub mod netns;
pub mod packet;
pub mod privilege;
pub mod process;
pub mod ring;
pub mod rist;
pub mod shm;
pub mod sockaddr;
pub mod sockopt;
pub mod srt;
#[cfg(feature = "uring")]
pub mod uring;

/// Turns a `-1` return into the thread's `errno` as an [`std::io::Error`].
fn check(rc: libc::c_int) -> std::io::Result<libc::c_int> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
