//! The host's interfaces: read afresh for every change of the rules, and
//! watched, since they change under the rules: netlink announces every link
//! and address change; the supervisor then reads the interfaces again and
//! hands them to the plane, which, if any a rule uses changed (appeared,
//! went, was re-created with a new index, changed its address, MAC or
//! MTU), takes or retakes the group memberships and sends the workers a
//! new table. Rules are never dropped for a missing interface: they wait
//! for it.

use std::collections::HashMap;
use std::time::Duration;

use mcr_core::interfaces::{InterfaceInfo, Interfaces, Link};
use mcr_sys::netlink::LinkWatch;
use tokio::sync::mpsc;

/// Everything the host's interfaces offer, read afresh.
pub fn interfaces() -> Interfaces {
    let mut addresses = mcr_sys::iface::all_addresses().unwrap_or_else(|e| {
        tracing::warn!("could not read the interfaces' addresses: {e}");
        HashMap::new()
    });
    Interfaces::new(mcr_sys::iface::names().into_iter().filter_map(|name| {
        Some(InterfaceInfo {
            index: mcr_sys::iface::index(&name).ok()?,
            mac: mcr_sys::iface::mac(&name).unwrap_or([0; 6]),
            mtu: mcr_sys::iface::mtu(&name).unwrap_or(1500),
            addresses: addresses.remove(&name).unwrap_or_default(),
            ethernet: mcr_sys::iface::is_ethernet(&name).unwrap_or(false),
            master: mcr_sys::iface::master(&name),
            link: mcr_sys::iface::flags(&name).map_or(Link::Up, |f| Link::from_flags(f.up, f.running)),
            name,
        })
    }))
}

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
