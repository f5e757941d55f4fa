//! What the rules hold on the host for their inputs, counted without a
//! socket: the first piece of the control plane that runs as a pure state
//! machine (mcrd carries out the actions it returns).
//!
//! A rule on a multicast group holds a membership of that group (one per
//! source for a source-specific rule) on its input interface, so that
//! switches and bridges deliver the stream; a rule on one of the host's
//! own addresses holds its port, so that the kernel does not answer the
//! sender with ICMP port unreachable. Several rules may hold the same
//! thing; it is given up with its last holder.
//!
//! Every change of the rules runs in three steps, here and nowhere else:
//! [`Ledger::take`] takes the claims the new or changed rules need (the
//! host joins and holds what it is told to), the caller publishes the new
//! table to the workers, then [`Ledger::finish`] gives up the claims those
//! rules held before and those of the removed rules (the host leaves and
//! frees what lost its last holder). So a membership that a changed rule
//! keeps, or that passes from one rule to another, is never left, and an
//! old one is left only once the workers no longer read it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use crate::interfaces::Interfaces;
use crate::rule::Rule;

/// One membership: a group (and source) on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JoinKey {
    /// The interface index.
    pub ifindex: u32,
    /// The group.
    pub group: IpAddr,
    /// The source, for a source-specific join.
    pub source: Option<IpAddr>,
}

/// What one rule holds for its inputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claim {
    /// Group memberships: one per multicast input, or one per source of
    /// it.
    pub joins: Vec<JoinKey>,
    /// Unicast inputs' ports.
    pub ports: Vec<SocketAddr>,
}

/// What `rule` needs to hold on `interfaces`: for each input, nothing for
/// a VLAN of a trunk (the host has no interface on it to join from; the
/// workers open the trunk's multicast filter instead) or while its input
/// interface is missing; none when that leaves nothing.
pub fn claim_of(rule: &Rule, interfaces: &Interfaces) -> Option<Claim> {
    if !rule.enabled {
        return None;
    }
    let mut claim = Claim::default();
    for (_, input) in rule.udp_inputs() {
        let dst = input.destination;
        if !dst.ip().is_multicast() {
            claim.ports.push(dst);
            continue;
        }
        if input.vlan.is_some() {
            continue;
        }
        let Some(ifindex) = interfaces.get(&input.interface).map(|i| i.index) else {
            continue;
        };
        let key = |source| JoinKey {
            ifindex,
            group: dst.ip(),
            source,
        };
        if input.sources.is_empty() {
            claim.joins.push(key(None));
        } else {
            claim.joins.extend(input.sources.iter().map(|&s| key(Some(s))));
        }
    }
    (claim != Claim::default()).then_some(claim)
}

/// What the host must do for the claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Make sure `key` is joined on `interface` (join it, or try again if
    /// it failed before; nothing if it is held). Sent for every holder
    /// that takes it, so a new rule retries what an old one could not.
    Join {
        /// The membership.
        key: JoinKey,
        /// The interface's name, for messages.
        interface: String,
    },
    /// `key` lost its last holder: leave it.
    Leave(JoinKey),
    /// Make sure the port is held (as for `Join`).
    HoldPort(SocketAddr),
    /// The port lost its last holder: let it go.
    FreePort(SocketAddr),
}

/// A change under way: the claims the changed rules held before, given up
/// by [`Ledger::finish`] once the workers run the new table.
#[derive(Debug)]
#[must_use = "a change is finished with Ledger::finish, or the old claims are never given up"]
pub struct Change {
    old: Vec<Claim>,
}

/// Every rule's claim, and how many rules hold each membership and port.
#[derive(Debug, Default)]
pub struct Ledger {
    claims: HashMap<String, Claim>,
    joins: HashMap<JoinKey, usize>,
    ports: HashMap<SocketAddr, usize>,
}

impl Ledger {
    /// The claim rule `name` holds, if any.
    pub fn claim(&self, name: &str) -> Option<&Claim> {
        self.claims.get(name)
    }

