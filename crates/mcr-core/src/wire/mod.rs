//! Packet formats, one file per protocol, as checked views over byte slices.
//!
//! Each header is a `#[repr(C)]` struct of byte-order-aware fields that
//! `zerocopy` lays over a slice after checking its length once; from then on
//! no accessor can panic. Model: smoltcp's `wire`.

pub mod checksum;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
pub mod rtp;
pub mod ts;
pub mod udp;
mod udp_frame;

pub use udp_frame::{
    FrameError, UDP_V4_HEADERS, UDP_V6_HEADERS, UdpFrameSpec, UdpFrameSpecV6, write_udp_v4_frame, write_udp_v6_frame,
};
