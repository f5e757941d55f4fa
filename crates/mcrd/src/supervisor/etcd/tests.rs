//! The follower against a real etcd in a test namespace.
//!
//! The follower's thread is started from a thread that entered the
//! namespace, and inherits it. Waits are generous; no timing is asserted.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use mcr_testbed::etcd::Etcd;
use mcr_testbed::{Ns, TempDir, Testbed};

use super::{Changes, EtcdError, Follower, Kvs, StoreSettings, StoreUpdate, follow};

/// How long any one expected update may take.
pub(super) const PATIENCE: Duration = Duration::from_secs(60);
pub(super) const PREFIX: &str = "/mcr/rules/";

/// A namespace with etcd in it; all removed on drop.
struct Bed {
    etcd: Etcd,
    ns: Ns,
    _dir: TempDir,
    _bed: Testbed,
}

fn bed(tag: &str) -> Bed {
    let mut testbed = Testbed::new(tag).expect("test bed");
    let ns = testbed.ns("etcd").expect("namespace");
    let dir = TempDir::new(&format!("etcd-{tag}")).expect("temp dir");
    let etcd = Etcd::start(&ns, dir.path()).expect("etcd");
    Bed {
        etcd,
        ns,
        _dir: dir,
        _bed: testbed,
    }
}

/// A follower whose updates arrive on a channel; a model of the prefix
/// built from them.
pub(super) struct Watcher {
    follower: Option<Follower>,
    pub(super) updates: Receiver<StoreUpdate>,
    model: BTreeMap<String, Vec<u8>>,
}

pub(super) fn settings(endpoints: &[&str]) -> StoreSettings {
    StoreSettings::new(endpoints.iter().map(|e| e.to_string()).collect(), PREFIX)
}

/// Starts the follower inside `ns`; `deliver` sees each update once it is
/// sent to the channel (and may hold the follower there for a while).
pub(super) fn start(
    ns: &Ns,
    settings: StoreSettings,
    mut deliver: impl FnMut(&StoreUpdate) + Send + 'static,
) -> Watcher {
    let (tx, updates) = channel();
    let name = ns.name().to_string();
    let follower = std::thread::spawn(move || {
        mcr_sys::netns::enter(&name).expect("enter the namespace");
        follow(settings.prepare().expect("settings"), move |u| {
            let _ = tx.send(u.clone());
            deliver(&u);
        })
        .expect("follow")
    })
    .join()
    .expect("starting thread");
    Watcher {
        follower: Some(follower),
        updates,
        model: BTreeMap::new(),
    }
}

fn watch(bed: &Bed) -> Watcher {
    start(&bed.ns, settings(&[&bed.etcd.endpoint()]), |_| {})
}

impl Watcher {
    /// The next update, applied to the model.
    pub(super) fn next(&mut self) -> StoreUpdate {
        let u = match self.updates.recv_timeout(PATIENCE) {
            Ok(u) => u,
            Err(e) => panic!("no update within {PATIENCE:?}: {e}"),
        };
        match &u {
            StoreUpdate::Whole { kvs, .. } => self.model = kvs.iter().cloned().collect(),
            StoreUpdate::Changes { changes, .. } => {
                for (k, v) in changes {
                    match v {
                        Some(v) => self.model.insert(k.clone(), v.clone()),
                        None => self.model.remove(k),
                    };
                }
            }
            StoreUpdate::Unreachable { .. } => {}
        }
        u
    }

    pub(super) fn whole(&mut self) -> (i64, Kvs) {
        match self.next() {
            StoreUpdate::Whole { revision, kvs } => (revision, kvs),
            other => panic!("expected Whole, got {other:?}"),
        }
    }

    pub(super) fn changes(&mut self) -> (i64, Changes) {
        match self.next() {
            StoreUpdate::Changes { revision, changes } => (revision, changes),
            other => panic!("expected Changes, got {other:?}"),
        }
    }

