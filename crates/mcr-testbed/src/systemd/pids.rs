//! The container's processes as the host sees them: its PID 1, every
//! process of its PID namespace, and the host PID of a PID inside it, read
//! from /proc (`NSpid:` lists a process's PID in each namespace, the host's
//! first and its own last).

use std::fs;

use crate::naming::inode;

/// The child of `parent` that is PID 1 of a PID namespace of its own (the
/// container's init, once nspawn has started it).
pub(super) fn container_init(parent: u32) -> Option<u32> {
    let parent = parent.to_string();
    pids().into_iter().find(|&pid| {
        let Some(status) = status(pid) else {
            return false;
        };
        let depth = field(&status, "NSpid").map_or(0, |v| v.split_whitespace().count());
        field(&status, "PPid") == Some(parent.as_str()) && depth >= 2 && innermost_pid(&status) == Some(1)
    })
}

/// The inode of process `pid`'s PID namespace (the namespace's identity).
pub(super) fn pid_namespace(pid: u32) -> Option<u64> {
    inode(&format!("/proc/{pid}/ns/pid"))
}

/// The host PIDs of every process in PID namespace `pidns`.
pub(super) fn in_namespace(pidns: u64) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|&pid| pid_namespace(pid) == Some(pidns))
        .collect()
}

/// The host PID of the process whose PID is `inner` in namespace `pidns`.
pub(super) fn host_pid(pidns: u64, inner: u32) -> Option<u32> {
    in_namespace(pidns)
        .into_iter()
        .find(|&pid| status(pid).and_then(|s| innermost_pid(&s)) == Some(inner))
}

/// Every PID in /proc.
fn pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

fn status(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// The value of `Key:` in a /proc/PID/status.
fn field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
}

/// A process's PID in its own (innermost) PID namespace: the last of
/// `NSpid:`.
fn innermost_pid(status: &str) -> Option<u32> {
    field(status, "NSpid")?.split_whitespace().last()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: &str = "Name:\tsystemd\nPid:\t9474\nPPid:\t9470\nNSpid:\t9474\t1\nNSpgid:\t9474\t1\n";

    #[test]
    fn reads_the_pid_inside_the_container() {
        assert_eq!(innermost_pid(INIT), Some(1));
        assert_eq!(field(INIT, "PPid"), Some("9470"));
        assert_eq!(field(INIT, "NSpid"), Some("9474\t1"));
        assert_eq!(innermost_pid("NSpid:\t42\n"), Some(42));
        assert_eq!(innermost_pid("Pid:\t42\n"), None);
    }

    #[test]
    fn this_process_is_found_in_its_own_namespace() {
        let me = std::process::id();
        let ns = pid_namespace(me).expect("our PID namespace");
        assert!(in_namespace(ns).contains(&me));
        // Outside a container, the innermost PID is the host's.
        assert_eq!(host_pid(ns, me), Some(me));
        assert_eq!(container_init(me), None);
    }
}
