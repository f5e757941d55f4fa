//! Network-namespace topologies for MCR's tests and benchmarks.
//!
//! A [`Testbed`] creates namespaces whose names carry a prefix unique to the
//! process and the test bed (`mcrtb_<pid>_<start>_<seq>_<tag>_<role>`), so
//! tests run in parallel without meeting. Everything it made is removed when
//! it is dropped, also while a test panics; namespaces left behind by a run
//! that was killed outright are reaped by the next [`Testbed::new`].
//!
//! [`Ns`] runs `ip` and other commands inside one namespace and spawns
//! processes there ([`Proc`], killed on drop). [`presets`] builds the
//! topologies MCR is measured on: chain, pipeline, dual-bridge and star.
//! [`traffic`] runs `mcrgen` inside them and reads its reports; [`relay`]
//! runs `mcrd` and `mcrctl`; [`capture`] records what crosses a link;
//! [`browser`] drives a headless Chromium at a page served in a namespace;
//! [`etcd`] runs etcd (one member or a cluster) in a namespace and changes
//! its keys.
//! [`vrrp`] runs keepalived for a hot-standby pair of relays, with MCR's
//! notify script, and reads the roles that script set.
//! [`srt`] runs third-party SRT peers (srt-live-transmit).
//! [`systemd`] boots systemd as PID 1 of a container (systemd-nspawn)
//! whose network is a test bed's namespace, to run mcrd as a service.
//!
//! Everything here needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the
//! `ip` command from iproute2.

#![forbid(unsafe_code)]

mod bed;
mod bins;
pub mod bpftool;
pub mod browser;
pub mod capture;
mod command;
pub mod config_file;
pub mod etcd;
pub mod ffmpeg;
pub mod http;
mod lock;
pub mod metrics;
mod naming;
mod ns;
pub mod pki;
pub mod presets;
mod process;
pub mod relay;
pub mod rist;
pub mod srt;
pub mod systemd;
mod temp_dir;
pub mod traffic;
pub mod tshark;
pub mod upgrade;
pub mod vrrp;

pub use bed::{BridgeOptions, Testbed, on_thread_in_namespace};
pub use bins::bin;
pub use lock::{TrafficLock, traffic_lock};
pub use naming::{PREFIX, live_namespaces};
pub use ns::Ns;
pub use process::{Finished, Proc};
pub use temp_dir::TempDir;

/// Signals, re-exported so callers need not depend on `mcr-sys`.
pub use mcr_sys::process::Signal;

/// What can go wrong while building or using a test bed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command such as `ip` exited with a failure.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line, for reproducing it by hand.
        command: String,
        /// How it exited.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A program could not be started at all.
    #[error("could not start `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not running as root.
    #[error("the test bed creates network namespaces and needs root; run the tests as root (uid is {uid})")]
    NotRoot {
        /// The effective uid we run as.
        uid: u32,
    },
    /// A spawned process did not do what was awaited in time.
    #[error("`{what}` did not {awaited} within {seconds:.1} s; stderr so far:\n{stderr}")]
    Timeout {
        /// The process.
        what: String,
        /// What we waited for.
        awaited: String,
        /// How long we waited.
        seconds: f64,
        /// Its stderr up to then.
        stderr: String,
    },
    /// A workspace binary is missing.
    #[error(
        "binary `{name}` not found at {path}: build the workspace binaries first (`cargo build --profile ci --bins`, or set MCR_BIN_DIR)"
    )]
    MissingBinary {
        /// The binary's name.
        name: String,
        /// Where it was looked for.
        path: String,
    },
    /// A tool's report could not be read.
    #[error("could not read the report of `{what}`: {reason}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}")]
    Report {
        /// The tool.
        what: String,
        /// Why.
        reason: String,
        /// What it printed.
        stdout: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Another I/O failure.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The test bed's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
