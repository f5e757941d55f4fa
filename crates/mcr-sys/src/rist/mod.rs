//! RIST (Reliable Internet Stream Transport, VSF TR-06) through the
//! system's librist 0.2 (Debian: librist-dev), with hand-written bindings.
//!
//! A [`Rist`] is one librist context: a sender or a receiver, in the
//! simple profile (TR-06-1: RTP over UDP, an even port and the next one
//! for RTCP) or the main profile (TR-06-2: GRE over one UDP port, AES with
//! a pre-shared secret, many peers on one port). Its one peer either
//! listens (`rist://@ADDRESS:PORT`) or connects (`rist://ADDRESS:PORT`);
//! both ends may send or receive, as librist allows.
//!
//! librist runs its own threads (a protocol thread per context, which
//! sends, retransmits, times out peers and calls the callbacks below);
//! [`Rist::send`] copies a datagram into its queue and [`Rist::recv`]
//! takes one from its output queue, neither waiting. What the callbacks
//! learn (peers that connect and go, each peer's or flow's statistics) is
//! kept behind a mutex and read with [`Rist::peers`] and [`Rist::stats`].
//!
//! The C declarations are in `ffi.rs`; `abi_check.c`, compiled by build.rs
//! against the installed headers, stops the build if a mirrored struct or
//! constant changed.

mod ctx;
mod ffi;

pub use ctx::{LEVEL_ERROR, LEVEL_WARN, Peer, Profile, Rist, RistError, RistStats, Role, set_log_sink};

/// The largest datagram MCR hands librist: what fits one RTP packet in a
/// 1500-byte IPv4 packet with the main profile's GRE header (librist's
/// own limit, `RIST_MAX_PACKET_SIZE`, is larger, but a larger datagram
/// would leave fragmented).
pub const MAX_PAYLOAD_BYTES: usize = 1400;
