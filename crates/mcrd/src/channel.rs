//! What the supervisor and a worker say to each other, one JSON object per
//! line over a Unix stream socket pair.

use mcr_core::snapshot::TableSnapshot;
use serde::{Deserialize, Serialize};

/// The worker's end of the pair is this descriptor number.
pub const WORKER_CHANNEL_FD: i32 = 3;
/// The statistics memory is this descriptor number in the worker.
pub const WORKER_STATS_FD: i32 = 4;

/// Supervisor to worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToWorker {
    /// The whole rule table; replaces the one the worker has.
    Table(TableSnapshot),
    /// Finish the current batch and exit.
    Stop,
}

/// Worker to supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum FromWorker {
    /// Started; ready for a table.
    Ready {
        /// The worker's process id.
        pid: u32,
    },
    /// Runs table `version` now.
    Applied {
        /// The version.
        version: u64,
    },
    /// Could not set up part of table `version` (an interface that
    /// vanished, say); runs it without that part.
    Trouble {
        /// The version.
        version: u64,
        /// What went wrong.
        error: String,
    },
}
