//! Logs on stderr, in one of three forms: `text` for people (time, level,
//! message; colour on a terminal), `json` for log collectors (one object
//! per line), and `journal` for journald (a `<N>` syslog priority prefix
//! that journald turns into the entry's priority, no time: the journal
//! keeps its own).

use std::fmt;

use mcr_core::config::{LogFormat, LogLevel};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `journal` when stderr goes to journald (systemd sets `JOURNAL_STREAM`),
/// `text` otherwise.
pub fn default_format() -> LogFormat {
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        LogFormat::Journal
    } else {
        LogFormat::Text
    }
}

/// Starts logging at `level` in `format`. `RUST_LOG`, when set, overrides
/// the level (per module, as `tracing` filters are written).
pub fn init(level: LogLevel, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level.to_string()));
    let base = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => base
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => base.json().with_current_span(false).init(),
        LogFormat::Journal => base.with_ansi(false).event_format(Journal).init(),
    }
}

/// One line per event: `<priority>message fields`.
struct Journal;

/// The syslog priority journald reads from a `<N>` prefix.
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

impl<S, N> FormatEvent<S, N> for Journal
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        write!(w, "<{}>", priority(event.metadata().level()))?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn levels_map_to_syslog_priorities() {
        use tracing::Level;
        let p: Vec<u8> = [Level::ERROR, Level::WARN, Level::INFO, Level::DEBUG, Level::TRACE]
            .iter()
            .map(super::priority)
            .collect();
        assert_eq!(p, vec![3, 4, 6, 7, 7]);
    }
}
