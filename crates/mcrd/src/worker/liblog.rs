//! The log lines of the libraries the worker runs (libsrt, librist),
//! into the worker's log: errors at most [`LINES_PER_S`] a second per
//! library, the rest counted in the next line; anything milder at debug
//! level (what those lines tell, a refused caller say, mcrd counts and
//! shows itself).

use std::sync::Mutex;

/// How many of a library's error lines a second reach the log.
pub const LINES_PER_S: u32 = 5;

/// One library's lines: its name and the window of its error lines (the
/// second, and how many came in it).
pub struct LibLog {
    name: &'static str,
    window: Mutex<(u64, u32)>,
}

impl LibLog {
    /// The log of library `name`.
    pub const fn new(name: &'static str) -> Self {
        LibLog {
            name,
            window: Mutex::new((0, 0)),
        }
    }

    /// Logs `msg`, an error if `error`.
    pub fn line(&self, error: bool, msg: &str) {
        let name = self.name;
        if !error {
            tracing::debug!("{name}: {msg}");
            return;
        }
        let now_s = mcr_sys::clock::monotonic_ns() / 1_000_000_000;
        let Ok(mut w) = self.window.lock() else { return };
        if w.0 != now_s {
            if w.1 > LINES_PER_S {
                tracing::warn!("{name}: {} more line(s) not shown", w.1 - LINES_PER_S);
            }
            *w = (now_s, 0);
        }
        w.1 += 1;
        if w.1 > LINES_PER_S {
            return;
        }
        tracing::warn!("{name}: {msg}");
    }
}
