//! The relay's role: active (it sends) or standby (it holds its
//! memberships, rings and outputs ready, counts what it would send, and
//! sends nothing). The role is one word in every worker's statistics
//! block and in the eBPF data path's, read before every send, so a change
//! takes effect from the next frame, with no table to publish.

use std::time::Instant;

use mcr_core::config::Role;
use mcr_core::control::RoleStatus;

/// The role and how it came to be.
#[derive(Debug)]
pub struct RoleKeeper {
    role: Role,
    since: Instant,
    changes: u64,
    set_by: &'static str,
}

impl RoleKeeper {
    /// The role the daemon starts in.
    pub fn new(role: Role) -> Self {
        RoleKeeper {
            role,
            since: Instant::now(),
            changes: 0,
            set_by: "config",
        }
    }

    /// The role now.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Takes `role`, as `by` asks; returns whether it changed.
    pub fn set(&mut self, role: Role, by: &'static str) -> bool {
        if role == self.role {
            return false;
        }
        self.role = role;
        self.since = Instant::now();
        self.changes += 1;
        self.set_by = by;
        true
    }

    /// How it stands, with the packets held so far.
    pub fn status(&self, held: u64, changed: bool) -> RoleStatus {
        RoleStatus {
            role: self.role,
            for_s: self.since.elapsed().as_secs_f64(),
            changes: self.changes,
            set_by: self.set_by.into(),
            held,
            changed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_counted_once_and_a_repeat_is_not_a_change() {
        let mut k = RoleKeeper::new(Role::Standby);
        assert_eq!(k.status(0, false).set_by, "config");
        assert!(k.set(Role::Active, "request"));
        assert!(!k.set(Role::Active, "request"), "already active");
        assert!(k.set(Role::Standby, "request"));
        let s = k.status(7, true);
        assert_eq!(
            (s.role, s.changes, s.set_by.as_str(), s.held),
            (Role::Standby, 2, "request", 7)
        );
    }
}
