//! The in-kernel data path, as far as it is pure: which rules it carries,
//! the entries of its maps (the layouts `mcr-bpf/bpf/datapath.c` reads),
//! and the plan that takes the maps from one table to the next without
//! disturbing what did not change.
//!
//! A rule is carried in the kernel (is *fast*) when every output is a
//! multicast frame of the input's family and there are at most
//! [`MAX_FANOUT`] of them, and its input interface has the tc program
//! attached; otherwise the workers forward it from their rings, as before.
//! Every destination rules take gets a map entry either way, so that the
//! program and the rings' filter agree on who forwards each frame: the
//! program takes the clean datagrams of fast rules, the rings everything
//! else.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::arbitrate::framing::Framing;
use crate::forward::FrameRewrite;
use crate::rule::{Dscp, Mode, Ttl};
use crate::stats::{InputCounter, LineCounter, OutputCounter, RuleCounter, StatsLayout};
use crate::table::{CompiledRule, MatchTable, OutputKind};
use crate::wire::ts;

/// The most outputs a rule may have and still be carried in the kernel.
pub const MAX_FANOUT: usize = 256;
/// The socket mark of the sockets MCR holds a port with: the program does
/// not take them for a local listener.
pub const SOCKET_MARK: u32 = 0x4d43_5200;

/// The program's verdict for a frame it leaves alone: it goes on up the
/// host's stack (and to the workers' rings, which saw it before).
pub const TCX_NEXT: i32 = -1;
/// Its verdict for a frame it took: every output got a clone, or counted
/// why not (and an arbitrated copy that was not the first goes nowhere);
/// the frame itself goes no further, not up the host's stack.
pub const TCX_DROP: i32 = 2;

/// `rule.flags`: the program forwards this rule's frames.
pub const RULE_FAST: u32 = 1;
/// `rule.flags`: an any-source entry with no any-source rule (a frame from
/// another source is a `wrong_source`, which the workers count).
pub const RULE_SSM_ONLY: u32 = 2;
/// `rule.flags`: an any-source entry of a destination that also has (S,G)
/// entries (the program looks for the source's own entry first).
pub const RULE_HAS_SOURCES: u32 = 4;
/// `rule.flags`: the health of the rule's input is followed (the program
/// hands each datagram's payload to the `health` ring).
pub const RULE_HEALTH: u32 = 8;
/// `rule.flags`: a line of an arbitrated market-data feed (the program
/// keeps the first copy of each sequence number).
pub const RULE_ARB: u32 = 16;
/// `rule.flags`: an IPv4 key of a rule with an IPv6 output. A datagram
/// without a UDP checksum (0) is the workers': IPv6 needs one, computed
/// over the whole payload, where the program only updates it for what it
/// changes.
pub const RULE_CHECKSUM_FOR_V6: u32 = 32;
/// Arbitrated rules the kernel carries at most (`ARB_RULES`).
pub const ARB_RULES: u32 = 256;
/// Units of one arbitrated rule the kernel follows (`ARB_UNITS`).
pub const ARB_UNITS: u32 = 4;
/// Lines of one arbitrated rule (`ARB_LINES`).
pub const ARB_LINES: u32 = 8;
/// The most header bytes the program reads of a feed (`ARB_HEADER`).
pub const ARB_HEADER: usize = 64;
/// The size of one unit's state (`struct arb_unit`).
pub const ARB_UNIT_SIZE: usize = 544;
/// `output.flags`: keep the source address.
pub const OUT_KEEP_SRC: u8 = 1;
/// `output.flags`: the TTL is fixed (else decremented).
pub const OUT_TTL_FIXED: u8 = 2;
/// `output.flags`: the DSCP is set (else kept).
pub const OUT_DSCP_SET: u8 = 4;
/// `output.flags`: the output is of the other IP version (the program
/// translates). A rule's outputs of the other version come after all of
/// its own.
pub const OUT_OTHER_FAMILY: u8 = 8;

/// What a frame is looked up by (`struct rule_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct RuleKey {
    /// The input interface.
    pub ifindex: u32,
    /// VLAN id, 0 untagged.
    pub vlan: u16,
    /// Destination port.
    pub port: u16,
    /// 4 or 6.
    pub family: u8,
    /// Zero.
    pub pad: [u8; 3],
    /// The source of an (S,G) entry; zero for the any-source entry.
    pub src: [u8; 16],
    /// The destination.
    pub dst: [u8; 16],
}

/// A destination's entry (`struct rule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct RuleValue {
    /// The index of the rule's first counter.
    pub counters: u32,
    /// Its first entry in the outputs array.
    pub first: u32,
    /// How many outputs.
    pub count: u32,
    /// `RULE_*`.
    pub flags: u32,
    /// Arbitrated: the rule's entry in the `arbs` array.
    pub arb: u32,
    /// ... which of its lines the key is.
    pub line: u32,
    /// ... the index of the line's first counter.
    pub in_counters: u32,
    /// ... the index of its line counters.
    pub line_counters: u32,
}

/// An arbitrated rule's framing as the program reads it (`struct arb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct ArbValue {
    /// The sequence number's offset, width (1, 2, 4, 8) and byte order.
    pub seq_off: u16,
    /// Its width.
    pub seq_width: u8,
    /// 1: big-endian.
    pub seq_be: u8,
    /// The message count's offset.
    pub count_off: u16,
    /// Its width; 0: the sequence counts packets.
    pub count_width: u8,
    /// 1: big-endian.
    pub count_be: u8,
    /// The session's offset.
    pub session_off: u16,
    /// Its length; 0: none.
    pub session_len: u8,
    /// 1: a one-byte unit at `unit_off`.
    pub unit_width: u8,
    /// The unit's offset.
    pub unit_off: u16,
    /// 1: the payload starts with its own length (u16 LE).
    pub length_check: u8,
    /// 1: a count of 0xffff ends the session (MoldUDP64).
    pub mold_end: u8,
    /// The shortest payload.
    pub header_len: u16,
    /// The window has 2^bits slots.
    pub bits: u8,
    /// How many lines.
    pub lines: u8,
    /// Zero.
    pub pad: u32,
}

impl ArbValue {
    /// The entry of a rule of `framing` with a `window` and `lines`
    /// lines, if the program can read its header (it reads at most
    /// [`ARB_HEADER`] bytes).
    pub fn of(framing: &Framing, window: u32, lines: usize) -> Option<ArbValue> {
        let g = framing.fields();
        let header_len = framing.header_len();
        if header_len > ARB_HEADER || lines > ARB_LINES as usize {
            return None;
        }
        let count = g.count;
        Some(ArbValue {
            seq_off: g.sequence.offset,
            seq_width: g.sequence.width,
            seq_be: u8::from(g.sequence.big_endian),
            count_off: count.map_or(0, |c| c.offset),
            count_width: count.map_or(0, |c| c.width),
            count_be: count.map_or(0, |c| u8::from(c.big_endian)),
            session_off: g.session.map_or(0, |x| x.offset),
            session_len: g.session.map_or(0, |x| x.len),
            unit_width: g.unit.map_or(0, |u| u.width),
            unit_off: g.unit.map_or(0, |u| u.offset),
            length_check: u8::from(framing.has_length()),
            mold_end: u8::from(*framing == Framing::MoldUdp64),
            header_len: header_len as u16,
            bits: window.max(1).next_power_of_two().trailing_zeros() as u8,
            lines: lines as u8,
            pad: 0,
        })
    }

