//! Descriptors that outlive one mcrd and are taken up by the next.
//!
//! Two ways carry them, and the next process takes them the same way:
//!
//! - **systemd's file-descriptor store.** A service with
//!   `FileDescriptorStoreMax=` sends descriptors to systemd
//!   (`FDSTORE=1`, `FDNAME=…` on its notification socket); systemd keeps
//!   them across a restart and a crash, closes them when the service is
//!   stopped, and hands them to the next process as `LISTEN_FDS`,
//!   `LISTEN_FDNAMES` and `LISTEN_PID`, from descriptor 3 on.
//! - **A direct handover** (`mcrctl restart`): the running process
//!   executes the next program in its place ([`exec_with`]), its
//!   descriptors left open, their numbers and names in [`HANDOVER_FDS`].

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;

/// The first descriptor handed over.
pub const FIRST_FD: RawFd = 3;
/// The environment variable that lists the descriptors of a direct
/// handover: `NUMBER=NAME`, `:`-separated.
pub const HANDOVER_FDS: &str = "MCR_HANDOVER_FDS";
/// The most descriptors taken at a start; more is a mistake of the
/// environment, not a handover.
const MOST: usize = 1 << 16;

/// Where the descriptors came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// systemd's file-descriptor store.
    Systemd,
    /// A previous mcrd handed them over directly.
    Handover,
}

/// Where the descriptors a process was started with came from (none: a
/// fresh start), and each with its name.
pub type Inherited = (Option<Source>, Vec<(String, OwnedFd)>);

/// Takes the descriptors this process was started with, by name, and
/// removes the variables that described them (so the workers, which are
/// started from this process, do not take them again). Each is made
/// close-on-exec. Empty when none were given.
///
/// Call it first thing in `main`, before any thread starts: it reads and
/// changes the environment.
pub fn take_inherited() -> io::Result<Inherited> {
    let var = |n: &str| std::env::var_os(n);
    let (source, listed): (Source, Vec<(RawFd, String)>) = if let Some(list) = var(HANDOVER_FDS) {
        let list = list.to_string_lossy().into_owned();
        let mut listed = Vec::new();
        for item in list.split(':').filter(|i| !i.is_empty()) {
            let parsed = item
                .split_once('=')
                .and_then(|(n, name)| Some((n.parse::<RawFd>().ok()?, name.to_string())));
            match parsed {
                Some((n, name)) if n >= FIRST_FD => listed.push((n, name)),
                _ => {
                    forget_variables();
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{HANDOVER_FDS}: `{item}` is not NUMBER=NAME (a descriptor from {FIRST_FD} on)"),
                    ));
                }
            }
        }
        (Source::Handover, listed)
    } else if let Some(pid) = var("LISTEN_PID") {
        let ours = pid.to_str().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
        let count = var("LISTEN_FDS")
            .and_then(|n| n.to_str().and_then(|n| n.parse::<usize>().ok()))
            .unwrap_or(0);
        if !ours || count == 0 {
            forget_variables();
            return Ok((None, Vec::new()));
        }
        let names: Vec<String> = var("LISTEN_FDNAMES")
            .map(|n| n.to_string_lossy().split(':').map(String::from).collect())
            .unwrap_or_default();
        let count = count.min(MOST);
        let listed = (0..count)
            .map(|i| {
                let n = FIRST_FD + RawFd::try_from(i).unwrap_or(0);
                (n, names.get(i).cloned().unwrap_or_else(|| format!("unnamed-{i}")))
            })
            .collect();
        (Source::Systemd, listed)
    } else {
        return Ok((None, Vec::new()));
    };
    forget_variables();
    if listed.len() > MOST {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} descriptors handed over: more than {MOST}", listed.len()),
        ));
    }
    let mut out = Vec::with_capacity(listed.len());
    for (raw, name) in listed {
        // SAFETY: F_GETFD only reads the descriptor's flags; it fails with
        // EBADF when the number is not open.
        if unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0
            || out.iter().any(|(_, fd): &(String, OwnedFd)| fd.as_raw_fd() == raw)
        {
            continue;
        }
        // SAFETY: by the protocol that described them (LISTEN_FDS for this
        // very process, or the handover's list, which the process before
        // wrote for the program it executed), these descriptors are open
        // and belong to this process, and nothing else in it knows their
        // numbers; each is taken once (checked just above), here, at the
        // start.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: F_SETFD on a descriptor we own, with a plain flag.
        crate::check(unsafe { libc::fcntl(raw, libc::F_SETFD, libc::FD_CLOEXEC) })?;
        out.push((name, fd));
    }
    Ok((Some(source), out))
}

fn forget_variables() {
    for n in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", HANDOVER_FDS] {
        // SAFETY: called at the start of main, before any thread runs
        // (take_inherited's contract), so nothing reads the environment
        // meanwhile.
        unsafe { std::env::remove_var(n) };
    }
}

