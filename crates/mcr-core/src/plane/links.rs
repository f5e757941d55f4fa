//! The links the rules use, as an operator sees them: a link that goes
//! down or comes up is an event that names the rules it carries, and a
//! rule says which of its links is down for as long as it is.
//!
//! A link's state changes nothing the workers build their table from (an
//! AF_PACKET socket and the eBPF program stay on an interface that is set
//! down, and the kernel keeps its memberships and sends the reports again
//! when it comes up), so it is told, not acted on.

use std::collections::BTreeMap;

use crate::control::InterfaceStatus;
use crate::interfaces::Interfaces;
use crate::rule::{Input, Output, Rule};
use crate::snapshot::SlottedRule;

/// The interfaces `rules` read from and send on, with the names of the
/// rules that read from each and of those that send on each.
pub fn carried(rules: &[SlottedRule]) -> BTreeMap<&str, (Vec<&str>, Vec<&str>)> {
    let mut carried: BTreeMap<&str, (Vec<&str>, Vec<&str>)> = BTreeMap::new();
    for r in rules.iter().map(|r| &r.rule) {
        for i in r.inputs().filter_map(Input::interface) {
            push_once(&mut carried.entry(i).or_default().0, &r.name);
        }
        for o in r.outputs.iter().filter_map(Output::interface) {
            push_once(&mut carried.entry(o).or_default().1, &r.name);
        }
    }
    carried
}

fn push_once<'a>(list: &mut Vec<&'a str>, name: &'a str) {
    if !list.contains(&name) {
        list.push(name);
    }
}

/// Every interface `rules` use, with its link on `interfaces` and how
/// often it changed (`changes`, by name).
pub fn status(rules: &[SlottedRule], interfaces: &Interfaces, changes: &BTreeMap<String, u64>) -> Vec<InterfaceStatus> {
    let names = |v: Vec<&str>| v.into_iter().map(String::from).collect();
    carried(rules)
        .into_iter()
        .map(|(name, (ins, outs))| InterfaceStatus {
            name: name.into(),
            link: interfaces.get(name).map(|i| i.link),
            inputs: names(ins),
            outputs: names(outs),
            link_changes: changes.get(name).copied().unwrap_or(0),
        })
        .collect()
}

/// The links `rules` use that went down or came up between `before` and
/// `now` (the same interface, by index, in both): the interface's name
/// and a message naming the rules whose inputs and outputs the link
/// carries, for each.
pub fn changed(rules: &[SlottedRule], before: &Interfaces, now: &Interfaces) -> Vec<(String, String)> {
    carried(rules)
        .into_iter()
        .filter_map(|(name, (ins, outs))| {
            let (was, is) = match (before.get(name), now.get(name)) {
                (Some(a), Some(b)) if a.index == b.index && a.link != b.link => (a.link, b.link),
                _ => return None,
            };
            let what = match (is.why_down(), was.why_down()) {
                (Some(why), _) => format!("link `{name}` down ({why})"),
                (None, Some(was)) => format!("link `{name}` up (it was down: {was})"),
                (None, None) => return None,
            };
            let rules = |v: &[&str]| v.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
            let mut carries = Vec::new();
            if !ins.is_empty() {
                carries.push(format!("inputs of {}", rules(&ins)));
            }
            if !outs.is_empty() {
                carries.push(format!("outputs of {}", rules(&outs)));
            }
            Some((name.to_string(), format!("{what}: it carries {}", carries.join("; "))))
        })
        .collect()
}

