//! A CPU's idle time, as MEASURING.md prescribes for busy time: wall time
//! minus idle and iowait from `/proc/stat` (the idle counters are exact;
//! the per-category ones are biased at packet rates).

/// Clock ticks per second of `/proc/stat` (USER_HZ, 100 on every Linux
/// build that matters).
pub const USER_HZ: f64 = 100.0;

/// Idle plus iowait of CPU `cpu` since boot, in ticks.
pub fn idle_ticks(cpu: usize) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let name = format!("cpu{cpu} ");
    let line = stat.lines().find(|l| l.starts_with(&name))?;
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal ...
    Some(f.get(3)? + f.get(4)?)
}

/// Idle plus iowait of CPU `cpu` since boot, in seconds.
pub fn idle_s(cpu: usize) -> Option<f64> {
    idle_ticks(cpu).map(|t| t as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machines_counters() {
        assert!(idle_ticks(0).is_some());
        assert!(idle_ticks(4096).is_none());
    }
}
