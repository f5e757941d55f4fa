//! Counters carried over a restart, an upgrade or a crash, so that
//! `mcrctl stats` goes on counting rather than starting from zero.
//!
//! Each mcrd hands the next three things (in systemd's store, or directly
//! with `mcrctl restart`):
//!
//! - `stats-workers`: the workers' statistics memory;
//! - `stats-kernel`: the eBPF data path's counter map, when it ran;
//! - `stats-slots`: a small document that says which rule, output and
//!   input each slot of those counted, in what layout, and what this mcrd
//!   had itself carried over from the one before it.
//!
//! The next mcrd reads the final counts of each rule, output and input it
//! still has (by the rule's name and the output's or input's text), once
//! its own workers run and its own program has taken over the interfaces,
//! and adds them to its own counts from then on. The counts of a rule that
//! is gone are let go with it. The document is rewritten whenever slots
//! change, so a crash finds it current.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;

use mcr_core::snapshot::SlottedRule;
use mcr_core::stats::{HEALTH_INPUTS, StatsLayout};
use mcr_sys::bpf::MappedCounters;
use mcr_sys::shm::SharedCounters;
use serde::{Deserialize, Serialize};

/// The name the workers' statistics memory is handed over under.
pub const WORKERS: &str = "stats-workers";
/// The name the eBPF data path's counter map is handed over under.
pub const KERNEL: &str = "stats-kernel";
/// The name the slot document is handed over under.
pub const SLOTS: &str = "stats-slots";

/// The document's format; another is refused with what it is.
const FORMAT: u32 = 1;

/// Which slots counted what, and what was carried already.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    workers: usize,
    rule_slots: usize,
    output_slots: usize,
    rules: Vec<Slots>,
    /// Counts carried from before, by index: the workers' and the eBPF
    /// data path's.
    carried_workers: Vec<(usize, u64)>,
    carried_kernel: Vec<(usize, u64)>,
}

/// One rule's slots.
#[derive(Debug, Serialize, Deserialize)]
struct Slots {
    name: String,
    slot: u32,
    /// Each output's text and slot.
    outputs: Vec<(String, u32)>,
    /// Each input's text, in order (the health's places).
    inputs: Vec<String>,
    /// With several inputs, each input's slot.
    input_slots: Vec<u32>,
}

impl Manifest {
    fn layout(&self) -> StatsLayout {
        StatsLayout {
            workers: self.workers,
            rule_slots: self.rule_slots,
            output_slots: self.output_slots,
        }
    }
}

/// Counts carried over from before, by counter index, added to what this
/// process's counters hold.
#[derive(Debug, Default)]
pub struct Carried {
    workers: HashMap<usize, u64>,
    kernel: HashMap<usize, u64>,
}

impl Carried {
    /// Added to the workers' counter `i`.
    pub fn workers(&self, i: usize) -> u64 {
        self.workers.get(&i).copied().unwrap_or(0)
    }

    /// Added to the eBPF data path's counter `i`.
    pub fn kernel(&self, i: usize) -> u64 {
        self.kernel.get(&i).copied().unwrap_or(0)
    }

    /// True when nothing was carried over (or all of it let go).
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty() && self.kernel.is_empty()
    }

    /// Lets go of what was carried at these indices (slots given anew).
    pub fn forget(&mut self, indices: impl IntoIterator<Item = usize>) {
        for i in indices {
            self.workers.remove(&i);
            self.kernel.remove(&i);
        }
    }
}

/// The slot document as this process writes it.
pub fn manifest(layout: &StatsLayout, rules: &[SlottedRule], carried: &Carried) -> Vec<u8> {
    let nonzero = |m: &HashMap<usize, u64>| {
        let mut v: Vec<(usize, u64)> = m.iter().filter(|(_, v)| **v > 0).map(|(i, v)| (*i, *v)).collect();
        v.sort_unstable();
        v
    };
    let m = Manifest {
        format: FORMAT,
        workers: layout.workers,
        rule_slots: layout.rule_slots,
        output_slots: layout.output_slots,
        rules: rules
            .iter()
            .map(|r| Slots {
                name: r.rule.name.clone(),
                slot: r.slot,
                outputs: r
                    .rule
                    .outputs
                    .iter()
                    .map(ToString::to_string)
                    .zip(r.output_slots.iter().copied())
                    .collect(),
                inputs: r.rule.inputs().map(ToString::to_string).collect(),
                input_slots: r.input_slots.clone(),
            })
            .collect(),
        carried_workers: nonzero(&carried.workers),
        carried_kernel: nonzero(&carried.kernel),
    };
    serde_json::to_vec(&m).unwrap_or_default()
}