    /// Slots in each of its windows.
    pub fn window(&self) -> u32 {
        1 << self.bits
    }
}

/// One output (`struct output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct OutputValue {
    /// The output interface.
    pub ifindex: u32,
    /// The index of its first counter.
    pub counters: u32,
    /// The interface's MTU.
    pub mtu: u32,
    /// New destination port.
    pub port: u16,
    /// VLAN id to tag with, 0 untagged.
    pub vlan: u16,
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// `OUT_*`.
    pub flags: u8,
    /// A fixed TTL.
    pub ttl: u8,
    /// A DSCP to set.
    pub dscp: u8,
    /// Zero.
    pub pad: u8,
    /// New destination.
    pub dst: [u8; 16],
    /// New source (unless kept).
    pub src: [u8; 16],
}

/// A unicast address the rings take UDP to (`struct unicast_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct UnicastKey {
    /// The input interface.
    pub ifindex: u32,
    /// 4 or 6.
    pub family: u8,
    /// Zero.
    pub pad: [u8; 3],
    /// The address.
    pub addr: [u8; 16],
}

/// A VLAN the rings take (`struct vlan_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct VlanKey {
    /// The input interface.
    pub ifindex: u32,
    /// The VLAN id.
    pub vlan: u32,
}

/// The payload bytes a whole health record holds (`HEALTH_PAYLOAD`): a
/// whole datagram of a 1500-byte MTU.
pub const HEALTH_PAYLOAD: usize = 1472;
/// `health_head.form`: the payload as it is (`struct health_record`).
pub const HEALTH_WHOLE: u16 = 0;
/// `health_head.form`: the pieces of it the checks read (`struct
/// health_pieces`).
pub const HEALTH_PIECES: u16 = 1;
/// The bytes of one piece (`PIECE`).
pub const PIECE: usize = 16;
/// Transport packets a datagram holds at most (`TS_IN_DATAGRAM`).
const TS_IN_DATAGRAM: usize = 7;
/// Where the pieces start: the first byte, the last, then the transport
/// packets from 0 and from 12 (`struct health_pieces`).
const PIECES_FIRST: usize = 0;
const PIECES_LAST: usize = PIECE;
const PIECES_AT: usize = PIECE + 8;
/// The pieces part of a record.
const PIECES_LEN: usize = PIECES_AT + 2 * TS_IN_DATAGRAM * PIECE;

/// The head of a health record (`struct health_head`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct HealthHeader {
    /// The rule, by the index of its first counter.
    pub rule: u32,
    /// The datagram's UDP payload length.
    pub length: u16,
    /// [`HEALTH_WHOLE`] or [`HEALTH_PIECES`].
    pub form: u16,
    /// When the datagram came (CLOCK_MONOTONIC, ns).
    pub arrived_ns: u64,
    /// Records the data path had lost to a full ring when it wrote this.
    pub missed: u64,
}

const HEAD: usize = std::mem::size_of::<HealthHeader>();
/// The size of a whole health record (`struct health_record`).
pub const HEALTH_RECORD: usize = HEAD + HEALTH_PAYLOAD;
/// The size of a record of pieces (`struct health_pieces`).
pub const HEALTH_PIECES_RECORD: usize = HEAD + PIECES_LEN;

/// One datagram as the `health` ring carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthRecord<'a> {
    /// The record's head.
    pub header: HealthHeader,
    /// What follows the head: the payload (as much of it as the record
    /// holds), or its pieces.
    body: &'a [u8],
}

impl<'a> HealthRecord<'a> {
    /// Reads a record from the ring's bytes; None if they are not one.
    pub fn parse(b: &'a [u8]) -> Option<HealthRecord<'a>> {
        let (header, rest) = HealthHeader::read_from_prefix(b).ok()?;
        let body = match header.form {
            HEALTH_WHOLE => rest.get(..usize::from(header.length).min(HEALTH_PAYLOAD))?,
            HEALTH_PIECES if usize::from(header.length) <= HEALTH_PAYLOAD => rest.get(..PIECES_LEN)?,
            _ => return None,
        };
        Some(HealthRecord { header, body })
    }

    /// What follows the head, as the program wrote it.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// Whether the record has every byte of the payload the health checks
    /// read (not so for a datagram past [`HEALTH_PAYLOAD`]).
    pub fn whole(&self) -> bool {
        self.header.form == HEALTH_PIECES || self.body.len() == usize::from(self.header.length)
    }

    /// The payload as the health checks see it: as it came, or, from
    /// pieces, with every byte the checks read where it was (the others
    /// zero), made in `scratch`. None if the record does not hold it all.
    pub fn payload<'s>(&'s self, scratch: &'s mut Vec<u8>) -> Option<&'s [u8]> {
        if !self.whole() {
            return None;
        }
        if self.header.form == HEALTH_WHOLE {
            return Some(self.body);
        }
        let len = usize::from(self.header.length);
        scratch.clear();
        scratch.resize(len, 0);
        let first = len.min(PIECE);
        scratch[..first].copy_from_slice(&self.body[PIECES_FIRST..PIECES_FIRST + first]);
        if let Some(last) = scratch.last_mut() {
            *last = self.body[PIECES_LAST];
        }
        for (from, off) in piece_offsets(len) {
            scratch[off..off + PIECE].copy_from_slice(&self.body[from..from + PIECE]);
        }
        Some(scratch)
    }
}

/// The transport-packet pieces of a payload of `len` bytes: where each
/// lies in the pieces part (`struct health_pieces`'s `at[base][packet]`)
/// and in the payload. A base's pieces stop at the first that does not
/// fit.
fn piece_offsets(len: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..2).flat_map(move |b| {
        (0..TS_IN_DATAGRAM)
            .map(move |k| (PIECES_AT + (b * TS_IN_DATAGRAM + k) * PIECE, b * 12 + k * ts::PACKET))
            .take_while(move |&(_, off)| off + PIECE <= len)
    })
}

/// Of a stream that is neither RTP nor MPEG-TS, the program hands the
/// health ring one datagram in this long (`HEALTH_SAMPLE_NS`).
pub const HEALTH_SAMPLE_NS: u64 = 25_000_000;