    /// Skips `Unreachable` updates (returning their reasons) up to the next
    /// `Whole`.
    fn unreachable_until_whole(&mut self) -> Vec<String> {
        let mut why = Vec::new();
        loop {
            match self.next() {
                StoreUpdate::Unreachable { why: w, .. } => why.push(w),
                StoreUpdate::Whole { .. } => return why,
                other => panic!("expected Unreachable or Whole, got {other:?}"),
            }
        }
    }

    /// Asserts that the follower's thread has ended: the sender its
    /// delivery held is gone (once what it sent before is read).
    fn ended(&self) {
        loop {
            match self.updates.recv_timeout(PATIENCE) {
                Ok(_) => continue,
                Err(e) => return assert_eq!(e, RecvTimeoutError::Disconnected),
            }
        }
    }

    /// Drops the follower; how long that took.
    fn stop(&mut self) -> Duration {
        let start = Instant::now();
        drop(self.follower.take());
        start.elapsed()
    }
}

fn value(i: usize) -> Vec<u8> {
    format!("{{\"rule\":{i},\"pad\":\"{}\"}}", "x".repeat(280)).into_bytes()
}

fn model(pairs: &[(String, Vec<u8>)]) -> BTreeMap<String, Vec<u8>> {
    pairs.iter().cloned().collect()
}

#[test]
fn the_first_update_is_every_key_under_the_prefix() {
    let bed = bed("etcd-whole");
    let keys: Vec<(String, Vec<u8>)> = (0..1200).map(|i| (format!("rule-{i:04}"), value(i))).collect();
    let full: Vec<(String, Vec<u8>)> = keys.iter().map(|(k, v)| (format!("{PREFIX}{k}"), v.clone())).collect();
    bed.etcd.txn_put(&full).expect("put");
    // Neighbours of the prefix, before and after it.
    for k in ["/mcr/rules", "/mcr/rules.", "/mcr/rules0", "/mcr/rulez/a", "/other"] {
        bed.etcd.put(k, "outside").expect("put");
    }
    let revision = bed.etcd.revision().expect("revision");
    let mut w = watch(&bed);
    let (at, kvs) = w.whole();
    assert_eq!(at, revision);
    assert_eq!(kvs.len(), keys.len());
    // In key order, every value whole.
    assert!(kvs == keys, "the keys differ from those written");
}

#[test]
fn a_transaction_is_one_batch_and_a_delete_is_none() {
    let bed = bed("etcd-batch");
    bed.etcd.put(format!("{PREFIX}a"), "1").expect("put");
    let mut w = watch(&bed);
    let (_, kvs) = w.whole();
    assert_eq!(kvs, [("a".to_string(), b"1".to_vec())]);

    let batch: Vec<(String, Vec<u8>)> = (0..100).map(|i| (format!("{PREFIX}t{i:03}"), value(i))).collect();
    let revision = bed.etcd.txn_put(&batch).expect("txn");
    let (at, changes) = w.changes();
    assert_eq!(at, revision);
    let want: Vec<_> = (0..100).map(|i| (format!("t{i:03}"), Some(value(i)))).collect();
    assert!(changes == want, "the batch differs: {} changes", changes.len());

    let revision = bed.etcd.delete(format!("{PREFIX}a")).expect("delete");
    assert_eq!(w.changes(), (revision, vec![("a".to_string(), None)]));
    let revision = bed.etcd.put(format!("{PREFIX}t000"), "").expect("put empty");
    assert_eq!(w.changes(), (revision, vec![("t000".to_string(), Some(vec![]))]));
    assert_eq!(w.model.len(), 100);
}

#[test]
fn keys_outside_the_prefix_or_not_utf8_are_never_delivered() {
    let bed = bed("etcd-outside");
    let mut w = watch(&bed);
    assert_eq!(w.whole().1, []);
    for k in ["/mcr/rules", "/mcr/rules0", "/mcr/rulez", "/other/x"] {
        bed.etcd.put(k, "outside").expect("put");
    }
    bed.etcd.put(b"/mcr/rules/\xff\xfe", "not UTF-8").expect("put");
    // Updates come in order: the first one delivered is this one.
    let revision = bed.etcd.put(format!("{PREFIX}inside"), "1").expect("put");
    assert_eq!(
        w.changes(),
        (revision, vec![("inside".to_string(), Some(b"1".to_vec()))])
    );
    // Nor in a Whole.
    let mut again = watch(&bed);
    assert_eq!(again.whole().1, [("inside".to_string(), b"1".to_vec())]);
}