/// The notification socket of the service manager, when there is one.
fn notify_socket() -> io::Result<Option<UnixDatagram>> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(None);
    };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)?
        }
        None => std::os::unix::net::SocketAddr::from_pathname(&path)?,
    };
    let sock = UnixDatagram::unbound()?;
    sock.connect_addr(&addr)?;
    Ok(Some(sock))
}

/// True when a service manager listens for notifications.
pub fn under_service_manager() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

/// Puts `fd` in systemd's file-descriptor store under `name` (at most 255
/// characters, no `:`), where it outlives this process until the service
/// is stopped. Does nothing without a service manager.
pub fn store(name: &str, fd: BorrowedFd<'_>) -> io::Result<()> {
    let Some(sock) = notify_socket()? else { return Ok(()) };
    // FDPOLL=0: keep it whatever it reports (a packet socket reports an
    // error when its interface goes down; systemd would otherwise drop it).
    let text = format!("FDSTORE=1\nFDPOLL=0\nFDNAME={name}");
    crate::fdpass::send(sock.as_fd(), text.as_bytes(), &[fd])
}

/// Removes every descriptor stored under `name` from systemd's store
/// (systemd closes them). Does nothing without a service manager.
pub fn unstore(name: &str) -> io::Result<()> {
    let Some(sock) = notify_socket()? else { return Ok(()) };
    let text = format!("FDSTOREREMOVE=1\nFDNAME={name}");
    crate::fdpass::send(sock.as_fd(), text.as_bytes(), &[])
}

/// What identifies an open file: its device and inode (two descriptors of
/// one socket or one BPF link have the same).
pub fn identity(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: stat is plain data; all zeroes is valid, and fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer for the call.
    crate::check(unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

/// Executes `cmd` in place of this process (same PID, so a service
/// manager or a PID file still names it), with `fds` left open across the
/// exec and listed in [`HANDOVER_FDS`]; every other descriptor closes as
/// usual (close-on-exec). Returns only if the exec failed, with the
/// descriptors made close-on-exec again and this process as it was.
pub fn exec_with(cmd: &mut std::process::Command, fds: &[(String, BorrowedFd<'_>)]) -> io::Error {
    if let Some((n, _)) = fds.iter().find(|(n, _)| n.is_empty() || n.contains([':', '='])) {
        return io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("handover name `{n}` is empty or has a `:` or `=`"),
        );
    }
    let list: Vec<String> = fds.iter().map(|(n, fd)| format!("{}={n}", fd.as_raw_fd())).collect();
    cmd.env(HANDOVER_FDS, OsString::from(list.join(":")));
    let set_cloexec = |on: bool| -> io::Result<()> {
        for (_, fd) in fds {
            let flags = if on { libc::FD_CLOEXEC } else { 0 };
            // SAFETY: F_SETFD on a descriptor the caller holds open, with a
            // plain flag.
            crate::check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags) })?;
        }
        Ok(())
    };
    if let Err(e) = set_cloexec(false) {
        let _ = set_cloexec(true);
        return e;
    }
    let e = cmd.exec();
    let _ = set_cloexec(true);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_exec_leaves_the_process_as_it_was() {
        // (A successful exec replaces the process; mcrd's end-to-end tests
        // of `mcrctl restart` run that.)
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let file = std::fs::File::open("/proc/self/status").expect("a file");
        let (ra, rf) = (a.as_raw_fd(), file.as_raw_fd());
        let mut cmd = std::process::Command::new("/bin/true");
        let e = exec_with(&mut cmd, &[("a:b".into(), a.as_fd())]);
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        // A program that does not exist: the exec fails, and the
        // descriptors are close-on-exec again.
        let mut missing = std::process::Command::new("/nonexistent/mcrd");
        let e = exec_with(&mut missing, &[("one".into(), a.as_fd()), ("two".into(), file.as_fd())]);
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        for fd in [ra, rf] {
            // SAFETY: reads the flags of a descriptor this test holds.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        }
        let envs: Vec<_> = missing.get_envs().collect();
        assert!(
            envs.iter()
                .any(|(k, v)| *k == HANDOVER_FDS && *v == Some(std::ffi::OsStr::new(&format!("{ra}=one:{rf}=two")))),
            "{envs:?}"
        );
        drop(b);
    }

    #[test]
    fn two_descriptors_of_one_socket_are_one_file() {
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let again = a.as_fd().try_clone_to_owned().expect("dup");
        assert_eq!(identity(a.as_fd()).expect("a"), identity(again.as_fd()).expect("again"));
        assert_ne!(identity(a.as_fd()).expect("a"), identity(b.as_fd()).expect("b"));
    }
}
