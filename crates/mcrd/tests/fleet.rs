//! A relay of a fleet takes its rules from etcd (Debian's etcd-server, a
//! real process in the relay's namespace): one key per rule under a
//! prefix. Rules written, changed and deleted in the store reach the
//! workers with a reload's semantics, so the streams whose rules did not
//! change lose nothing; a broken key is refused alone; while etcd is away
//! the relay forwards its last rules and says so, and it catches up when
//! etcd is back. Every packet of the untouched streams is checked.
//!
//! Each runs against etcd as production runs it ([`Mode::Secure`]): TLS,
//! client certificates, and a user whose role may only read the prefix.
//! The cache test runs over plain HTTP as well; `MCR_FLEET_PLAIN=1` runs
//! them all over plain HTTP, to compare (the latency of a change).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use mcr_core::control::{Origin, Reply, Request, Response, StoreProblem, StoreStatus};
use mcr_testbed::Ns;
use mcr_testbed::etcd::{Etcd, RelayFiles};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::{TempDir, traffic_lock};

const MINUTES: Duration = Duration::from_secs(240);
const PREFIX: &str = "/mcr/relay-1/rules/";

/// A persistent control-socket connection, for polling without starting
/// mcrctl each time.
struct Control {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Control {
    fn open(socket: &Path) -> Control {
        let w = UnixStream::connect(socket).expect("control socket");
        let r = BufReader::new(w.try_clone().expect("clone"));
        Control { w, r }
    }

    fn ask(&mut self, req: &Request) -> Reply {
        let mut line = serde_json::to_vec(req).expect("json");
        line.push(b'\n');
        self.w.write_all(&line).expect("send");
        let mut answer = String::new();
        self.r.read_line(&mut answer).expect("answer");
        serde_json::from_str::<Response>(&answer).expect("a response").reply
    }

    fn store(&mut self) -> StoreStatus {
        match self.ask(&Request::Store {}) {
            Reply::Store(s) => s,
            other => panic!("{other:?}"),
        }
    }