/// Whether the program hands every datagram like `payload` to the health
/// ring (the mirror of `follow`'s test): one the checks may take for RTP
/// (version 2) or MPEG-TS (a sync byte first, or a whole number of
/// transport packets). Of the others it hands on one in
/// [`HEALTH_SAMPLE_NS`] per rule: the checks learn from them only that the
/// stream flows.
pub fn health_looks_into(payload: &[u8]) -> bool {
    let b0 = payload.first().copied().unwrap_or(0);
    b0 & 0xc0 == 0x80 || b0 == ts::SYNC || (!payload.is_empty() && payload.len().is_multiple_of(ts::PACKET))
}

/// The pieces part of a record as the program makes it for `payload`, or
/// None where it sends the payload whole (the mirror of
/// `follow_pieces`, for tests: a record rebuilt from it must look to the
/// health checks exactly like the payload).
pub fn health_pieces(payload: &[u8]) -> Option<Vec<u8>> {
    let len = payload.len();
    if len == 0 || len > HEALTH_PAYLOAD {
        return None;
    }
    let mut out = vec![0u8; PIECES_LEN];
    let first = len.min(PIECE);
    out[PIECES_FIRST..PIECES_FIRST + first].copy_from_slice(&payload[..first]);
    if let Some(&last) = payload.last() {
        out[PIECES_LAST] = last;
    }
    let b0 = payload.first().copied().unwrap_or(0);
    let mut whole = len > 0 && b0 & 0xc0 == 0x80 && b0 & 0x1f != 0;
    for (at, off) in piece_offsets(len) {
        let piece = &payload[off..off + PIECE];
        out[at..at + PIECE].copy_from_slice(piece);
        // A PAT section whose table id lies past the piece.
        whole |= piece[0] == ts::SYNC
            && piece[1] & 0x5f == 0x40
            && piece[2] == 0
            && (piece[3] & 0x20 != 0 || 5 + usize::from(piece[4]) >= PIECE);
    }
    (!whole).then_some(out)
}

fn addr16(a: IpAddr) -> [u8; 16] {
    let mut b = [0u8; 16];
    match a {
        IpAddr::V4(v) => b[..4].copy_from_slice(&v.octets()),
        IpAddr::V6(v) => b = v.octets(),
    }
    b
}

fn family(a: IpAddr) -> u8 {
    if a.is_ipv4() { 4 } else { 6 }
}

/// Why the kernel does not carry a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ineligible {
    /// An output is a unicast host (sent through a UDP socket).
    UnicastOutput,
    /// The rule takes datagrams of both IP versions (which its checks
    /// refuse): the program's outputs are laid out for one version only.
    Translation,
    /// More outputs than [`MAX_FANOUT`].
    TooManyOutputs(usize),
    /// The input interface has no tc program.
    NoProgram,
    /// The rule has several inputs, which one worker combines.
    Redundancy,
    /// An output is SRT: a worker holds its connections.
    SrtOutput,
    /// An input is SRT: a worker takes its datagrams from libsrt.
    SrtInput,
    /// An output is RIST: a worker hands its datagrams to librist.
    RistOutput,
    /// An input is RIST: a worker takes its datagrams from librist.
    RistInput,
    /// Arbitrated, but the feed's header reaches past what the program
    /// reads.
    ArbitrationHeader,
    /// Arbitrated, but the kernel holds as many arbitrated rules as it can.
    ArbitrationFull,
}

impl std::fmt::Display for Ineligible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ineligible::UnicastOutput => f.write_str("a unicast output"),
            Ineligible::Translation => f.write_str("inputs of both IP versions"),
            Ineligible::TooManyOutputs(n) => write!(f, "{n} outputs (the kernel path takes up to {MAX_FANOUT})"),
            Ineligible::NoProgram => f.write_str("no tc program on the input interface"),
            Ineligible::Redundancy => f.write_str("several inputs (a worker merges, arbitrates or fails over)"),
            Ineligible::SrtOutput => f.write_str("an SRT output (a worker holds its connections)"),
            Ineligible::SrtInput => f.write_str("an SRT input (a worker takes its datagrams from libsrt)"),
            Ineligible::RistOutput => f.write_str("a RIST output (a worker hands its datagrams to librist)"),
            Ineligible::RistInput => f.write_str("a RIST input (a worker takes its datagrams from librist)"),
            Ineligible::ArbitrationHeader => write!(
                f,
                "an arbitrated feed whose header reaches past byte {ARB_HEADER} (the kernel path reads no further)"
            ),
            Ineligible::ArbitrationFull => write!(f, "{ARB_RULES} arbitrated rules are in the kernel already"),
        }
    }
}

