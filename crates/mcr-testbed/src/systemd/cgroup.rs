//! A control group of its own for each container.
//!
//! With `--keep-unit`, nspawn puts the container in `payload/` under the
//! cgroup it was started in. Two containers started from the same cgroup
//! would share that tree, and each one's systemd would manage the other's
//! units as its own: a `systemctl stop mcrd` in one kills mcrd in the
//! other, and one powering off removes the other's cgroups. So nspawn is
//! started in a cgroup named after its container, below the test's own, in
//! each hierarchy nspawn uses: the unified one (cgroup2) and, on a host
//! with the hybrid layout, the v1 `name=systemd` one.

use std::fs;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The cgroup directories of one container, one per hierarchy.
#[derive(Debug)]
pub(super) struct Cgroup {
    dirs: Vec<PathBuf>,
}

impl Cgroup {
    /// Creates cgroup `name` below this process's in every hierarchy
    /// nspawn uses.
    pub(super) fn create(name: &str) -> Result<Cgroup> {
        let io = |source| Error::Io {
            what: format!("create cgroup {name} for a container"),
            source,
        };
        let parents = own_cgroups().map_err(io)?;
        if parents.is_empty() {
            return Err(io(std::io::Error::other(
                "no cgroup2 or name=systemd hierarchy is mounted",
            )));
        }
        let mut cgroup = Cgroup { dirs: Vec::new() };
        for parent in parents {
            let dir = parent.join(name);
            fs::create_dir(&dir).map_err(io)?;
            // Tracked at once, so a failure below still removes it.
            cgroup.dirs.push(dir);
        }
        Ok(cgroup)
    }

    /// The `cgroup.procs` files that put a process in it, in every
    /// hierarchy.
    pub(super) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Removes it, and what nspawn and systemd made below it. Only empty
    /// cgroups can go: call this once every process of the container is
    /// gone.
    pub(super) fn remove(&self) {
        for dir in &self.dirs {
            remove_tree(dir);
        }
    }
}

/// Removes the cgroups of containers whose process is gone (named as
/// [`super::nspawn::new_machine_name`] does), if no process is left in
/// them.
pub(super) fn reap_stale(is_stale: impl Fn(&str) -> bool) {
    for parent in own_cgroups().unwrap_or_default() {
        let Ok(entries) = fs::read_dir(&parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_dir() && is_stale(&name) {
                remove_tree(&entry.path());
            }
        }
    }
}

/// Removes a cgroup and its descendants, deepest first (a cgroup's files
/// are not removed, the directory is: rmdir does it, and refuses a cgroup
/// that has processes).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

/// The directories of this process's cgroups in the unified hierarchy and
/// in the v1 `name=systemd` one, wherever they are mounted.
fn own_cgroups() -> std::io::Result<Vec<PathBuf>> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    let membership = fs::read_to_string("/proc/self/cgroup")?;
    Ok(cgroup_dirs(&mountinfo, &membership))
}

/// [`own_cgroups`] from the texts of /proc/self/mountinfo and
/// /proc/self/cgroup.
fn cgroup_dirs(mountinfo: &str, membership: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for line in mountinfo.lines() {
        let Some((mount, fs)) = line.split_once(" - ") else {
            continue;
        };
        let mount: Vec<&str> = mount.split(' ').collect();
        let fs: Vec<&str> = fs.split(' ').collect();
        let (Some(root), Some(point), Some(fstype)) = (mount.get(3), mount.get(4), fs.first()) else {
            continue;
        };
        // `0::PATH` for the unified hierarchy, `N:name=systemd:PATH` for v1.
        let controllers = match *fstype {
            "cgroup2" => Some(""),
            "cgroup" if fs.get(2).is_some_and(|o| o.split(',').any(|o| o == "name=systemd")) => Some("name=systemd"),
            _ => None,
        };
        let Some(controllers) = controllers else { continue };
        let own = membership.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, c, path) = (parts.next()?, parts.next()?, parts.next()?);
            (c == controllers).then_some(path)
        });
        // A path outside what this mount shows cannot be reached here.
        let relative = own
            .and_then(|p| p.strip_prefix(root.trim_end_matches('/')))
            .filter(|r| r.is_empty() || r.starts_with('/'));
        let Some(relative) = relative else { continue };
        let dir = PathBuf::from(point).join(relative.trim_start_matches('/'));
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_both_hierarchies_of_a_hybrid_host() {
        let membership = "9:name=systemd:/\n4:memory:/process_api/bf86\n0::/\n";
        assert_eq!(
            cgroup_dirs(HYBRID_MOUNTS, membership),
            [
                PathBuf::from("/sys/fs/cgroup/systemd"),
                PathBuf::from("/sys/fs/cgroup/unified")
            ]
        );
    }

    #[test]
    fn finds_a_nested_cgroup_of_a_unified_host() {
        let mounts = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let membership = "0::/user.slice/session-1.scope\n";
        assert_eq!(
            cgroup_dirs(mounts, membership),
            [PathBuf::from("/sys/fs/cgroup/user.slice/session-1.scope")]
        );
    }

    #[test]
    fn a_mount_of_part_of_a_hierarchy_is_followed() {
        let mounts = "30 23 0:26 /payload /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup_dirs(mounts, "0::/payload/system.slice/x.service\n"),
            [PathBuf::from("/sys/fs/cgroup/system.slice/x.service")]
        );
        assert!(cgroup_dirs(mounts, "0::/elsewhere\n").is_empty());
        assert!(cgroup_dirs(mounts, "0::/payload2/x\n").is_empty());
    }
}
