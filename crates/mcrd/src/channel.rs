//! What the supervisor and a worker say to each other, one JSON object per
//! line over a Unix stream socket pair.

use mcr_core::snapshot::TableSnapshot;
use serde::{Deserialize, Serialize};

/// The worker's end of the pair is this descriptor number.
pub const WORKER_CHANNEL_FD: i32 = 3;
/// The statistics memory is this descriptor number in the worker.
pub const WORKER_STATS_FD: i32 = 4;
/// With `--ring-filter`, the eBPF socket filter of the rings (the kernel
/// data path's counterpart) is this descriptor number in the worker.
pub const WORKER_FILTER_FD: i32 = 5;

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
    /// Runs table `version` now, without the parts listed in `problems`
    /// (an interface that vanished, say).
    Applied {
        /// The version.
        version: u64,
        /// What could not be set up.
        #[serde(default)]
        problems: Vec<Problem>,
    },
}

/// Something a worker could not set up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// What it keeps from forwarding.
    pub scope: Scope,
    /// What went wrong, naming the interface.
    pub error: String,
}

/// The rules a [`Problem`] concerns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This rule.
    Rule(String),
    /// Every rule that reads this interface.
    Input(String),
    /// Every rule with an output on this interface.
    Output(String),
}

impl Problem {
    /// True if it keeps `rule` (or part of it) from forwarding.
    pub fn concerns(&self, rule: &mcr_core::rule::Rule) -> bool {
        match &self.scope {
            Scope::Rule(name) => *name == rule.name,
            Scope::Input(i) => *i == rule.input.interface,
            Scope::Output(i) => rule.outputs.iter().any(|o| o.interface == *i),
        }
    }
}