    /// Waits until every live worker runs the store's `revision`.
    fn until_workers_run(&mut self, revision: i64) -> StoreStatus {
        let deadline = Instant::now() + MINUTES;
        loop {
            let s = self.store();
            if s.workers_revision >= revision {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "revision {revision} never reached the workers: {s:?}"
            );
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// Rule value of stream `i` of the 10 that flow.
fn stream_rule(i: u32) -> String {
    format!(
        "input = \"veth1:239.1.1.{}:5001\"\noutputs = [\"veth2:239.10.1.{}:6001\"]\n",
        i + 1,
        i + 1
    )
}

/// Rule value of churn rule `i` (no traffic), with output port `port`.
fn churn_rule(i: u32, port: u16) -> String {
    format!(
        "input = \"veth1:239.2.{}.{}:5001\"\noutputs = [\"veth2:239.20.{}.{}:{port}\"]\n",
        i / 250,
        i % 250 + 1,
        i / 250,
        i % 250 + 1
    )
}

/// How the relay reaches etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Plain HTTP, no user.
    Plain,
    /// TLS with the relay's client certificate, as user `mcr` whose role
    /// may only read [`PREFIX`].
    Secure,
}

impl Mode {
    /// Secure, unless `MCR_FLEET_PLAIN` is set.
    fn chosen() -> Mode {
        match std::env::var_os("MCR_FLEET_PLAIN") {
            Some(_) => Mode::Plain,
            None => Mode::Secure,
        }
    }
}

/// etcd in `ns`, and (secure) the relay's files for it.
fn store(ns: &Ns, dir: &TempDir, mode: Mode) -> (Etcd, Option<RelayFiles>) {
    match mode {
        Mode::Plain => (Etcd::start(ns, dir.path()).expect("etcd"), None),
        Mode::Secure => {
            let (etcd, files) = Etcd::start_fleet_store(ns, dir.path(), PREFIX, None).expect("etcd");
            (etcd, Some(files))
        }
    }
}

fn config(dir: &TempDir, files: Option<&RelayFiles>) -> String {
    let cache = dir.path().join("etcd-cache.json");
    let (scheme, secure) = match files {
        Some(f) => ("https", f.toml()),
        None => ("http", String::new()),
    };
    let text = format!(
        "[daemon]\nworkers = 2\n\n[daemon.etcd]\nendpoints = [\"{scheme}://127.0.0.1:2379\"]\nprefix = \"{PREFIX}\"\ncache = \"{}\"\n{secure}",
        cache.display()
    );
    dir.file("mcrd.toml", &text)
        .expect("config")
        .to_str()
        .expect("utf-8")
        .to_string()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn a_thousand_rules_come_change_and_go_in_etcd_while_ten_untouched_streams_lose_nothing() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("fleet-churn").expect("chain");
    let dir = TempDir::new("fleet-churn").expect("dir");
    let mode = Mode::chosen();
    let (etcd, files) = store(&c.relay, &dir, mode);
    let streams: Vec<(String, String)> = (0..10).map(|i| (format!("{PREFIX}s{i}"), stream_rule(i))).collect();
    let rev = etcd.txn_put(&streams).expect("stream rules");
    let relay = Relay::start(&c.relay, &["--config", &config(&dir, files.as_ref())]).expect("mcrd");
    let mut ctl = Control::open(relay.socket());
    ctl.until_workers_run(rev);
    let list = relay.rules().expect("list");
    assert_eq!(list.len(), 10);
    assert!(
        list.iter()
            .all(|r| matches!(&r.origin, Origin::Etcd { key, .. } if key == &format!("{PREFIX}{}", r.rule.name))),
        "{list:?}"
    );

    let n: u64 = 40_000;
    let rx = Mcrgen::streams("239.10.1.1+10:6001", Chain::SINK_IF)
        .expect(n)
        .arg("--first-packet-timeout")
        .arg("60s")
        .recv(&c.sink)
        .expect("recv");
    let (latencies, churned) = std::thread::scope(|s| {
        let sender = s.spawn(|| {
            Mcrgen::streams("239.1.1.1+10:5001", Chain::GEN_IF)
                .count(n)
                .rate("10k")
                .send(&c.generator, MINUTES)
                .expect("send")
        });
        // 1,000 rules written, in transactions of 100...
        let churn: Vec<(String, String)> = (0..1000)
            .map(|i| (format!("{PREFIX}c{i}"), churn_rule(i, 6001)))
            .collect();
        for batch in churn.chunks(100) {
            let rev = etcd.txn_put(batch).expect("churn written");
            ctl.until_workers_run(rev);
        }
        let st = ctl.store();
        assert_eq!((st.rules, st.refused.len()), (1010, 0), "{:?}", st.refused.first());
        // ...each changed on its own, timed from the write until every
        // worker runs it...
        let mut latencies = Vec::with_capacity(1000);
        for i in 0..1000 {
            let t = Instant::now();
            let rev = etcd
                .put(format!("{PREFIX}c{i}"), churn_rule(i, 7001))
                .expect("churn changed");
            ctl.until_workers_run(rev);
            latencies.push(t.elapsed());
        }
        // ...and deleted, in transactions of 100.
        for b in 0..10 {
            let mut rev = 0;
            for i in b * 100..(b + 1) * 100 {
                rev = etcd.delete(format!("{PREFIX}c{i}")).expect("churn deleted");
            }
            ctl.until_workers_run(rev);
        }
        let sent = sender.join().expect("sender");
        (latencies, sent)
    });
    assert_eq!(churned.packets, 10 * n);
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!(got.report.total.received, 10 * n);
    for st in &got.report.streams {
        assert_eq!(
            (st.unique, st.lost, st.duplicated, st.reordered, st.corrupted),
            (n, 0, 0, 0, 0),
            "{st:?}"
        );
    }
    let st = ctl.store();
    assert_eq!((st.rules, st.connected), (10, true), "{st:?}");
    assert_eq!(relay.rules().expect("list").len(), 10);
    let mut sorted = latencies.clone();
    sorted.sort();
    eprintln!(
        "etcd ({mode:?}) change -> every worker, over {} changes with 1,010 rules: median {:?}, p99 {:?}, max {:?}",
        sorted.len(),
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.99),
        sorted[sorted.len() - 1]
    );
    relay.stop().expect("stopped");
}

#[test]
fn a_broken_key_is_refused_alone_and_etcd_away_for_15_s_stops_nothing() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("fleet-away").expect("chain");
    let dir = TempDir::new("fleet-away").expect("dir");
    let (mut etcd, files) = store(&c.relay, &dir, Mode::chosen());
    let streams: Vec<(String, String)> = (0..3).map(|i| (format!("{PREFIX}s{i}"), stream_rule(i))).collect();
    let rev = etcd.txn_put(&streams).expect("stream rules");
    let relay = Relay::start(&c.relay, &["--config", &config(&dir, files.as_ref())]).expect("mcrd");
    let mut ctl = Control::open(relay.socket());
    ctl.until_workers_run(rev);