#[test]
fn a_watch_behind_compaction_ends_in_a_new_whole() {
    let bed = bed("etcd-compact");
    bed.etcd.put(format!("{PREFIX}a"), "1").expect("put");
    bed.etcd.put(format!("{PREFIX}b"), "1").expect("put");
    // The follower is held in its first delivery, between reading the
    // prefix and opening its watch, while the history it would watch from
    // is changed and compacted away.
    let (release, held) = channel::<()>();
    let mut first = true;
    let mut w = start(&bed.ns, settings(&[&bed.etcd.endpoint()]), move |_| {
        if std::mem::take(&mut first) {
            let _ = held.recv_timeout(PATIENCE);
        }
    });
    let (read_at, _) = w.whole();
    bed.etcd.delete(format!("{PREFIX}a")).expect("delete");
    bed.etcd.put(format!("{PREFIX}c"), "2").expect("put");
    let now = bed.etcd.revision().expect("revision");
    assert!(now > read_at + 1);
    bed.etcd.compact(now).expect("compact");
    release.send(()).expect("release");

    let (at, kvs) = w.whole();
    assert_eq!(at, now);
    assert_eq!(
        model(&kvs),
        BTreeMap::from([("b".into(), b"1".to_vec()), ("c".into(), b"2".to_vec())])
    );

    // A watch that keeps up is not disturbed by compaction.
    let revision = bed.etcd.put(format!("{PREFIX}d"), "3").expect("put");
    assert_eq!(w.changes(), (revision, vec![("d".to_string(), Some(b"3".to_vec()))]));
    bed.etcd.compact(revision).expect("compact");
    let revision = bed.etcd.put(format!("{PREFIX}e"), "4").expect("put");
    assert_eq!(w.changes(), (revision, vec![("e".to_string(), Some(b"4".to_vec()))]));
}

#[test]
fn a_stopped_etcd_is_unreachable_and_a_restarted_one_is_read_whole() {
    let mut bed = bed("etcd-restart");
    bed.etcd.put(format!("{PREFIX}stays"), "1").expect("put");
    bed.etcd.put(format!("{PREFIX}goes"), "1").expect("put");
    // Held at its first Unreachable while etcd comes back and is changed.
    let (release, held) = channel::<()>();
    let mut first = true;
    let mut w = start(&bed.ns, settings(&[&bed.etcd.endpoint()]), move |u| {
        if matches!(u, StoreUpdate::Unreachable { .. }) && std::mem::take(&mut first) {
            let _ = held.recv_timeout(PATIENCE);
        }
    });
    w.whole();
    bed.etcd.stop().expect("stop");
    let why = match w.next() {
        StoreUpdate::Unreachable { why, .. } => why,
        other => panic!("expected Unreachable, got {other:?}"),
    };
    assert!(why.starts_with("http://127.0.0.1:2379: "), "{why}");

    bed.etcd.restart().expect("restart");
    bed.etcd.delete(format!("{PREFIX}goes")).expect("delete");
    bed.etcd.put(format!("{PREFIX}new"), "2").expect("put");
    let now = bed.etcd.revision().expect("revision");
    release.send(()).expect("release");
    let more = w.unreachable_until_whole();
    eprintln!("unreachable: {why:?}, then {more:?}");
    assert_eq!(
        w.model,
        BTreeMap::from([("new".into(), b"2".to_vec()), ("stays".into(), b"1".to_vec())]),
        "after {why:?} and {more:?}"
    );
    let revision = bed.etcd.put(format!("{PREFIX}later"), "3").expect("put");
    assert!(revision > now);
    assert_eq!(
        w.changes(),
        (revision, vec![("later".to_string(), Some(b"3".to_vec()))])
    );
}

