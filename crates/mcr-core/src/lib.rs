//! MCR's core, without I/O: it reads no clock, opens no socket and spawns
//! nothing. It is handed bytes and returns decisions, so everything here is
//! tested, and fuzzed, on any machine.
//!
//! - [`wire`]: checked views over Ethernet, IPv4 and UDP headers, checksums
//!   (full and incremental), and the builder of UDP frames.

#![forbid(unsafe_code)]

pub mod wire;