/// The outputs of `r`, for a datagram arriving as `input` (for its
/// family), if the kernel can carry it.
pub fn outputs_of(r: &CompiledRule, input: IpAddr, layout: &StatsLayout) -> Result<Vec<OutputValue>, Ineligible> {
    match &r.redundancy {
        None => {}
        Some(red) => match red.mode {
            Mode::Arbitrate { framing, window } => {
                if !r.srt_inputs.is_empty() {
                    return Err(Ineligible::SrtInput);
                }
                if !r.rist_inputs.is_empty() {
                    return Err(Ineligible::RistInput);
                }
                if ArbValue::of(&framing, window, red.inputs()).is_none() {
                    return Err(Ineligible::ArbitrationHeader);
                }
            }
            _ => return Err(Ineligible::Redundancy),
        },
    }
    if r.outputs.len() > MAX_FANOUT {
        return Err(Ineligible::TooManyOutputs(r.outputs.len()));
    }
    let mut outputs = r
        .outputs
        .iter()
        .map(|o| match &o.kind {
            // A translated output has a source of its own version (the
            // rule's checks refuse source=keep across versions).
            OutputKind::Frame(fr) if fr.dst.is_ipv4() == input.is_ipv4() || fr.src.is_some() => {
                let mut v = output_value(o.ifindex, o.slot, fr, layout);
                if fr.dst.is_ipv4() != input.is_ipv4() {
                    v.flags |= OUT_OTHER_FAMILY;
                }
                Ok(v)
            }
            OutputKind::Frame(_) => Err(Ineligible::Translation),
            OutputKind::Udp { .. } => Err(Ineligible::UnicastOutput),
            OutputKind::Srt(_) => Err(Ineligible::SrtOutput),
            OutputKind::Rist(_) => Err(Ineligible::RistOutput),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The program translates a frame once, at the first output of the other
    // version: those come last (each keeps its own counters).
    outputs.sort_by_key(|o| o.flags & OUT_OTHER_FAMILY != 0);
    Ok(outputs)
}

fn output_value(ifindex: u32, slot: u32, fr: &FrameRewrite, layout: &StatsLayout) -> OutputValue {
    let mut flags = 0;
    let mut ttl = 0;
    let mut dscp = 0;
    if fr.src.is_none() {
        flags |= OUT_KEEP_SRC;
    }
    if let Ttl::Fixed(t) = fr.ttl {
        flags |= OUT_TTL_FIXED;
        ttl = t;
    }
    if let Dscp::Set(d) = fr.dscp {
        flags |= OUT_DSCP_SET;
        dscp = d;
    }
    OutputValue {
        ifindex,
        counters: layout.output(0, slot, OutputCounter::Packets) as u32,
        mtu: fr.mtu,
        port: fr.dst_port,
        vlan: fr.vlan.unwrap_or(0),
        dst_mac: fr.dst_mac,
        src_mac: fr.src_mac,
        flags,
        ttl,
        dscp,
        pad: 0,
        dst: addr16(fr.dst),
        src: fr.src.map(addr16).unwrap_or_default(),
    }
}

/// [`RULE_CHECKSUM_FOR_V6`] for an IPv4 key whose rule has an IPv6 output.
fn checksum_for_v6(k: &RuleKey, outputs: &[OutputValue]) -> u32 {
    if k.family == 4 && outputs.iter().any(|o| o.flags & OUT_OTHER_FAMILY != 0) {
        RULE_CHECKSUM_FOR_V6
    } else {
        0
    }
}

/// An arbitrated rule's entry and its lines' counters, if it is one the
/// program can read.
fn arb_of(r: &CompiledRule, layout: &StatsLayout) -> Option<(ArbValue, Vec<(u32, u32)>)> {
    let red = r.redundancy.as_ref()?;
    let Mode::Arbitrate { framing, window } = red.mode else {
        return None;
    };
    let n = red.inputs();
    let arb = ArbValue::of(&framing, window, n)?;
    let lines = (0..n)
        .map(|i| {
            let first = red.input_slots.get(i).copied().unwrap_or(0);
            let second = red.line_slot(i).unwrap_or(0);
            (
                layout.input(0, first, InputCounter::Packets) as u32,
                layout.line(0, second, LineCounter::Messages) as u32,
            )
        })
        .collect();
    Some((arb, lines))
}

/// What a key of the rules map points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A rule, by its statistics slot; `has_sources`: the key is an
    /// any-source one whose destination also has (S,G) keys.
    Rule {
        /// The rule's statistics slot.
        slot: u32,
        /// (S,G) keys exist for the same destination.
        has_sources: bool,
        /// Which of the rule's inputs the key is.
        input: usize,
    },
    /// Nothing: another source's (S,G) rules only.
    SsmOnly,
}

/// A rule as the maps hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastRule {
    /// Its name (for reports).
    pub name: String,
    /// The index of its first counter.
    pub counters: u32,
    /// Whether its input's health is followed.
    pub health: bool,
    /// Its outputs, or why the kernel does not carry it.
    pub outputs: Result<Vec<OutputValue>, Ineligible>,
    /// Arbitrated: its framing's entry, and each line's counters (its
    /// first counter, its line counters).
    pub arb: Option<(ArbValue, Vec<(u32, u32)>)>,
}

/// The whole content of the maps for one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FastTable {
    /// Every key of the rules map.
    pub keys: BTreeMap<RuleKey, Target>,
    /// Every rule the keys point at, by statistics slot.
    pub rules: BTreeMap<u32, FastRule>,
    /// Unicast inputs the rings take.
    pub unicast: BTreeSet<UnicastKey>,
    /// VLANs the rings take.
    pub vlans: BTreeSet<VlanKey>,
}

impl FastTable {
    /// The maps' content for `table`; `carried(ifindex)` says whether an
    /// input interface has the program (rules on one that has not are the
    /// workers').
    pub fn compile(table: &MatchTable, layout: &StatsLayout, carried: impl Fn(u32) -> bool) -> FastTable {
        let mut t = FastTable::default();
        // The IP version of each rule's keys: outputs are made for one.
        // (The rule's checks keep a rule's inputs to one version; this
        // holds the program to it whatever comes.)
        let mut versions: BTreeMap<u32, u8> = BTreeMap::new();
        for d in table.destinations() {
            let mut key = RuleKey {
                ifindex: d.ifindex,
                vlan: d.vlan,
                port: d.port,
                family: family(d.dst),
                pad: [0; 3],
                src: [0; 16],
                dst: addr16(d.dst),
            };
            let version = key.family;
            let mut add_rule = |t: &mut FastTable, r: &CompiledRule| {
                if *versions.entry(r.slot).or_insert(version) != version
                    && let Some(rule) = t.rules.get_mut(&r.slot)
                {
                    rule.outputs = Err(Ineligible::Translation);
                }
                t.rules.entry(r.slot).or_insert_with(|| FastRule {
                    name: r.name.clone(),
                    counters: layout.rule(0, r.slot, RuleCounter::Packets) as u32,
                    // An arbitrated line's health is its signal (its
                    // counters say it); the program hands none to the ring.
                    health: r.health && arb_of(r, layout).is_none(),
                    arb: arb_of(r, layout),
                    // What the rule is says why first; then whether its
                    // interface has the program.
                    outputs: outputs_of(r, d.dst, layout).and_then(|o| {
                        if carried(d.ifindex) {
                            Ok(o)
                        } else {
                            Err(Ineligible::NoProgram)
                        }
                    }),
                });
            };
            let has_sources = !d.by_source.is_empty();
            match d.any_source {
                Some(r) => {
                    add_rule(&mut t, r);
                    t.keys.insert(
                        key,
                        Target::Rule {
                            slot: r.slot,
                            has_sources,
                            input: d.any_source_input,
                        },
                    );
                }
                None => {
                    t.keys.insert(key, Target::SsmOnly);
                }
            }
            for ((s, r), &input) in d.by_source.iter().zip(&d.by_source_inputs) {
                add_rule(&mut t, r);
                key.src = addr16(*s);
                t.keys.insert(
                    key,
                    Target::Rule {
                        slot: r.slot,
                        has_sources: false,
                        input,
                    },
                );
            }
            if d.vlan != 0 {
                t.vlans.insert(VlanKey {
                    ifindex: d.ifindex,
                    vlan: u32::from(d.vlan),
                });
            }
            if !d.dst.is_multicast() {
                t.unicast.insert(UnicastKey {
                    ifindex: d.ifindex,
                    family: family(d.dst),
                    pad: [0; 3],
                    addr: addr16(d.dst),
                });
            }
        }
        // An arbitrated rule is the kernel's only if every line is: its
        // copies must meet in one place. And there is room for so many.
        let mut arbitrated = 0;
        let mut lines_off: BTreeSet<u32> = BTreeSet::new();
        for (k, target) in &t.keys {
            if let Target::Rule { slot, .. } = target
                && !carried(k.ifindex)
            {
                lines_off.insert(*slot);
            }
        }
        for (slot, r) in &mut t.rules {
            if r.arb.is_none() || r.outputs.is_err() {
                continue;
            }
            if lines_off.contains(slot) {
                r.outputs = Err(Ineligible::NoProgram);
            } else if arbitrated >= ARB_RULES {
                r.outputs = Err(Ineligible::ArbitrationFull);
            } else {
                arbitrated += 1;
            }
        }
        t
    }

