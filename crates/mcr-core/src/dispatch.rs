//! The per-frame decision, in one place: a frame as a ring hands it over
//! and the match table in; the rule that takes it (or why none does) and,
//! per output, what to send (a frame built by
//! [`crate::forward::rewrite_as`], or the payload as a datagram, with the
//! TTL and TOS decided for both by [`leaves_with`]) or why not. A worker
//! only moves the bytes.

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::forward::{Datagram, FrameRewrite, RxChecksum, kernel_tag, leaves_with, parse};
use crate::stats::{OutputCounter, WorkerCounter};
use crate::table::{CompiledOutput, CompiledRule, Lookup, MatchTable, OutputKind};
use crate::wire::{UdpFrameSpec, write_udp_v4_frame};

/// What the ring says about a frame besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    /// Its length on the wire (more than the bytes if the ring cut it).
    pub wire_len: usize,
    /// What the kernel knows of its UDP checksum.
    pub checksum: RxChecksum,
    /// The 802.1Q TCI the kernel took off it, if any.
    pub vlan_tci: Option<u16>,
    /// That tag's TPID, if the kernel says.
    pub vlan_tpid: Option<u16>,
}

/// A datagram a rule takes.
#[derive(Debug, Clone, Copy)]
pub struct Taken<'t> {
    /// Where it is in the frame, and its headers as they came.
    pub datagram: Datagram,
    /// The rule.
    pub rule: &'t CompiledRule,
    /// Which of its inputs it came from (0 for a rule with one).
    pub input: usize,
}

/// What to do for one output of the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<'t> {
    /// Build a frame with `rewrite`, this TTL and TOS
    /// ([`crate::forward::rewrite_as`]),
    /// and send it on the output's interface.
    Frame {
        /// The output's headers.
        rewrite: &'t FrameRewrite,
        /// The TTL or hop limit it leaves with.
        ttl: u8,
        /// The TOS byte or traffic class it leaves with.
        tos: u8,
    },
    /// Send the payload through the output's UDP socket.
    Datagram {
        /// The TTL or hop limit it leaves with.
        ttl: u8,
        /// The TOS byte or traffic class it leaves with.
        tos: u8,
    },
    /// Send the payload on every connection of the output's SRT endpoint
    /// (it re-originates the stream, so the input's TTL does not bound
    /// it).
    Srt,
    /// Hand the payload to the output's RIST sender (which re-originates
    /// it, as SRT does).
    Rist,
    /// Send nothing; count it for the output by this reason.
    Drop(OutputCounter),
}

/// Parses the frame that arrived on `ifindex` and finds the rule that
/// takes it, or says why none does (the reason it is counted by).
pub fn take<'t>(table: &'t MatchTable, ifindex: u32, frame: &[u8], meta: RxMeta) -> Result<Taken<'t>, WorkerCounter> {
    let tag = kernel_tag(meta.vlan_tci, meta.vlan_tpid)?;
    let d = parse(frame, meta.wire_len, meta.checksum, tag)?;
    match table.lookup(ifindex, d.vlan, d.dst, d.dst_port, d.src) {
        Lookup::Rule(rule, input) => Ok(Taken {
            datagram: d,
            rule,
            input,
        }),
        Lookup::NoRule => Err(WorkerCounter::NoRule),
        Lookup::WrongSource => Err(WorkerCounter::WrongSource),
    }
}

/// The TTL a datagram that came in over SRT or RIST starts with (a host's
/// default): an output whose TTL is `decrement` sends it with 63.
pub const CARRIED_IN_TTL: u8 = 64;

/// A datagram that came in over a transport in user space (SRT, RIST), made a
/// frame the rest of the path takes as if a ring had handed it over: its
/// payload already sits at [`crate::wire::UDP_V4_HEADERS`] in `frame`, and the headers
/// are written before it (from `from`, the peer, to the unspecified
/// address: every output writes its own destination).
pub fn carried_in(
    frame: &mut [u8],
    payload_len: usize,
    from: SocketAddrV4,
    ident: u16,
) -> Result<Datagram, WorkerCounter> {
    let spec = UdpFrameSpec {
        dst_mac: [0; 6],
        src_mac: [0; 6],
        src: from,
        dst: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        ttl: CARRIED_IN_TTL,
        dscp: 0,
        ident,
    };
    let len = write_udp_v4_frame(frame, &spec, payload_len).map_err(|_| WorkerCounter::BadLength)?;
    parse(&frame[..len], len, RxChecksum::Valid, None)
}

