//! Moving the calling thread into a named network namespace.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Moves the calling thread into the network namespace `name` (as created
/// by `ip netns add`, under `/run/netns`). Sockets it opens afterwards live
/// there; other threads are not affected.
pub fn enter(name: &str) -> io::Result<()> {
    if name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a namespace name has no `/`",
        ));
    }
    let f = File::open(format!("/run/netns/{name}"))?;
    // SAFETY: setns takes an fd we own and a flag; it changes only the
    // calling thread's namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    crate::check(rc).map(|_| ())
}
