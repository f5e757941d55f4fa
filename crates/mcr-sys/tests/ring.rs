//! AF_PACKET receive rings against real frames on a veth pair, in a test
//! bed: both ring formats, fanout, filters and drop counting.

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use mcr_core::bpf::ingress_filter;
use mcr_core::wire::{UDP_V4_HEADERS, UdpFrameSpec, ethernet, write_udp_v4_frame};
use mcr_sys::packet::PacketTx;
use mcr_sys::ring::{Fanout, Filter, FilterInsn, RingConfig, RingVersion, RxRing, filter_insn};
use mcr_testbed::presets::Pipeline;

fn filter_all() -> Vec<FilterInsn> {
    vec![FilterInsn {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: u32::MAX,
    }]
}

fn filter_core() -> Vec<FilterInsn> {
    ingress_filter(&mcr_core::bpf::FilterSpec::default())
        .into_iter()
        .map(|i| filter_insn(i.code, i.jt, i.jf, i.k))
        .collect()
}

fn cfg(version: RingVersion, bytes: usize) -> RingConfig {
    RingConfig {
        version,
        bytes,
        max_frame: 1518,
        block_timeout_ms: 1,
    }
}

/// A frame to `dst`, carrying `seq` in its payload.
fn frame(dst: SocketAddrV4, seq: u32) -> Vec<u8> {
    frame_of(dst, seq, 100)
}

/// The payload byte at `at` of frame `seq` (after the seq itself).
fn pattern(seq: u32, at: usize) -> u8 {
    (seq as usize).wrapping_mul(31).wrapping_add(at) as u8
}

/// A frame to `dst` with `payload_len` bytes of payload: `seq`, then
/// [`pattern`].
fn frame_of(dst: SocketAddrV4, seq: u32, payload_len: usize) -> Vec<u8> {
    let mut f = vec![0u8; UDP_V4_HEADERS + payload_len];
    f[UDP_V4_HEADERS..UDP_V4_HEADERS + 4].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[UDP_V4_HEADERS + 4..].iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
    let dst_mac = ethernet::multicast_mac((*dst.ip()).into()).unwrap_or([2, 0, 0, 0, 0, 2]);
    let spec = UdpFrameSpec {
        dst_mac,
        src_mac: [2, 0, 0, 0, 0, 1],
        src: "10.0.0.1:4000".parse().expect("literal"),
        dst,
        ttl: 8,
        dscp: 0,
        ident: 0,
    };
    write_udp_v4_frame(&mut f, &spec, payload_len).expect("fits");
    f
}

/// Sends `frames` from the generator's veth0 (on a thread inside its
/// namespace).
fn send_from(p: &Pipeline, frames: Vec<Vec<u8>>) {
    let ns = p.generator.name().to_string();
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&ns).expect("enter gen ns");
        let idx = mcr_sys::iface::index("veth0").expect("veth0");
        let tx = PacketTx::open(idx, false).expect("tx");
        for chunk in frames.chunks(32) {
            let refs: Vec<&[u8]> = chunk.iter().map(|f| f.as_slice()).collect();
            let mut off = 0;
            while off < refs.len() {
                off += tx.send(&refs[off..], false).expect("send");
            }
        }
    })
    .join()
    .expect("sender thread");
}

/// Runs `f` on a thread inside the sink's namespace.
fn in_sink<T: Send + 'static>(p: &Pipeline, f: impl FnOnce(u32) -> T + Send + 'static) -> T {
    let ns = p.sink.name().to_string();
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&ns).expect("enter sink ns");
        f(mcr_sys::iface::index("veth1").expect("veth1"))
    })
    .join()
    .expect("sink thread")
}