    /// The input interfaces of rules the kernel would carry if they had the
    /// program: those to attach it to.
    pub fn wanted_interfaces(table: &MatchTable, layout: &StatsLayout) -> BTreeSet<u32> {
        let t = FastTable::compile(table, layout, |_| true);
        t.keys
            .iter()
            .filter(|(_, target)| matches!(target, Target::Rule { slot, .. } if t.is_fast(*slot)))
            .map(|(k, _)| k.ifindex)
            .collect()
    }

    /// Whether the kernel carries the rule in `slot`.
    pub fn is_fast(&self, slot: u32) -> bool {
        self.rules.get(&slot).is_some_and(|r| r.outputs.is_ok())
    }

    /// Whether the program forwards a datagram that `slot`'s rule takes
    /// (else the workers do): the rule is the program's, unless an IPv4
    /// datagram without a UDP checksum is bound for an IPv6 output
    /// ([`RULE_CHECKSUM_FOR_V6`]).
    pub fn takes(&self, slot: u32, ipv4_without_checksum: bool) -> bool {
        match self.rules.get(&slot).map(|r| &r.outputs) {
            Some(Ok(outputs)) => !(ipv4_without_checksum && outputs.iter().any(|o| o.flags & OUT_OTHER_FAMILY != 0)),
            _ => false,
        }
    }
}

/// One step of taking the maps from one table to the next, in the order
/// they must happen: outputs first (into entries no key points at yet),
/// then keys, then what is no longer needed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Outputs array entries to write.
    pub outputs: Vec<(u32, OutputValue)>,
    /// Rules map entries to write.
    pub set: Vec<(RuleKey, RuleValue)>,
    /// Rules map entries to remove.
    pub remove: Vec<RuleKey>,
    /// Ring admission entries to add.
    pub unicast_add: Vec<UnicastKey>,
    /// ... and to remove.
    pub unicast_remove: Vec<UnicastKey>,
    /// VLAN admission entries to add.
    pub vlan_add: Vec<VlanKey>,
    /// ... and to remove.
    pub vlan_remove: Vec<VlanKey>,
    /// Arbitrated rules' entries to write (before the keys that name
    /// them), each starting afresh: its units' state zeroed, its race
    /// histogram zeroed, new windows made.
    pub arbs: Vec<(u32, ArbValue)>,
    /// Entries of arbitrated rules that are gone (their windows go, after
    /// the keys).
    pub arbs_gone: Vec<u32>,
}

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The outputs array has no room left.
    #[error("the kernel's outputs array is full ({0} entries)")]
    Full(u32),
}

/// Where each rule's outputs sit in the outputs array.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placed {
    first: u32,
    outputs: Vec<OutputValue>,
}

/// The maps' content as written, and the free room in the outputs array.
#[derive(Debug, Clone)]
pub struct Maps {
    capacity: u32,
    /// Free ranges (first, length), sorted, coalesced.
    free: Vec<(u32, u32)>,
    /// Ranges freed by the last plan: reused only after the next, so that a
    /// program that read a key before it changed never finds its outputs
    /// overwritten.
    cooling: Vec<(u32, u32)>,
    placed: BTreeMap<u32, Placed>,
    keys: BTreeMap<RuleKey, RuleValue>,
    unicast: BTreeSet<UnicastKey>,
    vlans: BTreeSet<VlanKey>,
    /// Arbitrated rules' entries, by rule slot; free entries, and entries
    /// freed by the last plan (reused only after the next).
    arbs: BTreeMap<u32, (u32, ArbValue)>,
    arb_free: Vec<u32>,
    arb_cooling: Vec<u32>,
}

impl Maps {
    /// Empty maps whose outputs array has `capacity` entries.
    pub fn new(capacity: u32) -> Maps {
        Maps {
            capacity,
            free: vec![(0, capacity)],
            cooling: Vec::new(),
            placed: BTreeMap::new(),
            keys: BTreeMap::new(),
            unicast: BTreeSet::new(),
            vlans: BTreeSet::new(),
            arbs: BTreeMap::new(),
            arb_free: (0..ARB_RULES).rev().collect(),
            arb_cooling: Vec::new(),
        }
    }

    /// The entry of the arbitrated rule in `slot`, if the kernel has one.
    pub fn arb_of(&self, slot: u32) -> Option<u32> {
        self.arbs.get(&slot).map(|&(i, _)| i)
    }

    fn alloc(&mut self, n: u32) -> Option<u32> {
        let i = self.free.iter().position(|&(_, len)| len >= n)?;
        let (first, len) = self.free[i];
        if len == n {
            self.free.remove(i);
        } else {
            self.free[i] = (first + n, len - n);
        }
        Some(first)
    }

    fn release(&mut self, first: u32, n: u32) {
        if n == 0 {
            return;
        }
        self.free.push((first, n));
        self.free.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(self.free.len());
        for (f, l) in self.free.drain(..) {
            match merged.last_mut() {
                Some((mf, ml)) if *mf + *ml == f => *ml += l,
                _ => merged.push((f, l)),
            }
        }
        self.free = merged;
    }

    /// What to write to take the maps to `next`; the maps are taken to be
    /// written once the plan is returned. A rule whose outputs did not
    /// change keeps its entries; a rule whose outputs changed gets new ones,
    /// and its keys are switched to them in one write each.
    pub fn plan(&mut self, next: &FastTable) -> Result<Plan, PlanError> {
        let mut work = self.clone();
        let plan = work.plan_on(next)?;
        *self = work;
        Ok(plan)
    }

