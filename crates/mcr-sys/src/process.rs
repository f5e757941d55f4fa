//! Process helpers: signals by PID, death of a child with its parent, CPU
//! pinning, a thread's scheduling class, the file-descriptor limit, and who
//! we run as.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A signal MCR sends to processes it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `SIGTERM`: stop cleanly.
    Term,
    /// `SIGINT`: stop cleanly, as from a terminal.
    Int,
    /// `SIGKILL`: stop now.
    Kill,
    /// `SIGHUP`: reload.
    Hup,
    /// `SIGSTOP`: pause (tests stall a process with it).
    Stop,
    /// `SIGCONT`: go on after `SIGSTOP`.
    Cont,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Int => libc::SIGINT,
            Signal::Kill => libc::SIGKILL,
            Signal::Hup => libc::SIGHUP,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
        }
    }
}

/// Sends `signal` to the process `pid`.
pub fn send_signal(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process id"))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a
    // positive pid names exactly one process, never a group.
    let rc = unsafe { libc::kill(pid, signal.number()) };
    crate::check(rc).map(|_| ())
}

/// Sends `signal` to every process of the process group `pgid` (a process
/// started as the leader of its own group, and what it forked). The caller
/// must know the group is its own: its leader not yet reaped, so that the
/// id cannot have been reused.
pub fn send_signal_to_group(pgid: u32, signal: Signal) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid)
        .ok()
        .filter(|&p| p > 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process group id"))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a
    // negative pid below -1 names exactly the group -pid (never -1, which
    // would be every process: ruled out above).
    let rc = unsafe { libc::kill(-pgid, signal.number()) };
    crate::check(rc).map(|_| ())
}

/// A process pinned by a pidfd: signals sent through it reach that process
/// and no other, even if its pid is reused after it exits.
#[derive(Debug)]
pub struct PidFd {
    fd: std::os::fd::OwnedFd,
}

impl PidFd {
    /// Opens a pidfd for `pid`.
    pub fn open(pid: u32) -> io::Result<PidFd> {
        let pid = libc::pid_t::try_from(pid)
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process id"))?;
        // SAFETY: pidfd_open takes a pid and flags by value and returns a new
        // fd or -1.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `rc` is a freshly created fd that nothing else owns.
        let fd = unsafe { std::os::fd::FromRawFd::from_raw_fd(crate::conv::fd_of(rc)?) };
        Ok(PidFd { fd })
    }