/// This process's slot document, in memory that outlives it.
#[derive(Debug)]
pub struct Note {
    file: File,
}

impl Note {
    /// A new, empty document.
    pub fn create() -> std::io::Result<Note> {
        Ok(Note {
            file: File::from(mcr_sys::shm::memfd("mcrd-stats-slots")?),
        })
    }

    /// Writes `doc` in place of what it held.
    pub fn write(&self, doc: &[u8]) -> std::io::Result<()> {
        self.file.write_all_at(doc, 0)?;
        self.file.set_len(doc.len() as u64)
    }
}

impl AsFd for Note {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// What the mcrd before left of its counters.
#[derive(Debug)]
pub struct Before {
    manifest: Manifest,
    workers: SharedCounters,
    kernel: Option<MappedCounters>,
    slots: File,
}

/// What was carried over.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CarriedOver {
    /// Rules whose counts go on.
    pub rules: usize,
    /// Outputs and inputs whose counts go on.
    pub lines: usize,
    /// Rules of the mcrd before that this one does not have.
    pub gone: usize,
}

impl Before {
    /// Opens what was handed over under [`WORKERS`], [`KERNEL`] and
    /// [`SLOTS`]; none when nothing was; an error saying why when it
    /// cannot be read (the counters then start from zero).
    pub fn open(mut fds: Vec<(String, OwnedFd)>) -> Result<Option<Before>, String> {
        if fds.is_empty() {
            return Ok(None);
        }
        let mut take = |name: &str| fds.iter().position(|(n, _)| n == name).map(|i| fds.swap_remove(i).1);
        let (slots, workers, kernel) = (take(SLOTS), take(WORKERS), take(KERNEL));
        let slots = File::from(slots.ok_or("the slot document (`stats-slots`) is missing")?);
        let doc = read_all(&slots).map_err(|e| format!("reading `{SLOTS}`: {e}"))?;
        let manifest: Manifest =
            serde_json::from_slice(&doc).map_err(|e| format!("`{SLOTS}` is not understood: {e}"))?;
        if manifest.format != FORMAT {
            return Err(format!(
                "`{SLOTS}` is in format {}, this mcrd reads format {FORMAT}",
                manifest.format
            ));
        }
        let layout = manifest.layout();
        let workers = workers.ok_or("the workers' statistics memory (`stats-workers`) is missing")?;
        let workers = SharedCounters::open(workers, layout.len()).map_err(|e| format!("`{WORKERS}`: {e}"))?;
        let kernel = match kernel {
            Some(fd) => {
                let k = MappedCounters::open(fd).map_err(|e| format!("`{KERNEL}`: {e}"))?;
                if k.len() < layout.datapath_len() {
                    return Err(format!(
                        "`{KERNEL}` holds {} counters, {} expected",
                        k.len(),
                        layout.datapath_len()
                    ));
                }
                Some(k)
            }
            None => None,
        };
        Ok(Some(Before {
            manifest,
            workers,
            kernel,
            slots,
        }))
    }

    /// What is handed over still, under its names, until it is carried
    /// (a crash before that finds it again).
    pub fn held(&self) -> Vec<(&'static str, BorrowedFd<'_>)> {
        let mut v = vec![(SLOTS, self.slots.as_fd()), (WORKERS, self.workers.as_fd())];
        if let Some(k) = &self.kernel {
            v.push((KERNEL, k.as_fd()));
        }
        v
    }

