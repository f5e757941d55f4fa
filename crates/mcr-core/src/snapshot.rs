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

impl TableSnapshot {
    /// A snapshot of `rules`, each written as (name, input, outputs) in
    /// `mcrctl add`'s syntax, on `interfaces`: rule i in statistics slot i,
    /// its output k in slot 10·i + k. For examples and tests; a rule that
    /// does not parse is an error that names it.
    pub fn from_text<O: AsRef<str>>(
        version: u64,
        rules: &[(&str, &str, &[O])],
        interfaces: Interfaces,
    ) -> Result<TableSnapshot, String> {
        let mut slotted = Vec::new();
        for (i, (name, input, outs)) in rules.iter().enumerate() {
            let what = |e: &dyn std::fmt::Display| format!("rule `{name}`: {e}");
            let mut outputs = Vec::new();
            for o in outs.iter() {
                outputs.push(o.as_ref().parse().map_err(|e| what(&e))?);
            }
            slotted.push(SlottedRule {
                rule: Rule::new(*name, input.parse().map_err(|e| what(&e))?, outputs),
                slot: i as u32,
                output_slots: (0..outs.len() as u32).map(|k| 10 * i as u32 + k).collect(),
                input_slots: Vec::new(),
                forced_input: None,
            });
        }
        Ok(TableSnapshot {
            version,
            rules: slotted,
            interfaces,
            fanout: Vec::new(),
        })
    }
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
    /// With several inputs: one slot among the output counters per input,
    /// in order, for the input's counters ([`crate::stats::InputCounter`]);
    /// an arbitrated rule then has a second per input, in order, for its
    /// line's health ([`crate::stats::LineCounter`]); none for a rule with
    /// one input (its counters are the rule's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_slots: Vec<u32>,
    /// A failover held to one input by `mcrctl switch` (its index from 0);
    /// none: the rule chooses. A rule that is replaced chooses again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_input: Option<usize>,
}