    /// Sends `signal` to the process (ESRCH once it has exited).
    pub fn signal(&self, signal: Signal) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_send_signal takes the pidfd, a signal number, a null
        // siginfo (meaning: as kill(2) would) and flags 0.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal.number(),
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// Makes the child that `cmd` starts receive SIGKILL when the thread that
/// spawned it ends, so a test or benchmark that dies leaves no process
/// behind. The request survives `exec` (and `ip netns exec`).
pub fn kill_with_parent(cmd: &mut Command) {
    // SAFETY: getpid is async-signal-safe and touches no memory.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec; it calls only
    // prctl and getppid, both async-signal-safe, and builds its errors from
    // raw OS error numbers, which allocate nothing.
    unsafe { cmd.pre_exec(move || die_with_parent(parent)) };
}

/// In a freshly forked child: ask for SIGKILL when `parent` goes away.
fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number by value and touches no
    // memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    crate::check(rc)?;
    // The parent may have died before the request was in place. The error
    // must not allocate: this runs between fork and exec.
    // SAFETY: getppid cannot fail and touches no memory.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Makes the child that `cmd` starts find each `fds[i].0` open as
/// descriptor number `fds[i].1` (without close-on-exec). The caller keeps
/// the descriptors open until the child has started. Sources are first
/// moved above every target, so no `dup2` clobbers another source.
pub fn pass_fds(cmd: &mut Command, fds: &[(std::os::fd::BorrowedFd<'_>, i32)]) {
    use std::os::fd::AsRawFd;
    const MAX: usize = 8;
    let mut pairs = [(-1i32, -1i32); MAX];
    let n = fds.len().min(MAX);
    for (p, (fd, target)) in pairs.iter_mut().zip(fds) {
        *p = (fd.as_raw_fd(), *target);
    }
    // SAFETY: the closure runs in the forked child before exec and calls
    // only fcntl and dup2, which are async-signal-safe; it works on a copy
    // of a fixed array and allocates nothing.
    unsafe { cmd.pre_exec(move || place_fds(&pairs[..n])) };
}

/// In a freshly forked child: put each `(src, target)` in place.
fn place_fds(pairs: &[(i32, i32)]) -> io::Result<()> {
    let highest = pairs.iter().map(|p| p.1).max().unwrap_or(0);
    let mut moved = [-1i32; 8];
    for (m, &(src, _)) in moved.iter_mut().zip(pairs) {
        // SAFETY: F_DUPFD_CLOEXEC duplicates an open fd to the lowest free
        // number above `highest`; plain integers only.
        *m = crate::check(unsafe { libc::fcntl(src, libc::F_DUPFD_CLOEXEC, highest + 1) })?;
    }
    for (&m, &(_, target)) in moved.iter().zip(pairs) {
        // SAFETY: dup2 takes two fd numbers; the new one has no close-on-exec
        // flag, and `m` is never a target (it is above all of them).
        crate::check(unsafe { libc::dup2(m, target) })?;
    }
    Ok(())
}

/// Takes ownership of descriptor `n`, inherited from the parent (see
/// [`pass_fds`]), and marks it close-on-exec. Fails if `n` is not open.
pub fn own_inherited_fd(n: i32) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: F_SETFD on a descriptor number changes only its flags; it
    // fails with EBADF if the number is not open, and then we own nothing.
    crate::check(unsafe { libc::fcntl(n, libc::F_SETFD, libc::FD_CLOEXEC) })?;
    // SAFETY: the descriptor is open (checked above) and was passed to this
    // process for it to own; no other owner exists in this process.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(n) })
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    set_thread_cpus(&[cpu])
}

/// Lets the calling thread run on `cpus` (and no other CPU); threads it
/// starts from now on inherit the set.
pub fn set_thread_cpus(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no CPU {cpu}")));
        }
        // SAFETY: `cpu` was checked to be below CPU_SETSIZE, so the bit is
        // inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 means the
    // calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    crate::check(rc).map(|_| ())
}

/// The CPUs this process may run on (its affinity mask), in order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable cpu_set_t of the size passed; pid 0 is
    // this thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    crate::check(rc)?;
    // SAFETY: CPU_ISSET reads one bit of a valid set, below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// The calling thread's id (`gettid`), for [`set_prompt`].
pub fn thread_id() -> i32 {
    // SAFETY: gettid cannot fail and touches no memory.
    unsafe { libc::gettid() }
}

/// Puts thread `tid` (0: the calling thread) in the real-time class at
/// the lowest priority (`SCHED_FIFO` 1), so that it runs as soon as it
/// wakes, ahead of every ordinary thread, or (`prompt` false) back in the
/// ordinary class. For short waits on a time only: a real-time thread that
/// keeps the CPU holds ordinary threads off it. Needs `CAP_SYS_NICE` or an
/// `RLIMIT_RTPRIO` of at least 1 ([`allow_prompt`]); going back always
/// works.
pub fn set_prompt(tid: i32, prompt: bool) -> io::Result<()> {
    let (policy, priority) = if prompt {
        (libc::SCHED_FIFO, 1)
    } else {
        (libc::SCHED_OTHER, 0)
    };
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid sched_param that the kernel only reads; a
    // tid that names no thread of ours is an error, not undefined behaviour.
    let rc = unsafe { libc::sched_setscheduler(tid, policy, &param) };
    crate::check(rc).map(|_| ())
}

/// Whether thread `tid` (0: the calling thread) is in the real-time class
/// [`set_prompt`] puts it in.
pub fn is_prompt(tid: i32) -> io::Result<bool> {
    // SAFETY: sched_getscheduler takes a tid by value and touches no memory.
    let policy = crate::check(unsafe { libc::sched_getscheduler(tid) })?;
    Ok(policy == libc::SCHED_FIFO)
}

/// Lets this process's threads take the lowest real-time priority without
/// `CAP_SYS_NICE` ([`set_prompt`]), by raising `RLIMIT_RTPRIO` to 1 where
/// it is below (while root: before privileges are dropped).
pub fn allow_prompt() -> io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    crate::check(unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut lim) })?;
    if lim.rlim_cur >= 1 {
        return Ok(());
    }
    lim.rlim_cur = 1;
    lim.rlim_max = lim.rlim_max.max(1);
    // SAFETY: `lim` is a valid rlimit that the kernel only reads.
    crate::check(unsafe { libc::setrlimit(libc::RLIMIT_RTPRIO, &lim) }).map(|_| ())
}