    /// Adds the final counts of every rule, output and input that `rules`
    /// still has to `into`, in `layout` (this process's).
    pub fn carry(&self, layout: &StatsLayout, rules: &[SlottedRule], into: &mut Carried) -> CarriedOver {
        let old = self.manifest.layout();
        let old_carried_w: HashMap<usize, u64> = self.manifest.carried_workers.iter().copied().collect();
        let old_carried_k: HashMap<usize, u64> = self.manifest.carried_kernel.iter().copied().collect();
        let workers = |i: usize| self.workers.get(i) + old_carried_w.get(&i).copied().unwrap_or(0);
        let kernel =
            |i: usize| self.kernel.as_ref().map_or(0, |k| k.get(i)) + old_carried_k.get(&i).copied().unwrap_or(0);
        let new_workers = layout.workers.max(1);
        let mut add =
            |olds: &mut dyn Iterator<Item = usize>, news: &mut dyn Iterator<Item = usize>, kernel_block: bool| {
                for (o, n) in olds.zip(news) {
                    let v = if kernel_block { kernel(o) } else { workers(o) };
                    if v > 0 {
                        let to = if kernel_block {
                            &mut into.kernel
                        } else {
                            &mut into.workers
                        };
                        *to.entry(n).or_default() += v;
                    }
                }
            };
        // The workers' own counters, worker by worker (a worker beyond
        // this mcrd's count adds to the one it would be now), and the eBPF
        // data path's own.
        for w in 0..old.workers {
            add(&mut old.worker_sums(w), &mut layout.worker_sums(w % new_workers), false);
        }
        if self.kernel.is_some() || !old_carried_k.is_empty() {
            add(&mut old.worker_sums(0), &mut layout.worker_sums(0), true);
        }
        let by_name: HashMap<&str, &SlottedRule> = rules.iter().map(|r| (r.rule.name.as_str(), r)).collect();
        let mut out = CarriedOver::default();
        for was in &self.manifest.rules {
            let Some(now) = by_name.get(was.name.as_str()) else {
                out.gone += 1;
                continue;
            };
            out.rules += 1;
            let outputs: Vec<String> = now.rule.outputs.iter().map(ToString::to_string).collect();
            let inputs: Vec<String> = now.rule.inputs().map(ToString::to_string).collect();
            let lines: Vec<(u32, u32)> =
                was.outputs
                    .iter()
                    .filter_map(|(text, s)| Some((*s, *now.output_slots.get(outputs.iter().position(|o| o == text)?)?)))
                    .chain(was.inputs.iter().zip(&was.input_slots).filter_map(|(text, s)| {
                        Some((*s, *now.input_slots.get(inputs.iter().position(|i| i == text)?)?))
                    }))
                    // An arbitrated rule's line slots, after its inputs'.
                    .chain(
                        was.inputs
                            .iter()
                            .zip(was.input_slots.iter().skip(was.inputs.len()))
                            .filter_map(|(text, s)| {
                                let k = inputs.iter().position(|i| i == text)?;
                                Some((*s, *now.input_slots.get(inputs.len() + k)?))
                            }),
                    )
                    .collect();
            let health: Vec<(usize, usize)> = was
                .inputs
                .iter()
                .enumerate()
                .take(HEALTH_INPUTS)
                .filter_map(|(i, text)| {
                    Some((i, inputs.iter().position(|x| x == text).filter(|j| *j < HEALTH_INPUTS)?))
                })
                .collect();
            out.lines += lines.len();
            for w in 0..old.workers {
                let nw = w % new_workers;
                add(
                    &mut old.rule_sums(w, was.slot),
                    &mut layout.rule_sums(nw, now.slot),
                    false,
                );
                for &(o, n) in &lines {
                    add(&mut old.output_sums(w, o), &mut layout.output_sums(nw, n), false);
                }
                for &(o, n) in &health {
                    add(
                        &mut old.health_sums(w, was.slot, o),
                        &mut layout.health_sums(nw, now.slot, n),
                        false,
                    );
                }
            }
            add(
                &mut old.rule_sums(0, was.slot),
                &mut layout.rule_sums(0, now.slot),
                true,
            );
            for &(o, n) in &lines {
                add(&mut old.output_sums(0, o), &mut layout.output_sums(0, n), true);
            }
        }
        out
    }
}

/// What of the counters must outlive this process, as named in the
/// store: the mcrd before's until they are carried over (`before`), then
/// this one's.
pub fn held<'a>(
    before: Option<&'a Before>,
    slots: Option<&'a Note>,
    workers: &'a SharedCounters,
    kernel: Option<&'a MappedCounters>,
) -> Vec<super::handover::Held<'a>> {
    if let Some(b) = before {
        // Named as the store holds them already.
        return b
            .held()
            .into_iter()
            .map(|(n, fd)| (n.to_string(), u64::MAX, fd))
            .collect();
    }
    let Some(note) = slots else { return Vec::new() };
    let mut v = vec![(SLOTS, note.as_fd()), (WORKERS, workers.as_fd())];
    if let Some(k) = kernel {
        v.push((KERNEL, k.as_fd()));
    }
    v.into_iter()
        .map(|(n, fd)| (n.to_string(), super::handover::inode(fd), fd))
        .collect()
}