/// The destination and sequence number of one of the test's frames; `None`
/// for the links' own traffic.
fn seq_of(f: &mcr_sys::ring::RxFrame<'_>) -> Option<(SocketAddrV4, u32)> {
    // The links' own IPv6 traffic (neighbour discovery, MLD reports), sent
    // at moments of the kernel's choosing after they come up, is not ours;
    // every IPv4 frame is.
    if f.data[12..14] != [0x08, 0x00] {
        return None;
    }
    let d = mcr_core::forward::parse(f.data, f.wire_len, mcr_core::forward::RxChecksum::Unknown, None)
        .expect("a valid frame");
    // Every frame says when it arrived: within this test's minute.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64;
    let at = f.arrived_ns.expect("a receive timestamp");
    assert!(at <= now && now - at < 60_000_000_000, "arrived at {at}, now {now}");
    let seq = u32::from_be_bytes(f.data[d.payload_at..d.payload_at + 4].try_into().expect("4 bytes"));
    let std::net::IpAddr::V4(dst) = d.dst else {
        panic!("an IPv4 frame")
    };
    Some((SocketAddrV4::new(dst, d.dst_port), seq))
}

/// Reads frames until `want` arrived or nothing arrives for a second;
/// returns (ring index, destination, seq) per frame.
fn drain(rings: &mut [RxRing], want: usize) -> Vec<(usize, SocketAddrV4, u32)> {
    let mut got = Vec::new();
    let mut last = Instant::now();
    while got.len() < want && last.elapsed() < Duration::from_secs(1) {
        let mut any = false;
        for (r, ring) in rings.iter_mut().enumerate() {
            let n = ring.for_each_ready(64, |f| {
                if let Some((dst, seq)) = seq_of(f) {
                    got.push((r, dst, seq));
                }
            });
            any |= n > 0;
        }
        if any {
            last = Instant::now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    got
}

/// Takes frames one at a time until `want` of the test's arrived (or
/// nothing arrives for a second), and no more; returns their seqs.
fn take(ring: &mut RxRing, want: usize) -> Vec<u32> {
    let mut got = Vec::new();
    let mut last = Instant::now();
    while got.len() < want && last.elapsed() < Duration::from_secs(1) {
        if ring.for_each_ready(1, |f| got.extend(seq_of(f).map(|s| s.1))) > 0 {
            last = Instant::now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    got
}

#[test]
fn both_ring_formats_deliver_every_frame_in_order_and_intact() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    for version in [RingVersion::V2, RingVersion::V3] {
        let p = Pipeline::new("ring-formats", 0).expect("link");
        let mut rings = in_sink(&p, move |idx| {
            vec![RxRing::open(idx, &cfg(version, 4 << 20), Filter::Classic(&filter_all()), None).expect("ring")]
        });
        let dst: SocketAddrV4 = "239.1.1.1:5001".parse().expect("literal");
        send_from(&p, (0..1000).map(|s| frame(dst, s)).collect());
        let got = drain(&mut rings, 1000);
        let seqs: Vec<u32> = got.iter().filter(|g| g.1 == dst).map(|g| g.2).collect();
        assert_eq!(seqs, (0..1000).collect::<Vec<_>>(), "{version:?}");
        let st = rings[0].stats().expect("stats");
        assert_eq!(st.drops, 0, "{version:?}");
        assert!(st.packets >= 1000, "{version:?}: {st:?}");
    }
}

#[test]
fn fanout_gives_each_frame_to_exactly_one_socket_and_keeps_flows_together() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let p = Pipeline::new("ring-fanout", 0).expect("link");
    // The first ring founds a group with an id the kernel picks (no other
    // group has it); the second joins it by that id.
    let mut rings = in_sink(&p, |idx| {
        let open = |fanout| {
            RxRing::open(
                idx,
                &cfg(RingVersion::V2, 16 << 20),
                Filter::Classic(&filter_core()),
                Some(fanout),
            )
            .expect("ring")
        };
        let first = open(Fanout::Found);
        let id = first.fanout_id().expect("fanout id").expect("in a group");
        let second = open(Fanout::Join(id));
        let third = open(Fanout::Join(id));
        let fourth = open(Fanout::Join(id));
        assert_eq!(second.fanout_id().expect("fanout id"), Some(id));
        // The group's program, as mcrd gives it: by flow, but six
        // destinations (the inputs of rules with several) pinned: three
        // to the first member, three to member 6 (the kernel takes it
        // modulo the members: the third socket, in the order they joined).
        let pinned: Vec<mcr_core::bpf::Pin> = (8..14u8)
            .map(|i| mcr_core::bpf::Pin {
                dst: std::net::IpAddr::from([239, 1, 1, i]),
                port: 5000 + u16::from(i),
                member: if i < 11 { 0 } else { 6 },
            })
            .collect();
        let program: Vec<FilterInsn> = mcr_core::bpf::fanout_program(&pinned)
            .into_iter()
            .map(|i| filter_insn(i.code, i.jt, i.jf, i.k))
            .collect();
        mcr_sys::ring::set_fanout_program(first.as_fd(), &program).expect("fanout program");
        vec![first, second, third, fourth]
    });
    let flows: Vec<SocketAddrV4> = (0..50)
        .map(|i| SocketAddrV4::new([239, 1, 1, i as u8 + 1].into(), 5001 + i))
        .collect();
    let mut frames = Vec::new();
    for s in 0..100 {
        for f in &flows {
            frames.push(frame(*f, s));
        }
    }
    // Each ring holds 8192 frames: all 5000 fit before the first read.
    send_from(&p, frames);
    let got = drain(&mut rings, 5000);
    assert_eq!(got.len(), 5000, "every frame once, none twice");
    assert!(rings.iter().all(|r| r.stats().expect("stats").drops == 0));
    let mut by_flow: HashMap<SocketAddrV4, (usize, Vec<u32>)> = HashMap::new();
    for (ring, dst, seq) in got {
        let e = by_flow.entry(dst).or_insert((ring, Vec::new()));
        assert_eq!(e.0, ring, "flow {dst} was split across sockets");
        e.1.push(seq);
    }
    for (dst, (_, seqs)) in &by_flow {
        assert_eq!(seqs, &(0..100).collect::<Vec<_>>(), "flow {dst} out of order");
    }
    let used: std::collections::HashSet<usize> = by_flow.values().map(|v| v.0).collect();
    assert_eq!(used.len(), 4, "50 flows should hash to every socket: {used:?}");
    for pinned in &flows[7..10] {
        assert_eq!(by_flow[pinned].0, 0, "{pinned} is pinned to the first member");
    }
    for pinned in &flows[10..13] {
        assert_eq!(by_flow[pinned].0, 2, "{pinned} is pinned to the third member");
    }
}

#[test]
fn the_filter_keeps_out_what_no_rule_could_take() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let p = Pipeline::new("ring-filter", 0).expect("link");
    let mut rings = in_sink(&p, |idx| {
        vec![
            RxRing::open(
                idx,
                &cfg(RingVersion::V2, 1 << 20),
                Filter::Classic(&filter_core()),
                None,
            )
            .expect("ring"),
        ]
    });
    let group: SocketAddrV4 = "239.1.1.1:5001".parse().expect("literal");
    let unicast: SocketAddrV4 = "10.0.0.2:5001".parse().expect("literal");
    let frames = (0..200)
        .map(|s| frame(if s % 2 == 0 { group } else { unicast }, s))
        .collect();
    send_from(&p, frames);
    let got = drain(&mut rings, 100);
    assert_eq!(got.len(), 100);
    assert!(got.iter().all(|g| g.1 == group));
}

#[test]
fn a_full_ring_counts_its_drops() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    for version in [RingVersion::V2, RingVersion::V3] {
        let p = Pipeline::new("ring-drops", 0).expect("link");
        let mut rings = in_sink(&p, move |idx| {
            vec![RxRing::open(idx, &cfg(version, 1 << 18), Filter::Classic(&filter_core()), None).expect("ring")]
        });
        let dst: SocketAddrV4 = "239.1.1.1:5001".parse().expect("literal");
        send_from(&p, (0..5000).map(|s| frame(dst, s)).collect());
        let st = rings[0].stats().expect("stats");
        let got = drain(&mut rings, 5000);
        assert!(st.drops > 0, "{version:?}: {st:?}");
        assert_eq!(
            got.len() as u64 + st.drops,
            5000,
            "{version:?}: every frame either read or counted as dropped"
        );
    }
}