    /// Step 1 of a change: takes the claims `rules` need on `ifs`, in
    /// place of those they held. Returns the change to finish and, for
    /// each rule in order, what the host must do for it now.
    pub fn take<'a>(
        &mut self,
        rules: impl IntoIterator<Item = &'a Rule>,
        ifs: &Interfaces,
    ) -> (Change, Vec<Vec<Action>>) {
        let mut old = Vec::new();
        let mut todo = Vec::new();
        for rule in rules {
            let new = claim_of(rule, ifs);
            let mut actions = Vec::new();
            if let Some(c) = &new {
                for &key in &c.joins {
                    *self.joins.entry(key).or_default() += 1;
                    let interface = ifs.by_index(key.ifindex).map_or_else(String::new, |i| i.name.clone());
                    actions.push(Action::Join { key, interface });
                }
                for &a in &c.ports {
                    *self.ports.entry(a).or_default() += 1;
                    actions.push(Action::HoldPort(a));
                }
            }
            old.extend(match new {
                Some(c) => self.claims.insert(rule.name.clone(), c),
                None => self.claims.remove(&rule.name),
            });
            todo.push(actions);
        }
        (Change { old }, todo)
    }

    /// Step 3 of a change, once the workers have the new table: gives up
    /// what the changed rules held before and what the rules named in
    /// `removed` held. Returns what the host must leave and free.
    pub fn finish<'a>(&mut self, change: Change, removed: impl IntoIterator<Item = &'a str>) -> Vec<Action> {
        let mut old = change.old;
        old.extend(removed.into_iter().filter_map(|name| self.claims.remove(name)));
        let mut actions = Vec::new();
        for claim in old {
            for key in claim.joins {
                if release(&mut self.joins, key) {
                    actions.push(Action::Leave(key));
                }
            }
            for a in claim.ports {
                if release(&mut self.ports, a) {
                    actions.push(Action::FreePort(a));
                }
            }
        }
        actions
    }
}