    // A broken value, a rule that clashes with another's input, and a
    // change of s1 that breaks it: each refused alone, s1 keeps its rule.
    etcd.put(
        format!("{PREFIX}bad"),
        "input = \"veth1:nowhere\"\noutputs = [\"veth2:239.10.9.9:6001\"]\n",
    )
    .expect("put");
    etcd.put(format!("{PREFIX}twin"), stream_rule(0)).expect("put");
    let rev = etcd.put(format!("{PREFIX}s1"), "outputs = 7\n").expect("put");
    let st = ctl.until_workers_run(rev);
    let refused: Vec<&str> = st.refused.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        refused,
        [format!("{PREFIX}bad"), format!("{PREFIX}s1"), format!("{PREFIX}twin")],
        "{st:?}"
    );
    assert!(st.refused[0].error.contains("veth1:nowhere"), "{:?}", st.refused[0]);
    assert_eq!(st.rules, 3, "s0, s1 (as it was) and s2");
    let shown = relay.ctl_ok(&["store"]).expect("mcrctl store");
    assert!(shown.contains("REFUSED /mcr/relay-1/rules/twin"), "{shown}");
    let listed = relay.ctl_ok(&["list"]).expect("mcrctl list");
    assert!(listed.contains("from etcd /mcr/relay-1/rules/s0@"), "{listed}");
    // A rule the store gives is the store's to change.
    let out = relay.ctl(&["remove", "s0"]).expect("mcrctl");
    assert!(
        out.stderr.contains("comes from etcd key /mcr/relay-1/rules/s0"),
        "{}",
        out.stderr
    );
    let rev = etcd.put(format!("{PREFIX}s1"), stream_rule(1)).expect("mend s1");
    etcd.delete(format!("{PREFIX}bad")).expect("delete");
    let rev = etcd.delete(format!("{PREFIX}twin")).expect("delete").max(rev);
    assert!(ctl.until_workers_run(rev).refused.is_empty());

