//! SRT and RIST across an impaired path, against third-party peers: 40 ms of delay
//! each way, 2 % loss and 1 % reordering of every UDP datagram (data,
//! ACKs, NAKs), made by two `mcrgen impair --match udp` in a namespace
//! between two of the line's nodes, one per direction (this kernel has no
//! netem). With an SRT latency of 400 ms, five times the round trip, and
//! after a second of another stream over the connection ([`warm_up`]),
//! `mcrgen recv` must get every datagram of the checked stream once, in
//! order, intact, with its MPEG-TS continuity whole; the latency it
//! measured is printed, never asserted. Peers: srt-live-transmit calling
//! MCR's listener output, and ffmpeg or srt-live-transmit pushing into
//! MCR's listener input; for RIST (a buffer of 400 ms), ristreceiver
//! calling MCR's listener output and ristsender pushing into MCR's
//! listener input.
//!
//! ```text
//! gen (veth0 10.0.0.1) ─ [path] ─ (veth1 10.0.0.2) relay (veth2 10.0.1.1) ─ [path] ─ (veth3 10.0.1.2) sink
//! ```
//!
//! Each test puts the path on one of the two links: the one SRT crosses.

use std::time::{Duration, Instant};

use mcr_core::control::{RuleStats, SrtStatus};
use mcr_testbed::ffmpeg::{Ffmpeg, srt_url};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::rist::RistTool;
use mcr_testbed::srt::LiveTransmit;
use mcr_testbed::traffic::{Impairer, Mcrgen, Received, Sender};
use mcr_testbed::{Ns, Testbed, traffic_lock};
use mcrgen::impair::ImpairReport;

const MINUTES: Duration = Duration::from_secs(180);
/// The impairment, each way.
const FAULTS: [&str; 8] = ["--match", "udp", "--delay", "40ms", "--loss", "2%", "--reorder", "1%"];
/// The SRT latency: at least four round trips of 80 ms.
const LATENCY_MS: u64 = 400;
/// Datagrams checked, at `RATE`: 5 s of an MPEG-TS stream of 10.5 Mb/s
/// (about 100 lost on the way, each repaired).
const COUNT: u64 = 5000;
/// Datagrams sent after them: a loss is noticed (and repaired) only when
/// a later datagram arrives, so the last datagram before a pause can be
/// lost for good. These carry the checked ones' repairs; any of them may
/// be lost.
const TAIL: u64 = 300;
const RATE: u64 = 1000;
/// Datagrams of another stream sent first (see [`warm_up`]).
const WARM_UP: u64 = 1000;

/// The line's namespaces, one of its links crossing a path namespace where
/// two impairers, one per direction, carry its frames.
struct Impaired {
    _tb: Testbed,
    generator: Ns,
    relay: Ns,
    sink: Ns,
    path: Ns,
}

/// Which link crosses the path.
#[derive(Clone, Copy)]
enum Link {
    /// gen ↔ relay.
    In,
    /// relay ↔ sink.
    Out,
}

impl Impaired {
    fn new(tag: &str, impaired: Link) -> Impaired {
        let mut tb = Testbed::new(tag).expect("test bed");
        let generator = tb.ns("gen").expect("ns");
        let relay = tb.ns("relay").expect("ns");
        let sink = tb.ns("sink").expect("ns");
        let path = tb.ns("path").expect("ns");
        for ns in [&generator, &relay, &sink, &path] {
            ns.rp_filter_off().expect("rp_filter");
        }
        let links = [
            (
                &generator,
                Chain::GEN_IF,
                Chain::GEN_ADDR,
                &relay,
                Chain::RELAY_IN_IF,
                Chain::RELAY_IN_ADDR,
            ),
            (
                &relay,
                Chain::RELAY_OUT_IF,
                Chain::RELAY_OUT_ADDR,
                &sink,
                Chain::SINK_IF,
                Chain::SINK_ADDR,
            ),
        ];
        for (k, (a, a_if, a_addr, b, b_if, b_addr)) in links.into_iter().enumerate() {
            if matches!((k, impaired), (0, Link::In) | (1, Link::Out)) {
                tb.veth(a, a_if, &path, "p_a").expect("veth");
                tb.veth(&path, "p_b", b, b_if).expect("veth");
                // The impairers pass on frames as they read them: a UDP
                // checksum the sender's veth left for the "hardware" to
                // fill in would reach the far end unfilled, and be dropped
                // there. The two ends compute their checksums themselves.
                a.exec("ethtool", ["-K", a_if, "tx", "off"]).expect("ethtool");
                b.exec("ethtool", ["-K", b_if, "tx", "off"]).expect("ethtool");
            } else {
                tb.veth(a, a_if, b, b_if).expect("veth");
            }
            a.addr(a_if, &format!("{a_addr}/24")).expect("addr");
            b.addr(b_if, &format!("{b_addr}/24")).expect("addr");
        }
        Impaired {
            _tb: tb,
            generator,
            relay,
            sink,
            path,
        }
    }

