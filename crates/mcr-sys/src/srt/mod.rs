//! SRT (Secure Reliable Transport) through the system's libsrt 1.5
//! (Debian: libsrt-openssl-dev), with hand-written bindings.
//!
//! [`startup`] starts libsrt once per process (it also checks that the
//! library is 1.5.x and routes its logs to [`set_log_sink`]). [`SrtSocket`]
//! owns one SRT socket: options, bind (also to a UDP socket made by the
//! caller, [`SrtSocket::bind_acquire`]), listen with a hook that accepts or
//! rejects each caller by stream id before the handshake completes
//! ([`ListenHook`]), connect, non-blocking send and receive of messages, and
//! statistics ([`SrtStats`]). [`SrtEpoll`] waits on many SRT sockets at once.
//!
//! libsrt runs its own threads: a garbage collector started by
//! [`startup`], and for each UDP port a sender and a receiver thread,
//! started by the call that first binds or connects a socket on that port.
//! The listen hook and the log sink run on those threads. A UDP socket
//! libsrt opens lives in the network namespace of the thread that calls
//! [`SrtSocket::bind`] or [`SrtSocket::connect`].
//!
//! The C declarations are in `ffi.rs`/`perfmon.rs`; `abi_check.c`, compiled
//! by build.rs against the installed header, stops the build if a mirrored
//! struct or constant changed.

mod epoll;
mod error;
mod ffi;
mod hook;
mod log;
mod options;
mod perfmon;
mod reject;
mod socket;
mod stats;

use std::sync::OnceLock;

pub use epoll::{Events, MAX_EVENTS_PER_WAIT, SrtEpoll};
pub use error::SrtError;
pub use hook::{HookRequest, ListenHook};
pub use log::{LEVEL_CRIT, LEVEL_DEBUG, LEVEL_ERR, LEVEL_NOTICE, LEVEL_WARNING, LogSink, set_log_level, set_log_sink};
pub use options::STREAM_ID_MAX_BYTES;
pub use reject::{RejectCode, RejectReason};
pub use socket::{Sent, SrtSocket, SrtState};
pub use stats::SrtStats;

/// The largest payload of one live-mode message (`SRT_LIVE_MAX_PLSIZE`):
/// 1500 − 28 (IPv4 + UDP) − 16 (SRT header).
pub const LIVE_MAX_PAYLOAD_BYTES: usize = 1456;
/// The default payload size in live mode (`SRT_LIVE_DEF_PLSIZE`, 7 MPEG-TS
/// packets).
pub const LIVE_DEFAULT_PAYLOAD_BYTES: usize = 1316;

static STARTED: OnceLock<Result<(), SrtError>> = OnceLock::new();

/// Starts libsrt for this process (`srt_startup`), once: later calls return
/// the first call's result. Before that it checks that the loaded libsrt is
/// 1.5.x (the layouts mirrored here are 1.5's), installs the log handler
/// that feeds [`set_log_sink`] and sets the log level to warnings.
///
/// Sockets and epolls call it themselves; call it early to learn about a
/// wrong library at start-up. libsrt's garbage-collector thread is created
/// here and inherits this thread's signal mask and CPU affinity.
pub fn startup() -> Result<(), SrtError> {
    STARTED
        .get_or_init(|| {
            check_version(ffi::srt_getversion())?;
            log::install();
            // 0: started, 1: already started (by someone else in this
            // process), -1: failed.
            if ffi::srt_startup() < 0 {
                return Err(SrtError::last("srt_startup"));
            }
            Ok(())
        })
        .clone()
}

/// The version of the libsrt loaded at run time, e.g. `1.5.1`.
pub fn library_version() -> String {
    version_string(ffi::srt_getversion())
}

fn version_string(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// Accepts 1.5.x, whose ABI the mirrored structs describe.
fn check_version(v: u32) -> Result<(), SrtError> {
    if v >> 16 == ffi::SRT_VERSION_MAJOR && (v >> 8) & 0xff == ffi::SRT_VERSION_MINOR {
        Ok(())
    } else {
        Err(SrtError::Version {
            found: version_string(v),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_1_5() {
        assert!(check_version(0x01_05_01).is_ok());
        assert!(check_version(0x01_05_05).is_ok());
        let e = check_version(0x01_04_04).expect_err("1.4 is refused");
        assert!(e.to_string().starts_with("libsrt 1.4.4 is loaded"), "{e}");
        assert!(check_version(0x01_06_00).is_err());
    }

    #[test]
    fn starts_against_the_installed_library() {
        startup().expect("libsrt 1.5 is installed");
        startup().expect("a second call returns the first result");
        assert!(library_version().starts_with("1.5."), "{}", library_version());
    }
}
