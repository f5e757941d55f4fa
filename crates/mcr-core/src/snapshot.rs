//! The rule table as the supervisor hands it to every worker: the whole of
//! it, versioned, with each rule's and output's statistics slot and the
//! interface facts the worker needs to build frames.

use serde::{Deserialize, Serialize};

use crate::interfaces::Interfaces;
use crate::rule::Rule;

/// One version of the whole rule table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSnapshot {
    /// Increases with every change.
    pub version: u64,
    /// Every rule, with its statistics slots.
    pub rules: Vec<SlottedRule>,
    /// The interfaces the rules name.
    pub interfaces: Interfaces,
    /// With several workers: the fanout group each input interface's rings
    /// join, by interface index (the supervisor founds each group, so its
    /// id is one no other group has).
    #[serde(default)]
    pub fanout: Vec<(u32, u16)>,
}

/// A rule and where its counters live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlottedRule {
    /// The rule.
    pub rule: Rule,
    /// Its slot among the rule counters.
    pub slot: u32,
    /// One slot among the output counters per output, in order.
    pub output_slots: Vec<u32>,
}
