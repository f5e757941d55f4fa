//! The systemd-nspawn command line that boots a container, the names and
//! machine IDs of containers, and what nspawn leaves when it is killed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::naming::{NETNS_DIR, start_time};
use crate::{Error, Ns, Result};

/// Every container's name starts with this (a host name: no `_`).
const MACHINE_PREFIX: &str = "mcrtb-";
/// Where nspawn keeps a directory per running container, on the host.
const PROPAGATE_DIR: &str = "/run/systemd/nspawn/propagate";

static NEXT_SEQ: AtomicU32 = AtomicU32::new(0);

/// The command that boots container `machine` in namespace `ns`, in the
/// cgroups whose `cgroup.procs` files are `cgroup_procs`, with `binds`
/// (each writable, at its own path), `binds_ro` (read-only) and
/// `machine_id` as its `/etc/machine-id`. The module's documentation says
/// why each option.
pub(super) fn command(
    machine: &str,
    ns: &Ns,
    cgroup_procs: &[PathBuf],
    binds: &[&Path],
    binds_ro: &[&Path],
    machine_id: &Path,
) -> Command {
    // A shell enters the cgroups and execs nspawn, which keeps its PID.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", ENTER_CGROUPS_AND_EXEC, "sh"])
        .args(cgroup_procs)
        .arg("--")
        .arg("systemd-nspawn")
        .env("SYSTEMD_SECCOMP", "0")
        .args(["--quiet", "--directory=/", "--volatile=yes", "--register=no"])
        .args(["--keep-unit", "--boot"])
        .arg(format!("--machine={machine}"))
        .arg(format!("--network-namespace-path={NETNS_DIR}/{}", ns.name()))
        .args(["--console=pipe", "--link-journal=no", "--capability=all"]);
    for path in binds {
        cmd.arg(format!("--bind={}", bind_path(path)));
    }
    for path in binds_ro {
        cmd.arg(format!("--bind-ro={}", bind_path(path)));
    }
    cmd.arg(format!("--bind-ro={}:/etc/machine-id", bind_path(machine_id)))
        .args(["--", "systemd.firstboot=off"])
        .arg("systemd.mask=systemd-machine-id-commit.service")
        .arg("systemd.mask=systemd-sysctl.service");
    cmd
}

/// `sh -c THIS sh PROCS... -- PROGRAM ARGS...`: writes its PID into each
/// `cgroup.procs` file, then execs the program.
const ENTER_CGROUPS_AND_EXEC: &str =
    r#"while [ "$1" != -- ]; do echo $$ >"$1" || exit 125; shift; done; shift; exec "$@""#;

/// A fresh container name, `mcrtb-PID-START-SEQ`: this process, its start
/// time (so a reused PID is not taken for the owner) and a counter.
pub(super) fn new_machine_name() -> Result<String> {
    let pid = std::process::id();
    let start = start_time(pid).ok_or_else(|| Error::Io {
        what: "name a container".into(),
        source: std::io::Error::other("cannot read this process's start time from /proc"),
    })?;
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
    Ok(format!("{MACHINE_PREFIX}{pid}-{start}-{seq}"))
}

/// A machine ID (32 hex digits, never all zero) unlike any other
/// container's: the time, this process and the counter.
pub(super) fn new_machine_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        .max(1);
    let seq = NEXT_SEQ.load(Ordering::Relaxed);
    format!("{nanos:016x}{:08x}{seq:08x}", std::process::id())
}

/// Removes nspawn's directory for `machine` (empty; nspawn removes it
/// itself when it exits normally).
pub(super) fn remove_leftovers(machine: &str) {
    let _ = fs::remove_dir(Path::new(PROPAGATE_DIR).join(machine));
}

/// Removes what nspawn left for the containers of processes that are gone.
pub(super) fn reap_stale() {
    let Ok(entries) = fs::read_dir(PROPAGATE_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_stale(&name) {
            remove_leftovers(&name);
        }
    }
}

/// True if `name` is a container's whose process is gone.
pub(super) fn is_stale(name: &str) -> bool {
    owner(name).is_some_and(|(pid, started)| start_time(pid) != Some(started))
}

/// The process (PID and start time) that named container `name`.
fn owner(name: &str) -> Option<(u32, u64)> {
    let mut parts = name.strip_prefix(MACHINE_PREFIX)?.split('-');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// A path as an nspawn `--bind=` argument, where `:` separates paths.
fn bind_path(path: &Path) -> String {
    path.to_string_lossy().replace('\\', "\\\\").replace(':', "\\:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_machine_ids_are_unique_and_valid() {
        let (a, b) = (new_machine_name().expect("name"), new_machine_name().expect("name"));
        assert_ne!(a, b);
        assert!(
            a.len() <= 64 && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{a}"
        );
        assert_eq!(owner(&a).map(|(pid, _)| pid), Some(std::process::id()));
        let id = new_machine_id();
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }

    #[test]
    fn reads_the_owner_of_a_name() {
        assert_eq!(owner("mcrtb-12-34-5"), Some((12, 34)));
        assert_eq!(owner("other-12-34-5"), None);
        assert_eq!(owner("mcrtb-x"), None);
        assert!(
            !is_stale(&new_machine_name().expect("name")),
            "a live owner is never stale"
        );
        assert!(is_stale("mcrtb-0-5-0"), "no process has PID 0");
        assert!(!is_stale("other-0-5-0"), "not ours to judge");
    }

    #[test]
    fn a_colon_in_a_bound_path_is_escaped() {
        assert_eq!(bind_path(Path::new("/tmp/a:b")), "/tmp/a\\:b");
    }
}
