//! A redundant pair of relays (issue 19), end to end.
//!
//! 1. Hot standby under keepalived (VRRP): both relays carry the same rule,
//!    keepalived elects one and its notify script makes that one's mcrd
//!    active. While one stream flows, the active relay fails in four ways
//!    (its mcrd killed, its input link cut, its output link cut, its
//!    keepalived stopped), again and again, each time on whichever relay
//!    is active; the sink checks every packet and the packets each
//!    failover lost are printed, with their median, min and max per cause.
//!    The adverts ride on a third network of their own, as the packaged
//!    example has it (and that link is cut too), or with
//!    `MCR_PAIR_ADVERTS_ON=output` on the output network, `input` on the
//!    input network, `both` on each of the two (two instances in a sync
//!    group).
//! 2. Split brain: the adverts of the master stop reaching the backup; both
//!    send, both say so in `/metrics`, and the sink gets duplicates until
//!    the adverts pass again.
//! 3. Two active relays into a third that merges their copies (ST 2022-7):
//!    one relay after the other is killed, and the sink gets every packet
//!    once, in order, intact.
//!
//! Nothing here asserts a time; the losses seen are printed (run with
//! `--no-capture`).

use std::time::{Duration, Instant};

use mcr_core::config::Role;
use mcr_core::control::Reply;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::vrrp::{self, Keepalived, SyncedInstance, VrrpConfig};
use mcr_testbed::{BridgeOptions, Ns, Proc, Signal, TempDir, Testbed, bin, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);
/// Long enough for any election, failover or restart here, also on a
/// loaded machine.
const WAIT: Duration = Duration::from_secs(30);
/// The stream's rate: one packet is 0.1 ms.
const RATE_PPS: u64 = 10_000;
const INPUT: &str = "in0:239.1.1.1:5001";
const OUTPUT: &str = "out0:239.10.1.1:6001";

/// gen ↔ `brin` (in namespace `lan`) ↔ `in0` of relays a and b; their
/// `out0` ↔ `brout` (also in `lan`) ↔ sink. Neither bridge snoops: both
/// relays see the stream, the sink sees what either sends.
struct Pair {
    tb: Testbed,
    generator: Ns,
    lan: Ns,
    relays: [Ns; 2],
    sink: Ns,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        let mut tb = Testbed::new(tag).expect("test bed");
        let generator = tb.ns("gen").expect("ns");
        let lan = tb.ns("lan").expect("ns");
        let relays = [tb.ns("ra").expect("ns"), tb.ns("rb").expect("ns")];
        let sink = tb.ns("sink").expect("ns");
        for ns in [&generator, &lan, &relays[0], &relays[1], &sink] {
            ns.rp_filter_off().expect("rp_filter");
        }
        tb.bridge(&lan, "brin", BridgeOptions::default()).expect("bridge");
        tb.veth(&generator, "g0", &lan, "pg").expect("veth");
        tb.attach(&lan, "pg", "brin").expect("attach");
        generator.addr("g0", "10.31.0.100/24").expect("addr");
        for (i, r) in relays.iter().enumerate() {
            let port = format!("p{i}");
            tb.veth(r, "in0", &lan, &port).expect("veth");
            tb.attach(&lan, &port, "brin").expect("attach");
            r.addr("in0", &format!("10.31.0.{}/24", i + 1)).expect("addr");
        }
        Pair {
            tb,
            generator,
            lan,
            relays,
            sink,
        }
    }

    /// The output side for test 1: both relays' `out0` and the sink on
    /// one bridge, which also carries the VRRP adverts.
    fn output_bridge(&self) {
        self.tb
            .bridge(&self.lan, "brout", BridgeOptions::default())
            .expect("bridge");
        for (i, r) in self.relays.iter().enumerate() {
            let port = format!("q{i}");
            self.tb.veth(r, "out0", &self.lan, &port).expect("veth");
            self.tb.attach(&self.lan, &port, "brout").expect("attach");
            r.addr("out0", &format!("10.32.0.{}/24", i + 1)).expect("addr");
        }
        self.tb.veth(&self.sink, "in0", &self.lan, "qs").expect("veth");
        self.tb.attach(&self.lan, "qs", "brout").expect("attach");
        self.sink.addr("in0", "10.32.0.100/24").expect("addr");
    }

    /// A third network between the relays, for the adverts alone: `mg0`
    /// of each on `brmg` (in `lan`).
    fn management_bridge(&self) {
        self.tb
            .bridge(&self.lan, "brmg", BridgeOptions::default())
            .expect("bridge");
        for (i, r) in self.relays.iter().enumerate() {
            let port = format!("m{i}");
            self.tb.veth(r, "mg0", &self.lan, &port).expect("veth");
            self.tb.attach(&self.lan, &port, "brmg").expect("attach");
            r.addr("mg0", &format!("10.33.0.{}/24", i + 1)).expect("addr");
        }
    }
}

