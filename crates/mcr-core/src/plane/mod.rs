//! The control plane's decisions, without a socket or a clock: the
//! supervisor in mcrd feeds them what happened (a request, a worker's
//! acknowledgement or exit, an interface change, the time) and carries out
//! what they return (join, leave, hold a port, publish a table, answer,
//! restart a worker after a delay). Each is tested here on its own, with
//! property tests of the invariants that the daemon relies on.
//!
//! - [`rule_table`]: the rules, their versions and statistics slots; every
//!   change checked as a whole.
//! - [`claims`]: what the rules hold on the host (memberships, ports), and
//!   the three steps of every change: take, publish, give up.
//! - [`replies`]: changes waiting for every live worker to run their table,
//!   each answered once.
//! - [`store`]: rules from etcd, one key per rule, refused key by key.
//! - [`backoff`]: how long a worker that died waits before it starts again.
//! - [`links`]: the links the rules use going down and up, as the journal
//!   and the rules' problems tell them.

pub mod backoff;
pub mod claims;
#[cfg(test)]
mod fixture;
pub mod links;
pub mod machine;
pub mod replies;
pub mod rule_table;
pub mod store;
