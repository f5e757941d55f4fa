//! Interfaces that change under the rules: netlink announces every link
//! and address change; the supervisor then reads the interfaces again and,
//! if any a rule uses changed (appeared, went, was re-created with a new
//! index, changed its address, MAC or MTU), takes or retakes the group
//! memberships and sends the workers a new table. Rules are never dropped
//! for a missing interface: they wait for it.

use std::time::Duration;

use mcr_sys::netlink::LinkWatch;
use tokio::sync::mpsc;

use mcr_core::plane::claims::claim_of;

use super::{Supervisor, interfaces};

/// Changes often come in bursts (a link, then its addresses): wait this
/// long after the first before reading the interfaces.
const SETTLE: Duration = Duration::from_millis(100);

/// Watches the interfaces from a thread of its own (it blocks on the
/// netlink socket); sends on `changed` after each burst of changes.
/// Without netlink (it cannot fail on Linux, but if it does) changes are
/// picked up at the next rule change, as the log says.
pub fn watch(changed: mpsc::Sender<()>) {
    let watch = match LinkWatch::open() {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(
                "cannot watch the interfaces (netlink): {e}; interface changes are picked up only when rules change"
            );
            return;
        }
    };
    let spawned = std::thread::Builder::new().name("links".into()).spawn(move || {
        loop {
            if let Err(e) = watch.wait() {
                tracing::error!(
                    "watching the interfaces (netlink): {e}; interface changes are picked up only when rules change"
                );
                return;
            }
            std::thread::sleep(SETTLE);
            let _ = watch.drain();
            // A full channel already holds a change not yet handled.
            if let Err(mpsc::error::TrySendError::Closed(())) = changed.try_send(()) {
                return;
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!("cannot start the interface watcher: {e}");
    }
}

/// What differs between two readings of one interface.
fn what_changed(a: &mcr_core::interfaces::InterfaceInfo, b: &mcr_core::interfaces::InterfaceInfo) -> String {
    let list = |v: &[std::net::IpAddr]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ");
    let mut parts = Vec::new();
    if a.addresses != b.addresses {
        parts.push(format!(
            "addresses [{}] -> [{}]",
            list(&a.addresses),
            list(&b.addresses)
        ));
    }
    if a.mac != b.mac {
        parts.push("MAC".to_string());
    }
    if a.mtu != b.mtu {
        parts.push(format!("MTU {} -> {}", a.mtu, b.mtu));
    }
    if a.master != b.master {
        parts.push(format!("bridge {:?} -> {:?}", a.master, b.master));
    }
    if a.ethernet != b.ethernet {
        parts.push("link type".to_string());
    }
    parts.join(", ")
}

impl Supervisor {
    /// Reads the interfaces again and applies what changed for the rules.
    pub(super) fn on_links_changed(&mut self) {
        let ifs = interfaces();
        let used: std::collections::BTreeSet<String> = self
            .rules
            .rules()
            .iter()
            .flat_map(|r| {
                std::iter::once(r.rule.input.interface.clone())
                    .chain(r.rule.outputs.iter().map(|o| o.interface.clone()))
            })
            .collect();
        let mut changed = Vec::new();
        for name in &used {
            match (self.ifs.get(name), ifs.get(name)) {
                (None, Some(i)) => changed.push(format!("`{name}` appeared (index {})", i.index)),
                (Some(_), None) => changed.push(format!("`{name}` is gone")),
                (Some(a), Some(b)) if a.index != b.index => {
                    changed.push(format!("`{name}` was re-created (index {} -> {})", a.index, b.index))
                }
                (Some(a), Some(b)) if a != b => changed.push(format!("`{name}` changed: {}", what_changed(a, b))),
                _ => {}
            }
        }
        if !changed.is_empty() {
            tracing::info!("interfaces: {}", changed.join(", "));
        }
        // Memberships on the interfaces as they are now, checked every time
        // (a rule change in between may have published the new interfaces
        // already, without retaking other rules' memberships): taken before
        // the table changes, the old ones left after.
        let rules = self.rules.rules().to_vec();
        let reclaim: Vec<&mcr_core::rule::Rule> = rules
            .iter()
            .map(|r| &r.rule)
            .filter(|r| claim_of(r, &ifs).as_ref() != self.ledger.claim(&r.name))
            .collect();
        if changed.is_empty() && reclaim.is_empty() {
            // A unicast input's port may be holdable now that its address is.
            self.ports.retry_failed();
            return;
        }
        self.change_rules(reclaim, [], ifs, |s, ifs| {
            let ports = s.ports.retry_failed();
            if ports > 0 {
                tracing::info!("{ports} unicast port(s) held now");
            }
            s.rules.touch();
            s.publish_with(ifs);
        });
    }
}