/// A second reader of the same socket (what a restarted worker is, with the
/// ring the supervisor kept) goes on at the frame after the last one the
/// first handed back (what it took and did not hand back is read again):
/// none lost, none read twice, also mid-block (V3),
/// with an empty ring (the kernel's position is found from the marks), and
/// after the ring filled while nobody read it.
#[test]
fn a_ring_adopted_by_another_reader_goes_on_where_the_first_stopped() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    for version in [RingVersion::V2, RingVersion::V3] {
        let p = Pipeline::new("ring-adopt", 0).expect("link");
        let dst: SocketAddrV4 = "239.1.1.2:5001".parse().expect("literal");
        let mut first = in_sink(&p, move |idx| {
            RxRing::open(idx, &cfg(version, 1 << 20), Filter::Classic(&filter_core()), None).expect("ring")
        });
        let geometry = first.geometry();
        assert_eq!(
            geometry.to_string().parse::<mcr_sys::ring::RingGeometry>(),
            Ok(geometry)
        );
        send_from(&p, (0..300).map(|s| frame(dst, s)).collect());
        assert_eq!(take(&mut first, 123), (0..123).collect::<Vec<_>>(), "{version:?}");
        // It takes 50 more and dies before handing them back (as a worker
        // killed before its batch went out): they are the next reader's.
        // (One take: the next would hand these back.)
        let mut unsent = Vec::new();
        assert_eq!(
            first.take_ready(50, |f| {
                unsent.extend(seq_of(f).map(|s| s.1));
                true
            }),
            50
        );
        assert!(unsent.len() >= 40, "{version:?}: {unsent:?}");
        assert_eq!(
            unsent,
            (123..123 + unsent.len() as u32).collect::<Vec<_>>(),
            "{version:?}"
        );

        // The first reader goes away; a copy of its socket lives on.
        let kept = first.as_fd().try_clone_to_owned().expect("dup");
        drop(first);
        send_from(&p, (300..600).map(|s| frame(dst, s)).collect());
        let mut second = RxRing::adopt(kept.try_clone().expect("dup"), geometry).expect("adopt");
        assert_eq!(
            take(&mut second, 477),
            (123..600).collect::<Vec<_>>(),
            "{version:?}: after 123 taken"
        );
        assert!(take(&mut second, 1).is_empty(), "{version:?}: nothing more");

        // Everything was handed back: the third reader finds where the
        // kernel writes next from the marks alone.
        drop(second);
        let mut third = RxRing::adopt(kept.try_clone().expect("dup"), geometry).expect("adopt");
        send_from(&p, (600..700).map(|s| frame(dst, s)).collect());
        assert_eq!(
            take(&mut third, 100),
            (600..700).collect::<Vec<_>>(),
            "{version:?}: after an empty ring"
        );

        // Nobody reads while far more than the ring holds arrives: the
        // fourth reader starts at the oldest frame waiting and reads on in
        // order; what it reads and what the kernel counted as dropped add
        // up to what was sent.
        drop(third);
        let _ = RxRing::adopt(kept.try_clone().expect("dup"), geometry)
            .expect("adopt")
            .stats();
        send_from(&p, (700..10700).map(|s| frame(dst, s)).collect());
        let mut fourth = RxRing::adopt(kept, geometry).expect("adopt");
        let drops = fourth.stats().expect("stats").drops;
        let got = take(&mut fourth, 10000);
        assert!(drops > 0, "{version:?}: the ring was meant to fill");
        assert_eq!(got.len() as u64 + drops, 10000, "{version:?}: read + dropped = sent");
        assert_eq!(got.first(), Some(&700), "{version:?}: from the oldest");
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{version:?}: in order");
    }
}

