//! CPU accounting as MEASURING.md prescribes: a core's busy time is wall
//! time minus its idle and iowait time from `/proc/stat` (the idle counters
//! are exact; the per-category ones are biased at packet rates), and a
//! process's time is its own `utime + stime` (plus its reaped children's).

use std::collections::HashMap;

use mcrgen::cpu::USER_HZ as HZ;
pub use mcrgen::cpu::idle_ticks as cpu_idle_ticks;

/// Busy seconds of a CPU over `wall_s` seconds, given idle ticks before and
/// after.
pub fn busy_s(wall_s: f64, idle_before: u64, idle_after: u64) -> f64 {
    (wall_s - idle_after.saturating_sub(idle_before) as f64 / HZ).max(0.0)
}

pub use mcr_sys::process::cpu_seconds as process_cpu_s;

/// True for a kernel thread (a child of kthreadd, pid 2). Those that
/// matter here (ksoftirqd) do the very packet work being measured, which
/// the busy time of the relay's core already counts.
fn is_kernel_thread(pid: u32) -> bool {
    pid == 2 || parent(pid) == Some(2)
}

/// CPU seconds of every user-space process on the machine, by pid.
pub fn all_processes() -> HashMap<u32, f64> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| !is_kernel_thread(pid))
        .filter_map(|pid| Some((pid, process_cpu_s(pid, true)?)))
        .collect()
}

/// CPU seconds that processes other than `ours` (and their children)
/// used between two snapshots.
pub fn others_s(before: &HashMap<u32, f64>, after: &HashMap<u32, f64>, ours: &[u32]) -> f64 {
    after
        .iter()
        .filter(|(pid, _)| !ours.contains(pid) && !is_descendant(**pid, ours))
        .map(|(pid, t)| t - before.get(pid).copied().unwrap_or(0.0))
        .filter(|d| *d > 0.0)
        .sum()
}

fn parent(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

fn is_descendant(pid: u32, ancestors: &[u32]) -> bool {
    let mut p = pid;
    for _ in 0..64 {
        match parent(p) {
            Some(pp) if ancestors.contains(&pp) => return true,
            Some(pp) if pp > 1 => p = pp,
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machines_counters() {
        assert!(cpu_idle_ticks(0).is_some());
        assert!(cpu_idle_ticks(4096).is_none());
        assert!(process_cpu_s(std::process::id(), true).is_some());
        assert!(!all_processes().is_empty());
        assert_eq!(busy_s(1.0, 100, 150), 0.5);
        assert_eq!(busy_s(1.0, 100, 300), 0.0);
    }
}