#[test]
fn refused_connections_say_where_and_the_follower_keeps_trying() {
    let mut bed = bed("etcd-refused");
    bed.etcd.put(format!("{PREFIX}a"), "1").expect("put");
    bed.etcd.stop().expect("stop");
    let mut w = watch(&bed);
    let why = match w.next() {
        StoreUpdate::Unreachable { why, .. } => why,
        other => panic!("expected Unreachable, got {other:?}"),
    };
    assert!(
        why.contains("http://127.0.0.1:2379: cannot connect to 127.0.0.1:2379: Connection refused"),
        "{why}"
    );
    bed.etcd.restart().expect("restart");
    // The same reason is not repeated while the follower retries.
    let more = w.unreachable_until_whole();
    eprintln!("unreachable: {why:?}, then {more:?}");
    assert!(more.iter().all(|m| *m != why), "{more:?}");
    assert_eq!(w.model, BTreeMap::from([("a".into(), b"1".to_vec())]));
}

#[test]
fn the_next_endpoint_is_tried_and_an_outage_names_them_all() {
    let mut bed = bed("etcd-endpoints");
    // Nothing listens on port 1.
    let mut w = start(&bed.ns, settings(&["http://127.0.0.1:1", &bed.etcd.endpoint()]), |_| {});
    w.whole();
    bed.etcd.stop().expect("stop");
    let why = loop {
        if let StoreUpdate::Unreachable { why, .. } = w.next() {
            break why;
        }
    };
    assert!(why.contains("http://127.0.0.1:1: cannot connect"), "{why}");
    assert!(why.contains("http://127.0.0.1:2379: "), "{why}");
    bed.etcd.restart().expect("restart");
    let more = w.unreachable_until_whole();
    eprintln!("unreachable: {why:?}, then {more:?}");
}

#[test]
fn a_silent_watch_on_a_stalled_etcd_is_noticed() {
    let mut bed = bed("etcd-stall");
    let mut s = settings(&[&bed.etcd.endpoint()]);
    s.timeout = Duration::from_secs(1);
    s.probe_after = Duration::from_secs(1);
    let mut w = start(&bed.ns, s, |_| {});
    w.whole();
    // The watch runs.
    let revision = bed.etcd.put(format!("{PREFIX}a"), "1").expect("put");
    assert_eq!(w.changes(), (revision, vec![("a".to_string(), Some(b"1".to_vec()))]));
    // Its connections stay open; nothing answers on them.
    bed.etcd.pause().expect("pause");
    let why = match w.next() {
        StoreUpdate::Unreachable { why, .. } => why,
        other => panic!("expected Unreachable, got {other:?}"),
    };
    assert!(
        why.contains("the watch was silent and the member did not answer"),
        "{why}"
    );
    bed.etcd.resume().expect("resume");
    let more = w.unreachable_until_whole();
    eprintln!("unreachable: {why:?}, then {more:?}");
    let revision = bed.etcd.put(format!("{PREFIX}b"), "2").expect("put");
    assert_eq!(w.changes(), (revision, vec![("b".to_string(), Some(b"2".to_vec()))]));
}

#[test]
fn a_member_cut_off_from_its_leader_ends_the_watch() {
    let mut testbed = Testbed::new("etcd-leader").expect("test bed");
    let ns = testbed.ns("etcd").expect("namespace");
    let dir = TempDir::new("etcd-leader").expect("temp dir");
    let mut members = Etcd::start_cluster(&ns, dir.path(), 3).expect("cluster");
    let mut s = settings(&[&members[0].endpoint()]);
    // Only `hasleader` can notice this: the member answers, but it hears
    // of no change any more.
    s.probe_after = Duration::from_secs(3600);
    let mut w = start(&ns, s, |_| {});
    w.whole();
    let revision = members[0].put(format!("{PREFIX}a"), "1").expect("put");
    assert_eq!(w.changes(), (revision, vec![("a".to_string(), Some(b"1".to_vec()))]));
    members[1].kill().expect("kill");
    members[2].kill().expect("kill");
    let why = match w.next() {
        StoreUpdate::Unreachable { why, .. } => why,
        other => panic!("expected Unreachable, got {other:?}"),
    };
    assert!(why.contains("etcdserver: no leader"), "{why}");
    // A quorum again.
    members[1].restart().expect("restart");
    let more = w.unreachable_until_whole();
    eprintln!("unreachable: {why:?}, then {more:?}");
    assert_eq!(w.model, BTreeMap::from([("a".into(), b"1".to_vec())]));
}