/// Starts `mcrd --role standby` in `ns` with the pair's rule.
fn standby_relay(ns: &Ns) -> Relay {
    let relay = Relay::start(ns, &["--role", "standby"]).expect("mcrd");
    relay.add_rule("feed", INPUT, &[OUTPUT]).expect("rule added");
    relay
}

fn role_of(relay: &Relay) -> Role {
    match relay.ask(&["role"]).expect("role") {
        Reply::Role(r) => r.role,
        other => panic!("{other:?}"),
    }
}

/// Packets the relay's one output has sent.
fn sent(relay: &Relay) -> u64 {
    relay.stats().expect("stats").rules[0].outputs[0].packets
}

/// Waits until `relay` sends again: its count of sent packets grows by a
/// few hundred.
fn sends(relay: &Relay, what: &str) {
    let from = sent(relay);
    let deadline = Instant::now() + WAIT;
    while sent(relay) < from + 500 {
        assert!(
            Instant::now() < deadline,
            "{what}: the relay sends nothing\n{}",
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How the active relay fails.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Failure {
    /// SIGKILL to its mcrd; restored by starting mcrd again (standby).
    KillMcrd,
    /// Its input link (`in0`) set down; restored by setting it up.
    CutInput,
    /// Its output link (`out0`) set down; restored by setting it up.
    CutOutput,
    /// The link of the adverts alone (`mg0`, when they have one) set
    /// down; restored by setting it up.
    CutManagement,
    /// SIGTERM to its keepalived; restored by starting keepalived again.
    StopKeepalived,
}

impl Failure {
    fn name(self) -> &'static str {
        match self {
            Failure::KillMcrd => "mcrd SIGKILL",
            Failure::CutInput => "input link down",
            Failure::CutOutput => "output link down",
            Failure::CutManagement => "advert link down",
            Failure::StopKeepalived => "keepalived SIGTERM",
        }
    }
}

/// One relay of the hot-standby pair: its namespace, mcrd and keepalived.
struct Side {
    ns: Ns,
    relay: Option<Relay>,
    keepalived: Option<Keepalived>,
    priority: u8,
}

/// The network keepalived's VRRP instance runs on: its adverts, and the
/// virtual address, go there; the relay's links that carry no adverts are
/// tracked.
#[derive(Debug, Clone, Copy, PartialEq)]
enum AdvertLink {
    /// On the output network (`out0`), `in0` tracked.
    Output,
    /// On the input network (`in0`), `out0` tracked.
    Input,
    /// On a network of their own (`mg0`), `in0` and `out0` tracked: the
    /// packaged example's layout (`interface eth0`, `track_interface eth1
    /// eth2`).
    Management,
    /// On both: one instance on `out0` and one on `in0`, in a sync group.
    Both,
}

impl AdvertLink {
    /// `MCR_PAIR_ADVERTS_ON`: `management` (the default), `output`,
    /// `input` or `both`.
    fn from_env() -> AdvertLink {
        match std::env::var("MCR_PAIR_ADVERTS_ON").as_deref() {
            Err(_) | Ok("management") => AdvertLink::Management,
            Ok("output") => AdvertLink::Output,
            Ok("input") => AdvertLink::Input,
            Ok("both") => AdvertLink::Both,
            Ok(other) => panic!("MCR_PAIR_ADVERTS_ON={other}: say `management`, `output`, `input` or `both`"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            AdvertLink::Output => "the output network",
            AdvertLink::Input => "the input network",
            AdvertLink::Management => "a network of their own",
            AdvertLink::Both => "both networks (a sync group)",
        }
    }
}

/// The pair under keepalived, with what it needs to (re)start each side.
struct Vrrp<'a> {
    sides: [Side; 2],
    dir: &'a TempDir,
    mcrctl: String,
    adverts: AdvertLink,
}

impl Vrrp<'_> {
    /// Both sides of `p`: mcrd standby with the pair's rule, and keepalived
    /// (priorities 150 and 100, its adverts on the network `adverts`
    /// says), its files in `dir`.
    fn start<'a>(p: &Pair, dir: &'a TempDir, adverts: AdvertLink) -> Vrrp<'a> {
        let sides = [0, 1].map(|i| Side {
            ns: p.relays[i].clone(),
            relay: Some(standby_relay(&p.relays[i])),
            keepalived: None,
            priority: [150, 100][i],
        });
        let mut pair = Vrrp {
            sides,
            dir,
            mcrctl: bin("mcrctl").expect("mcrctl").display().to_string(),
            adverts,
        };
        pair.start_keepalived(0);
        pair.start_keepalived(1);
        pair
    }

    fn conf(&self, side: &Side) -> VrrpConfig {
        let socket = side.relay.as_ref().expect("mcrd runs").socket().to_path_buf();
        // Each virtual address in the subnet of the instance's interface,
        // which keepalived puts it on.
        let (interface, tracked, virtual_ip) = match self.adverts {
            AdvertLink::Output => ("out0", vec!["in0".into()], "10.32.0.10/24"),
            AdvertLink::Input => ("in0", vec!["out0".into()], "10.31.0.10/24"),
            AdvertLink::Management => ("mg0", vec!["in0".into(), "out0".into()], "10.33.0.10/24"),
            AdvertLink::Both => ("out0", vec![], "10.32.0.10/24"),
        };
        VrrpConfig {
            instance: "MCR".into(),
            interface: interface.into(),
            vrid: 51,
            priority: side.priority,
            advert_int_s: advert_int_s(),
            track_interfaces: tracked,
            // keepalived hears of processes only in the initial network
            // namespace: here its track_process would never see mcrd end.
            // A check through mcrd's control socket stands in (every 1 s,
            // keepalived's shortest script interval).
            track_process: None,
            track_script: Some(format!("{} --socket {} version", self.mcrctl, socket.display())),
            virtual_ip: virtual_ip.into(),
            notify_script: vrrp::notify_script(),
            control_socket: socket,
            script_user: "root".into(),
            synced: (self.adverts == AdvertLink::Both).then(|| SyncedInstance {
                interface: "in0".into(),
                vrid: 52,
                virtual_ip: "10.31.0.10/24".into(),
            }),
        }
    }

    fn start_keepalived(&mut self, i: usize) {
        let conf = self.conf(&self.sides[i]);
        let k = Keepalived::start_with_env(&self.sides[i].ns, self.dir.path(), &conf, &[("MCRCTL", &self.mcrctl)])
            .expect("keepalived starts");
        self.sides[i].keepalived = Some(k);
    }

    fn relay(&self, i: usize) -> &Relay {
        self.sides[i].relay.as_ref().expect("mcrd runs")
    }

    fn state(&self, i: usize) -> Option<String> {
        self.sides[i].keepalived.as_ref().and_then(Keepalived::state)
    }

    /// Waits until one side is MASTER with its mcrd active, and the other BACKUP with its mcrd standby; returns the master.
    fn stable(&self) -> usize {
        let deadline = Instant::now() + WAIT;
        loop {
            let states = [self.state(0), self.state(1)];
            let master = match (states[0].as_deref(), states[1].as_deref()) {
                (Some("MASTER"), Some("BACKUP")) => Some(0),
                (Some("BACKUP"), Some("MASTER")) => Some(1),
                _ => None,
            };
            if let Some(m) = master
                && self.sides.iter().all(|s| s.relay.is_some())
                && role_of(self.relay(m)) == Role::Active
                && role_of(self.relay(1 - m)) == Role::Standby
            {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "no stable pair: {states:?}\n{}\n{}",
                self.log(0),
                self.log(1)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self, i: usize) -> String {
        let s = &self.sides[i];
        format!(
            "--- {}: transitions {:?}\n{}",
            s.ns.name(),
            s.keepalived.as_ref().map(Keepalived::transitions),
            s.keepalived.as_ref().map(Keepalived::log).unwrap_or_default()
        )
    }

    /// Fails the active side `a` in `how`; returns once the other side is
    /// MASTER and its relay sends.
    fn fail(&mut self, a: usize, how: Failure) {
        let b = 1 - a;
        let before = self.sides[b]
            .keepalived
            .as_ref()
            .expect("keepalived")
            .transitions()
            .len();
        match how {
            Failure::KillMcrd => {
                let mut relay = self.sides[a].relay.take().expect("mcrd");
                relay.signal(Signal::Kill).expect("SIGKILL");
                drop(relay);
            }
            Failure::CutInput => self.sides[a].ns.link_down("in0").expect("link down"),
            Failure::CutOutput => self.sides[a].ns.link_down("out0").expect("link down"),
            Failure::CutManagement => self.sides[a].ns.link_down("mg0").expect("link down"),
            Failure::StopKeepalived => self.sides[a]
                .keepalived
                .as_mut()
                .expect("keepalived")
                .stop()
                .expect("stop"),
        }
        self.sides[b]
            .keepalived
            .as_ref()
            .expect("keepalived")
            .wait_for("take over", WAIT, |t| {
                t.len() > before && t.last().is_some_and(|t| t.state == "MASTER")
            })
            .unwrap_or_else(|e| panic!("{} on the active relay: no takeover: {e}", how.name()));
        sends(self.relay(b), "the new master");
    }

    /// Undoes [`Vrrp::fail`] on side `a`.
    fn restore(&mut self, a: usize, how: Failure) {
        match how {
            Failure::KillMcrd => self.sides[a].relay = Some(standby_relay(&self.sides[a].ns)),
            Failure::CutInput => self.sides[a].ns.link_up("in0").expect("link up"),
            Failure::CutOutput => self.sides[a].ns.link_up("out0").expect("link up"),
            Failure::CutManagement => self.sides[a].ns.link_up("mg0").expect("link up"),
            Failure::StopKeepalived => self.start_keepalived(a),
        }
    }
}

/// keepalived's advert interval, in seconds: `MCR_PAIR_ADVERT_S` (0.01 to
/// 40.95, for measuring the losses against it), or 0.1 (the packaged
/// example's).
fn advert_int_s() -> f64 {
    std::env::var("MCR_PAIR_ADVERT_S")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|s| (0.01..=40.95).contains(s))
        .unwrap_or(0.1)
}