    /// Starts the two impairers: (towards the relay's side b, back).
    fn impair(&self) -> (Impairer, Impairer) {
        let start = |from: &str, to: &str, seed: &str| {
            let mut args = vec!["--in", from, "--out", to, "--seed", seed];
            args.extend_from_slice(&FAULTS);
            Impairer::start(&self.path, &args).expect("mcrgen impair")
        };
        (start("p_a", "p_b", "1"), start("p_b", "p_a", "2"))
    }
}

/// Waits (at most 60 s) until `ok` holds of `rule`'s statistics.
fn wait_for_rule(relay: &Relay, rule: &str, what: &str, ok: impl Fn(&RuleStats) -> bool) -> RuleStats {
    let start = Instant::now();
    loop {
        let stats = relay.stats().expect("stats");
        let r = stats.rules.into_iter().find(|r| r.name == rule);
        if let Some(r) = r.as_ref().filter(|r| ok(r)) {
            return r.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no {what} within 60 s: {r:?}\n{}",
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most 60 s) until `ok` holds of the SRT status `find` takes
/// from `rule`'s statistics.
fn wait_until(
    relay: &Relay,
    rule: &str,
    what: &str,
    find: impl Fn(&RuleStats) -> Option<SrtStatus>,
    ok: impl Fn(&SrtStatus) -> bool,
) -> SrtStatus {
    let r = wait_for_rule(relay, rule, what, |r| find(r).is_some_and(|s| ok(&s)));
    find(&r).expect("the status just seen")
}

/// The warm-up stream, under way until the checked one starts.
struct WarmUp {
    sender: Sender,
    /// Datagrams the SRT connection had dropped as too late when the
    /// warm-up was done.
    too_late: u64,
}

/// Sends datagrams of another stream (id 9) to `dest` until the checked
/// stream starts ([`send_checked`]); waits until `rule` has forwarded
/// nearly `WARM_UP` of them and a second more. The checked stream then
/// crosses a connection whose round trip libsrt has measured: it starts
/// from 100 ± 50 ms and measures only while data flows, and in a
/// connection's first second a datagram now and then is dropped as too
/// late even at 400 ms (see docs/SRT.md).
fn warm_up(
    n: &Impaired,
    relay: &Relay,
    rule: &str,
    dest: &str,
    find: impl Fn(&RuleStats) -> Option<SrtStatus>,
) -> WarmUp {
    let (most, rate) = ((120 * RATE).to_string(), RATE.to_string());
    let sender = Sender::start(
        &n.generator,
        &[
            "-s",
            dest,
            "-i",
            Chain::GEN_IF,
            "--count",
            &most,
            "--rate",
            &rate,
            "--wrap",
            "ts",
            "--first-id",
            "9",
        ],
    )
    .expect("send the warm-up");
    wait_for_rule(relay, rule, "the warm-up forwarded", |r| {
        r.outputs[0].packets + 20 >= WARM_UP
    });
    // (libsrt's counts are read once a second.)
    std::thread::sleep(Duration::from_millis(LATENCY_MS + 1000));
    let s = wait_until(relay, rule, "the connection", find, |s| s.connections.len() == 1);
    WarmUp {
        sender,
        too_late: s.connections[0].dropped_too_late,
    }
}

/// Sends the checked stream (`COUNT` datagrams and the `TAIL`) from the
/// generator to `dest` right after the warm-up's last datagram, and
/// returns what the sink received at `at` on `iface` (the warm-up's
/// datagrams still on their way passed over), and how many datagrams the
/// warm-up sent. (With a pause longer than a RIST receiver's buffer
/// between the two, as there was when the warm-up stopped first and its
/// tail was waited out, ristreceiver can lose the first datagram after it
/// for good even when it was sent again.)
fn send_checked(n: &Impaired, warm: WarmUp, dest: &str, at: &str, iface: &str) -> (Received, u64) {
    let rx = Mcrgen::streams(at, iface)
        .wrap("ts")
        .arg("--ignore-id")
        .arg(9)
        // (It stops once nothing came for this long: a busy machine may
        // hold the stream up for a while.)
        .arg("--idle-timeout")
        .arg("5s")
        .recv(&n.sink)
        .expect("recv");
    let warmed = warm.sender.stop().expect("the warm-up").packets;
    let got = Mcrgen::streams(dest, Chain::GEN_IF)
        .count(COUNT + TAIL)
        .rate(RATE)
        .wrap("ts")
        .send(&n.generator, MINUTES)
        .map(|_| rx.finish(MINUTES).expect("recv done"))
        .expect("send");
    (got, warmed)
}

/// The kernel's UDP counters in `ns` (`/proc/net/snmp`: `RcvbufErrors`
/// are datagrams dropped because a socket's buffer was full).
fn udp_counters(ns: &Ns) -> String {
    let snmp = ns.exec("cat", ["/proc/net/snmp"]).unwrap_or_default();
    let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
    match udp[..] {
        [names, values] => names
            .split_whitespace()
            .zip(values.split_whitespace())
            .skip(1)
            .map(|(n, v)| format!("{n} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        _ => snmp,
    }
}

/// Every one of the first `COUNT` datagrams arrived once, in order,
/// intact, with the MPEG-TS whole (only the tail after them may miss its
/// end).
fn assert_whole(got: &Received, context: &str) {
    assert_eq!(
        (got.code, got.report.streams.len()),
        (Some(0), 1),
        "{:?}\n{context}",
        got.report.problems
    );
    let s = &got.report.streams[0];
    assert_eq!(
        (
            s.lost,
            s.duplicated,
            s.reordered,
            s.too_late,
            s.corrupted,
            s.wrong_stream,
            s.unrecognized
        ),
        (0, 0, 0, 0, 0, 0, 0),
        "{:?}\n{s:?}\n{context}",
        got.report.problems
    );
    assert!(
        s.highest_seq >= Some(COUNT - 1) && s.unique == s.highest_seq.map_or(0, |h| h + 1),
        "{s:?}\n{context}"
    );
    assert!(got.report.problems.is_empty(), "{:?}\n{context}", got.report.problems);
    let ts = s.health.and_then(|h| h.ts).expect("MPEG-TS health");
    assert_eq!(
        (ts.continuity_errors, ts.sync_byte_errors, ts.pat_errors),
        (0, 0, 0),
        "{ts:?}\n{context}"
    );
}

/// The impairment really happened: datagrams were lost, reordered and
/// delayed both ways (the return way carries SRT's ACKs and NAKs).
fn assert_impaired(data: &ImpairReport, back: &ImpairReport) {
    for r in [data, back] {
        assert!(r.dropped > 0 && r.delayed > 0, "{r:?}");
        assert_eq!(r.delay_min_ns.map(|d| d >= 40_000_000), Some(true), "{r:?}");
    }
    assert!(data.reordered > 0, "{data:?}");
}

/// One line of the table in docs/SRT.md.
fn report(what: &str, budget: &str, got: &Received, data: &ImpairReport, back: &ImpairReport, srt: &str) {
    let l = got.report.total.latency.expect("latency");
    let ms = |ns: u64| ns as f64 / 1e6;
    eprintln!(
        "{what}: {COUNT} datagrams (and {} of {TAIL} after them), none lost, duplicated or reordered; \
         impaired way: {} datagrams, {} dropped, {} reordered; return way: {} datagrams, {} dropped, {} reordered; \
         {srt}; latency sender to receiver min {:.1} ms, median {:.1} ms, p99 {:.1} ms, max {:.1} ms \
         ({budget}, path delay 40 ms each way)",
        got.report.total.unique - COUNT,
        data.matched,
        data.dropped,
        data.reordered,
        back.matched,
        back.dropped,
        back.reordered,
        ms(l.min_ns),
        ms(l.p50_ns),
        ms(l.p99_ns),
        ms(l.max_ns),
    );
}

#[test]
fn multicast_to_an_srt_caller_across_an_impaired_path_loses_nothing() {
    let _lock = traffic_lock().expect("lock");
    let n = Impaired::new("srt-impaired-out", Link::Out);
    let relay = Relay::start(&n.relay, &[]).expect("mcrd");
    relay
        .add_rule(
            "feed",
            &format!("{}:239.1.1.1:5001", Chain::RELAY_IN_IF),
            &[&format!("srt://0.0.0.0:9000,latency={LATENCY_MS},streamid=feed")],
        )
        .expect("rule added");
    let find = |r: &RuleStats| r.outputs.first()?.srt.clone();
    wait_until(&relay, "feed", "listener", find, |s| s.state == "listening");
    let (towards_sink, towards_relay) = n.impair();
    // The remote site: srt-live-transmit calls across the path and puts
    // the stream back on multicast there.
    let caller = LiveTransmit::start(
        &n.sink,
        &format!(
            "srt://{}:9000?streamid=feed&latency={LATENCY_MS}",
            Chain::RELAY_OUT_ADDR
        ),
        // (TTL 0: delivered to the host's own sockets, never sent back
        // through the path.)
        &format!("udp://239.9.9.1:6000?adapter={}&ttl=0", Chain::SINK_ADDR),
        0,
    )
    .expect("srt-live-transmit");
    wait_until(&relay, "feed", "the caller", find, |s| s.connections.len() == 1);
    let warm = warm_up(&n, &relay, "feed", "239.1.1.1:5001", find);
    let too_late_before = warm.too_late;
    let (got, warmed) = send_checked(&n, warm, "239.1.1.1:5001", "239.9.9.1:6000", Chain::SINK_IF);
    // libsrt's counts are read once a second: wait until they are whole.
    let srt = wait_until(&relay, "feed", "every datagram counted", find, |s| {
        s.connections
            .first()
            .is_some_and(|c| c.packets == warmed + COUNT + TAIL)
    });
    let data = towards_sink.stop().expect("impairer");
    let back = towards_relay.stop().expect("impairer");
    let context = format!(
        "{}\n{}\n--- caller\n{}\n--- impairers\n{data:?}\n{back:?}",
        relay.ctl_ok(&["stats"]).unwrap_or_default(),
        relay.log(),
        caller.log()
    );
    assert_whole(&got, &context);
    assert_impaired(&data, &back);
    let c = &srt.connections[0];
    // What the path lost was sent again. Lost for good is only what
    // libsrt gave up as too late (the checked stream lost nothing; the
    // count also holds the warm-up and the tail, so it is printed), never
    // the caller's loss reports (libsrt 1.5.1 counts none here: its
    // retransmissions in live mode follow the caller's periodic reports).
    assert!(c.retransmitted > 0, "{c:?}");
    assert_eq!(c.lost, c.dropped_too_late, "{c:?}");
    assert_eq!((c.queue_full, c.latency_ms), (0, LATENCY_MS), "{c:?}");
    report(
        "multicast -> MCR -> SRT listener -> srt-live-transmit caller -> multicast",
        &format!("SRT latency {LATENCY_MS} ms"),
        &got,
        &data,
        &back,
        &format!(
            "MCR's connection (warm-up included): rtt {:.1} ms, {} reported missing by the caller, {} retransmitted, {} lost for good (dropped too late; {too_late_before} of them by the end of the warm-up)",
            c.rtt_ms, c.reported_missing, c.retransmitted, c.lost
        ),
    );
}

/// The encoder that pushes the stream over SRT into MCR.
enum Encoder {
    Ffmpeg(Ffmpeg),
    LiveTransmit(LiveTransmit),
}

impl Encoder {
    fn log(&mut self) -> String {
        let (exited, log) = match self {
            Encoder::Ffmpeg(f) => (f.exited(), f.log()),
            Encoder::LiveTransmit(l) => (l.exited(), l.log()),
        };
        format!("(exited: {exited:?})\n{log}")
    }
}

#[test]
fn ffmpeg_pushing_srt_across_an_impaired_path_reaches_multicast_whole() {
    push_across_an_impaired_path("srt-impaired-ffmpeg", true);
}

#[test]
fn srt_live_transmit_pushing_srt_across_an_impaired_path_reaches_multicast_whole() {
    push_across_an_impaired_path("srt-impaired-push", false);
}

/// An encoder in the generator's namespace (ffmpeg, or srt-live-transmit)
/// calls MCR's SRT input across the impaired path and pushes the stream;
/// MCR puts it on multicast.
fn push_across_an_impaired_path(tag: &str, ffmpeg: bool) {
    let _lock = traffic_lock().expect("lock");
    let n = Impaired::new(tag, Link::In);
    let relay = Relay::start(&n.relay, &[]).expect("mcrd");
    relay
        .add_rule(
            "contrib",
            &format!("srt://0.0.0.0:9200,latency={LATENCY_MS},streamid=contrib"),
            &[&format!("{}:239.10.9.9:6009", Chain::RELAY_OUT_IF)],
        )
        .expect("rule added");
    let find = |r: &RuleStats| Some(r.srt_inputs.first()?.srt.clone());
    wait_until(&relay, "contrib", "listener", find, |s| s.state == "listening");
    let (towards_relay, towards_gen) = n.impair();
    // The encoder takes the generator's datagrams (sent to its own
    // address: multicast from a host does not loop back to an AF_PACKET
    // sender's own sockets) and pushes them over SRT, each datagram one
    // SRT message, byte for byte.
    let input = format!("{}:5000", Chain::GEN_ADDR);
    let mut encoder = if ffmpeg {
        let mut f = Ffmpeg::datagrams(
            &n.generator,
            // (A 4 MiB socket buffer: ffmpeg's 384 KiB hold 0.3 s of
            // the stream, less than a busy machine may stall it.)
            &format!("udp://{input}?buffer_size=4194304&fifo_size=100000&overrun_nonfatal=1"),
            &srt_url(
                &format!("{}:9200", Chain::RELAY_IN_ADDR),
                true,
                Duration::from_millis(LATENCY_MS),
                1316,
                "contrib",
            ),
            1316,
        )
        .expect("ffmpeg");
        f.wait_for_udp_port(5000, Duration::from_secs(30))
            .expect("ffmpeg's input");
        Encoder::Ffmpeg(f)
    } else {
        let l = LiveTransmit::start(
            &n.generator,
            "udp://:5000",
            &format!(
                "srt://{}:9200?streamid=contrib&latency={LATENCY_MS}",
                Chain::RELAY_IN_ADDR
            ),
            0,
        )
        .expect("srt-live-transmit");
        // It calls at once, and reads its input once connected.
        wait_until(&relay, "contrib", "the call", find, |s| s.connections.len() == 1);
        Encoder::LiveTransmit(l)
    };
    // ffmpeg calls only once its input has given it a datagram, and then
    // sends what it held meanwhile (the call takes about 0.4 s here) in
    // one burst: the warm-up makes it call, and lets libsrt measure the
    // round trip before the checked stream starts.
    let warm = warm_up(&n, &relay, "contrib", &input, find);
    let too_late_before = warm.too_late;
    let (got, warmed) = send_checked(&n, warm, &input, "239.10.9.9:6009", Chain::SINK_IF);
    let data = towards_relay.stop().expect("impairer");
    let back = towards_gen.stop().expect("impairer");
    let context = format!(
        "{:?}\nrelay's UDP: {}\nencoder's UDP: {}\n{}\n{}\n--- encoder {}\n--- impairers\n{data:?}\n{back:?}",
        got.report.streams,
        udp_counters(&n.relay),
        udp_counters(&n.generator),
        relay.ctl_ok(&["stats"]).unwrap_or_default(),
        relay.log(),
        encoder.log()
    );
    assert_whole(&got, &context);
    assert_impaired(&data, &back);
    let srt = wait_until(&relay, "contrib", "every datagram counted", find, |s| {
        s.connections.first().is_some_and(|c| c.packets >= warmed - 20 + COUNT)
    });
    let c = &srt.connections[0];
    assert_eq!(c.stream_id, "contrib", "{c:?}");
    // What the path lost MCR received again; lost for good is only what
    // it gave up as too late, never the gaps it found and had sent again.
    assert!(c.retransmitted > 0, "{c:?}");
    assert_eq!(c.lost, c.dropped_too_late, "{c:?}");
    assert_eq!(c.latency_ms, LATENCY_MS, "{c:?}");
    let stats = relay.stats().expect("stats");
    let r = stats.rules.iter().find(|r| r.name == "contrib").expect("rule");
    assert!(
        r.packets >= warmed - 20 + COUNT && r.outputs[0].packets == r.packets,
        "{r:?}"
    );
    report(
        &format!(
            "{} caller -> SRT -> MCR listener -> multicast",
            if ffmpeg { "ffmpeg" } else { "srt-live-transmit" }
        ),
        &format!("SRT latency {LATENCY_MS} ms"),
        &got,
        &data,
        &back,
        &format!(
            "MCR's connection (warm-up included): rtt {:.1} ms, {} found missing, {} received again, {} lost for good (dropped too late; {too_late_before} of them by the end of the warm-up)",
            c.rtt_ms, c.reported_missing, c.retransmitted, c.lost
        ),
    );
    drop(encoder);
}

/// The RIST recovery buffer both ends ask for: MCR's default (and
/// librist's), twelve round trips. (At 400 ms, five round trips, a CI run
/// on a busy host saw librist give up on one datagram of 5,300: a retry
/// or two late, with 2 % loss each way.)
const BUFFER_MS: u64 = mcr_core::rist::DEFAULT_BUFFER_MS as u64;

#[test]
fn multicast_to_a_rist_receiver_across_an_impaired_path_loses_nothing() {
    let _lock = traffic_lock().expect("lock");
    let n = Impaired::new("rist-impaired-out", Link::Out);
    let relay = Relay::start(&n.relay, &[]).expect("mcrd");
    relay
        .add_rule(
            "feed",
            &format!("{}:239.1.1.1:5001", Chain::RELAY_IN_IF),
            &[&format!("rist://0.0.0.0:8200,buffer={BUFFER_MS}")],
        )
        .expect("rule added");
    let find = |r: &RuleStats| r.outputs.first()?.rist.clone();
    wait_until(&relay, "feed", "listener", find, |s| s.state == "listening");
    let (towards_sink, towards_relay) = n.impair();
    // The remote site: ristreceiver reaches MCR's listener across the
    // path and hands the stream to a port of its host, where it is
    // checked.
    let receiver = RistTool::start(
        &n.sink,
        "ristreceiver",
        1,
        &format!("rist://{}:8200?buffer={BUFFER_MS}", Chain::RELAY_OUT_ADDR),
        "udp://127.0.0.1:6100",
    )
    .expect("ristreceiver");
    wait_until(&relay, "feed", "the receiver", find, |s| s.connections.len() == 1);
    let warm = warm_up(&n, &relay, "feed", "239.1.1.1:5001", find);
    let (got, warmed) = send_checked(&n, warm, "239.1.1.1:5001", "127.0.0.1:6100", "lo");
    // librist's counts are read once a second (the sender's include its
    // RTCP packets).
    let rist = wait_until(&relay, "feed", "every datagram counted", find, |s| {
        s.connections
            .first()
            .is_some_and(|c| c.packets >= warmed + COUNT + TAIL)
    });
    let data = towards_sink.stop().expect("impairer");
    let back = towards_relay.stop().expect("impairer");
    let context = format!(
        "{}\n{}\n--- receiver\n{}\n--- impairers\n{data:?}\n{back:?}",
        relay.ctl_ok(&["stats"]).unwrap_or_default(),
        relay.log(),
        receiver.log()
    );
    assert_whole(&got, &context);
    assert_impaired(&data, &back);
    let c = &rist.connections[0];
    // What the path lost was sent again.
    assert!(c.retransmitted > 0, "{c:?}\n{context}");
    report(
        "multicast -> MCR -> RIST listener -> ristreceiver -> host",
        &format!("RIST buffer {BUFFER_MS} ms"),
        &got,
        &data,
        &back,
        &format!(
            "MCR's peer (warm-up included): rtt {:.1} ms, {} retransmitted",
            c.rtt_ms, c.retransmitted
        ),
    );
}

#[test]
fn ristsender_pushing_across_an_impaired_path_reaches_multicast_whole() {
    let _lock = traffic_lock().expect("lock");
    let n = Impaired::new("rist-impaired-in", Link::In);
    let relay = Relay::start(&n.relay, &[]).expect("mcrd");
    relay
        .add_rule(
            "contrib",
            &format!("rist://0.0.0.0:8210,buffer={BUFFER_MS}"),
            &[&format!("{}:239.10.9.9:6009", Chain::RELAY_OUT_IF)],
        )
        .expect("rule added");
    let find = |r: &RuleStats| Some(r.rist_inputs.first()?.rist.clone());
    wait_until(&relay, "contrib", "listener", find, |s| s.state == "listening");
    let (towards_relay, towards_gen) = n.impair();
    // The encoder: ristsender takes the generator's datagrams (sent to its
    // own address) and reaches MCR's input across the path.
    let input = format!("{}:5000", Chain::GEN_ADDR);
    let sender = RistTool::start(
        &n.generator,
        "ristsender",
        1,
        &format!("udp://@{input}"),
        &format!("rist://{}:8210?buffer={BUFFER_MS}", Chain::RELAY_IN_ADDR),
    )
    .expect("ristsender");
    wait_until(&relay, "contrib", "the sender", find, |s| s.connections.len() == 1);
    let warm = warm_up(&n, &relay, "contrib", &input, find);
    let (got, warmed) = send_checked(&n, warm, &input, "239.10.9.9:6009", Chain::SINK_IF);
    let data = towards_relay.stop().expect("impairer");
    let back = towards_gen.stop().expect("impairer");
    let rist = wait_until(&relay, "contrib", "the flow's counts", find, |s| {
        s.connections.first().is_some_and(|c| c.packets >= warmed + COUNT)
    });
    let context = format!(
        "{:?}\nrelay's UDP: {}\n{}\n{}\n--- sender\n{}\n--- impairers\n{data:?}\n{back:?}",
        got.report.streams,
        udp_counters(&n.relay),
        relay.ctl_ok(&["stats"]).unwrap_or_default(),
        relay.log(),
        sender.log()
    );
    assert_whole(&got, &context);
    assert_impaired(&data, &back);
    let c = &rist.connections[0];
    // What the path lost, a retransmission brought, and nothing was lost
    // for good.
    assert!(c.retransmitted > 0 && c.lost == 0, "{c:?}\n{context}");
    report(
        "ristsender -> RIST -> MCR (RIST input, listener) -> multicast",
        &format!("RIST buffer {BUFFER_MS} ms"),
        &got,
        &data,
        &back,
        &format!(
            "MCR's flow (warm-up included): rtt {:.1} ms, {} recovered, {} lost",
            c.rtt_ms, c.retransmitted, c.lost
        ),
    );
}