    // Streams s0..s2 flow while etcd is stopped for 15 s (far past every
    // retry and timeout of the follower's); meanwhile the
    // relay says so. Once etcd is back, s3 is added and s2 removed there:
    // both arrive.
    let n: u64 = 30_000;
    let rx = Mcrgen::streams("239.10.1.1+2:6001", Chain::SINK_IF)
        .expect(n)
        .arg("--first-packet-timeout")
        .arg("60s")
        .recv(&c.sink)
        .expect("recv");
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            Mcrgen::streams("239.1.1.1+3:5001", Chain::GEN_IF)
                .count(n)
                .rate("3k")
                .send(&c.generator, MINUTES)
                .expect("send")
        });
        std::thread::sleep(Duration::from_secs(2));
        etcd.stop().expect("etcd stopped");
        let deadline = Instant::now() + MINUTES;
        let away = loop {
            let st = ctl.store();
            if !st.connected {
                break st;
            }
            assert!(Instant::now() < deadline, "mcrd never noticed etcd was gone: {st:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(away.problem.is_some() && away.rules == 3, "{away:?}");
        assert_eq!(away.problem_kind, Some(StoreProblem::Unreachable), "{away:?}");
        let metrics = c
            .relay
            .exec("curl", ["-s", "http://127.0.0.1:9808/metrics"])
            .expect("curl");
        assert!(metrics.contains("mcr_etcd_connected 0"), "{metrics}");
        assert!(
            metrics.contains("mcr_etcd_problem{kind=\"unreachable\"} 1"),
            "{metrics}"
        );
        let stats = relay.stats().expect("stats");
        assert!(stats.store.is_some_and(|s| !s.connected));
        std::thread::sleep(Duration::from_secs(15));
        etcd.restart().expect("etcd back");
        etcd.put(format!("{PREFIX}s3"), stream_rule(3)).expect("put");
        let rev = etcd.delete(format!("{PREFIX}s2")).expect("delete");
        let back = ctl.until_workers_run(rev);
        assert!(back.connected && back.rules == 3, "{back:?}");
        assert_eq!(sender.join().expect("sender").packets, 3 * n);
    });
    let got = rx.finish(MINUTES).expect("recv done");
    // s0 and s1 never changed: every packet, once, in order.
    for st in &got.report.streams {
        assert_eq!(
            (st.unique, st.lost, st.duplicated, st.reordered, st.corrupted),
            (n, 0, 0, 0, 0),
            "{st:?}\n{}",
            relay.log()
        );
    }
    let names: Vec<String> = relay.rules().expect("list").into_iter().map(|r| r.rule.name).collect();
    assert_eq!(names, ["s0", "s1", "s3"]);
    relay.stop().expect("stopped");
}

#[test]
fn a_relay_started_while_etcd_is_away_forwards_what_etcd_gave_last() {
    started_while_etcd_is_away(Mode::chosen());
}

#[test]
fn a_relay_started_while_etcd_is_away_forwards_what_etcd_gave_last_over_plain_http() {
    started_while_etcd_is_away(Mode::Plain);
}

fn started_while_etcd_is_away(mode: Mode) {
    let _lock = traffic_lock().expect("lock");
    let tag = format!("fleet-cache-{}", if mode == Mode::Plain { "plain" } else { "tls" });
    let c = Chain::new(&tag).expect("chain");
    let dir = TempDir::new(&tag).expect("dir");
    let (mut etcd, files) = store(&c.relay, &dir, mode);
    let streams: Vec<(String, String)> = (0..2).map(|i| (format!("{PREFIX}s{i}"), stream_rule(i))).collect();
    let rev = etcd.txn_put(&streams).expect("stream rules");
    let config = config(&dir, files.as_ref());
    let relay = Relay::start(&c.relay, &["--config", &config]).expect("mcrd");
    Control::open(relay.socket()).until_workers_run(rev);
    mcr_testbed::etcd::wait_for_cache(&dir.path().join("etcd-cache.json"), rev, MINUTES);
    relay.stop().expect("stopped");
    etcd.stop().expect("etcd stopped");

    // Started again while etcd is away: the cached rules forward every
    // packet, and the relay says where they come from.
    let relay = Relay::start(&c.relay, &["--config", &config]).expect("mcrd again");
    let mut ctl = Control::open(relay.socket());
    let st = ctl.store();
    assert!(!st.connected && st.rules == 2, "{st:?}");
    assert!(
        st.problem
            .as_deref()
            .is_some_and(|p| p.contains("of the cache (revision")),
        "{st:?}"
    );
    let n = 5_000;
    let got = mcr_testbed::traffic::every_packet_crosses(
        &c.generator,
        Chain::GEN_IF,
        "239.1.1.1+2:5001",
        &c.sink,
        Chain::SINK_IF,
        "239.10.1.1+2:6001",
        n,
        "4k",
    )
    .expect("the cached rules forward");
    assert_eq!(got.report.total.received, 2 * n);

    // etcd back, and changed: the relay follows it again.
    etcd.restart().expect("etcd back");
    let rev = etcd.put(format!("{PREFIX}s2"), stream_rule(2)).expect("put");
    let st = ctl.until_workers_run(rev);
    assert!(st.connected && st.rules == 3, "{st:?}");
    relay.stop().expect("stopped");
}
