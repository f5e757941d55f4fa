//! Restart and handover as a component: what passes from one mcrd to the
//! next, whether systemd restarts it or `mcrctl restart` runs a program in
//! its place.
//!
//! It owns:
//! - systemd's file-descriptor store, kept equal to what must outlive this
//!   process ([`handover::FdStore`]);
//! - the membership sockets the mcrd before held, until this one holds
//!   every membership itself;
//! - the program `mcrctl restart` asked for, until the answer is out;
//! - the slot document that tells the next mcrd which slot counts what
//!   ([`carry::Note`]), and the counters the mcrd before left, until they
//!   are carried over ([`carry::Before`]).
//!
//! It takes from the supervisor what the other components hold that must
//! outlive the process (the eBPF links, the membership and port sockets)
//! and where the counters are; it offers the whole list to hand on (to
//! systemd's store, or to the program run in this process's place), the
//! carry of the counts, and what to say about each step. It never touches
//! the plane: the rules it reads are the plane's, passed in.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use mcr_core::plane::machine::Level;
use mcr_core::snapshot::SlottedRule;
use mcr_core::stats::StatsLayout;

use super::carry::{self, Carried};
use super::handover::{self, Held};
use super::stats::Counters;

/// What passes from one mcrd to the next.
#[derive(Debug)]
pub struct Continuity {
    store: handover::FdStore,
    /// The membership sockets of the mcrd before.
    held_over: Vec<OwnedFd>,
    /// The program `mcrctl restart` asked for.
    restart: Option<PathBuf>,
    /// Which slots count what, for the next mcrd (none if the memory for
    /// it could not be had).
    slots: Option<carry::Note>,
    /// The counters the mcrd before left, until they are carried over.
    before: Option<carry::Before>,
}

impl Continuity {
    /// Takes what the mcrd before left in `inherited` (the names in the
    /// store, its membership sockets, its counters) and makes the slot
    /// document; with what to say about it.
    pub fn take_over(inherited: &mut handover::Inherited) -> (Continuity, Vec<(Level, String)>) {
        let mut notes = Vec::new();
        let slots = carry::Note::create()
            .map_err(|e| {
                notes.push((
                    Level::Warn,
                    format!("no memory for the slot document ({e}): a restart will start the counters from zero"),
                ))
            })
            .ok();
        let restarted = inherited.source.is_some();
        let before = match carry::Before::open(std::mem::take(&mut inherited.stats)) {
            Ok(None) if restarted => {
                notes.push((
                    Level::Warn,
                    "restart: the mcrd before handed over no counters (a build older than this one): they start from zero"
                        .into(),
                ));
                None
            }
            Ok(b) => b,
            Err(why) => {
                notes.push((
                    Level::Warn,
                    format!("restart: the counters of the mcrd before could not be read ({why}); they start from zero"),
                ));
                None
            }
        };
        let c = Continuity {
            store: handover::FdStore::new(&inherited.names),
            held_over: std::mem::take(&mut inherited.joins),
            restart: None,
            slots,
            before,
        };
        (c, notes)
    }

    /// Marks this process to run `binary` in its place once the answer to
    /// `mcrctl restart` is out.
    pub fn ask_restart(&mut self, binary: PathBuf) {
        self.restart = Some(binary);
    }

    /// Whether a restart was asked for.
    pub fn restart_asked(&self) -> bool {
        self.restart.is_some()
    }

    /// The program a restart was asked for, taken.
    pub fn take_restart(&mut self) -> Option<PathBuf> {
        self.restart.take()
    }

    /// Lets go of the membership sockets of the mcrd before, once this
    /// one holds every membership itself; how many there were.
    pub fn let_go_held_over(&mut self) -> usize {
        std::mem::take(&mut self.held_over).len()
    }

    /// Adds what the mcrd before counted to this one's counts (`carried`),
    /// by the rules in their slots (`rules`), once its counts are final;
    /// what to say about it, if there was anything to carry.
    pub fn carry_counts(
        &mut self,
        layout: &StatsLayout,
        rules: &[SlottedRule],
        carried: &mut Carried,
    ) -> Option<String> {
        let before = self.before.take()?;
        let over = before.carry(layout, rules, carried);
        let mut m = format!(
            "restart: counters carried over: {} rule(s), {} output(s) and input(s) go on counting from where the mcrd before left them",
            over.rules, over.lines
        );
        if over.gone > 0 {
            m.push_str(&format!("; {} rule(s) this mcrd does not have were let go", over.gone));
        }
        Some(m)
    }