impl<'t> Taken<'t> {
    /// What output `o` of the rule sends.
    #[inline]
    pub fn verdict(&self, o: &'t CompiledOutput) -> Verdict<'t> {
        match &o.kind {
            OutputKind::Frame(rewrite) => match leaves_with(rewrite.ttl, rewrite.dscp, &self.datagram) {
                Ok((ttl, tos)) => Verdict::Frame { rewrite, ttl, tos },
                Err(reason) => Verdict::Drop(reason),
            },
            OutputKind::Udp { ttl, dscp, .. } => match leaves_with(*ttl, *dscp, &self.datagram) {
                Ok((ttl, tos)) => Verdict::Datagram { ttl, tos },
                Err(reason) => Verdict::Drop(reason),
            },
            OutputKind::Srt(_) => Verdict::Srt,
            OutputKind::Rist(_) => Verdict::Rist,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interfaces::{InterfaceInfo, Interfaces};
    use crate::snapshot::TableSnapshot;
    use crate::wire::{UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};

    fn table(rules: &[(&str, &str, &[&str])]) -> MatchTable {
        let iface =
            |name: &str, index: u32, addr: &str| InterfaceInfo::ethernet(name, index, [addr.parse().expect("literal")]);
        let ifs = Interfaces::new([iface("in0", 2, "10.0.0.2"), iface("out0", 3, "10.0.1.1")]);
        let snap = TableSnapshot::from_text(1, rules, ifs).expect("rules");
        let (t, errors) = MatchTable::compile(&snap);
        assert!(errors.is_empty(), "{errors:?}");
        t
    }

    fn frame(src: &str, dst: &str, ttl: u8, dscp: u8) -> Vec<u8> {
        let payload = [7u8; 32];
        let mut f = vec![0u8; UDP_V4_HEADERS + payload.len()];
        f[UDP_V4_HEADERS..].copy_from_slice(&payload);
        let spec = UdpFrameSpec {
            dst_mac: [1, 0, 0x5e, 1, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: src.parse().expect("literal"),
            dst: dst.parse().expect("literal"),
            ttl,
            dscp,
            ident: 7,
        };
        write_udp_v4_frame(&mut f, &spec, payload.len()).expect("fits");
        f
    }

    #[test]
    fn a_datagram_carried_in_leaves_like_one_that_arrived() {
        let t = table(&[("a", "in0:239.1.1.1:5001", &["out0:239.10.1.1:6001"])]);
        let payload = b"carried over SRT";
        let mut f = vec![0u8; UDP_V4_HEADERS + payload.len()];
        f[UDP_V4_HEADERS..].copy_from_slice(payload);
        let from = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 5), 40000);
        let d = carried_in(&mut f, payload.len(), from, 9).expect("a datagram");
        assert_eq!(&f[d.payload_at..d.payload_at + d.payload_len], payload);
        assert_eq!((d.src, d.ttl), (std::net::IpAddr::V4(*from.ip()), CARRIED_IN_TTL));
        let taken = Taken {
            datagram: d,
            rule: &t.rules()[0],
            input: 0,
        };
        let Verdict::Frame { ttl, .. } = taken.verdict(&taken.rule.outputs[0]) else {
            panic!("a frame");
        };
        assert_eq!(ttl, CARRIED_IN_TTL - 1);
        assert!(carried_in(&mut [0u8; 10], 100, from, 0).is_err());
    }

    fn meta(f: &[u8]) -> RxMeta {
        RxMeta {
            wire_len: f.len(),
            checksum: RxChecksum::Unknown,
            vlan_tci: None,
            vlan_tpid: None,
        }
    }

    #[test]
    fn a_frame_is_taken_by_its_rule_or_counted_by_why_not() {
        let t = table(&[
            ("any", "in0:239.1.1.1:5001", &["out0:239.10.1.1:6001"]),
            ("ssm", "in0:239.1.1.2:5002,source=10.0.0.7", &["out0:239.10.1.2:6002"]),
        ]);
        let f = frame("10.0.0.1:4000", "239.1.1.1:5001", 9, 0);
        let taken = take(&t, 2, &f, meta(&f)).expect("taken");
        assert_eq!(taken.rule.name, "any");
        assert_eq!(
            take(&t, 3, &f, meta(&f)).map(|t| t.rule.name.clone()),
            Err(WorkerCounter::NoRule)
        );
        let other = frame("10.0.0.1:4000", "239.1.1.2:5002", 9, 0);
        assert_eq!(
            take(&t, 2, &other, meta(&other)).map(|t| t.rule.name.clone()),
            Err(WorkerCounter::WrongSource)
        );
        let ssm = frame("10.0.0.7:4000", "239.1.1.2:5002", 9, 0);
        assert_eq!(take(&t, 2, &ssm, meta(&ssm)).expect("taken").rule.name, "ssm");
        // What the parser refuses is counted by its reason.
        assert_eq!(
            take(&t, 2, &f[..20], meta(&f[..20])).map(|t| t.rule.name.clone()),
            Err(WorkerCounter::BadLength)
        );
        // An 802.1ad service tag the kernel took off is no rule's VLAN.
        let tagged = RxMeta {
            vlan_tci: Some(100),
            vlan_tpid: Some(0x88a8),
            ..meta(&f)
        };
        assert_eq!(
            take(&t, 2, &f, tagged).map(|t| t.rule.name.clone()),
            Err(WorkerCounter::VlanTagged)
        );
    }

    #[test]
    fn ttl_and_dscp_are_decided_here_for_frames_and_datagrams_alike() {
        let t = table(&[(
            "r",
            "in0:239.1.1.1:5001",
            &[
                "out0:239.10.1.1:6001",
                "out0:239.10.1.2:6002,ttl=7,dscp=ef",
                "out0:10.0.1.9:7001",
                "out0:10.0.1.9:7002,ttl=3,dscp=cs1",
            ],
        )]);
        // DSCP 10 (af11), TTL 9.
        let f = frame("10.0.0.1:4000", "239.1.1.1:5001", 9, 10);
        let taken = take(&t, 2, &f, meta(&f)).expect("taken");
        let v: Vec<Verdict<'_>> = taken.rule.outputs.iter().map(|o| taken.verdict(o)).collect();
        assert!(matches!(v[0], Verdict::Frame { ttl: 8, tos: 40, .. }), "{:?}", v[0]);
        assert!(matches!(v[1], Verdict::Frame { ttl: 7, tos: 184, .. }), "{:?}", v[1]);
        assert_eq!(v[2], Verdict::Datagram { ttl: 8, tos: 40 });
        assert_eq!(v[3], Verdict::Datagram { ttl: 3, tos: 32 });
        // A TTL of 1 goes no further where it is decremented, either way.
        let last = frame("10.0.0.1:4000", "239.1.1.1:5001", 1, 0);
        let taken = take(&t, 2, &last, meta(&last)).expect("taken");
        let v: Vec<Verdict<'_>> = taken.rule.outputs.iter().map(|o| taken.verdict(o)).collect();
        assert_eq!(v[0], Verdict::Drop(OutputCounter::TtlExpired));
        assert!(matches!(v[1], Verdict::Frame { ttl: 7, .. }));
        assert_eq!(v[2], Verdict::Drop(OutputCounter::TtlExpired));
        assert_eq!(v[3], Verdict::Datagram { ttl: 3, tos: 32 });
    }

    #[test]
    fn the_frame_built_from_a_verdict_is_the_one_rewrite_builds() {
        let t = table(&[("r", "in0:239.1.1.1:5001", &["out0:239.10.1.1:6001,dscp=af41"])]);
        let f = frame("10.0.0.1:4000", "239.1.1.1:5001", 9, 0);
        let taken = take(&t, 2, &f, meta(&f)).expect("taken");
        let Verdict::Frame { rewrite, ttl, tos } = taken.verdict(&taken.rule.outputs[0]) else {
            panic!("a frame output");
        };
        let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
        let n = crate::forward::rewrite_as(&f, &taken.datagram, rewrite, ttl, tos, &mut a).expect("built");
        let m = crate::forward::rewrite(&f, &taken.datagram, rewrite, &mut b).expect("built");
        assert_eq!(a[..n], b[..m]);
    }
}
