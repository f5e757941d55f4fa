//! Rules and workers change while traffic flows: untouched streams lose
//! nothing, a removed stream stops at once, a killed worker comes back.

use std::time::{Duration, Instant};

use mcr_core::control::StatsReport;
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::{Signal, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

#[test]
fn removing_one_rule_stops_its_stream_at_once_and_spares_the_others() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-remove-one").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    for i in 1..=10 {
        relay
            .ctl_ok(&[
                "add",
                &format!("s{i}"),
                "--input",
                &format!("veth1:239.1.1.{i}:{}", 5000 + i),
                "--output",
                &format!("veth2:239.10.1.{i}:{}", 6000 + i),
            ])
            .expect("add");
    }
    let rx = Mcrgen::streams("239.10.1.1+10:6001+", Chain::SINK_IF)
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&c.sink)
        .expect("recv");
    let sender = c.send_from_generator_meanwhile("239.1.1.1+10:5001+", 4000, "10k", MINUTES);
    std::thread::sleep(Duration::from_millis(1500));
    relay.ctl_ok(&["remove", "s5"]).expect("remove");
    assert_eq!(sender.join().expect("sender").expect("send").packets, 40_000);
    let got = rx.finish(MINUTES).expect("recv done");
    for (i, s) in got.report.streams.iter().enumerate() {
        if i == 4 {
            continue;
        }
        assert!(
            s.problems(Some(4000)).is_empty(),
            "stream {i}: {:?}",
            s.problems(Some(4000))
        );
        assert_eq!(s.received, 4000);
    }
    // The removed stream: a clean prefix, then nothing.
    let s5 = &got.report.streams[4];
    assert!(s5.received > 0 && s5.received < 4000, "{s5:?}");
    assert_eq!((s5.lost, s5.duplicated, s5.reordered), (0, 0, 0), "{s5:?}");
    assert_eq!(s5.highest_seq, Some(s5.received - 1));
    // Every packet of it was forwarded before the table changed, or
    // counted as having no rule after: none slipped through.
    let st = relay.stats().expect("stats");
    let no_rule: u64 = st.workers.iter().map(|w| w.drops["no_rule"]).sum();
    assert_eq!(
        s5.received + no_rule,
        4000,
        "forwarded {} + no_rule {no_rule}",
        s5.received
    );
    assert!(!st.rules.iter().any(|r| r.name == "s5"));
}

