//! Names unique to one test bed, and reaping the namespaces of dead runs.
//!
//! A name is `mcrtb_<pid>_<start>_<seq>_<tag>_<role>`: the owning process,
//! its start time (so a reused pid is not mistaken for the owner), a counter
//! unique within the process, a readable tag and the namespace's role. A
//! namespace whose owner no longer runs is stale.

use std::fs;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use mcr_sys::process::{PidFd, Signal};

use crate::command;

/// Every namespace a test bed creates starts with this.
pub const PREFIX: &str = "mcrtb_";

pub(crate) const NETNS_DIR: &str = "/run/netns";

static NEXT_SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh prefix for a test bed of this process, e.g.
/// `mcrtb_4242_1234567_0_chain_`. Without our own start time the name
/// would look stale to every other test bed, so that is an error.
pub(crate) fn new_prefix(tag: &str) -> std::io::Result<String> {
    let pid = std::process::id();
    let start =
        start_time(pid).ok_or_else(|| std::io::Error::other("cannot read this process's start time from /proc"))?;
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
    Ok(format!("{PREFIX}{pid}_{start}_{seq}_{}_", sanitize(tag)))
}

/// Keeps a tag short and made of characters safe in a file name.
fn sanitize(tag: &str) -> String {
    let s: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(24)
        .collect();
    if s.is_empty() { "tb".to_string() } else { s }
}

/// The start time of process `pid` in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), or `None` if it does not exist.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses; the
    // fields after its closing parenthesis start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// The owner (pid, start time) encoded in a test-bed namespace name.
fn owner(name: &str) -> Option<(u32, u64)> {
    let mut parts = name.strip_prefix(PREFIX)?.split('_');
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    Some((pid, start))
}

/// Every network namespace on this machine whose name starts with `prefix`.
pub fn live_namespaces(prefix: &str) -> Vec<String> {
    let Ok(dir) = fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// True if the process that created `name` is gone.
fn is_stale(name: &str) -> bool {
    match owner(name) {
        Some((pid, start)) => start_time(pid) != Some(start),
        // A name with our prefix that we cannot parse was not made by this
        // code; leave it alone.
        None => false,
    }
}

/// Kills what still runs in namespace `name` and deletes it. Every process
/// inside a test-bed namespace was started by a test bed. Errors are
/// reported, not raised: this runs in `Drop`.
pub(crate) fn remove_namespace(name: &str) {
    kill_processes_in(name);
    if let Err(e) = command::ip(&["netns", "del", name]) {
        // Another test bed may have reaped it at the same moment.
        if live_namespaces(name).iter().any(|n| n == name) {
            eprintln!("mcr-testbed: could not delete namespace {name}: {e}");
        }
    }
}

/// SIGKILLs every process in namespace `name`, repeating until none is left
/// (one may fork while we kill), and waits briefly for them to be gone.
///
/// Each process is pinned with a pidfd first and then checked to be still
/// in this namespace, so a pid that was reused by an unrelated process in
/// the meantime is never signalled.
pub(crate) fn kill_processes_in(name: &str) {
    let ns_inode = inode(&format!("{NETNS_DIR}/{name}"));
    for _round in 0..20 {
        let pids = pids_in(name);
        if pids.is_empty() {
            return;
        }
        for &pid in &pids {
            let Ok(pidfd) = PidFd::open(pid) else { continue };
            if ns_inode.is_some() && inode(&format!("/proc/{pid}/ns/net")) == ns_inode {
                let _ = pidfd.signal(Signal::Kill);
            }
        }
        // A killed process leaves its namespaces when it exits; give it a
        // moment so the namespace is really gone when we return.
        for _ in 0..100 {
            if pids.iter().all(|&p| start_time(p).is_none() || is_zombie(p)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// The inode number of a file (a namespace's identity), if it exists.
pub(crate) fn inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| m.ino())
}

fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(true)
}

fn pids_in(name: &str) -> Vec<u32> {
    Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .filter(|&p| p != std::process::id())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the namespaces of test beds whose process is gone, and whatever
/// still runs inside them. Returns the names removed.
pub(crate) fn reap_stale() -> Vec<String> {
    let stale: Vec<String> = live_namespaces(PREFIX).into_iter().filter(|n| is_stale(n)).collect();
    for name in &stale {
        remove_namespace(name);
    }
    stale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_encodes_this_process_as_a_live_owner() {
        let p = new_prefix("Some Test::name").expect("prefix");
        assert!(p.starts_with(PREFIX));
        assert!(p.contains("_some-test--name_"), "{p}");
        let (pid, start) = owner(&format!("{p}gen")).expect("parses");
        assert_eq!(pid, std::process::id());
        assert_eq!(Some(start), start_time(pid));
        assert!(!is_stale(&format!("{p}gen")));
    }

    #[test]
    fn prefixes_differ_within_one_process() {
        assert_ne!(new_prefix("a").expect("a"), new_prefix("a").expect("a"));
    }

    #[test]
    fn a_dead_or_reused_owner_is_stale() {
        // pid 1 runs, but cannot have started at this tick.
        assert!(is_stale("mcrtb_1_18446744073709551615_0_x_gen"));
        // No process has pid 0 in /proc.
        assert!(is_stale("mcrtb_0_5_0_x_gen"));
        // Not ours to judge.
        assert!(!is_stale("mcrtb_garbage"));
    }

    #[test]
    fn start_time_reads_past_a_command_name_with_spaces() {
        assert!(start_time(std::process::id()).is_some());
        assert_eq!(start_time(u32::MAX), None);
    }
}