/// A random duration in `[0, max)`, from std's randomly keyed hasher.
fn random_below(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let r = std::collections::hash_map::RandomState::new().build_hasher().finish();
    max.mul_f64((r >> 11) as f64 / (1u64 << 53) as f64)
}

/// Rounds of each failure: `MCR_PAIR_ROUNDS`, or 5 (about a minute for
/// the four causes; the figures in OPERATIONS.md are of 10).
fn rounds() -> usize {
    std::env::var("MCR_PAIR_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5)
}

/// A hot-standby pair under keepalived loses packets only while it fails
/// over, and the stream always comes back from the other relay.
///
/// Both mcrds start standby and keepalived (state BACKUP, nopreempt,
/// adverts every 0.1 s on a link of their own, the input and output links
/// tracked; [`AdvertLink`] for the other layouts) makes the master's active.
/// While 10k packets a second flow, the active relay fails in each of four
/// ways ([`Failure`]; five when the adverts have a link of their own,
/// which can fail too), [`rounds`] times each, each time after a random
/// wait of up to a second (the active relay alternates, as the restored
/// one returns as backup); each is undone and the pair let settle before
/// the next. The sink checks every packet:
/// nothing corrupted or reordered, and every hole in the sequence is
/// charged to the failover it followed (a hole of k packets is k/10 ms).
///
/// Duplicates need not be zero: a failover can leave both relays active for a
/// moment. The new master's notify script makes its mcrd active as soon as
/// keepalived enters MASTER, while the old one's goes standby only once its
/// own script has run (after a STOP, or a FAULT, whose `mcrctl role
/// standby` waits for nothing on the new master). During that overlap the
/// sink gets both copies. It lasts for a script run or two, far below three
/// adverts (a takeover's own delay); the test holds duplicates to three
/// advert intervals' worth of packets per failover.
#[test]
fn a_vrrp_pair_fails_over_and_the_sink_loses_only_the_failovers_packets() {
    let _lock = traffic_lock().expect("lock");
    let started = Instant::now();
    let p = Pair::new("pair-vrrp");
    p.output_bridge();
    let dir = TempDir::new("pair-vrrp").expect("dir");
    let adverts = AdvertLink::from_env();
    if adverts == AdvertLink::Management {
        p.management_bridge();
    }
    let mut pair = Vrrp::start(&p, &dir, adverts);
    let rx = Mcrgen::streams("239.10.1.1:6001", "in0")
        .arg("--first-packet-timeout")
        .arg("120s")
        .arg("--idle-timeout")
        .arg("3s")
        .recv(&p.sink)
        .expect("recv");
    let mut active = pair.stable();

    // One stream for the whole test: stopped at the end.
    let mut send = p.generator.command(bin("mcrgen").expect("mcrgen"));
    send.args([
        "send",
        "-s",
        "239.1.1.1:5001",
        "-i",
        "g0",
        "--count",
        "1000000000",
        "--rate",
    ])
    .arg(RATE_PPS.to_string());
    let mut sender: Proc = p.generator.spawn(send).expect("mcrgen send");
    let send_start = Instant::now();
    sends(pair.relay(active), "the first master");

    let n = rounds();
    let mut kinds = vec![
        Failure::KillMcrd,
        Failure::CutInput,
        Failure::CutOutput,
        Failure::StopKeepalived,
    ];
    if adverts == AdvertLink::Management {
        kinds.push(Failure::CutManagement);
    }
    // (kind, the sequence number the stream was at when it failed).
    let mut events: Vec<(Failure, u64)> = Vec::new();
    for &how in &kinds {
        for _ in 0..n {
            // A random wait first, so that the failures fall anywhere in
            // keepalived's cycles (the adverts', and the once-a-second
            // check of mcrd) rather than at the same point of each: the
            // losses are then their distribution, not one point of it.
            std::thread::sleep(random_below(Duration::from_secs(1)));
            let at = (send_start.elapsed().as_secs_f64() * RATE_PPS as f64) as u64;
            events.push((how, at));
            pair.fail(active, how);
            pair.restore(active, how);
            let master = pair.stable();
            assert_eq!(master, 1 - active, "the restored relay stays backup (nopreempt)");
            sends(pair.relay(master), "the master, settled");
            active = master;
            // A second of steady stream between failovers, so that each
            // hole is told apart from the next failover's.
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    sender.signal(Signal::Term).expect("stop the sender");
    let got = rx.finish(MINUTES).expect("recv done");
    drop(sender);
    let s = &got.report.streams[0];
    eprintln!("receiver: {s:?}");
    assert_eq!((s.corrupted, s.reordered), (0, 0), "{:?}", got.report);
    assert!(s.holes.len() < 1024, "every hole listed: {}", s.holes.len());
    assert_eq!(s.holes.iter().map(|h| h.1).sum::<u64>(), s.lost, "{:?}", s.holes);
    let advert = advert_int_s();
    let per_failover_bound = (3.0 * advert * RATE_PPS as f64) as u64;
    assert!(
        s.duplicated <= events.len() as u64 * per_failover_bound,
        "{} duplicates in {} failovers",
        s.duplicated,
        events.len()
    );

    // Each hole to the failover it followed (the stream's sequence number
    // at a failover is estimated from the time since the sender was
    // started, which runs a little ahead of the stream: a hole may seem to
    // start up to 0.3 s before its failover).
    let slack = RATE_PPS * 3 / 10;
    let mut lost = vec![0u64; events.len()];
    for &(first, count) in &s.holes {
        let i = events
            .iter()
            .rposition(|e| e.1 <= first + slack)
            .unwrap_or_else(|| panic!("a hole before any failover: {first}+{count}"));
        lost[i] += count;
    }
    let ms = |k: u64| k as f64 * 1000.0 / RATE_PPS as f64;
    let mut table = format!(
        "VRRP pair failovers, {RATE_PPS} pps, adverts every {advert} s on {} \
         ({} duplicates in all), packets lost per failover (ms):\n\
         {:<20} {:>3} {:>18} {:>18} {:>18}\n",
        adverts.name(),
        s.duplicated,
        "kind",
        "n",
        "median",
        "min",
        "max"
    );
    for &how in &kinds {
        let mut l: Vec<u64> = events
            .iter()
            .zip(&lost)
            .filter(|(e, _)| e.0 == how)
            .map(|(_, &l)| l)
            .collect();
        l.sort_unstable();
        let n = l.len();
        // The median of an even count is the mean of the middle two.
        let median = (l[(n - 1) / 2] + l[n / 2]) / 2;
        let cell = |k: u64| format!("{k} ({:.1})", ms(k));
        table.push_str(&format!(
            "{:<20} {:>3} {:>18} {:>18} {:>18}\n",
            how.name(),
            n,
            cell(median),
            cell(l[0]),
            cell(l[n - 1])
        ));
        eprintln!("{}: lost per failover, sorted: {l:?}", how.name());
    }
    eprintln!("{table}test took {:.1} s", started.elapsed().as_secs_f64());
}

/// `mcr_role{role="active"}` from the relay's `/metrics`.
fn metrics_active(ns: &Ns) -> bool {
    let text = ns
        .exec("curl", ["-sf", "--max-time", "5", "http://127.0.0.1:9808/metrics"])
        .expect("metrics");
    text.lines().any(|l| l == "mcr_role{role=\"active\"} 1")
}

/// Split brain: when the adverts of one relay no longer reach the other,
/// both become VRRP masters and both send. Each relay's `/metrics` then
/// says `mcr_role{role="active"} 1` (what the documented alert sums), and
/// the consequence is what OPERATIONS.md says: every packet twice at the
/// sink. When the adverts pass again, the relay of lower priority steps
/// down, and the stream is single again.
#[test]
fn split_brain_shows_in_both_relays_metrics_and_doubles_the_stream() {
    let _lock = traffic_lock().expect("lock");
    let p = Pair::new("pair-split");
    p.output_bridge();
    let dir = TempDir::new("pair-split").expect("dir");
    let pair = Vrrp::start(&p, &dir, AdvertLink::Output);
    let master = pair.stable();
    let backup = 1 - master;
    assert_eq!(
        [metrics_active(&p.relays[0]), metrics_active(&p.relays[1])]
            .iter()
            .filter(|a| **a)
            .count(),
        1,
        "one active before"
    );
    let rx = Mcrgen::streams("239.10.1.1:6001", "in0")
        .arg("--first-packet-timeout")
        .arg("60s")
        .arg("--idle-timeout")
        .arg("3s")
        .recv(&p.sink)
        .expect("recv");
    let n: u64 = 30_000;
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            Mcrgen::streams("239.1.1.1:5001", "g0")
                .count(n)
                .rate("3k")
                .send(&p.generator, MINUTES)
                .expect("send")
        });
        sends(pair.relay(master), "the master");
        // The master's adverts stop reaching the backup (VRRP is IP
        // protocol 112): on the bridge port towards the backup, they are
        // classed into an HTB class whose token bucket is smaller than any
        // packet, which drops them (this kernel has no prio qdisc and no
        // tc actions). The backup becomes master too.
        let port = format!("q{backup}");
        let tc = |args: &str| {
            let args: Vec<&str> = args.split_whitespace().collect();
            p.lan.exec("tc", &args).expect("tc");
        };
        tc(&format!("qdisc add dev {port} root handle 1: htb default 1"));
        tc(&format!("class add dev {port} parent 1: classid 1:1 htb rate 10gbit"));
        tc(&format!(
            "class add dev {port} parent 1: classid 1:2 htb rate 8bit ceil 8bit"
        ));
        tc(&format!(
            "qdisc add dev {port} parent 1:2 handle 20: tbf rate 8bit burst 10 limit 10"
        ));
        tc(&format!(
            "filter add dev {port} parent 1: protocol ip u32 match ip protocol 112 0xff flowid 1:2"
        ));
        let deadline = Instant::now() + WAIT;
        while !(metrics_active(&p.relays[0]) && metrics_active(&p.relays[1])) {
            assert!(
                Instant::now() < deadline,
                "no split brain\n{}\n{}",
                pair.log(0),
                pair.log(1)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sends(pair.relay(backup), "the second master");
        sends(pair.relay(master), "the first master, still");
        // The adverts pass again: the backup's priority is lower, it
        // steps down.
        tc(&format!("qdisc del dev {port} root"));
        let deadline = Instant::now() + WAIT;
        while role_of(pair.relay(backup)) != Role::Standby {
            assert!(
                Instant::now() < deadline,
                "split brain never healed\n{}",
                pair.log(backup)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(metrics_active(&p.relays[master]) && !metrics_active(&p.relays[backup]));
        assert_eq!(sender.join().expect("sender").packets, n);
    });
    let got = rx.finish(MINUTES).expect("recv done");
    let st = &got.report.streams[0];
    assert!(st.duplicated > 0, "both masters sent: duplicates at the sink: {st:?}");
    assert_eq!((st.corrupted, st.lost), (0, 0), "{st:?}");
    eprintln!("split brain: {} of {n} packets arrived twice, none lost", st.duplicated);
}

/// Two active relays each forward the stream to a third, on a group and a
/// link of its own; the third merges the two copies (ST 2022-7). Killing
/// one relay, restarting it, then killing the other loses nothing: the
/// sink gets every packet once, in order, intact.
#[test]
fn a_merging_relay_behind_two_active_relays_loses_nothing_when_either_dies() {
    let _lock = traffic_lock().expect("lock");
    let mut p = Pair::new("pair-merge");
    let merger = p.tb.ns("mrg").expect("ns");
    merger.rp_filter_off().expect("rp_filter");
    for (i, (r, port)) in p.relays.iter().zip(["ia", "ib"]).enumerate() {
        p.tb.veth(r, "out0", &merger, port).expect("veth");
        r.addr("out0", &format!("10.4{}.0.1/24", i + 1)).expect("addr");
        merger.addr(port, &format!("10.4{}.0.2/24", i + 1)).expect("addr");
    }
    p.tb.veth(&merger, "out0", &p.sink, "in0").expect("veth");
    merger.addr("out0", "10.43.0.1/24").expect("addr");
    p.sink.addr("in0", "10.43.0.2/24").expect("addr");

    let groups = ["out0:239.10.1.1:6001", "out0:239.10.2.1:6001"];
    let start = |i: usize| {
        let r = Relay::start(&p.relays[i], &[]).expect("mcrd");
        r.add_rule("feed", INPUT, &[groups[i]]).expect("rule added");
        r
    };
    let mut relays = [Some(start(0)), Some(start(1))];
    let merge = Relay::start(&merger, &[]).expect("merging mcrd");
    merge
        .ctl_ok(&[
            "add",
            "m",
            "--input",
            "ia:239.10.1.1:6001",
            "--input",
            "ib:239.10.2.1:6001",
            "--mode",
            "merge",
            "--output",
            "out0:239.20.1.1:7001",
        ])
        .expect("merge rule added");

    let count: u64 = 80_000;
    let rx = Mcrgen::streams("239.20.1.1:7001", "in0")
        .expect(count)
        .wrap("rtp")
        .arg("--first-packet-timeout")
        .arg("120s")
        .arg("--idle-timeout")
        .arg("3s")
        .recv(&p.sink)
        .expect("recv");
    let generator = p.generator.clone();
    std::thread::scope(|s| {
        let sender = s.spawn(move || {
            Mcrgen::streams("239.1.1.1:5001", "g0")
                .count(count)
                .rate(RATE_PPS)
                .wrap("rtp")
                .send(&generator, MINUTES)
                .expect("send")
        });
        let kill = |relays: &mut [Option<Relay>; 2], i: usize| {
            let mut r = relays[i].take().expect("running");
            sends(&r, "before the kill");
            r.signal(Signal::Kill).expect("SIGKILL");
        };
        std::thread::sleep(Duration::from_secs(1));
        kill(&mut relays, 0);
        std::thread::sleep(Duration::from_millis(500));
        relays[0] = Some(start(0));
        sends(relays[0].as_ref().expect("restarted"), "the restarted relay");
        std::thread::sleep(Duration::from_millis(500));
        kill(&mut relays, 1);
        assert_eq!(sender.join().expect("sender").packets, count);
    });
    let got = rx.finish(MINUTES).expect("recv done");
    let s = &got.report.streams[0];
    eprintln!("merge behind two relays, each killed once: {s:?}");
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, merge.log());
    assert_eq!(
        (s.received, s.unique, s.lost, s.duplicated, s.reordered, s.corrupted),
        (count, count, 0, 0, 0, 0),
        "{:?}",
        got.report
    );
    assert!(
        relays[0].is_some() && sent(relays[0].as_ref().expect("a")) > 0,
        "the restarted relay forwarded"
    );
}
