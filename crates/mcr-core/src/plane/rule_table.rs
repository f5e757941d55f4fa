//! The rule table the supervisor owns: the single source of truth. Every
//! change is validated as a whole, bumps the version, and assigns
//! statistics slots. A freed slot is reused only once every worker runs a
//! table without it, and is zeroed before it is. Pure: the supervisor
//! publishes the snapshots it makes.

use crate::control::{ControlError, ErrorKind};
use crate::interfaces::Interfaces;
use crate::rule::Rule;
use crate::snapshot::{SlottedRule, TableSnapshot};
use crate::validate::{RuleError, RuleIndex, check_rule, check_rule_in};

/// Statistics slots of one kind.
#[derive(Debug, Clone)]
struct SlotPool {
    next: u32,
    cap: u32,
    /// Freed slots and the table version that no longer used them.
    free: Vec<(u32, u64)>,
}

impl SlotPool {
    fn new(cap: usize) -> Self {
        SlotPool {
            next: 0,
            cap: u32::try_from(cap).unwrap_or(u32::MAX),
            free: Vec::new(),
        }
    }

    /// A slot: a fresh one, or a freed one that every worker has moved past
    /// (`acked` is the lowest version all running workers run). The flag
    /// says it was used before and must be zeroed.
    fn take(&mut self, acked: u64) -> Option<(u32, bool)> {
        if let Some(i) = self.free.iter().position(|&(_, v)| v <= acked) {
            return Some((self.free.swap_remove(i).0, true));
        }
        if self.next < self.cap {
            self.next += 1;
            return Some((self.next - 1, false));
        }
        None
    }

    fn give_back(&mut self, slot: u32, version: u64) {
        self.free.push((slot, version));
    }
}

/// Slots that were used before and must be zeroed before a worker counts
/// into them again.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reused {
    /// Rule slots.
    pub rules: Vec<u32>,
    /// Output slots.
    pub outputs: Vec<u32>,
}

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The rule is invalid.
    #[error(transparent)]
    Invalid(#[from] RuleError),
    /// No room for more rules or outputs.
    #[error("the table is full: {0}")]
    Full(String),
}

impl ChangeError {
    /// The refusal as the control socket tells it: an error of `kind`,
    /// with `context` before an invalid rule's message (the config file of
    /// a reload), and `full` saying what a full table means for this
    /// change and what to do (given what ran out).
    pub fn to_control(
        &self,
        kind: ErrorKind,
        context: Option<&str>,
        full: impl FnOnce(&str) -> String,
    ) -> ControlError {
        match self {
            ChangeError::Invalid(r) => ControlError {
                kind,
                field: Some(r.field.to_string()),
                message: context.map_or_else(|| r.to_string(), |c| format!("{c}: {r}")),
            },
            ChangeError::Full(what) => ControlError::new(kind, full(what)),
        }
    }
}

/// What an add did.
#[derive(Debug)]
pub struct Added {
    /// The table version with the rule in it.
    pub version: u64,
    /// The rule it replaced, if any.
    pub replaced: Option<SlottedRule>,
    /// Slots to zero.
    pub reused: Reused,
}

/// What a reload did, by rule name.
#[derive(Debug, Default)]
pub struct Replaced {
    /// The table version with the new set (unchanged when nothing changed).
    pub version: u64,
    /// Rules that are new.
    pub added: Vec<Rule>,
    /// Rules that changed: the old and the new.
    pub changed: Vec<(Rule, Rule)>,
    /// Rules that are gone.
    pub removed: Vec<Rule>,
    /// How many stayed exactly as they were.
    pub unchanged: usize,
    /// Slots to zero.
    pub reused: Reused,
}

/// The rule table.
#[derive(Debug, Clone)]
pub struct RuleTable {
    rules: Vec<SlottedRule>,
    version: u64,
    rule_slots: SlotPool,
    output_slots: SlotPool,
}