    fn plan_on(&mut self, next: &FastTable) -> Result<Plan, PlanError> {
        for (f, n) in std::mem::take(&mut self.cooling) {
            self.release(f, n);
        }
        let mut plan = Plan::default();
        let mut placed: BTreeMap<u32, Placed> = BTreeMap::new();
        for (&slot, r) in &next.rules {
            let Ok(outs) = &r.outputs else { continue };
            match self.placed.remove(&slot) {
                Some(p) if p.outputs == *outs => {
                    placed.insert(slot, p);
                }
                old => {
                    let n = outs.len() as u32;
                    let Some(first) = self.alloc(n) else {
                        return Err(PlanError::Full(self.capacity));
                    };
                    for (i, o) in outs.iter().enumerate() {
                        plan.outputs.push((first + i as u32, *o));
                    }
                    if let Some(o) = old {
                        self.cooling.push((o.first, o.outputs.len() as u32));
                    }
                    placed.insert(
                        slot,
                        Placed {
                            first,
                            outputs: outs.clone(),
                        },
                    );
                }
            }
        }
        for (_, p) in std::mem::take(&mut self.placed) {
            self.cooling.push((p.first, p.outputs.len() as u32));
        }
        self.placed = placed;
        // Arbitrated rules: the same framing keeps its entry (and its
        // state); a new or changed one starts afresh in another.
        self.arb_free.append(&mut self.arb_cooling);
        let mut arbs = BTreeMap::new();
        for (&slot, r) in &next.rules {
            let (Ok(_), Some((av, _))) = (&r.outputs, &r.arb) else {
                continue;
            };
            match self.arbs.remove(&slot) {
                Some((i, old)) if old == *av => {
                    arbs.insert(slot, (i, *av));
                }
                old => {
                    let Some(i) = self.arb_free.pop() else {
                        return Err(PlanError::Full(ARB_RULES));
                    };
                    plan.arbs.push((i, *av));
                    if let Some((gone, _)) = old {
                        self.arb_cooling.push(gone);
                        plan.arbs_gone.push(gone);
                    }
                    arbs.insert(slot, (i, *av));
                }
            }
        }
        for (_, (gone, _)) in std::mem::take(&mut self.arbs) {
            self.arb_cooling.push(gone);
            plan.arbs_gone.push(gone);
        }
        self.arbs = arbs;
        let mut keys = BTreeMap::new();
        for (k, t) in &next.keys {
            let v = match t {
                Target::SsmOnly => RuleValue {
                    counters: 0,
                    first: 0,
                    count: 0,
                    flags: RULE_SSM_ONLY | RULE_HAS_SOURCES,
                    arb: 0,
                    line: 0,
                    in_counters: 0,
                    line_counters: 0,
                },
                Target::Rule {
                    slot,
                    has_sources,
                    input,
                } => {
                    let counters = next.rules.get(slot).map_or(0, |r| r.counters);
                    let sources = if *has_sources { RULE_HAS_SOURCES } else { 0 };
                    let health = if next.rules.get(slot).is_some_and(|r| r.health) {
                        RULE_HEALTH
                    } else {
                        0
                    };
                    // An arbitrated line: its rule's entry and its counters.
                    let arb = self.arbs.get(slot).and_then(|&(i, _)| {
                        let lines = &next.rules.get(slot)?.arb.as_ref()?.1;
                        let &(in_counters, line_counters) = lines.get(*input)?;
                        Some((i, *input as u32, in_counters, line_counters))
                    });
                    match self.placed.get(slot) {
                        Some(p) => RuleValue {
                            counters,
                            first: p.first,
                            count: p.outputs.len() as u32,
                            flags: RULE_FAST
                                | sources
                                | health
                                | if arb.is_some() { RULE_ARB } else { 0 }
                                | checksum_for_v6(k, &p.outputs),
                            arb: arb.map_or(0, |a| a.0),
                            line: arb.map_or(0, |a| a.1),
                            in_counters: arb.map_or(0, |a| a.2),
                            line_counters: arb.map_or(0, |a| a.3),
                        },
                        None => RuleValue {
                            counters,
                            first: 0,
                            count: 0,
                            flags: sources,
                            arb: 0,
                            line: 0,
                            in_counters: 0,
                            line_counters: 0,
                        },
                    }
                }
            };
            if self.keys.get(k) != Some(&v) {
                plan.set.push((*k, v));
            }
            keys.insert(*k, v);
        }
        plan.remove = self.keys.keys().filter(|k| !keys.contains_key(k)).copied().collect();
        self.keys = keys;
        plan.unicast_add = next.unicast.difference(&self.unicast).copied().collect();
        plan.unicast_remove = self.unicast.difference(&next.unicast).copied().collect();
        self.unicast = next.unicast.clone();
        plan.vlan_add = next.vlans.difference(&self.vlans).copied().collect();
        plan.vlan_remove = self.vlans.difference(&next.vlans).copied().collect();
        self.vlans = next.vlans.clone();
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interfaces::{InterfaceInfo, Interfaces};
    use crate::snapshot::TableSnapshot;

    fn table(rules: &[(&str, &str, &[&str])]) -> MatchTable {
        let iface = |name: &str, index, addr: &str| {
            InterfaceInfo::ethernet(name, index, [addr, "fd00::9"].map(|a| a.parse().expect("literal")))
        };
        let ifs = Interfaces::new([iface("veth1", 2, "10.0.0.2"), iface("veth2", 3, "10.0.1.1")]);
        let snap = TableSnapshot::from_text(1, rules, ifs).expect("rules");
        let (t, errors) = MatchTable::compile(&snap);
        assert!(errors.is_empty(), "{errors:?}");
        t
    }

    fn layout() -> StatsLayout {
        StatsLayout::new(1)
    }

    #[test]
    fn the_layouts_are_those_of_the_c_program() {
        assert_eq!(std::mem::size_of::<RuleKey>(), 44);
        assert_eq!(std::mem::size_of::<RuleValue>(), 32);
        assert_eq!(std::mem::size_of::<ArbValue>(), 24);
        assert_eq!((HEALTH_RECORD, HEALTH_PIECES_RECORD), (1496, 272));
        assert_eq!(std::mem::size_of::<OutputValue>(), 64);
        assert_eq!(std::mem::size_of::<UnicastKey>(), 24);
        assert_eq!(std::mem::size_of::<VlanKey>(), 8);
    }

    #[test]
    fn multicast_rules_and_translations_are_fast_unicast_is_not() {
        let t = table(&[
            (
                "mc",
                "veth1:239.1.1.1:5001",
                &["veth2:239.10.1.1:6001,ttl=4,dscp=ef,vlan=7"],
            ),
            (
                "uni",
                "veth1:239.1.1.2:5002",
                &["veth2:239.10.1.2:6002", "veth2:10.0.1.2:7000"],
            ),
            ("v6", "veth1:239.1.1.3:5003", &["veth2:[ff3e::1]:6003"]),
        ]);
        let f = FastTable::compile(&t, &layout(), |_| true);
        assert!(f.is_fast(0));
        assert_eq!(f.rules[&1].outputs, Err(Ineligible::UnicastOutput));
        let v6 = f.rules[&2].outputs.as_ref().expect("a translation is fast");
        assert_eq!(v6[0].flags, OUT_OTHER_FAMILY);
        assert_eq!(&v6[0].dst[..2], &[0xff, 0x3e]);
        let o = f.rules[&0].outputs.as_ref().expect("fast")[0];
        assert_eq!((o.ifindex, o.port, o.vlan, o.ttl, o.dscp), (3, 6001, 7, 4, 46));
        assert_eq!(o.flags, OUT_TTL_FIXED | OUT_DSCP_SET);
        assert_eq!(o.dst_mac, [1, 0, 0x5e, 10, 1, 1]);
        assert_eq!(&o.src[..4], &[10, 0, 1, 1], "the interface's address by default");
        assert_eq!(o.counters as usize, layout().output(0, 0, OutputCounter::Packets));
        // Without the program on the input, nothing is fast.
        let none = FastTable::compile(&t, &layout(), |_| false);
        assert_eq!(none.rules[&0].outputs, Err(Ineligible::NoProgram));
        assert_eq!(none.keys.len(), 3, "every destination keeps its entry");
    }

    #[test]
    fn source_specific_rules_get_a_key_per_source_and_an_ssm_only_entry() {
        let t = table(&[(
            "s",
            "veth1:232.1.1.1:5001,source=10.0.0.1,source=10.0.0.5",
            &["veth2:239.10.1.1:6001,source=keep"],
        )]);
        let f = FastTable::compile(&t, &layout(), |_| true);
        assert_eq!(f.keys.len(), 3);
        assert_eq!(f.keys.values().filter(|t| **t == Target::SsmOnly).count(), 1);
        let mut maps = Maps::new(16);
        let plan = maps.plan(&f).expect("room");
        let any = plan
            .set
            .iter()
            .find(|(k, _)| k.src == [0; 16])
            .expect("any-source entry");
        assert_eq!(any.1.flags, RULE_SSM_ONLY | RULE_HAS_SOURCES);
        let o = f.rules[&0].outputs.as_ref().expect("fast")[0];
        assert_eq!(o.flags & OUT_KEEP_SRC, OUT_KEEP_SRC);
    }

    #[test]
    fn unicast_inputs_and_vlans_are_admitted_to_the_rings() {
        let t = table(&[
            ("u", "veth1:10.0.0.2:7001", &["veth2:239.10.7.1:7001"]),
            ("v", "veth1:239.1.1.1:5001,vlan=100", &["veth2:239.10.1.1:6001"]),
        ]);
        let f = FastTable::compile(&t, &layout(), |_| true);
        assert_eq!(f.unicast.len(), 1);
        assert_eq!(f.unicast.iter().next().map(|u| (u.ifindex, u.family)), Some((2, 4)));
        assert_eq!(f.vlans.iter().next(), Some(&VlanKey { ifindex: 2, vlan: 100 }));
    }

    #[test]
    fn a_plan_touches_only_what_changed_and_moves_changed_outputs_to_fresh_entries() {
        let mut maps = Maps::new(16);
        let t1 = table(&[
            (
                "a",
                "veth1:239.1.1.1:5001",
                &["veth2:239.10.1.1:6001", "veth2:239.10.1.2:6002"],
            ),
            ("b", "veth1:239.1.1.2:5002", &["veth2:239.10.2.1:6001"]),
        ]);
        let p1 = maps.plan(&FastTable::compile(&t1, &layout(), |_| true)).expect("room");
        assert_eq!((p1.outputs.len(), p1.set.len(), p1.remove.len()), (3, 2, 0));
        // The same table again: nothing to write.
        let again = maps.plan(&FastTable::compile(&t1, &layout(), |_| true)).expect("room");
        assert_eq!(again, Plan::default());
        // Rule b changes its output: new entries for it, its key rewritten,
        // rule a untouched.
        let t2 = table(&[
            (
                "a",
                "veth1:239.1.1.1:5001",
                &["veth2:239.10.1.1:6001", "veth2:239.10.1.2:6002"],
            ),
            ("b", "veth1:239.1.1.2:5002", &["veth2:239.10.2.9:6001"]),
        ]);
        let p2 = maps.plan(&FastTable::compile(&t2, &layout(), |_| true)).expect("room");
        assert_eq!(p2.outputs.len(), 1);
        assert_eq!(p2.set.len(), 1);
        let old_b = p1.set.iter().find(|(k, _)| k.port == 5002).expect("b").1;
        assert_ne!(
            p2.set[0].1.first, old_b.first,
            "not written over what a running program may read"
        );
        // Rule a goes: its key is removed; its entries are free after the
        // next plan, not this one.
        let t3 = table(&[("b", "veth1:239.1.1.2:5002", &["veth2:239.10.2.9:6001"])]);
        let p3 = maps.plan(&FastTable::compile(&t3, &layout(), |_| true)).expect("room");
        assert_eq!(p3.remove.len(), 1);
        assert!(p3.set.iter().all(|(k, _)| k.port != 5001));
    }

    #[test]
    fn a_full_outputs_array_is_an_error_and_changes_nothing() {
        let mut maps = Maps::new(2);
        let t = table(&[(
            "a",
            "veth1:239.1.1.1:5001",
            &[
                "veth2:239.10.1.1:6001",
                "veth2:239.10.1.2:6002",
                "veth2:239.10.1.3:6003",
            ],
        )]);
        assert_eq!(
            maps.plan(&FastTable::compile(&t, &layout(), |_| true)),
            Err(PlanError::Full(2))
        );
        let small = table(&[("b", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])]);
        assert!(maps.plan(&FastTable::compile(&small, &layout(), |_| true)).is_ok());
    }