/// The interface's MTU grew past what the ring's slots hold (9000 on a
/// ring made for 1500): long frames still arrive whole and in their
/// place among the short ones, in both formats (V2 reads them from the
/// socket's queue, a V3 block holds them). A V2 reader that died after
/// taking a frame's copy and before handing back its slot leaves the
/// queue one frame ahead: the next reader gets that one frame cut (so it
/// is counted) and every later one whole.
#[test]
fn frames_longer_than_the_ring_slots_arrive_whole_and_in_order() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    for version in [RingVersion::V2, RingVersion::V3] {
        let p = Pipeline::new("ring-jumbo", 0).expect("link");
        p.generator.mtu("veth0", 9000).expect("mtu");
        p.sink.mtu("veth1", 9000).expect("mtu");
        let dst: SocketAddrV4 = "239.1.1.3:5001".parse().expect("literal");
        let mut ring = in_sink(&p, move |idx| {
            RxRing::open(idx, &cfg(version, 4 << 20), Filter::Classic(&filter_core()), None).expect("ring")
        });
        // The long frames do not fit a V2 slot; a V3 block holds them.
        let fits = ring.slot_frame_bytes() >= UDP_V4_HEADERS + 8000;
        assert_eq!(
            fits,
            version == RingVersion::V3,
            "{version:?}: {}",
            ring.slot_frame_bytes()
        );
        let len_of = |seq: u32| if seq.is_multiple_of(3) { 8000 } else { 100 };
        send_from(&p, (0..600).map(|s| frame_of(dst, s, len_of(s))).collect());
        let mut got = Vec::new();
        let mut last = Instant::now();
        while got.len() < 600 && last.elapsed() < Duration::from_secs(1) {
            let n = ring.for_each_ready(64, |f| {
                let Some((d, seq)) = seq_of(f) else { return };
                assert_eq!(d, dst);
                assert_eq!(f.data.len(), f.wire_len, "{version:?}: frame {seq} whole");
                assert_eq!(f.data.len(), UDP_V4_HEADERS + len_of(seq), "{version:?}: frame {seq}");
                let payload = &f.data[UDP_V4_HEADERS + 4..];
                assert!(
                    payload.iter().enumerate().all(|(i, b)| *b == pattern(seq, i)),
                    "{version:?}: frame {seq}'s payload"
                );
                got.push(seq);
            });
            if n > 0 {
                last = Instant::now();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(got, (0..600).collect::<Vec<_>>(), "{version:?}");
        assert_eq!(ring.stats().expect("stats").drops, 0, "{version:?}");

        if version == RingVersion::V2 {
            send_from(&p, (0..10).map(|s| frame_of(dst, s, 8000)).collect());
            // A reader takes the first copy and dies before its slot.
            let mut buf = vec![0u8; 1 << 16];
            let (n, _) = mcr_sys::sockopt::recv_gro(ring.as_fd(), &mut buf, true).expect("a copy waits");
            assert_eq!(n, UDP_V4_HEADERS + 8000);
            let mut seen = Vec::new();
            let mut last = Instant::now();
            while seen.len() < 10 && last.elapsed() < Duration::from_secs(1) {
                if ring.for_each_ready(64, |f| {
                    // A cut frame does not parse: its seq is read in place.
                    if f.data[12..14] == [0x08, 0x00] {
                        let at = UDP_V4_HEADERS;
                        let seq = u32::from_be_bytes(f.data[at..at + 4].try_into().expect("4 bytes"));
                        let whole = f.data.len() == f.wire_len;
                        if whole {
                            let payload = &f.data[UDP_V4_HEADERS + 4..];
                            assert!(payload.iter().enumerate().all(|(i, b)| *b == pattern(seq, i)));
                        }
                        seen.push((seq, whole));
                    }
                }) > 0
                {
                    last = Instant::now();
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let want: Vec<(u32, bool)> = (0..10).map(|s| (s, s != 0)).collect();
            assert_eq!(seen, want, "only the frame whose copy was taken is cut");
        }
    }
}