#[test]
fn dropping_the_follower_stops_it_while_watching_and_while_waiting() {
    let mut bed = bed("etcd-drop");
    let mut w = watch(&bed);
    w.whole();
    let took = w.stop();
    w.ended();
    eprintln!("dropped while watching in {took:?}");

    bed.etcd.stop().expect("stop");
    let mut w = watch(&bed);
    assert!(matches!(w.next(), StoreUpdate::Unreachable { .. }));
    let took = w.stop();
    w.ended();
    eprintln!("dropped while waiting to retry in {took:?}");
}

#[test]
fn dropped_from_its_own_delivery_it_ends_without_waiting_for_itself() {
    let bed = bed("etcd-self-drop");
    let (keep, kept) = channel::<Follower>();
    let kept = std::sync::Mutex::new(kept);
    let (done, finished): (Sender<()>, _) = channel();
    let w = start(&bed.ns, settings(&[&bed.etcd.endpoint()]), move |_| {
        let follower = kept.lock().expect("lock").recv().expect("the follower");
        drop(follower);
        let _ = done.send(());
    });
    let Watcher { follower, updates, .. } = w;
    keep.send(follower.expect("follower")).expect("hand over");
    finished.recv_timeout(PATIENCE).expect("delivery returned");
    assert!(matches!(updates.recv_timeout(PATIENCE), Ok(StoreUpdate::Whole { .. })));
    assert_eq!(updates.recv_timeout(PATIENCE), Err(RecvTimeoutError::Disconnected));
}

#[test]
fn settings_that_cannot_work_are_refused_before_starting() {
    let refused = |s: StoreSettings| s.check().expect_err("refused").to_string();
    assert_eq!(
        refused(settings(&["http://127.0.0.1:2379", "https://etcd:2379"])),
        "[daemon.etcd]: the endpoints mix http:// and https://; give every member as https:// (a plain one would let anyone on the path change the rules)"
    );
    assert_eq!(
        refused(settings(&["https://etcd:2379"])),
        "[daemon.etcd]: https:// endpoints need ca_file (the CA that issued etcd's server certificates)"
    );
    let mut plain_with_ca = settings(&["http://etcd:2379"]);
    plain_with_ca.ca_file = Some("/etc/mcr/etcd-ca.pem".into());
    assert!(refused(plain_with_ca).contains("are for https:// endpoints"));
    let mut clear = settings(&["http://etcd.example:2379"]);
    clear.user = Some(("mcr".into(), "/etc/mcr/etcd-password".into()));
    assert_eq!(
        refused(clear),
        "[daemon.etcd]: user `mcr` would send its password in clear to http://etcd.example:2379; write the endpoints as https:// (with ca_file)"
    );
    let mut missing = settings(&["https://etcd:2379"]);
    missing.ca_file = Some("/nonexistent/etcd-ca.pem".into());
    let absent = refused(missing);
    assert!(
        absent.starts_with("[daemon.etcd] ca_file /nonexistent/etcd-ca.pem: ") && absent.contains("No such file"),
        "{absent}"
    );
    assert!(matches!(settings(&[]).check(), Err(EtcdError::NoEndpoints)));
    let mut zero = settings(&["http://127.0.0.1:2379"]);
    zero.timeout = Duration::ZERO;
    assert!(matches!(zero.check(), Err(EtcdError::ZeroDuration)));
    assert!(settings(&["http://127.0.0.1:2379"]).check().is_ok());
}