    /// Writes which slots count what (and what was carried over) for the
    /// next mcrd. If that fails, says so, and writes no more: a restart
    /// then starts the counters from zero.
    pub fn write_slots(&mut self, layout: &StatsLayout, rules: &[SlottedRule], carried: &Carried) -> Option<String> {
        let note = self.slots.as_ref()?;
        let doc = carry::manifest(layout, rules, carried);
        let e = note.write(&doc).err()?;
        self.slots = None;
        Some(format!(
            "writing the slot document: {e}; a restart will start the counters from zero"
        ))
    }

    /// Everything that must outlive this process: `others` (what the other
    /// components hold), the membership sockets of the mcrd before, and
    /// the counters (the mcrd before's until they are carried over, then
    /// this one's, in `counters`).
    pub fn outliving<'a>(
        &'a self,
        others: impl IntoIterator<Item = Held<'a>>,
        counters: Counters<'a>,
    ) -> Vec<Held<'a>> {
        let held_over = self.held_over.iter().map(|fd| handover::socket("join", fd.as_fd()));
        others
            .into_iter()
            .chain(held_over)
            .chain(carry::held(
                self.before.as_ref(),
                self.slots.as_ref(),
                counters.shm,
                counters.kernel,
            ))
            .collect()
    }

    /// Whether systemd's store is kept (under a service manager only);
    /// else [`Continuity::keep_store`] does nothing, and what outlives
    /// this process need not be listed for it.
    pub fn keeps_store(&self) -> bool {
        self.store.is_on()
    }

    /// Keeps systemd's store equal to [`Continuity::outliving`] of
    /// `others` and `counters`; returns what failed.
    pub fn keep_store<'a>(
        &mut self,
        others: impl IntoIterator<Item = Held<'a>>,
        counters: Counters<'a>,
    ) -> Vec<String> {
        if !self.store.is_on() {
            return Vec::new();
        }
        let Continuity {
            store,
            held_over,
            before,
            slots,
            ..
        } = self;
        let mut held: Vec<Held<'_>> = held_over
            .iter()
            .map(|fd| handover::socket("join", fd.as_fd()))
            .collect();
        held.extend(carry::held(
            before.as_ref(),
            slots.as_ref(),
            counters.shm,
            counters.kernel,
        ));
        // (One by one: each is taken down to the borrow of `self`.)
        for h in others {
            held.push(h);
        }
        store.sync(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use mcr_sys::shm::SharedCounters;

    fn fresh() -> Continuity {
        let mut inherited = handover::Inherited::default();
        let (c, notes) = Continuity::take_over(&mut inherited);
        assert!(notes.is_empty(), "a first start has nothing to say: {notes:?}");
        c
    }

    #[test]
    fn a_first_start_hands_on_its_counters_and_the_slot_document() {
        let c = fresh();
        let shm = SharedCounters::create("mcrd-test-continuity", 64).expect("memory");
        let counters = Counters {
            shm: &shm,
            kernel: None,
        };
        let names: Vec<String> = c.outliving([], counters).into_iter().map(|h| h.0).collect();
        assert_eq!(
            names,
            [carry::SLOTS, carry::WORKERS],
            "the document and the workers' counters"
        );
    }

    #[test]
    fn a_restart_is_asked_once_and_taken_once() {
        let mut c = fresh();
        assert!(!c.restart_asked());
        c.ask_restart(PathBuf::from("/usr/bin/mcrd"));
        assert!(c.restart_asked());
        assert_eq!(c.take_restart(), Some(PathBuf::from("/usr/bin/mcrd")));
        assert!(!c.restart_asked() && c.take_restart().is_none());
    }

    #[test]
    fn the_sockets_of_the_mcrd_before_are_handed_on_until_let_go() {
        let mut inherited = handover::Inherited::default();
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket");
        inherited.joins.push(OwnedFd::from(socket));
        let (mut c, _) = Continuity::take_over(&mut inherited);
        let shm = SharedCounters::create("mcrd-test-continuity", 64).expect("memory");
        let counters = || Counters {
            shm: &shm,
            kernel: None,
        };
        let joins = |c: &Continuity| {
            c.outliving([], counters())
                .iter()
                .filter(|h| h.0.starts_with("join-"))
                .count()
        };
        assert_eq!(joins(&c), 1);
        assert_eq!(c.let_go_held_over(), 1);
        assert_eq!(joins(&c), 0);
    }

    #[test]
    fn with_nothing_before_there_is_nothing_to_carry() {
        let mut c = fresh();
        let layout = StatsLayout::new(1);
        let mut carried = Carried::default();
        assert_eq!(c.carry_counts(&layout, &[], &mut carried), None);
        assert_eq!(c.write_slots(&layout, &[], &carried), None, "the document is written");
    }
}
