//! libsrt's log lines, handed to a Rust function instead of stderr.
//!
//! mcr-sys does not depend on `tracing`: the program sets a sink with
//! [`set_log_sink`] and forwards the lines to its own logger (rate-limited
//! there if it wants). Until a sink is set, libsrt's lines are dropped.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::RwLock;

use super::ffi;

/// libsrt's log levels (syslog's numbers): lower is more severe.
pub const LEVEL_CRIT: i32 = ffi::LOG_CRIT;
/// An error.
pub const LEVEL_ERR: i32 = ffi::LOG_ERR;
/// A warning: the default level [`super::startup`] sets.
pub const LEVEL_WARNING: i32 = ffi::LOG_WARNING;
/// A notice.
pub const LEVEL_NOTICE: i32 = ffi::LOG_NOTICE;
/// Debugging detail (very verbose; only in libsrt builds with heavy
/// logging are the most detailed lines present at all).
pub const LEVEL_DEBUG: i32 = ffi::LOG_DEBUG;

/// Receives each log line: its level (`LEVEL_*`) and text (with libsrt's
/// thread name and area, without time, severity or newline).
pub type LogSink = fn(level: i32, msg: &str);

static SINK: RwLock<Option<LogSink>> = RwLock::new(None);

/// Sends libsrt's log lines to `sink` from now on. It is called on
/// libsrt's own threads, so it must be quick and must not call back into
/// libsrt's logging setup; a panic in it is caught and the line dropped.
pub fn set_log_sink(sink: LogSink) {
    *SINK.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sink);
}

/// Sets the most verbose level libsrt logs (one of the `LEVEL_*`
/// constants); [`super::startup`] sets [`LEVEL_WARNING`].
pub fn set_log_level(level: i32) {
    ffi::srt_setloglevel(level);
}

/// Installs the handler and the default level; called once by startup.
pub(super) fn install() {
    ffi::srt_setlogflags(ffi::SRT_LOGF_DISABLE_TIME | ffi::SRT_LOGF_DISABLE_SEVERITY | ffi::SRT_LOGF_DISABLE_EOL);
    ffi::srt_setloglevel(LEVEL_WARNING);
    // SAFETY: `handler` matches SRT_LOG_HANDLER_FN, never unwinds, and
    // uses no opaque pointer (NULL is passed and never read).
    unsafe { ffi::srt_setloghandler(std::ptr::null_mut(), Some(handler)) };
}

/// libsrt's log callback. It runs on any libsrt thread.
unsafe extern "C" fn handler(
    _opaque: *mut c_void,
    level: c_int,
    _file: *const c_char,
    _line: c_int,
    _area: *const c_char,
    message: *const c_char,
) {
    if message.is_null() {
        return;
    }
    let Some(sink) = *SINK.read().unwrap_or_else(std::sync::PoisonError::into_inner) else {
        return;
    };
    // SAFETY: libsrt passes a NUL-terminated string that lives for the
    // duration of this call; it is not kept beyond it.
    let text = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    let text = text.trim_end();
    // A panic must not unwind into C++ (that would abort the process).
    let _ = std::panic::catch_unwind(|| sink(level, text));
}
