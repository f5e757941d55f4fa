//! `mcrgen`: MCR's traffic tools.
//!
//! `send` paces any number of UDP streams (multicast or unicast, IPv4 or
//! IPv6) from one process with batched `sendmmsg`; every payload carries a
//! header (stream id, sequence number, send time) and a pattern the receiver
//! checks byte for byte. `recv` joins any number of groups, spreading the
//! joins over as many sockets as the kernel's per-socket limit requires, and
//! accounts for every packet: received, lost, duplicated, reordered,
//! corrupted, and latency percentiles.
//!
//! The pure parts ([`spec`], [`payload`], [`tracker`], [`histogram`],
//! [`report`]) are tested without a network; [`send`] and [`recv`] do the
//! I/O.

#![forbid(unsafe_code)]

pub mod cpu;
pub mod feed;
pub mod histogram;
pub mod hostile;
pub mod impair;
pub mod payload;
pub mod recv;
pub mod report;
pub mod send;
pub mod spec;
pub mod tracker;
pub mod units;
pub mod wrap;