impl RuleTable {
    /// An empty table with room for `rule_slots` rules and `output_slots`
    /// outputs.
    pub fn new(rule_slots: usize, output_slots: usize) -> Self {
        RuleTable {
            rules: Vec::new(),
            version: 0,
            rule_slots: SlotPool::new(rule_slots),
            output_slots: SlotPool::new(output_slots),
        }
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Every rule, in the order added.
    pub fn rules(&self) -> &[SlottedRule] {
        &self.rules
    }

    /// The rule called `name`.
    #[cfg(test)]
    pub fn get(&self, name: &str) -> Option<&SlottedRule> {
        self.rules.iter().find(|r| r.rule.name == name)
    }

    /// Adds `rule`, or replaces the rule of the same name. `acked` is the
    /// lowest table version every running worker has applied.
    pub fn add(&mut self, rule: Rule, interfaces: &Interfaces, acked: u64) -> Result<Added, ChangeError> {
        let others: Vec<Rule> = self.rules.iter().map(|r| r.rule.clone()).collect();
        check_rule(&rule, &others, interfaces)?;
        let next_version = self.version + 1;
        let mut reused = Reused::default();
        let replaced = self.put(rule, acked, next_version, &mut reused)?;
        self.version = next_version;
        Ok(Added {
            version: next_version,
            replaced,
            reused,
        })
    }

    /// Makes the table exactly `rules` (a reload): checked as a whole
    /// first, so a refusal changes nothing; then only the difference is
    /// applied, as one new version. Unchanged rules keep their slots and
    /// counts, and so do the unchanged outputs of a changed rule.
    pub fn replace_all(
        &mut self,
        rules: Vec<Rule>,
        interfaces: &Interfaces,
        acked: u64,
    ) -> Result<Replaced, ChangeError> {
        let index = RuleIndex::new(&rules, interfaces);
        let mut seen = std::collections::HashSet::new();
        for r in &rules {
            if !seen.insert(r.name.as_str()) {
                return Err(ChangeError::Invalid(RuleError {
                    rule: r.name.clone(),
                    field: crate::field::Field::Name,
                    reason: format!("rule name `{}` is used twice", r.name),
                }));
            }
            check_rule_in(r, &index, interfaces)?;
        }
        let next_version = self.version + 1;
        let mut next = self.clone();
        let mut out = Replaced::default();
        // Removals first, so an input that moves to another rule is free.
        let new_names: std::collections::HashSet<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        let old_by_name: std::collections::HashMap<&str, &SlottedRule> =
            self.rules.iter().map(|r| (r.rule.name.as_str(), r)).collect();
        for old in &self.rules {
            if !new_names.contains(old.rule.name.as_str()) {
                next.drop_rule(&old.rule.name, next_version);
                out.removed.push(old.rule.clone());
            }
        }
        for rule in rules {
            match old_by_name.get(rule.name.as_str()) {
                Some(old) if old.rule == rule => out.unchanged += 1,
                Some(old) => {
                    let old = old.rule.clone();
                    next.put(rule.clone(), acked, next_version, &mut out.reused)?;
                    out.changed.push((old, rule));
                }
                None => {
                    next.put(rule.clone(), acked, next_version, &mut out.reused)?;
                    out.added.push(rule);
                }
            }
        }
        if out.added.is_empty() && out.changed.is_empty() && out.removed.is_empty() {
            out.version = self.version;
            return Ok(out);
        }
        next.version = next_version;
        *self = next;
        out.version = next_version;
        Ok(out)
    }

    /// Puts `rule` in the table as version `next_version` (already
    /// checked), replacing the rule of the same name; returns that rule.
    fn put(
        &mut self,
        rule: Rule,
        acked: u64,
        next_version: u64,
        reused: &mut Reused,
    ) -> Result<Option<SlottedRule>, ChangeError> {
        let old = self.rules.iter().position(|r| r.rule.name == rule.name);
        // Outputs (and inputs) that stay the same keep their slot and their
        // counts.
        let mut old_slots: Vec<(OutputKey, u32)> = old
            .map(|i| {
                let r = &self.rules[i];
                // (An arbitrated rule's second slots after its inputs'.)
                let inputs = r
                    .rule
                    .inputs()
                    .map(OutputKey::of_input)
                    .chain(r.rule.inputs().map(OutputKey::of_line))
                    .zip(r.input_slots.iter().copied());
                r.rule
                    .outputs
                    .iter()
                    .map(OutputKey::of)
                    .zip(r.output_slots.iter().copied())
                    .chain(inputs)
                    .collect()
            })
            .unwrap_or_default();
        let rule_slot = match old {
            Some(i) => self.rules[i].slot,
            None => match self.rule_slots.take(acked) {
                Some((s, was_used)) => {
                    if was_used {
                        reused.rules.push(s);
                    }
                    s
                }
                None => return Err(ChangeError::Full(format!("{} rules", self.rule_slots.cap))),
            },
        };
        // A rule with several inputs counts each in a slot of its own.
        // An arbitrated rule counts each input's line health in a second.
        let input_keys: Vec<OutputKey> = match &rule.redundancy {
            Some(r) => {
                let lines = matches!(r.mode, crate::rule::Mode::Arbitrate { .. });
                rule.inputs()
                    .map(OutputKey::of_input)
                    .chain(rule.inputs().filter(|_| lines).map(OutputKey::of_line))
                    .collect()
            }
            None => Vec::new(),
        };
        let keys: Vec<OutputKey> = rule.outputs.iter().map(OutputKey::of).chain(input_keys).collect();
        let mut slots = Vec::with_capacity(keys.len());
        let mut taken_new = Vec::new();
        for key in keys {
            if let Some(k) = old_slots.iter().position(|(ok, _)| *ok == key) {
                slots.push(old_slots.swap_remove(k).1);
                continue;
            }
            match self.output_slots.take(acked) {
                Some((s, was_used)) => {
                    if was_used {
                        reused.outputs.push(s);
                    }
                    taken_new.push(s);
                    slots.push(s);
                }
                None => {
                    // Put back what this add took.
                    for s in taken_new {
                        self.output_slots.give_back(s, 0);
                    }
                    if old.is_none() {
                        self.rule_slots.give_back(rule_slot, 0);
                    }
                    return Err(ChangeError::Full(format!("{} outputs", self.output_slots.cap)));
                }
            }
        }
        for (_, s) in old_slots {
            self.output_slots.give_back(s, next_version);
        }
        let input_slots = slots.split_off(rule.outputs.len());
        let output_slots = slots;
        let slotted = SlottedRule {
            rule,
            slot: rule_slot,
            output_slots,
            input_slots,
            forced_input: None,
        };
        Ok(match old {
            Some(i) => Some(std::mem::replace(&mut self.rules[i], slotted)),
            None => {
                self.rules.push(slotted);
                None
            }
        })
    }

    /// A new version with the same rules (the interfaces under them
    /// changed); returns it.
    pub fn touch(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    /// Holds the failover rule called `name` to its input `input` (from
    /// 0; none: it chooses again); returns the new version. The caller
    /// has checked that the rule exists and the input is one of its.
    pub fn force(&mut self, name: &str, input: Option<usize>) -> Option<u64> {
        let r = self.rules.iter_mut().find(|r| r.rule.name == name)?;
        r.forced_input = input;
        self.version += 1;
        Some(self.version)
    }

    /// Removes the rule called `name`; returns it and the new version.
    pub fn remove(&mut self, name: &str) -> Option<(SlottedRule, u64)> {
        let r = self.drop_rule(name, self.version + 1)?;
        self.version += 1;
        Some((r, self.version))
    }

    /// Takes the rule called `name` out; its slots are free from
    /// `version` on.
    fn drop_rule(&mut self, name: &str, version: u64) -> Option<SlottedRule> {
        let i = self.rules.iter().position(|r| r.rule.name == name)?;
        let r = self.rules.remove(i);
        self.rule_slots.give_back(r.slot, version);
        for &s in r.output_slots.iter().chain(&r.input_slots) {
            self.output_slots.give_back(s, version);
        }
        Some(r)
    }

    /// The whole table, for the workers.
    pub fn snapshot(&self, interfaces: &Interfaces) -> TableSnapshot {
        // Only the interfaces the rules name: the workers need no others.
        let used: std::collections::BTreeSet<&str> = self
            .rules
            .iter()
            .flat_map(|r| {
                (r.rule.inputs().filter_map(crate::rule::Input::interface))
                    .chain(r.rule.outputs.iter().filter_map(crate::rule::Output::interface))
            })
            .collect();
        TableSnapshot {
            version: self.version,
            rules: self.rules.clone(),
            interfaces: Interfaces::new(interfaces.iter().filter(|i| used.contains(i.name.as_str())).cloned()),
            fanout: Vec::new(),
        }
    }
}

/// What makes two outputs the same output (and so keep one slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputKey(String);

impl OutputKey {
    /// An output, whether it is turned on or off: turning it off or on
    /// keeps its slot, and so its counters.
    fn of(o: &crate::rule::Output) -> Self {
        OutputKey(o.name_text())
    }

    /// An input of a rule with several, which counts in an output slot.
    fn of_input(i: &crate::rule::Input) -> Self {
        OutputKey(format!("from {i}"))
    }

    /// The line health of an input of an arbitrated rule.
    fn of_line(i: &crate::rule::Input) -> Self {
        OutputKey(format!("line {i}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interfaces::InterfaceInfo;

    fn ifaces() -> Interfaces {
        let mk = |name: &str, index, addr: &str| InterfaceInfo::ethernet(name, index, [addr.parse().expect("literal")]);
        Interfaces::new([mk("in0", 2, "10.0.0.2"), mk("out0", 3, "10.0.1.1")])
    }

    fn rule(name: &str, group: u8, outs: &[&str]) -> Rule {
        Rule::new(
            name,
            format!("in0:239.1.1.{group}:5001").parse().expect("input"),
            outs.iter().map(|o| o.parse().expect("output")).collect(),
        )
    }

    #[test]
    fn slots_are_assigned_kept_and_reused_only_when_safe() {
        let mut t = RuleTable::new(2, 3);
        let a = t.add(rule("a", 1, &["out0:239.10.1.1:6001"]), &ifaces(), 0).expect("a");
        assert_eq!((a.version, t.get("a").expect("a").slot), (1, 0));
        t.add(
            rule("b", 2, &["out0:239.10.1.2:6001", "out0:239.10.1.3:6001"]),
            &ifaces(),
            0,
        )
        .expect("b");
        assert!(matches!(
            t.add(rule("c", 3, &["out0:239.10.1.4:6001"]), &ifaces(), 0),
            Err(ChangeError::Full(_))
        ));
        let (_, v) = t.remove("b").expect("b");
        // Workers still run version 2: b's slots may not be reused yet.
        assert!(matches!(
            t.add(rule("c", 3, &["out0:239.10.1.4:6001"]), &ifaces(), v - 1),
            Err(ChangeError::Full(_))
        ));
        let c = t.add(rule("c", 3, &["out0:239.10.1.4:6001"]), &ifaces(), v).expect("c");
        assert_eq!(c.reused.rules, vec![1]);
        assert_eq!(c.reused.outputs.len(), 1);
    }

    #[test]
    fn replacing_keeps_the_slots_of_what_did_not_change() {
        let mut t = RuleTable::new(10, 10);
        t.add(
            rule("a", 1, &["out0:239.10.1.1:6001", "out0:239.10.1.2:6001"]),
            &ifaces(),
            0,
        )
        .expect("a");
        let before = t.get("a").expect("a").clone();
        let r = t
            .add(
                rule("a", 1, &["out0:239.10.1.2:6001", "out0:239.10.1.9:6001"]),
                &ifaces(),
                0,
            )
            .expect("replace");
        assert!(r.replaced.is_some());
        let after = t.get("a").expect("a");
        assert_eq!(after.slot, before.slot);
        assert_eq!(
            after.output_slots[0], before.output_slots[1],
            "the unchanged output keeps its counts"
        );
        assert_ne!(after.output_slots[1], before.output_slots[0]);
        assert_eq!(t.rules().len(), 1);
    }

    #[test]
    fn turning_an_output_or_a_rule_off_and_on_keeps_every_slot() {
        let mut t = RuleTable::new(10, 10);
        let outs = ["out0:239.10.1.1:6001", "out0:239.10.1.2:6001"];
        t.add(rule("a", 1, &outs), &ifaces(), 0).expect("a");
        let before = t.get("a").expect("a").clone();
        let off = rule("a", 1, &["out0:239.10.1.1:6001", "out0:239.10.1.2:6001,enabled=false"]);
        t.add(off, &ifaces(), 0).expect("off");
        assert_eq!(t.get("a").expect("a").output_slots, before.output_slots);
        let parked = Rule {
            enabled: false,
            ..rule("a", 1, &outs)
        };
        t.add(parked, &ifaces(), 0).expect("parked");
        t.add(rule("a", 1, &outs), &ifaces(), 0).expect("on");
        let after = t.get("a").expect("a");
        assert_eq!((after.slot, &after.output_slots), (before.slot, &before.output_slots));
    }

    #[test]
    fn a_reload_changes_only_what_differs_and_refuses_as_a_whole() {
        let mut t = RuleTable::new(10, 10);
        for (n, g) in [("a", 1), ("b", 2), ("c", 3)] {
            t.add(rule(n, g, &[&format!("out0:239.10.1.{g}:6001")]), &ifaces(), 0)
                .expect("add");
        }
        let a_before = t.get("a").expect("a").clone();
        let b_before = t.get("b").expect("b").clone();
        // b gains an output, c goes, d comes (taking c's input: removals
        // are applied first), a stays.
        let new = vec![
            rule("a", 1, &["out0:239.10.1.1:6001"]),
            rule("b", 2, &["out0:239.10.1.2:6001", "out0:239.10.1.7:6001"]),
            rule("d", 3, &["out0:239.10.1.9:6001"]),
        ];
        let r = t.replace_all(new.clone(), &ifaces(), 3).expect("reload");
        assert_eq!(r.version, 4, "one new version for the whole change");
        assert_eq!(r.unchanged, 1);
        assert_eq!(r.added.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["d"]);
        assert_eq!(r.changed.iter().map(|x| x.1.name.as_str()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(r.removed.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["c"]);
        assert_eq!(t.get("a").expect("a"), &a_before, "untouched: same slots");
        let b = t.get("b").expect("b");
        assert_eq!((b.slot, b.output_slots[0]), (b_before.slot, b_before.output_slots[0]));
        // The same set again changes nothing, not even the version.
        let same = t.replace_all(new, &ifaces(), 4).expect("same");
        assert_eq!((same.version, same.unchanged, t.version()), (4, 3, 4));
        // A set with one bad rule (or a name twice) changes nothing.
        let before = t.rules().to_vec();
        let bad = vec![
            rule("a", 1, &["out0:239.10.1.1:6001"]),
            rule("e", 1, &["out0:239.10.1.5:6001"]),
        ];
        assert!(t.replace_all(bad, &ifaces(), 4).is_err());
        let twice = vec![
            rule("a", 1, &["out0:239.10.1.1:6001"]),
            rule("a", 2, &["out0:239.10.1.5:6001"]),
        ];
        let e = t.replace_all(twice, &ifaces(), 4).expect_err("twice");
        assert!(e.to_string().contains("used twice"), "{e}");
        // A set too big for the table changes nothing either.
        let many: Vec<Rule> = (1..=11)
            .map(|g| rule(&format!("r{g}"), g, &["out0:239.10.1.1:6001"]))
            .collect();
        assert!(matches!(t.replace_all(many, &ifaces(), 4), Err(ChangeError::Full(_))));
        assert_eq!((t.rules(), t.version()), (&before[..], 4));
    }

    #[test]
    fn refusals_change_nothing() {
        let mut t = RuleTable::new(10, 10);
        t.add(rule("a", 1, &["out0:239.10.1.1:6001"]), &ifaces(), 0).expect("a");
        let e = t
            .add(rule("b", 1, &["out0:239.10.1.2:6001"]), &ifaces(), 0)
            .expect_err("same input");
        assert!(e.to_string().contains("already takes"), "{e}");
        assert_eq!((t.version(), t.rules().len()), (1, 1));
        assert!(t.remove("nope").is_none());
        let snap = t.snapshot(&ifaces());
        assert_eq!(snap.version, 1);
        assert_eq!(snap.interfaces.iter().count(), 2);
    }
}