    #[test]
    fn a_rule_that_turns_slow_keeps_its_key_without_the_fast_flag() {
        let mut maps = Maps::new(16);
        let fast = table(&[("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])]);
        maps.plan(&FastTable::compile(&fast, &layout(), |_| true))
            .expect("room");
        let slow = table(&[(
            "a",
            "veth1:239.1.1.1:5001",
            &["veth2:239.10.1.1:6001", "veth2:10.0.1.2:7000"],
        )]);
        let p = maps
            .plan(&FastTable::compile(&slow, &layout(), |_| true))
            .expect("room");
        assert_eq!(p.set.len(), 1);
        assert_eq!(p.set[0].1.flags & RULE_FAST, 0);
        assert!(p.remove.is_empty());
    }

    #[test]
    fn a_followed_rule_sends_its_health_and_one_turned_off_stops() {
        let mut maps = Maps::new(16);
        let t = table(&[("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])]);
        let mut f = FastTable::compile(&t, &layout(), |_| true);
        let p = maps.plan(&f).expect("room");
        assert_eq!(p.set[0].1.flags, RULE_FAST | RULE_HEALTH);
        f.rules.get_mut(&0).expect("rule").health = false;
        let p = maps.plan(&f).expect("room");
        assert_eq!(p.set.len(), 1);
        assert_eq!(p.set[0].1.flags, RULE_FAST);
    }

    /// A record as the program writes it for `payload`: pieces where it
    /// would, else whole.
    fn record_of(payload: &[u8]) -> Vec<u8> {
        let (form, body) = match health_pieces(payload) {
            Some(p) => (HEALTH_PIECES, p),
            None => (HEALTH_WHOLE, payload[..payload.len().min(HEALTH_PAYLOAD)].to_vec()),
        };
        let header = HealthHeader {
            rule: 40,
            length: payload.len() as u16,
            form,
            arrived_ns: 7,
            missed: 2,
        };
        let mut b = header.as_bytes().to_vec();
        b.extend_from_slice(&body);
        b.resize(HEALTH_RECORD, 0xee);
        b
    }

    #[test]
    fn health_records_are_read_as_the_program_writes_them() {
        let mut scratch = Vec::new();
        // Short and odd payloads go as pieces too (these short enough
        // that the first 16 bytes and the last are all of them).
        for payload in [&b"hello"[..], &[0x80; 17][..]] {
            let b = record_of(payload);
            let r = HealthRecord::parse(&b).expect("record");
            assert_eq!((r.header.rule, r.header.missed, r.header.form), (40, 2, HEALTH_PIECES));
            assert!(r.whole());
            assert_eq!(r.payload(&mut scratch), Some(payload));
        }
        // A PAT section whose table id is in its piece goes as pieces; one
        // whose pointer field or adaptation field puts it further, whole.
        for rtp in [false, true] {
            assert!(health_pieces(&ts_payload(rtp, &[], (false, 0))).is_some());
            assert!(health_pieces(&ts_payload(rtp, &[], (false, 10))).is_some());
            assert!(health_pieces(&ts_payload(rtp, &[], (false, 11))).is_none());
            assert!(health_pieces(&ts_payload(rtp, &[], (true, 0))).is_none());
        }
        // An empty payload: whole (there is nothing to take pieces of).
        let b = record_of(&[]);
        let r = HealthRecord::parse(&b).expect("record");
        assert_eq!(r.header.form, HEALTH_WHOLE);
        assert_eq!(r.payload(&mut scratch), Some(&[][..]));
        // RTP with a CSRC: whole.
        let mut rtp = vec![0x81; 300];
        rtp[0] = 0x81;
        let b = record_of(&rtp);
        let r = HealthRecord::parse(&b).expect("record");
        assert_eq!(r.header.form, HEALTH_WHOLE);
        assert_eq!(r.payload(&mut scratch), Some(&rtp[..]));
        // A jumbo datagram: only the first HEALTH_PAYLOAD bytes, not looked into.
        let big = vec![0x47; 9000];
        let b = record_of(&big);
        let r = HealthRecord::parse(&b).expect("record");
        assert!(!r.whole());
        assert_eq!(r.payload(&mut scratch), None);
        // Not a record: an unknown form, pieces of a datagram too long for
        // them, or too short.
        let mut bad = record_of(b"hello");
        bad[6] = 9;
        assert_eq!(HealthRecord::parse(&bad), None);
        let mut bad = record_of(b"hello");
        bad[4..6].copy_from_slice(&9000u16.to_ne_bytes());
        assert_eq!(HealthRecord::parse(&bad), None);
        assert_eq!(HealthRecord::parse(&[0; 10]), None);
    }

    /// MPEG-TS in UDP or in RTP (seven packets: a PAT, six of PID 0x100),
    /// with what `damage` says broken.
    fn ts_payload(rtp: bool, damage: &[(usize, u8)], pat: (bool, u8)) -> Vec<u8> {
        let base = if rtp { 12 } else { 0 };
        let mut b = vec![0u8; base + 7 * ts::PACKET];
        if rtp {
            crate::wire::rtp::RtpHeader::write(&mut b, 33, 5, 90, 7);
        }
        for k in 0..7 {
            let p = &mut b[base + k * ts::PACKET..base + (k + 1) * ts::PACKET];
            let pid = if k == 0 { 0 } else { 0x100 };
            ts::write_header(p, pid, k < 2, k as u8);
            p[4] = 0;
            p[5] = 0;
        }
        // The PAT: an adaptation field, or a pointer field, or neither.
        let (af, pointer) = pat;
        let p = &mut b[base..base + ts::PACKET];
        if af {
            p[3] |= 0x20;
            p[4] = 3;
        } else {
            p[4] = pointer;
        }
        for &(at, v) in damage {
            let n = b.len();
            b[at % n] = v;
        }
        b
    }

    proptest::proptest! {
        /// A payload the program does not hand on every time changes
        /// nothing the checks hold, whatever came before: only that the
        /// stream flows is learnt from it.
        #[test]
        fn what_the_program_samples_the_checks_would_not_count(
            before in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..1500),
            kind in 0u8..3,
        ) {
            let mut h = crate::health::InputHealth::default();
            // Something first: noise, or a stream of each kind.
            let first = match kind {
                0 => before,
                1 => ts_payload(false, &[], (false, 0)),
                _ => ts_payload(true, &[], (false, 0)),
            };
            h.observe(&first, 0);
            proptest::prop_assume!(!health_looks_into(&payload));
            let was = h.clone();
            proptest::prop_assert_eq!(h.observe(&payload, 1), None);
            proptest::prop_assert_eq!(h.carries, was.carries);
            proptest::prop_assert_eq!(h.rtp.counts(), was.rtp.counts());
            proptest::prop_assert_eq!(h.ts.counts(), was.ts.counts());
        }

        /// What the health checks make of a payload rebuilt from the
        /// program's pieces is what they make of the payload itself: every
        /// count, datagram after datagram.
        #[test]
        fn the_checks_see_in_the_pieces_what_they_see_in_the_payload(
            datagrams in proptest::collection::vec(
                (0u8..4, proptest::collection::vec((0usize..1400, proptest::num::u8::ANY), 0..4), proptest::bool::ANY, 0u8..14, 0usize..1400),
                1..40,
            )
        ) {
            let mut full = crate::health::InputHealth::default();
            let mut pieced = crate::health::InputHealth::default();
            let mut scratch = Vec::new();
            for (i, (kind, damage, af, pointer, cut)) in datagrams.into_iter().enumerate() {
                let payload = match kind {
                    0 => ts_payload(false, &damage, (af, pointer)),
                    1 => ts_payload(true, &damage, (af, pointer)),
                    // Cut short: RTP or noise of any length.
                    2 => ts_payload(true, &damage, (af, pointer))[..cut.min(12 + 7 * ts::PACKET)].to_vec(),
                    _ => damage.iter().map(|&(_, v)| v).cycle().take(cut).collect(),
                };
                let b = record_of(&payload);
                let r = HealthRecord::parse(&b).expect("record");
                let seen = r.payload(&mut scratch).expect("whole").to_vec();
                let t = i as u64 * 1_000_000;
                proptest::prop_assert_eq!(full.observe(&payload, t), pieced.observe(&seen, t));
                proptest::prop_assert_eq!(full.carries, pieced.carries);
                proptest::prop_assert_eq!(full.rtp.counts(), pieced.rtp.counts());
                proptest::prop_assert_eq!(full.ts.counts(), pieced.ts.counts());
            }
        }
    }
}