fn read_all(f: &File) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = f.read_at(&mut chunk, buf.len() as u64)?;
        if n == 0 {
            return Ok(buf);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcr_core::stats::{OutputCounter, RuleCounter, WorkerCounter};

    fn slotted(name: &str, slot: u32, outputs: &[(&str, u32)]) -> SlottedRule {
        SlottedRule {
            rule: mcr_core::rule::Rule::new(
                name,
                "veth0:239.1.1.1:5000".parse().expect("input"),
                outputs.iter().map(|(o, _)| o.parse().expect("output")).collect(),
            ),
            slot,
            output_slots: outputs.iter().map(|(_, s)| *s).collect(),
            input_slots: Vec::new(),
            forced_input: None,
        }
    }

    fn handed(layout: &StatsLayout, rules: &[SlottedRule], carried: &Carried, shm: &SharedCounters) -> Before {
        let note = Note::create().expect("memfd");
        note.write(&manifest(layout, rules, carried)).expect("write");
        let fds = vec![
            (SLOTS.to_string(), note.as_fd().try_clone_to_owned().expect("dup")),
            (WORKERS.to_string(), shm.as_fd().try_clone_to_owned().expect("dup")),
        ];
        Before::open(fds).expect("opens").expect("something")
    }

    #[test]
    fn counts_follow_rules_and_outputs_to_their_new_slots() {
        let old = StatsLayout {
            workers: 2,
            rule_slots: 8,
            output_slots: 16,
        };
        let shm = SharedCounters::create("t", old.len()).expect("memfd");
        let a = slotted("a", 1, &[("veth1:239.2.2.2:5000", 3), ("veth2:239.2.2.2:5000", 4)]);
        let gone = slotted("gone", 2, &[("veth1:239.9.9.9:5000", 5)]);
        shm.set(old.rule(0, 1, RuleCounter::Packets), 10);
        shm.set(old.rule(1, 1, RuleCounter::Packets), 5);
        shm.set(old.rule(1, 1, RuleCounter::Active), 2);
        shm.set(old.output(0, 4, OutputCounter::Packets), 7);
        shm.set(old.rule(0, 2, RuleCounter::Packets), 99);
        shm.set(old.worker(1, WorkerCounter::RxFrames), 30);
        shm.set(old.worker(1, WorkerCounter::Standby), 1);
        let mut before_that = Carried::default();
        before_that.workers.insert(old.rule(0, 1, RuleCounter::Packets), 1000);
        let before = handed(&old, &[a, gone], &before_that, &shm);

        // The new mcrd: one worker, other slots, and output 2 only.
        let new = StatsLayout {
            workers: 1,
            rule_slots: 8,
            output_slots: 16,
        };
        let a_now = slotted("a", 6, &[("veth2:239.2.2.2:5000", 9)]);
        let mut carried = Carried::default();
        let over = before.carry(&new, std::slice::from_ref(&a_now), &mut carried);
        assert_eq!(
            over,
            CarriedOver {
                rules: 1,
                lines: 1,
                gone: 1
            }
        );
        assert_eq!(carried.workers(new.rule(0, 6, RuleCounter::Packets)), 1015);
        assert_eq!(carried.workers(new.rule(0, 6, RuleCounter::Active)), 0, "a value");
        assert_eq!(carried.workers(new.output(0, 9, OutputCounter::Packets)), 7);
        assert_eq!(carried.workers(new.worker(0, WorkerCounter::RxFrames)), 30);
        assert_eq!(carried.workers(new.worker(0, WorkerCounter::Standby)), 0, "a value");
        assert!(carried.kernel.is_empty());
        // What was carried is handed on in turn.
        let doc: Manifest = serde_json::from_slice(&manifest(&new, &[a_now], &carried)).expect("json");
        assert!(
            doc.carried_workers
                .contains(&(new.rule(0, 6, RuleCounter::Packets), 1015))
        );
        carried.forget(new.rule_sums(0, 6));
        assert_eq!(carried.workers(new.rule(0, 6, RuleCounter::Packets)), 0);
    }

    #[test]
    fn what_cannot_be_read_is_refused_with_the_reason() {
        assert!(Before::open(Vec::new()).expect("nothing").is_none());
        let note = Note::create().expect("memfd");
        note.write(b"{\"format\": 9}").expect("write");
        let e =
            Before::open(vec![(SLOTS.into(), note.as_fd().try_clone_to_owned().expect("dup"))]).expect_err("refused");
        assert!(e.contains("not understood"), "{e}");
        let shm = SharedCounters::create("t", 8).expect("memfd");
        let e =
            Before::open(vec![(WORKERS.into(), shm.as_fd().try_clone_to_owned().expect("dup"))]).expect_err("refused");
        assert!(e.contains("slot document"), "{e}");
        // A document that says more counters than the memory holds.
        let l = StatsLayout::new(2);
        note.write(&manifest(&l, &[], &Carried::default())).expect("write");
        let e = Before::open(vec![
            (SLOTS.into(), note.as_fd().try_clone_to_owned().expect("dup")),
            (WORKERS.into(), shm.as_fd().try_clone_to_owned().expect("dup")),
        ])
        .expect_err("refused");
        assert!(e.contains("stats-workers"), "{e}");
    }
}