/// Raises the soft limit on open file descriptors to the hard limit and
/// returns the new soft limit.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    crate::check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid rlimit that the kernel only reads.
    crate::check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(lim.rlim_cur)
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The effective group id of this process.
pub fn effective_gid() -> u32 {
    // SAFETY: getegid cannot fail and touches no memory.
    unsafe { libc::getegid() }
}

/// Clock ticks per second of `/proc/PID/stat` (USER_HZ, 100 on every Linux
/// build that matters).
const USER_HZ: f64 = 100.0;

/// `utime + stime` (and, with `children`, `cutime + cstime`) of a
/// process, in seconds.
pub fn cpu_seconds(pid: u32, children: bool) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the command name start at field 3 (state): utime is 14,
    // stime 15, cutime 16, cstime 17.
    let get = |n: usize| f.get(n - 3).and_then(|x| x.parse::<u64>().ok());
    let mut t = get(14)? + get(15)?;
    if children {
        t += get(16)? + get(17)?;
    }
    Some(t as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One thread made prompt by another, and back (as root, with
    /// `CAP_SYS_NICE`, as the tests run).
    #[test]
    fn a_thread_is_made_prompt_by_another_and_ordinary_again() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            tx.send(thread_id()).expect("send");
            done_rx.recv().expect("done");
            is_prompt(0).expect("policy")
        });
        let tid = rx.recv().expect("tid");
        assert!(!is_prompt(tid).expect("policy"));
        set_prompt(tid, true).expect("SCHED_FIFO");
        assert!(is_prompt(tid).expect("policy"));
        done_tx.send(()).expect("done");
        assert!(other.join().expect("join"), "the thread sees itself prompt");
        set_prompt(0, true).expect("SCHED_FIFO");
        set_prompt(0, false).expect("SCHED_OTHER");
        assert!(!is_prompt(0).expect("policy"));
    }

    #[test]
    fn signals_reach_a_child_by_pid() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        kill_with_parent(&mut cmd);
        let mut child = cmd.spawn().expect("spawn sleep");
        send_signal(child.id(), Signal::Kill).expect("kill");
        let status = child.wait().expect("wait");
        assert!(!status.success());
    }

    #[test]
    fn passed_fds_land_on_their_numbers_even_when_they_cross() {
        use std::os::fd::{AsFd, AsRawFd};
        let a = std::fs::File::open("/proc/self/stat").expect("a");
        let b = std::fs::File::open("/dev/null").expect("b");
        // Ask for a's number to become b's target and the other way round.
        let (na, nb) = (a.as_raw_fd(), b.as_raw_fd());
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            &format!("readlink /proc/self/fd/{na}; readlink /proc/self/fd/{nb}"),
        ]);
        pass_fds(&mut cmd, &[(a.as_fd(), nb), (b.as_fd(), na)]);
        let out = cmd.output().expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], "/dev/null", "b landed on a's number: {text}");
        assert!(lines[1].ends_with("/stat"), "a landed on b's number: {text}");
    }

    #[test]
    fn zero_is_not_a_pid() {
        assert!(send_signal(0, Signal::Term).is_err());
    }

    #[test]
    fn fd_limit_can_be_raised() {
        assert!(raise_fd_limit().expect("rlimit") >= 1024);
    }

    #[test]
    fn this_process_may_run_on_some_cpu() {
        let cpus = allowed_cpus().expect("affinity");
        assert!(!cpus.is_empty());
    }

    #[test]
    fn pinning_to_cpu0_works_and_a_huge_cpu_is_refused() {
        pin_current_thread(0).expect("cpu 0");
        assert!(pin_current_thread(1 << 20).is_err());
    }
}
