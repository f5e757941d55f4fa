//! MCR's core, without I/O: it reads no clock, opens no socket and spawns
//! nothing. It is handed bytes and returns decisions, so everything here is
//! tested, and fuzzed, on any machine.
//!
//! - [`wire`]: checked views over Ethernet, IPv4, IPv6, UDP, RTP and
//!   MPEG-TS headers, checksums (full and incremental), and the builder of
//!   UDP frames.
//! - [`rule`]: the rule model and its text form; [`validate`]: the checks
//!   every rule passes before it is used; [`interfaces`]: the facts about
//!   interfaces that validation and forwarding need.
//! - [`snapshot`]: the whole rule table as workers receive it;
//!   [`table`]: the match table compiled from it; [`forward`]: parsing a
//!   frame and rewriting it for an output; [`bpf`]: the ingress filter.
//! - [`dispatch`]: a worker's decision for one frame, output by output.
//! - [`health`]: an input's health as its datagrams pass (RTP sequence and
//!   jitter, MPEG-TS first-priority checks).
//! - [`failover`]: a primary input and its backups: which one the stream
//!   is taken from, with loss of signal, hold time and forced choices.
//! - [`arbitrate`]: A/B line arbitration of sequenced market-data feeds
//!   (MoldUDP64, MDP 3.0, PITCH, MITCH, generic): each sequence number
//!   once, from the first line to bring it.
//! - [`merge`]: SMPTE ST 2022-7: copies of one RTP stream from several
//!   paths merged back into one, in order.
//! - [`plane`]: the control plane as one state machine: events in, effects
//!   out.
//! - [`stats`]: where every counter lives in the shared statistics memory.
//! - [`control`]: the control protocol between `mcrctl` and `mcrd`;
//!   [`config`]: the config file; [`metrics`]: the Prometheus text format.

#![forbid(unsafe_code)]

pub mod arbitrate;
pub mod bpf;
pub mod combine;
pub mod config;
pub mod control;
pub mod datapath;
pub mod dispatch;
pub mod failover;
pub mod field;
pub mod forward;
pub mod health;
pub mod interfaces;
pub mod merge;
pub mod metrics;
pub mod named;
pub mod nmos;
pub mod plane;
pub mod rist;
pub mod rule;
pub mod snapshot;
pub mod srt;
pub mod stats;
pub mod table;
pub mod validate;
pub mod wire;