/// What `rule` meets on `interfaces` while a link of its is down: one
/// problem per link, "input link `in0` down (no carrier)".
pub fn problems(rule: &Rule, interfaces: &Interfaces) -> Vec<String> {
    let inputs = rule.inputs().filter_map(|i| Some(("input", i.interface()?)));
    let outputs = rule.outputs.iter().filter_map(|o| Some(("output", o.interface()?)));
    let mut out: Vec<String> = Vec::new();
    for (side, name) in inputs.chain(outputs) {
        let Some(why) = interfaces.get(name).and_then(|i| i.link.why_down()) else {
            continue;
        };
        let p = format!("{side} link `{name}` down ({why})");
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interfaces::{InterfaceInfo, Link};

    fn rule(text: &str) -> Rule {
        let (name, rest) = text.split_once(' ').expect("a name");
        let (input, outputs) = rest.split_once(" -> ").expect("an arrow");
        Rule::new(
            name,
            input.parse().expect("input"),
            outputs.split(' ').map(|o| o.parse().expect("output")).collect(),
        )
    }

    fn slotted(rules: &[Rule]) -> Vec<SlottedRule> {
        (0u32..)
            .zip(rules)
            .map(|(slot, r)| SlottedRule {
                rule: r.clone(),
                slot,
                output_slots: Vec::new(),
                input_slots: Vec::new(),
                forced_input: None,
            })
            .collect()
    }

    fn messages(rules: &[SlottedRule], before: &Interfaces, now: &Interfaces) -> Vec<String> {
        changed(rules, before, now).into_iter().map(|(_, m)| m).collect()
    }

    fn ifs(links: &[(&str, u32, Link)]) -> Interfaces {
        Interfaces::new(links.iter().map(|(n, i, link)| InterfaceInfo {
            link: *link,
            ..InterfaceInfo::ethernet(n, *i, [])
        }))
    }

    #[test]
    fn a_link_going_down_and_up_names_the_rules_it_carries() {
        let rules = slotted(&[
            rule("a in0:239.1.1.1:5001 -> out0:239.10.1.1:6001"),
            rule("b in0:239.1.1.2:5002 -> out1:239.10.1.2:6002"),
            rule("c in1:239.1.1.3:5003 -> out0:239.10.1.3:6003 out0:239.10.1.4:6004"),
        ]);
        let up = ifs(&[
            ("in0", 2, Link::Up),
            ("in1", 3, Link::Up),
            ("out0", 4, Link::Up),
            ("out1", 5, Link::Up),
        ]);
        let down = ifs(&[
            ("in0", 2, Link::NoCarrier),
            ("in1", 3, Link::Up),
            ("out0", 4, Link::AdminDown),
            ("out1", 5, Link::Up),
        ]);
        assert_eq!(
            messages(&rules, &up, &down),
            [
                "link `in0` down (no carrier): it carries inputs of `a`, `b`",
                "link `out0` down (set down): it carries outputs of `a`, `c`",
            ]
        );
        assert_eq!(
            messages(&rules, &down, &up),
            [
                "link `in0` up (it was down: no carrier): it carries inputs of `a`, `b`",
                "link `out0` up (it was down: set down): it carries outputs of `a`, `c`",
            ]
        );
        assert!(messages(&rules, &up, &up).is_empty());
        // From one way of being down to the other is still down.
        let admin = ifs(&[
            ("in0", 2, Link::AdminDown),
            ("in1", 3, Link::Up),
            ("out0", 4, Link::AdminDown),
            ("out1", 5, Link::Up),
        ]);
        assert_eq!(
            messages(&rules, &down, &admin),
            ["link `in0` down (set down): it carries inputs of `a`, `b`"]
        );
    }

    #[test]
    fn links_no_rule_uses_and_recreated_interfaces_are_not_link_events() {
        let rules = slotted(&[rule("a in0:239.1.1.1:5001 -> out0:239.10.1.1:6001")]);
        let before = ifs(&[("in0", 2, Link::Up), ("out0", 4, Link::Up), ("eth9", 9, Link::Up)]);
        // eth9 is no rule's; in0 came back with a new index (that is told
        // as a re-created interface, not as a link change).
        let now = ifs(&[
            ("in0", 12, Link::NoCarrier),
            ("out0", 4, Link::Up),
            ("eth9", 9, Link::AdminDown),
        ]);
        assert!(messages(&rules, &before, &now).is_empty());
    }

    #[test]
    fn a_rule_says_which_of_its_links_is_down() {
        let r = rule("a in0:239.1.1.1:5001 -> out0:239.10.1.1:6001 out0:239.10.1.2:6002 out1:239.10.1.3:6003");
        let now = ifs(&[
            ("in0", 2, Link::AdminDown),
            ("out0", 4, Link::NoCarrier),
            ("out1", 5, Link::Up),
        ]);
        assert_eq!(
            problems(&r, &now),
            [
                "input link `in0` down (set down)",
                "output link `out0` down (no carrier)",
            ]
        );
        let up = ifs(&[("in0", 2, Link::Up), ("out0", 4, Link::Up), ("out1", 5, Link::Up)]);
        assert!(problems(&r, &up).is_empty());
        // A missing interface is another problem, told elsewhere.
        assert!(problems(&r, &Interfaces::default()).is_empty());
    }

    #[test]
    fn the_status_lists_every_interface_the_rules_use_once() {
        let rules = slotted(&[
            rule("a in0:239.1.1.1:5001 -> out0:239.10.1.1:6001"),
            rule("b in0:239.1.1.2:5002 -> in0:239.10.1.2:6002"),
        ]);
        let now = ifs(&[("in0", 2, Link::NoCarrier), ("eth9", 9, Link::Up)]);
        let changes = [("in0".to_string(), 3)].into();
        let s = status(&rules, &now, &changes);
        assert_eq!(
            s,
            [
                InterfaceStatus {
                    name: "in0".into(),
                    link: Some(Link::NoCarrier),
                    inputs: vec!["a".into(), "b".into()],
                    outputs: vec!["b".into()],
                    link_changes: 3,
                },
                InterfaceStatus {
                    name: "out0".into(),
                    link: None,
                    inputs: vec![],
                    outputs: vec!["a".into()],
                    link_changes: 0,
                },
            ]
        );
    }
}