/// One holder fewer of `key`; true if that was the last.
fn release<K: Eq + std::hash::Hash>(users: &mut HashMap<K, usize>, key: K) -> bool {
    let Some(n) = users.get_mut(&key) else {
        // Every claim given up was taken, and is given up once: a key
        // without holders here would be a defect of this module.
        debug_assert!(false, "a claim released that was never taken");
        return false;
    };
    *n -= 1;
    if *n > 0 {
        return false;
    }
    users.remove(&key);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::fixture::{Host, RULE_KINDS, ifs, needed, rule};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8, u8),
        Remove(u8),
        Reload(Vec<(u8, u8)>),
        Interfaces([bool; 2]),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..6, 0u8..RULE_KINDS).prop_map(|(n, w)| Op::Add(n, w)),
            2 => (0u8..6).prop_map(Op::Remove),
            1 => proptest::collection::vec((0u8..6, 0u8..RULE_KINDS), 0..6).prop_map(Op::Reload),
            1 => any::<[bool; 2]>().prop_map(Op::Interfaces),
        ]
    }

    proptest! {
        /// Random adds, removes, reloads and interface changes, each run
        /// as mcrd runs it (take, publish, finish). After every step the
        /// host holds exactly what the rules need, each holder is counted
        /// once, nothing is left or freed that was not held, and nothing
        /// the new rules still need is left during the change.
        #[test]
        fn the_host_holds_exactly_what_the_rules_need(ops in proptest::collection::vec(op(), 1..40)) {
            let mut ledger = Ledger::default();
            let mut host = Host::default();
            let mut rules: BTreeMap<String, Rule> = BTreeMap::new();
            let mut present = [true, true];
            for op in ops {
                let (claim, removed): (Vec<Rule>, Vec<String>) = match op {
                    Op::Add(n, w) => {
                        let r = rule(&format!("r{n}"), w);
                        rules.insert(r.name.clone(), r.clone());
                        (vec![r], vec![])
                    }
                    Op::Remove(n) => {
                        let name = format!("r{n}");
                        if rules.remove(&name).is_none() {
                            continue;
                        }
                        (vec![], vec![name])
                    }
                    Op::Reload(all) => {
                        let new: BTreeMap<String, Rule> =
                            all.iter().map(|&(n, w)| (format!("r{n}"), rule(&format!("r{n}"), w))).collect();
                        let removed = rules.keys().filter(|k| !new.contains_key(*k)).cloned().collect();
                        let changed = new.values().filter(|r| rules.get(&r.name) != Some(r)).cloned().collect();
                        rules = new;
                        (changed, removed)
                    }
                    Op::Interfaces(p) => {
                        present = p;
                        let now = ifs(&present);
                        // As mcrd does on a link change: claim again each
                        // rule whose claim differs on the new interfaces.
                        let moved = rules
                            .values()
                            .filter(|r| claim_of(r, &now).as_ref() != ledger.claim(&r.name))
                            .cloned()
                            .collect();
                        (moved, vec![])
                    }
                };
                let now = ifs(&present);
                let (change, todo) = ledger.take(&claim, &now);
                prop_assert_eq!(todo.len(), claim.len());
                for a in todo.iter().flatten() {
                    let taking = matches!(a, Action::Join { .. } | Action::HoldPort(_));
                    prop_assert!(taking, "{:?} before publishing", a);
                    host.apply(a);
                }
                // (The table is published here.)
                let Host { joined: needed_joins, held: needed_ports } = needed(rules.values(), &now);
                for a in ledger.finish(change, removed.iter().map(String::as_str)) {
                    match &a {
                        Action::Leave(k) => prop_assert!(!needed_joins.contains(k), "left {:?}, still needed", k),
                        Action::FreePort(p) => prop_assert!(!needed_ports.contains(p), "freed {}, still needed", p),
                        other => prop_assert!(false, "{:?} after publishing", other),
                    }
                    host.apply(&a);
                }
                prop_assert_eq!(&host.joined, &needed_joins);
                prop_assert_eq!(&host.held, &needed_ports);
                // Each holder counted once: the counts are the rules'.
                let mut want: HashMap<JoinKey, usize> = HashMap::new();
                let mut want_ports: HashMap<SocketAddr, usize> = HashMap::new();
                for r in rules.values() {
                    if let Some(c) = ledger.claim(&r.name) {
                        c.joins.iter().for_each(|k| *want.entry(*k).or_default() += 1);
                        c.ports.iter().for_each(|p| *want_ports.entry(*p).or_default() += 1);
                    }
                    let expected = claim_of(r, &now);
                    prop_assert_eq!(ledger.claim(&r.name), expected.as_ref());
                }
                prop_assert_eq!(&ledger.joins, &want);
                prop_assert_eq!(&ledger.ports, &want_ports);
                prop_assert!(ledger.claims.keys().all(|k| rules.contains_key(k)), "a claim of a rule that is gone");
            }
        }
    }

    #[test]
    fn a_rule_replaced_with_the_same_input_never_leaves_its_group() {
        let now = ifs(&[true, true]);
        let mut ledger = Ledger::default();
        let (c, todo) = ledger.take([&rule("a", 0)], &now);
        assert_eq!(todo[0].len(), 1);
        assert!(ledger.finish(c, []).is_empty());
        // Replaced (same input): joined again (a no-op on the host),
        // nothing left.
        let (c, _) = ledger.take([&rule("a", 0)], &now);
        assert!(ledger.finish(c, []).is_empty());
        // Moved to another group: the old one is left after publishing.
        let (c, todo) = ledger.take([&rule("a", 2)], &now);
        assert!(matches!(&todo[0][0], Action::Join { key, .. } if key.group.to_string() == "239.1.1.1"));
        let left = ledger.finish(c, []);
        assert!(matches!(&left[..], [Action::Leave(k)] if k.group.to_string() == "239.1.1.0"));
        // Removed: its group is left.
        let (c, _) = ledger.take([], &now);
        assert_eq!(ledger.finish(c, ["a"]).len(), 1);
        assert!(ledger.joins.is_empty());
    }
}