#[test]
fn a_killed_worker_comes_back_with_the_table_and_its_counters() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-kill-worker").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    let list_before = relay.ctl_ok(&["--json", "list"]).expect("list");
    let rx = Mcrgen::streams("239.10.1.1:6001", Chain::SINK_IF)
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&c.sink)
        .expect("recv");
    let sender = c.send_from_generator_meanwhile("239.1.1.1:5001", 8000, "1000", MINUTES);
    std::thread::sleep(Duration::from_secs(2));
    let before = relay.workers().expect("workers")[0].clone();
    let pid = before.pid.expect("a running worker");
    let packets_before = relay.stats().expect("stats").rules[0].packets;
    assert!(packets_before > 0);
    // The test started mcrd, which started this worker.
    mcr_sys::process::send_signal(pid, Signal::Kill).expect("kill -9 the worker");

    // It comes back, and meanwhile no counter goes backwards.
    let start = Instant::now();
    let mut last = packets_before;
    let after = loop {
        let st = relay.stats().expect("stats");
        assert!(
            st.rules[0].packets >= last,
            "counter went back from {last} to {}",
            st.rules[0].packets
        );
        last = st.rules[0].packets;
        let w = relay.workers().expect("workers")[0].clone();
        if w.state == "running" && w.pid.is_some_and(|p| p != pid) {
            break w;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "worker did not come back: {w:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(after.restarts, 1);
    assert!(
        after.last_exit.as_deref().is_some_and(|e| e.contains("signal 9")),
        "{after:?}"
    );
    assert_eq!(
        relay.ctl_ok(&["--json", "list"]).expect("list"),
        list_before,
        "the rules are unchanged"
    );
    let packets_back = relay.stats().expect("stats").rules[0].packets;

    sender.join().expect("sender").expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    let s = &got.report.streams[0];
    // Forwarding resumed to the very end, without duplicates or reordering;
    // only what arrived while no worker ran may be missing.
    assert_eq!(s.highest_seq, Some(7999), "{s:?}");
    assert_eq!((s.duplicated, s.reordered, s.corrupted), (0, 0, 0), "{s:?}");
    let packets_end = relay.stats().expect("stats").rules[0].packets;
    assert!(packets_end > packets_back && packets_back >= packets_before);
    assert_eq!(packets_end, s.received, "the relay counted exactly what arrived");
}

/// Every counter a `stats` reply holds, as (what, value), to compare two
/// replies.
fn counters(st: &StatsReport) -> Vec<(String, f64)> {
    let mut v = Vec::new();
    for r in &st.rules {
        v.push((format!("rule {} packets", r.name), r.packets as f64));
        for o in &r.outputs {
            v.push((format!("output {} packets", o.output), o.packets as f64));
            for (k, n) in &o.drops {
                v.push((format!("output {} {k}", o.output), *n as f64));
            }
        }
    }
    for w in &st.workers {
        v.push((format!("worker {} rx", w.index), w.rx_frames as f64));
        v.push((format!("worker {} tx", w.index), w.tx_packets as f64));
        v.push((format!("worker {} cpu", w.index), w.cpu_s));
        for (k, n) in &w.drops {
            v.push((format!("worker {} {k}", w.index), *n as f64));
        }
    }
    v
}

/// Two processes that spin on both cores for as long as they live (killed
/// by PID on drop): a host busy with other work.
struct Spinners(Vec<std::process::Child>);

impl Spinners {
    fn start() -> Self {
        Spinners(
            (0..2)
                .map(|_| {
                    std::process::Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("a spinning shell")
                })
                .collect(),
        )
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `streams` streams of `pps` each through 2 workers while one of them is killed
/// (SIGKILL, in turn) every `every` for `during`, every packet checked:
/// no counter ever goes back (sampled every 250 ms), the supervisor
/// answers throughout, each worker comes back with the whole table, and
/// afterwards every stream forwards every packet, in order, once. Returns
/// the kills and what was lost meanwhile; nothing may be duplicated,
/// reordered or corrupted.
fn kill_workers_while_streams_flow(
    name: &str,
    args: &[&str],
    (streams, pps): (u32, u64),
    every: Duration,
    during: Duration,
) -> Kills {
    const N: u64 = 5000;
    let sent = pps * (during.as_secs() + 2);
    let c = Chain::new(name).expect("chain");
    let relay = Relay::start(&c.relay, &[&["--workers", "2"], args].concat()).expect("mcrd");
    for i in 1..=streams {
        relay
            .add_rule(
                &format!("s{i}"),
                &format!("veth1:239.1.1.{i}:{}", 5000 + i),
                &[&format!("veth2:239.10.1.{i}:{}", 6000 + i)],
            )
            .expect("add");
    }
    let list_before = relay.ctl_ok(&["--json", "list"]).expect("list");
    let outputs = format!("239.10.1.1+{streams}:6001+");
    let inputs = format!("239.1.1.1+{streams}:5001+");
    // The frames a worker that was killed last had not read wait in its
    // ring until it is back, which on a busy host can be a while after the
    // sender ends: the sink waits for them (nothing else ends it early).
    let rx = c
        .expect_at_sink(&outputs, sent, &["--idle-timeout", "15s"])
        .expect("recv");
    let sender = c.send_from_generator_meanwhile(&inputs, sent, &(pps * u64::from(streams)).to_string(), MINUTES);
    let mut last = counters(&relay.stats().expect("stats"));
    let start = Instant::now();
    let mut kills = 0u64;
    // When each kill was, after the sender started.
    let mut kill_at = Vec::new();
    while start.elapsed() < during {
        // Kill the worker that is running, in turn.
        let ws = relay.workers().expect("workers");
        let w = &ws[(kills % 2) as usize];
        if let (Some(pid), "running") = (w.pid, w.state.as_str()) {
            mcr_sys::process::send_signal(pid, Signal::Kill).expect("kill -9 a worker");
            kill_at.push(start.elapsed());
            kills += 1;
        }
        let until = Instant::now() + every;
        while Instant::now() < until {
            let now = counters(&relay.stats().expect("stats"));
            for ((what, before), (_, after)) in last.iter().zip(&now) {
                assert!(after >= before, "{what} went back from {before} to {after}");
            }
            last = now;
            std::thread::sleep(Duration::from_millis(250));
        }
        relay.ctl_ok(&["version"]).expect("the supervisor answers");
    }
    sender.join().expect("sender").expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    let stopped_by = got.report.stopped_by.clone();
    assert_eq!(got.report.streams.len(), streams as usize, "{:?}", got.report);
    let mut lost = Vec::new();
    let mut per_kill = vec![0u64; kill_at.len().max(1)];
    for s in &got.report.streams {
        assert_eq!(
            (s.duplicated, s.reordered, s.too_late, s.corrupted),
            (0, 0, 0, 0),
            "while workers were killed: {:?}",
            s.problems(Some(sent))
        );
        assert_eq!(s.received + s.lost, sent, "{:?}", s.problems(Some(sent)));
        lost.push(s.lost);
        // Nothing reordered: the holes in the sequence are exactly what
        // was lost before the last packet, each at its time (seq / pps);
        // the kill nearest to it (they are `every` apart) is its cause.
        let tail = sent - s.highest_seq.map_or(0, |h| h + 1);
        let mut in_holes = 0;
        for &(first, n) in &s.holes {
            let at = Duration::from_secs_f64(first as f64 / pps as f64);
            let k = (0..kill_at.len()).min_by_key(|&k| kill_at[k].abs_diff(at)).unwrap_or(0);
            per_kill[k] += n;
            in_holes += n;
        }
        assert_eq!(in_holes + tail, s.lost, "{} holes listed: {:?}", s.holes.len(), s.holes);
        *per_kill.last_mut().expect("one") += tail;
    }
    // Each came back with the whole table.
    let deadline = Instant::now() + Duration::from_secs(30);
    while relay.workers().expect("workers").iter().any(|w| w.state != "running") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let ws = relay.workers().expect("workers");
    let restarts: u64 = ws.iter().map(|w| w.restarts).sum();
    assert_eq!(restarts, kills, "{ws:?}");
    let version = ws[0].table_version;
    assert!(
        ws.iter().all(|w| w.state == "running" && w.table_version == version),
        "{ws:?}"
    );
    assert_eq!(relay.ctl_ok(&["--json", "list"]).expect("list"), list_before);
    // And forwarding is whole again: a fresh run on every stream, every
    // packet, in order, once.
    let rx = c.expect_at_sink(&outputs, N, &[]).expect("recv");
    c.send_from_generator(&inputs, N, "3000", MINUTES).expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    for s in &got.report.streams {
        assert!(s.problems(Some(N)).is_empty(), "{:?}", s.problems(Some(N)));
    }
    // What the daemon said that was not routine, and its workers' ring
    // drops and restarts (a ring that filled while its worker was away),
    // for a failure to show.
    let workers = relay
        .stats()
        .map(|st| {
            st.workers
                .iter()
                .map(|w| format!("worker {}: ring drops {}", w.index, w.ring_drops))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let log = format!(
        "(the sink stopped by {stopped_by}; {workers})\n{}",
        relay
            .log()
            .lines()
            .filter(|l| !l.contains(" INFO "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Kills {
        kills,
        lost,
        per_kill,
        log,
        kill_at,
    }
}

/// What [`kill_workers_while_streams_flow`] saw.
struct Kills {
    kills: u64,
    /// Lost per stream.
    lost: Vec<u64>,
    /// Lost per kill, all streams (what was lost after the last packet
    /// that arrived counts for the last kill).
    per_kill: Vec<u64>,
    /// The daemon's warnings and errors.
    log: String,
    /// When each kill was, after the sender started.
    kill_at: Vec<Duration>,
}

/// The streams of the default (eBPF) data path never pass through a
/// worker: half a minute of kills every 2 s loses none of their packets.
#[test]
fn workers_killed_every_two_seconds_for_half_a_minute_come_back_and_no_counter_goes_back() {
    let _lock = traffic_lock().expect("lock");
    let Kills { kills, lost, .. } = kill_workers_while_streams_flow(
        "relay-kill-often",
        &[],
        (3, 3000),
        Duration::from_secs(2),
        Duration::from_secs(30),
    );
    assert!(kills >= 10, "{kills} kills");
    assert_eq!(lost, [0, 0, 0], "lost per stream in {kills} kills");
}

/// The workers forward: a worker's rings outlive it (the supervisor keeps
/// them), so a kill loses at most what the worker had taken and not yet
/// sent, and nothing that arrives while it is away. At most 64 packets a
/// kill, in all streams; in practice none at these rates.
fn workers_killed_every_two_seconds_on_the_packet_path(name: &str, busy: bool) {
    let _lock = traffic_lock().expect("lock");
    let spinners = busy.then(Spinners::start);
    let Kills {
        kills,
        lost,
        per_kill,
        log,
        kill_at,
    } = kill_workers_while_streams_flow(
        name,
        &["--datapath", "packet"],
        (3, 3000),
        Duration::from_secs(2),
        Duration::from_secs(30),
    );
    drop(spinners);
    let total: u64 = lost.iter().sum();
    eprintln!("{kills} kills, lost per kill {per_kill:?}, per stream {lost:?}, {total} in all");
    // (A worker that is not running is not killed: fewer kills means one
    // was away, and mcrd's warnings say why.)
    assert!(kills >= 10, "{kills} kills at {kill_at:?}; mcrd said:\n{log}");
    assert!(
        per_kill.iter().all(|&n| n <= 64),
        "lost per kill {per_kill:?} (at most 64 each), per stream {lost:?}; kills at {kill_at:?}; mcrd said:\n{log}"
    );
}

#[test]
fn killed_workers_of_the_packet_path_lose_at_most_a_batch_each() {
    workers_killed_every_two_seconds_on_the_packet_path("relay-kill-packet", false);
}

#[test]
fn killed_workers_of_the_packet_path_lose_at_most_a_batch_each_on_a_busy_host() {
    workers_killed_every_two_seconds_on_the_packet_path("relay-kill-busy", true);
}

/// 5 streams, 20,000 pps in all, forwarded by the workers; each worker
/// killed and restarted in turn, 6 times in 12 s: nothing lost, nothing
/// reordered.
#[test]
fn workers_restarted_while_five_streams_flow_at_20k_pps_lose_nothing() {
    let _lock = traffic_lock().expect("lock");
    let Kills { kills, lost, .. } = kill_workers_while_streams_flow(
        "relay-restart-20k",
        &["--datapath", "packet"],
        (5, 4000),
        Duration::from_secs(2),
        Duration::from_secs(12),
    );
    assert!(kills >= 5, "{kills} kills");
    assert_eq!(lost, [0; 5], "lost per stream in {kills} kills");
}

#[test]
fn a_worker_that_keeps_dying_is_restarted_ever_more_slowly() {
    let c = Chain::new("relay-crash-loop").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // Kill the worker the moment it is back, for 12 s.
    let start = Instant::now();
    let mut killed = std::collections::HashSet::new();
    while start.elapsed() < Duration::from_secs(12) {
        if let Some(pid) = relay.workers().expect("workers")[0].pid
            && killed.insert(pid)
        {
            let _ = mcr_sys::process::send_signal(pid, Signal::Kill);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Restart delays double from 100 ms to 5 s: about 7 restarts in 12 s.
    // A supervisor that restarted at once would have done hundreds.
    let restarts = relay.workers().expect("workers")[0].restarts;
    assert!((3..=12).contains(&restarts), "{restarts} restarts in 12 s");
    let log = relay.log();
    let delays: Vec<f64> = log
        .lines()
        .filter_map(|l| l.split("restarting in ").nth(1))
        .filter_map(|d| {
            let d = d.trim();
            d.strip_suffix("ms")
                .and_then(|ms| ms.parse::<f64>().ok().map(|v| v / 1000.0))
                .or_else(|| d.strip_suffix('s').and_then(|s| s.parse().ok()))
        })
        .collect();
    assert!(delays.len() >= 3, "{log}");
    assert!(delays.windows(2).all(|w| w[1] >= w[0]), "delays grow: {delays:?}");
    assert!(delays.last().is_some_and(|d| *d >= 3.2), "{delays:?}");
    // The supervisor is still there and answers.
    relay.ctl_ok(&["version"]).expect("version");
}

/// mcrd answers (and tells systemd it is ready) only once every worker
/// runs the rules of its config file, rings open and filters attached: a
/// stream sent the moment it answers loses nothing, start after start, on
/// both data paths and with two workers sharing the input.
#[test]
fn a_stream_sent_the_moment_mcrd_answers_loses_nothing_start_after_start() {
    const STARTS: usize = 50;
    const N: u64 = 400;
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-starts").expect("chain");
    let dir = mcr_testbed::TempDir::new("relay-starts").expect("dir");
    let config = dir
        .file(
            "mcrd.toml",
            "[daemon]\nworkers = 2\n\n[[rule]]\nname = \"feed\"\ninput = \"veth1:239.1.1.1:5001\"\noutputs = [\"veth2:239.10.1.1:6001\"]\n",
        )
        .expect("config");
    let config = config.to_str().expect("utf-8");
    for start in 0..STARTS {
        let rx = c
            .expect_at_sink("239.10.1.1:6001", N, &["--idle-timeout", "2s"])
            .expect("recv");
        let datapath = if start % 2 == 0 { "ebpf" } else { "packet" };
        // Relay::start returns the moment mcrd answers `version`.
        let relay = Relay::start(&c.relay, &["--config", config, "--datapath", datapath]).expect("mcrd");
        let sent = c.send_from_generator("239.1.1.1:5001", N, "5k", MINUTES).expect("send");
        assert_eq!(sent.packets, N);
        let got = rx.finish(MINUTES).expect("recv done");
        let Some(s) = got.report.streams.first() else {
            panic!(
                "start {start} ({datapath}): nothing arrived\nrelay log:\n{}",
                relay.log()
            );
        };
        assert!(
            s.problems(Some(N)).is_empty() && s.received == N,
            "start {start} ({datapath}): {:?}\nrelay log:\n{}",
            s.problems(Some(N)),
            relay.log()
        );
        relay.stop().expect("stopped");
    }
}
