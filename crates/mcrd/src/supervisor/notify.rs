//! systemd's readiness protocol (`Type=notify`): one datagram per state
//! change to the socket named by `NOTIFY_SOCKET`, when there is one. Not
//! under systemd, every call does nothing.

use std::os::unix::net::{SocketAddr, UnixDatagram};

fn send(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = (|| -> std::io::Result<()> {
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
        let addr = match bytes.strip_prefix(b"@") {
            // An abstract socket: '@' stands for the leading NUL.
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name)?
            }
            None => SocketAddr::from_pathname(&path)?,
        };
        UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    })();
    if let Err(e) = sent {
        tracing::warn!("could not tell systemd `{}`: {e}", state.lines().next().unwrap_or(""));
    }
}

/// The daemon serves: its rules are in place and the control socket is
/// open.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={status}\nMAINPID={}", std::process::id()));
}

/// A reload has begun; [`ready`] follows when it is done.
pub fn reloading() {
    let usec = mcr_sys::clock::monotonic_ns() / 1000;
    send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading"));
}

/// The daemon is shutting down.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=stopping");
}
