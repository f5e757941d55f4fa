//! The topologies MCR is tested and measured on.
//!
//! | preset | shape |
//! |---|---|
//! | [`Chain`] | gen (veth0 10.0.0.1) ↔ (veth1 10.0.0.2) relay (veth2 10.0.1.1) ↔ (veth3 10.0.1.2) sink |
//! | [`Pipeline`] | gen → relay 1 → … → relay n → sink, link k on 10.0.k.0/24 (0 relays: one veth link) |
//! | [`DualBridge`] | senders and the relay's ingress on br0, the relay's egress and sinks on br1, no route between |
//! | [`Star`] | gen → relay → K egress links, one sink namespace each |
//! | [`TwoPaths`] | gen → two paths, each through an impairer's namespace → relay → sink |
//!
//! Every preset turns the reverse-path filter off in each namespace and
//! leaves IP forwarding off, so nothing crosses a relay namespace unless a
//! relay carries it.

mod dual_bridge;
mod line;
mod star;
mod two_paths;

pub use dual_bridge::DualBridge;
pub use line::{Chain, Flowing, Pipeline};
pub use star::Star;
pub use two_paths::TwoPaths;
