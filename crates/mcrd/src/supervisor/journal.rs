//! What the daemon did lately, for `mcrctl events` and the web page: every
//! line the supervisor logs about rules, interfaces, workers and reloads
//! is also kept here, the newest [`EVENTS_KEPT`].

use std::collections::VecDeque;

use mcr_core::control::{EVENTS_KEPT, EventRecord};
use mcr_core::plane::machine::Level;

/// The recent events, oldest first.
#[derive(Debug, Default)]
pub struct Journal {
    kept: VecDeque<EventRecord>,
}

impl Journal {
    /// Logs `message` at `level` and keeps it.
    pub fn note(&mut self, level: Level, message: String) {
        let level = match level {
            Level::Info => {
                tracing::info!("{message}");
                "info"
            }
            Level::Warn => {
                tracing::warn!("{message}");
                "warn"
            }
            Level::Error => {
                tracing::error!("{message}");
                "error"
            }
        };
        if self.kept.len() == EVENTS_KEPT {
            self.kept.pop_front();
        }
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.kept.push_back(EventRecord {
            at_ms,
            level: level.into(),
            message,
        });
    }

    /// Every kept event, oldest first.
    pub fn events(&self) -> Vec<EventRecord> {
        self.kept.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_are_kept_in_order() {
        let mut j = Journal::default();
        for i in 0..EVENTS_KEPT + 5 {
            j.note(Level::Info, format!("e{i}"));
        }
        let e = j.events();
        assert_eq!(e.len(), EVENTS_KEPT);
        assert_eq!(e[0].message, "e5");
        assert_eq!(e[EVENTS_KEPT - 1].message, format!("e{}", EVENTS_KEPT + 4));
        assert!(e.iter().all(|e| e.level == "info" && e.at_ms > 0));
    }
}
