//! Why a connection was refused: the code a listen hook answers with
//! ([`RejectCode`]) and the reason a caller reads afterwards
//! ([`RejectReason`]).

use std::ffi::CStr;
use std::fmt;

use super::ffi;

/// A code a [`super::ListenHook`] rejects a caller with. libsrt passes it to
/// the caller in the handshake; only codes from 1000 up are accepted
/// (1000-1999 predefined, as in libsrt's access_control.h, 2000 and up the
/// application's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejectCode(i32);

impl RejectCode {
    /// 1400: the request (e.g. the stream id) is malformed.
    pub const BAD_REQUEST: RejectCode = RejectCode(ffi::SRT_REJX_BAD_REQUEST);
    /// 1401: authentication failed.
    pub const UNAUTHORIZED: RejectCode = RejectCode(ffi::SRT_REJX_UNAUTHORIZED);
    /// 1402: too many callers or too much load.
    pub const OVERLOAD: RejectCode = RejectCode(ffi::SRT_REJX_OVERLOAD);
    /// 1403: access denied.
    pub const FORBIDDEN: RejectCode = RejectCode(ffi::SRT_REJX_FORBIDDEN);
    /// 1404: no such stream.
    pub const NOT_FOUND: RejectCode = RejectCode(ffi::SRT_REJX_NOTFOUND);
    /// 1500: an unexpected error in the listener (also what a panicking
    /// hook answers).
    pub const INTERNAL_ERROR: RejectCode = RejectCode(ffi::SRT_REJX_ISE);

    /// A code of the caller's choice; `None` below 1000, which libsrt
    /// reserves for its own reasons and refuses to send.
    pub const fn new(code: i32) -> Option<RejectCode> {
        if code >= ffi::SRT_REJC_PREDEFINED {
            Some(RejectCode(code))
        } else {
            None
        }
    }

    /// The number sent in the handshake.
    pub const fn code(self) -> i32 {
        self.0
    }
}

impl fmt::Display for RejectCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        RejectReason(self.0).fmt(f)
    }
}

/// Why libsrt refused or broke a connection (`srt_getrejectreason`): below
/// 1000 one of libsrt's own reasons (`SRT_REJ_*`), from 1000 up the code a
/// listener's hook rejected the caller with ([`RejectCode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejectReason(pub(crate) i32);

impl RejectReason {
    /// 0: no reason recorded (still connecting, or never refused).
    pub const UNKNOWN: RejectReason = RejectReason(ffi::SRT_REJ_UNKNOWN);
    /// 2: the peer rejected the connection without a more precise reason.
    pub const PEER: RejectReason = RejectReason(ffi::SRT_REJ_PEER);
    /// 5: the listener's backlog was full.
    pub const BACKLOG: RejectReason = RejectReason(ffi::SRT_REJ_BACKLOG);
    /// 7: the socket is being closed.
    pub const CLOSE: RejectReason = RejectReason(ffi::SRT_REJ_CLOSE);
    /// 10: both sides encrypt, with different passphrases.
    pub const BAD_SECRET: RejectReason = RejectReason(ffi::SRT_REJ_BADSECRET);
    /// 11: one side encrypts and the other does not.
    pub const UNSECURE: RejectReason = RejectReason(ffi::SRT_REJ_UNSECURE);
    /// 16: no answer within the connect timeout.
    pub const TIMEOUT: RejectReason = RejectReason(ffi::SRT_REJ_TIMEOUT);

    /// The number libsrt reports.
    pub const fn code(self) -> i32 {
        self.0
    }

    /// The code a listener's hook chose, if this is one (1000 and up).
    pub const fn hook_code(self) -> Option<RejectCode> {
        RejectCode::new(self.0)
    }
}

impl PartialEq<RejectCode> for RejectReason {
    fn eq(&self, other: &RejectCode) -> bool {
        self.0 == other.0
    }
}

/// The name of a code from access_control.h (HTTP's, plus 1000).
fn access_control_name(code: i32) -> Option<&'static str> {
    Some(match code {
        ffi::SRT_REJX_FALLBACK => "rejected (no reason given)",
        ffi::SRT_REJX_BAD_REQUEST => "bad request",
        ffi::SRT_REJX_UNAUTHORIZED => "unauthorized",
        ffi::SRT_REJX_OVERLOAD => "overload",
        ffi::SRT_REJX_FORBIDDEN => "forbidden",
        ffi::SRT_REJX_NOTFOUND => "not found",
        ffi::SRT_REJX_BAD_MODE => "bad mode",
        ffi::SRT_REJX_UNACCEPTABLE => "unacceptable",
        ffi::SRT_REJX_CONFLICT => "conflict",
        ffi::SRT_REJX_NOTSUP_MEDIA => "media type not supported",
        ffi::SRT_REJX_LOCKED => "locked",
        ffi::SRT_REJX_FAILED_DEPEND => "failed dependency",
        ffi::SRT_REJX_ISE => "internal server error",
        ffi::SRT_REJX_UNIMPLEMENTED => "unimplemented",
        ffi::SRT_REJX_GW => "gateway error",
        ffi::SRT_REJX_DOWN => "service down",
        ffi::SRT_REJX_VERSION => "SRT version not supported",
        ffi::SRT_REJX_NOROOM => "no room",
        _ => return None,
    })
}

impl fmt::Display for RejectReason {
    /// `1404 not found`, `2001 application-defined`, `10 Incorrect
    /// passphrase` (libsrt's text for its own reasons).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = access_control_name(self.0) {
            return write!(f, "{} {name}", self.0);
        }
        if self.0 >= ffi::SRT_REJC_PREDEFINED {
            return write!(f, "{} application-defined", self.0);
        }
        // SAFETY: srt_rejectreason_str accepts any id (an out-of-range one
        // gets the "Unknown" entry) and returns a static string.
        let p = unsafe { ffi::srt_rejectreason_str(self.0) };
        if p.is_null() {
            return write!(f, "{} (unknown)", self.0);
        }
        // SAFETY: `p` points to one of libsrt's static NUL-terminated
        // strings.
        let text = unsafe { CStr::from_ptr(p) };
        write!(f, "{} {}", self.0, text.to_string_lossy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_codes_readably() {
        assert_eq!(RejectReason(1404).to_string(), "1404 not found");
        assert_eq!(RejectCode::OVERLOAD.to_string(), "1402 overload");
        assert_eq!(RejectReason(2001).to_string(), "2001 application-defined");
        assert_eq!(RejectReason::BAD_SECRET.to_string(), "10 Incorrect passphrase");
        assert_eq!(RejectReason(-5).to_string(), "-5 Unknown or erroneous");
        assert_eq!(RejectReason(999).to_string(), "999 Unknown or erroneous");
    }

    #[test]
    fn hook_codes_start_at_1000() {
        assert_eq!(RejectCode::new(999), None);
        assert_eq!(RejectCode::new(1404), Some(RejectCode::NOT_FOUND));
        assert_eq!(RejectReason(1404).hook_code(), Some(RejectCode::NOT_FOUND));
        assert_eq!(RejectReason::TIMEOUT.hook_code(), None);
        assert!(RejectReason(1404) == RejectCode::NOT_FOUND);
    }
}
