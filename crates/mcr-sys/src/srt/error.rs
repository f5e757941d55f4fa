//! What a libsrt call can fail with.

use std::ffi::CStr;
use std::io;

use super::ffi;

/// A failed libsrt call, or an argument refused before the call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SrtError {
    /// libsrt returned an error: its code (`SRT_ERRNO`, e.g. 1002 for a
    /// rejected connection) and its own message, read with the thread-safe
    /// `srt_getlasterror_str`.
    #[error("{op}: {message} (SRT error {code})")]
    Call {
        /// The call and what it was given, e.g. `srt_bind 0.0.0.0:9000`.
        op: String,
        /// libsrt's error code.
        code: i32,
        /// libsrt's message for it.
        message: String,
    },
    /// An argument libsrt would refuse or misread, caught before calling
    /// it.
    #[error("{op}: {reason}")]
    Invalid {
        /// The call that was not made.
        op: String,
        /// What is wrong and what to change.
        reason: String,
    },
    /// The libsrt loaded at run time is not the 1.5 series these bindings
    /// mirror.
    #[error(
        "libsrt {found} is loaded, but MCR's SRT bindings are written for libsrt 1.5.x \
         (Debian: libsrt1.5-openssl); install it or rebuild MCR against the installed one"
    )]
    Version {
        /// The version found, e.g. `1.4.4`.
        found: String,
    },
}

impl SrtError {
    /// The error libsrt recorded for this thread's last failed call, named
    /// after `op`; the record is cleared so that a later failure is never
    /// reported with a stale message.
    pub(crate) fn last(op: impl Into<String>) -> SrtError {
        let code = last_code();
        // SAFETY: srt_getlasterror_str takes nothing and returns a pointer
        // into this thread's error record (or NULL).
        let p = unsafe { ffi::srt_getlasterror_str() };
        let message = if p.is_null() {
            String::new()
        } else {
            // SAFETY: `p` is a NUL-terminated string that stays valid until
            // the next libsrt call on this thread; it is copied here before
            // that (srt_clearlasterror below).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        ffi::srt_clearlasterror();
        SrtError::Call {
            op: op.into(),
            code,
            message,
        }
    }

    pub(crate) fn invalid(op: impl Into<String>, reason: impl Into<String>) -> SrtError {
        SrtError::Invalid {
            op: op.into(),
            reason: reason.into(),
        }
    }

    /// libsrt's error code (`SRT_ERRNO`), for an error from libsrt.
    pub fn code(&self) -> Option<i32> {
        match self {
            SrtError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The operation would have blocked on a non-blocking socket
    /// (`SRT_EASYNC*`): try again when epoll reports the socket ready.
    pub fn is_would_block(&self) -> bool {
        matches!(
            self.code(),
            Some(ffi::SRT_EASYNCFAIL | ffi::SRT_EASYNCSND | ffi::SRT_EASYNCRCV | ffi::SRT_ETIMEOUT)
        )
    }

    /// The socket is gone or its connection is over: closed, lost, never
    /// connected, or an id libsrt no longer knows. Close it; retrying is
    /// useless.
    pub fn is_closed(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ffi::SRT_EINVSOCK
                    | ffi::SRT_ECONNLOST
                    | ffi::SRT_ENOCONN
                    | ffi::SRT_ECONNFAIL
                    | ffi::SRT_ESCLOSED
                    | ffi::SRT_ECONNREJ
            )
        )
    }
}

/// The code of this thread's last libsrt error, without building an error
/// (the paths that expect "would block" check it on every call).
pub(crate) fn last_code() -> i32 {
    // SAFETY: srt_getlasterror accepts NULL for the system errno it would
    // otherwise store.
    unsafe { ffi::srt_getlasterror(std::ptr::null_mut()) }
}

impl From<SrtError> for io::Error {
    fn from(e: SrtError) -> io::Error {
        let kind = if e.is_would_block() {
            io::ErrorKind::WouldBlock
        } else if e.is_closed() {
            io::ErrorKind::NotConnected
        } else if matches!(e, SrtError::Invalid { .. }) {
            io::ErrorKind::InvalidInput
        } else {
            io::ErrorKind::Other
        };
        io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(code: i32) -> SrtError {
        SrtError::Call {
            op: "srt_recvmsg2 @1".into(),
            code,
            message: "m".into(),
        }
    }

    #[test]
    fn classifies_codes() {
        assert!(call(ffi::SRT_EASYNCRCV).is_would_block());
        assert!(call(ffi::SRT_EASYNCSND).is_would_block());
        assert!(!call(ffi::SRT_EASYNCRCV).is_closed());
        for c in [ffi::SRT_EINVSOCK, ffi::SRT_ECONNLOST, ffi::SRT_ENOCONN] {
            assert!(call(c).is_closed(), "{c}");
            assert!(!call(c).is_would_block(), "{c}");
        }
        assert!(!SrtError::invalid("x", "y").is_closed());
        assert_eq!(call(5004).code(), Some(5004));
    }

    #[test]
    fn message_names_the_operation() {
        let e = SrtError::Call {
            op: "srt_bind 0.0.0.0:9000".into(),
            code: 1003,
            message: "Connection setup failure: unable to create/configure SRT socket".into(),
        };
        assert_eq!(
            e.to_string(),
            "srt_bind 0.0.0.0:9000: Connection setup failure: unable to create/configure SRT socket (SRT error 1003)"
        );
        assert_eq!(
            io::Error::from(call(ffi::SRT_EASYNCRCV)).kind(),
            io::ErrorKind::WouldBlock
        );
    }
}
