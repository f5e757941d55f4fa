//! Packet formats, one file per protocol, as checked views over byte slices.
//!
//! Each header is a `#[repr(C)]` struct of byte-order-aware fields that
//! `zerocopy` lays over a slice after checking its length once; from then on
//! no accessor can panic. Model: smoltcp's `wire`.

pub mod checksum;
pub mod ethernet;
pub mod ipv4;
pub mod udp;
mod udp_frame;

pub use udp_frame::{FrameError, UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};
