//! keepalived (VRRP) for a hot-standby pair of relays.
//!
//! Each relay of a pair runs keepalived with one `vrrp_instance`
//! ([`VrrpConfig`], written out as `packaging/keepalived/keepalived.conf.example`
//! is) and the notify fifo script `packaging/keepalived/mcr-vrrp-notify`,
//! which makes mcrd active on the master and standby otherwise.
//! [`Keepalived`] runs one such keepalived in a test bed's namespace,
//! stops it or kills it, and reads what its notify script did.

mod config;
mod keepalived;

use std::path::PathBuf;

pub use config::{SyncedInstance, VrrpConfig, directives};
pub use keepalived::{Keepalived, Transition};

/// The repository's notify fifo script, `packaging/keepalived/mcr-vrrp-notify`.
pub fn notify_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../packaging/keepalived/mcr-vrrp-notify")
}

/// The repository's example configuration,
/// `packaging/keepalived/keepalived.conf.example`.
pub fn example_conf() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../packaging/keepalived/keepalived.conf.example")
}
