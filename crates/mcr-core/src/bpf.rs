//! The classic BPF program each ingress socket filters with, so that only
//! frames aimed at what rules take enter the ring: IPv4 or IPv6 to a
//! multicast group, or UDP to one of the unicast addresses rules take,
//! untagged or tagged with a VLAN rules take. Everything else (other
//! protocols, other hosts' traffic, other VLANs) never costs the worker a
//! thing. What it lets in is checked by the worker, and whatever is wrong
//! with it counted by reason: IP that is not UDP (IGMP, TCP) to a group,
//! and IP frames too short to hold their header, are let in for that
//! reason.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

// The opcodes used here (linux/bpf_common.h).
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_W_ABS: u16 = 0x20;
const LD_W_LEN: u16 = 0x80;
const AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;
const JA: u16 = 0x05;
const LD_H_IND: u16 = 0x48;
const LD_W_IND: u16 = 0x40;
const LDX_B_MSH: u16 = 0xb1;
const LDX_MEM: u16 = 0x61;
const LD_MEM: u16 = 0x60;
const LD_IMM: u16 = 0x00;
const ST: u16 = 0x02;
const TAX: u16 = 0x07;
const XOR_X: u16 = 0xac;
const MUL_K: u16 = 0x24;
const RSH_K: u16 = 0x74;

/// The most IPv4 unicast addresses the filter names one by one; with more,
/// it lets in UDP to any IPv4 unicast address (the worker counts what no
/// rule takes).
pub const MAX_UNICAST: usize = 200;
/// The same for IPv6 (each takes eight instructions).
pub const MAX_UNICAST_V6: usize = 24;
/// The same for VLANs: with more, every tagged frame is let in.
pub const MAX_VLANS: usize = 200;

/// The ancillary load of "a VLAN tag was taken off this frame"
/// (SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT).
const VLAN_TAG_PRESENT: u32 = 0xffff_f000 + 48;
/// The ancillary load of that tag's TCI (SKF_AD_OFF + SKF_AD_VLAN_TAG).
const VLAN_TAG: u32 = 0xffff_f000 + 44;
/// The ancillary load of that tag's TPID (SKF_AD_OFF + SKF_AD_VLAN_TPID).
const VLAN_TPID: u32 = 0xffff_f000 + 60;

/// What one input interface's filter lets in besides multicast: the
/// unicast addresses and the VLANs its rules take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterSpec {
    /// Unicast destinations (UDP to them is let in).
    pub unicast: Vec<IpAddr>,
    /// VLAN ids (frames tagged with them are let in; untagged frames
    /// always are).
    pub vlans: Vec<u16>,
}

/// A label in a program being assembled.
#[derive(Debug, Clone, Copy)]
struct Label(usize);

/// A jump target: the next instruction, or a label.
#[derive(Debug, Clone, Copy)]
enum To {
    Next,
    L(Label),
}

/// A classic BPF assembler with forward labels. Jumps are 8 bits: the
/// program is laid out in blocks that each end in their own returns, so
/// that no jump reaches far (checked when resolved).
#[derive(Default)]
struct Asm {
    p: Vec<Insn>,
    at: Vec<Option<usize>>,
    fixups: Vec<(usize, To, To)>,
    /// Unconditional jumps (32-bit offsets, for blocks of any length).
    long: Vec<(usize, Label)>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.at.push(None);
        Label(self.at.len() - 1)
    }

    fn bind(&mut self, l: Label) {
        self.at[l.0] = Some(self.p.len());
    }

    fn op(&mut self, code: u16, k: u32) {
        self.p.push(Insn { code, jt: 0, jf: 0, k });
    }

    fn jump(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.fixups.push((self.p.len(), jt, jf));
        self.op(code, k);
    }

    fn ja(&mut self, to: Label) {
        self.long.push((self.p.len(), to));
        self.op(JA, 0);
    }

    fn ret(&mut self, accept: bool) {
        self.op(RET_K, if accept { u32::MAX } else { 0 });
    }

    fn finish(mut self) -> Vec<Insn> {
        for (i, l) in std::mem::take(&mut self.long) {
            let target = self.at[l.0].expect("every label is bound");
            self.p[i].k = u32::try_from(target - i - 1).expect("a program of fewer than 2^32 instructions");
        }
        for (i, jt, jf) in std::mem::take(&mut self.fixups) {
            let off = |t: To| -> u8 {
                match t {
                    To::Next => 0,
                    To::L(l) => {
                        let target = self.at[l.0].expect("every label is bound");
                        u8::try_from(target - i - 1).expect("the filter's blocks keep jumps short")
                    }
                }
            };
            self.p[i].jt = off(jt);
            self.p[i].jf = off(jf);
        }
        self.p
    }
}

/// The filter for an input interface whose rules take `spec` besides
/// untagged multicast.
pub fn ingress_filter(spec: &FilterSpec) -> Vec<Insn> {
    let mut a = Asm::default();
    let (ip, tagged, drop_tagged) = (a.label(), a.label(), a.label());
    a.op(LD_W_ABS, VLAN_TAG_PRESENT);
    a.jump(JEQ_K, 0, To::L(ip), To::L(tagged));
    // A frame the kernel took a tag off: an 802.1Q tag (not an 802.1ad
    // service tag) of a VLAN a rule takes (0: priority tagged only).
    a.bind(tagged);
    a.op(LD_W_ABS, VLAN_TPID);
    if spec.vlans.len() <= MAX_VLANS {
        a.jump(JEQ_K, 0x8100, To::Next, To::L(drop_tagged));
        a.op(LD_W_ABS, VLAN_TAG);
        a.op(AND_K, u32::from(crate::wire::ethernet::VID_MASK));
        a.jump(JEQ_K, 0, To::L(ip), To::Next);
        for &v in &spec.vlans {
            a.jump(JEQ_K, u32::from(v), To::L(ip), To::Next);
        }
    } else {
        a.jump(JEQ_K, 0x8100, To::L(ip), To::L(drop_tagged));
    }
    a.bind(drop_tagged);
    a.ret(false);
    a.bind(ip);
    let (v4, v6, inner_tag) = (a.label(), a.label(), a.label());
    a.op(LD_H_ABS, 12);
    a.jump(JEQ_K, 0x0800, To::L(v4), To::Next);
    a.jump(JEQ_K, 0x86dd, To::L(v6), To::Next);
    // A tag still in the frame (a second one, QinQ, behind the one the
    // kernel took off): let in for the worker to count as vlan_tagged.
    a.jump(JEQ_K, 0x8100, To::L(inner_tag), To::Next);
    a.jump(JEQ_K, 0x88a8, To::L(inner_tag), To::Next);
    a.ret(false);
    a.bind(inner_tag);
    a.ret(true);
    let v4_names: Vec<Ipv4Addr> = spec
        .unicast
        .iter()
        .filter_map(|u| match u {
            IpAddr::V4(v) => Some(*v),
            IpAddr::V6(_) => None,
        })
        .collect();
    let v6_names: Vec<Ipv6Addr> = spec
        .unicast
        .iter()
        .filter_map(|u| match u {
            IpAddr::V6(v) => Some(*v),
            IpAddr::V4(_) => None,
        })
        .collect();
    a.bind(v4);
    ipv4_block(&mut a, &v4_names);
    a.bind(v6);
    ipv6_block(&mut a, &v6_names);
    a.finish()
}

/// IPv4: to a group outside 224.0.0.0/24 and 240/4, or UDP to a named
/// address; a header cut short is let in for the worker to count.
fn ipv4_block(a: &mut Asm, names: &[Ipv4Addr]) {
    let (accept, drop, unicast) = (a.label(), a.label(), a.label());
    a.op(LD_W_LEN, 0);
    a.jump(JGE_K, 34, To::Next, To::L(accept));
    a.op(LD_W_ABS, 30);
    a.jump(JGE_K, 0xe000_0000, To::Next, To::L(unicast));
    // 240/4 is reserved; 224.0.0.0/24 is link-local control traffic (IGMP
    // among it), which no rule takes.
    a.jump(JGE_K, 0xf000_0000, To::L(drop), To::Next);
    a.jump(JGE_K, 0xe000_0100, To::L(accept), To::L(drop));
    a.bind(unicast);
    // To a unicast address, only UDP: the host's own TCP, ICMP... are not
    // MCR's.
    a.op(LD_B_ABS, 23);
    a.jump(JEQ_K, 17, To::Next, To::L(drop));
    if names.len() > MAX_UNICAST {
        a.ret(true);
    } else {
        a.op(LD_W_ABS, 30);
        for n in names {
            a.jump(JEQ_K, u32::from(*n), To::L(accept), To::Next);
        }
    }
    a.bind(drop);
    a.ret(false);
    a.bind(accept);
    a.ret(true);
}

/// IPv6: to a group of wider than link-local scope (MLD and neighbour
/// discovery live in ff02::/16), or UDP right after the fixed header to a
/// named address; a header cut short is let in for the worker to count.
fn ipv6_block(a: &mut Asm, names: &[Ipv6Addr]) {
    let (accept, drop, unicast) = (a.label(), a.label(), a.label());
    a.op(LD_W_LEN, 0);
    a.jump(JGE_K, 54, To::Next, To::L(accept));
    a.op(LD_B_ABS, 38);
    a.jump(JEQ_K, 0xff, To::Next, To::L(unicast));
    a.op(LD_B_ABS, 39);
    a.op(AND_K, 0x0f);
    a.jump(JGT_K, 2, To::L(accept), To::L(drop));
    a.bind(unicast);
    a.op(LD_B_ABS, 20);
    a.jump(JEQ_K, 17, To::Next, To::L(drop));
    if names.len() > MAX_UNICAST_V6 {
        a.ret(true);
    } else {
        for n in names {
            let next = a.label();
            let o = n.octets();
            for (w, at) in [38u32, 42, 46, 50].into_iter().enumerate() {
                let word = u32::from_be_bytes([o[4 * w], o[4 * w + 1], o[4 * w + 2], o[4 * w + 3]]);
                a.op(LD_W_ABS, at);
                let hit = if w == 3 { To::L(accept) } else { To::Next };
                a.jump(JEQ_K, word, hit, To::L(next));
            }
            a.bind(next);
        }
    }
    a.bind(drop);
    a.ret(false);
    a.bind(accept);
    a.ret(true);
}

/// The most inputs of each family on one interface that
/// [`fanout_program`] names one by one; with more, it sends every frame of
/// that family to the first member.
pub const MAX_PINNED: usize = 300;

/// An input whose every frame one worker must take: the inputs of a rule
/// with several inputs (one worker sees every copy of the stream), and
/// those of a rule with SRT or RIST endpoints (worker 0 holds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pin {
    /// The input's destination and port.
    pub dst: IpAddr,
    pub port: u16,
    /// What the program returns for its frames: the kernel takes it
    /// modulo the group's members, so `member % workers` is the worker
    /// (the supervisor opens every group's members in worker order).
    pub member: u32,
}

/// The program that picks which member of an interface's fanout group (so
/// which worker) takes a frame (`PACKET_FANOUT_CBPF`; it sees the frame
/// from the IP header on and returns a number the kernel takes modulo the
/// members). A frame to one of `pinned` goes to the member its pin names;
/// every other datagram goes by a hash of its addresses and ports, so a
/// flow always reaches the same worker.
pub fn fanout_program(pinned: &[Pin]) -> Vec<Insn> {
    let mut a = Asm::default();
    let (v4, v6) = (a.label(), a.label());
    let v4_pins: Vec<(u32, u16, u32)> = pinned
        .iter()
        .filter_map(|p| match p.dst {
            IpAddr::V4(v) => Some((u32::from(v), p.port, p.member)),
            IpAddr::V6(_) => None,
        })
        .collect();
    let v6_pins: Vec<(Ipv6Addr, u16, u32)> = pinned
        .iter()
        .filter_map(|p| match p.dst {
            IpAddr::V6(v) => Some((v, p.port, p.member)),
            IpAddr::V4(_) => None,
        })
        .collect();
    let (not4, other) = (a.label(), a.label());
    a.op(LD_B_ABS, 0);
    a.op(RSH_K, 4);
    a.jump(JEQ_K, 4, To::Next, To::L(not4));
    a.ja(v4);
    a.bind(not4);
    a.jump(JEQ_K, 6, To::Next, To::L(other));
    a.ja(v6);
    a.bind(other);
    a.op(RET_K, 0);
    // IPv4: X is the header's length, the UDP ports follow it.
    a.bind(v4);
    if v4_pins.len() > MAX_PINNED {
        a.op(RET_K, 0);
    }
    a.op(LDX_B_MSH, 0);
    for (dst, port, member) in v4_pins {
        let next = a.label();
        a.op(LD_W_ABS, 16);
        a.jump(JEQ_K, dst, To::Next, To::L(next));
        a.op(LD_H_IND, 2);
        a.jump(JEQ_K, u32::from(port), To::Next, To::L(next));
        a.op(RET_K, member);
        a.bind(next);
    }
    // The ports first, while X is the header's length.
    a.op(LD_W_IND, 0);
    a.op(ST, PORTS);
    start_hash(&mut a);
    for at in [12u32, 16] {
        a.op(LD_W_ABS, at);
        mix_in(&mut a);
    }
    a.op(LD_MEM, PORTS);
    mix_in(&mut a);
    finish_hash(&mut a);
    // IPv6: the ports right after the fixed header (a flow's extension
    // headers are the same for all its packets, so it still hashes alike).
    a.bind(v6);
    if v6_pins.len() > MAX_PINNED {
        a.op(RET_K, 0);
    }
    for (dst, port, member) in v6_pins {
        let next = a.label();
        let o = dst.octets();
        for (w, at) in [24u32, 28, 32, 36].into_iter().enumerate() {
            let word = u32::from_be_bytes([o[4 * w], o[4 * w + 1], o[4 * w + 2], o[4 * w + 3]]);
            a.op(LD_W_ABS, at);
            a.jump(JEQ_K, word, To::Next, To::L(next));
        }
        a.op(LD_H_ABS, 42);
        a.jump(JEQ_K, u32::from(port), To::Next, To::L(next));
        a.op(RET_K, member);
        a.bind(next);
    }
    start_hash(&mut a);
    for at in [8u32, 12, 16, 20, 24, 28, 32, 36, 40] {
        a.op(LD_W_ABS, at);
        mix_in(&mut a);
    }
    finish_hash(&mut a);
    a.finish()
}

/// Scratch memory of the fanout program: the hash so far, and the ports.
const HASH: u32 = 0;
const PORTS: u32 = 1;

/// The hash starts at 0.
fn start_hash(a: &mut Asm) {
    a.op(LD_IMM, 0);
    a.op(ST, HASH);
}

/// Takes the word in A into the hash: hash = (hash ^ word) × a large odd
/// number, so words that change together (a group and its port counting
/// up alike) do not cancel as a plain XOR of them would.
fn mix_in(a: &mut Asm) {
    a.op(TAX, 0);
    a.op(LD_MEM, HASH);
    a.op(XOR_X, 0);
    a.op(MUL_K, 0x9e37_79b1);
    a.op(ST, HASH);
}

/// Mixes the word in A (murmur3's finaliser, so every bit of it moves
/// the low bits the kernel takes modulo the members) and returns it.
fn finish_hash(a: &mut Asm) {
    for (mul, shift) in [(Some(0x85eb_ca6b), 16), (Some(0xc2b2_ae35), 13), (None, 16)] {
        a.op(TAX, 0);
        a.op(RSH_K, shift);
        a.op(XOR_X, 0);
        if let Some(m) = mul {
            a.op(MUL_K, m);
        }
    }
    a.op(RET_A, 0);
}

/// Runs a filter made here over a frame, as the kernel would: returns the
/// number of bytes to keep (0: drop). `tag` is the TCI the kernel took off
/// the frame, if any, and `tpid` its TPID. Only the opcodes this module
/// emits are known: any other drops the frame (tests compare other filters
/// with this one).
pub fn interpret(p: &[Insn], frame: &[u8], tag: Option<u16>, tpid: u16) -> u32 {
    let (mut a, mut x): (u32, u32) = (0, 0);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    loop {
        let Some(&i) = p.get(pc) else { return 0 };
        let load = |at: usize, n: usize| -> Option<u32> {
            frame
                .get(at..at + n)
                .map(|b| b.iter().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
        };
        pc += 1;
        match i.code {
            LD_W_LEN => a = frame.len() as u32,
            LD_W_ABS if i.k == VLAN_TAG_PRESENT => a = u32::from(tag.is_some()),
            LD_W_ABS if i.k == VLAN_TAG => a = u32::from(tag.unwrap_or(0)),
            LD_W_ABS if i.k == VLAN_TPID => a = if tag.is_some() { u32::from(tpid) } else { 0 },
            LD_H_ABS | LD_B_ABS | LD_W_ABS => {
                let n = match i.code {
                    LD_H_ABS => 2,
                    LD_B_ABS => 1,
                    _ => 4,
                };
                match load(i.k as usize, n) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            LD_H_IND | LD_W_IND => {
                let n = if i.code == LD_H_IND { 2 } else { 4 };
                match load(x as usize + i.k as usize, n) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            LDX_B_MSH => match load(i.k as usize, 1) {
                Some(v) => x = 4 * (v & 0xf),
                None => return 0,
            },
            LDX_MEM => x = mem[i.k as usize % 16],
            LD_MEM => a = mem[i.k as usize % 16],
            LD_IMM => a = i.k,
            ST => mem[i.k as usize % 16] = a,
            TAX => x = a,
            XOR_X => a ^= x,
            MUL_K => a = a.wrapping_mul(i.k),
            RSH_K => a >>= i.k,
            RET_A => return a,
            JA => pc += i.k as usize,
            AND_K => a &= i.k,
            JEQ_K | JGE_K | JGT_K => {
                let t = match i.code {
                    JEQ_K => a == i.k,
                    JGE_K => a >= i.k,
                    _ => a > i.k,
                };
                pc += usize::from(if t { i.jt } else { i.jf });
            }
            RET_K => return i.k,
            _ => return 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_tagged(p: &[Insn], frame: &[u8], tag: Option<u16>) -> u32 {
        interpret(p, frame, tag, 0x8100)
    }

    fn run_tpid(p: &[Insn], frame: &[u8], tag: Option<u16>, tpid: u16) -> u32 {
        interpret(p, frame, tag, tpid)
    }

    fn run(p: &[Insn], frame: &[u8]) -> u32 {
        run_tagged(p, frame, None)
    }

    fn filter(unicast: &[&str], vlans: &[u16]) -> Vec<Insn> {
        ingress_filter(&FilterSpec {
            unicast: unicast.iter().map(|a| a.parse().expect("literal")).collect(),
            vlans: vlans.to_vec(),
        })
    }

    fn udp_to(dst: [u8; 4], proto: u8, ethertype: u16) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[23] = proto;
        f[30..34].copy_from_slice(&dst);
        f
    }

    fn udp6_to(dst: &str, next: u8) -> Vec<u8> {
        let mut f = vec![0u8; 62];
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        f[20] = next;
        f[38..54].copy_from_slice(&dst.parse::<Ipv6Addr>().expect("literal").octets());
        f
    }

    /// An IPv4 or IPv6 UDP datagram's headers, from the IP header on (as a
    /// fanout program sees it).
    fn datagram(src: &str, dst: &str, sport: u16, dport: u16, options: usize) -> Vec<u8> {
        let (src, dst): (IpAddr, IpAddr) = (src.parse().expect("literal"), dst.parse().expect("literal"));
        let mut d = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(g)) => {
                let mut d = vec![0u8; 20 + options];
                d[0] = 0x40 | (5 + options / 4) as u8;
                d[9] = 17;
                d[12..16].copy_from_slice(&s.octets());
                d[16..20].copy_from_slice(&g.octets());
                d
            }
            (IpAddr::V6(s), IpAddr::V6(g)) => {
                let mut d = vec![0u8; 40];
                d[0] = 0x60;
                d[6] = 17;
                d[8..24].copy_from_slice(&s.octets());
                d[24..40].copy_from_slice(&g.octets());
                d
            }
            _ => panic!("one family"),
        };
        d.extend_from_slice(&sport.to_be_bytes());
        d.extend_from_slice(&dport.to_be_bytes());
        d.extend_from_slice(&[0, 8, 0, 0]);
        d
    }

    #[test]
    fn the_fanout_program_pins_inputs_to_their_member_and_hashes_the_rest_by_flow() {
        let pin = |dst: &str, member| Pin {
            dst: dst.parse().expect("literal"),
            port: 5001,
            member,
        };
        let pinned = vec![
            pin("239.1.1.1", 0),
            pin("ff3e::1", 0),
            pin("239.1.1.3", 7),
            pin("ff3e::3", 9),
        ];
        let p = fanout_program(&pinned);
        let members = 2;
        let pick = |d: &[u8]| interpret(&p, d, None, 0) % members;
        // Every packet of a pinned input, from any source and port, with
        // or without IP options: the member its pin names (modulo the
        // members, as the kernel takes it).
        for sport in 1000..1200 {
            for src in ["10.0.0.1", "10.0.0.77"] {
                assert_eq!(pick(&datagram(src, "239.1.1.1", sport, 5001, 0)), 0);
                assert_eq!(pick(&datagram(src, "239.1.1.1", sport, 5001, 8)), 0);
                assert_eq!(pick(&datagram(src, "239.1.1.3", sport, 5001, 0)), 1);
                assert_eq!(pick(&datagram(src, "239.1.1.3", sport, 5001, 8)), 1);
            }
            assert_eq!(pick(&datagram("2001:db8::1", "ff3e::1", sport, 5001, 0)), 0);
            assert_eq!(pick(&datagram("2001:db8::1", "ff3e::3", sport, 5001, 0)), 1);
        }
        // Other flows spread over both members, each always to the same.
        let mut seen = [0u32; 2];
        for sport in 1000..1200 {
            for (src, dst, dport) in [
                ("10.0.0.1", "239.1.1.1", 5002),
                ("10.0.0.1", "239.1.1.2", 5001),
                ("2001:db8::1", "ff3e::2", 5001),
            ] {
                let d = datagram(src, dst, sport, dport, 0);
                let m = pick(&d);
                assert_eq!(m, pick(&d), "a flow goes to one member");
                seen[m as usize] += 1;
            }
        }
        assert!(seen[0] > 150 && seen[1] > 150, "spread: {seen:?}");
        // Streams that differ only in group and port (one sender, one
        // source port) spread over four members too.
        let p4 = fanout_program(&[]);
        let mut four = [0u32; 4];
        for i in 1..=20u16 {
            let d = datagram("10.0.0.1", &format!("239.1.1.{i}"), 40000, 5000 + i, 0);
            four[(interpret(&p4, &d, None, 0) % 4) as usize] += 1;
            // Sources and groups that count up together, too.
            let d = datagram(&format!("10.0.0.{i}"), &format!("239.1.1.{i}"), 40000, 5000, 0);
            four[(interpret(&p4, &d, None, 0) % 4) as usize] += 1;
            let d = datagram("2001:db8::1", &format!("ff3e::{i}"), 40000, 5000 + i, 0);
            four[(interpret(&p4, &d, None, 0) % 4) as usize] += 1;
        }
        assert!(four.iter().all(|&n| n >= 6), "60 streams over 4 workers: {four:?}");
        // Not IP: the first member (the workers count it).
        assert_eq!(pick(&[0u8; 30]), 0);
        // More pins than the program names: the whole family is pinned.
        let many: Vec<Pin> = (0..=MAX_PINNED as u32)
            .map(|i| Pin {
                dst: IpAddr::V4(Ipv4Addr::from(0xef00_0000 + i)),
                port: 5001,
                member: i,
            })
            .collect();
        let p = fanout_program(&many);
        for sport in 1000..1100 {
            assert_eq!(
                interpret(&p, &datagram("10.0.0.1", "239.9.9.9", sport, 9, 0), None, 0) % 2,
                0
            );
        }
        assert!(fanout_program(&many[..MAX_PINNED]).len() < 4096, "within BPF_MAXINSNS");
    }

    #[test]
    fn lets_in_ipv4_to_groups_and_named_unicast_only() {
        let p = filter(&["10.0.0.2"], &[]);
        assert_ne!(run(&p, &udp_to([239, 1, 1, 1], 17, 0x0800)), 0);
        assert_ne!(run(&p, &udp_to([224, 0, 1, 1], 17, 0x0800)), 0);
        // Link-local control traffic: IGMPv3 reports, mDNS.
        assert_eq!(run(&p, &udp_to([224, 0, 0, 22], 2, 0x0800)), 0);
        assert_eq!(run(&p, &udp_to([224, 0, 0, 251], 17, 0x0800)), 0);
        assert_ne!(run(&p, &udp_to([224, 0, 1, 0], 17, 0x0800)), 0);
        assert_ne!(run(&p, &udp_to([10, 0, 0, 2], 17, 0x0800)), 0);
        assert_eq!(run(&p, &udp_to([10, 0, 0, 3], 17, 0x0800)), 0);
        assert_eq!(run(&p, &udp_to([240, 0, 0, 1], 17, 0x0800)), 0);
        // Not UDP, to a group: the worker counts it (not_udp).
        assert_ne!(run(&p, &udp_to([239, 1, 1, 1], 6, 0x0800)), 0, "TCP");
        assert_ne!(run(&p, &udp_to([239, 1, 1, 1], 2, 0x0800)), 0, "IGMP");
        assert_eq!(run(&p, &udp_to([10, 0, 0, 3], 6, 0x0800)), 0, "TCP to another host");
        assert_eq!(
            run(&p, &udp_to([10, 0, 0, 2], 6, 0x0800)),
            0,
            "TCP to the host (ssh): not MCR's"
        );
        assert_eq!(run(&p, &udp_to([10, 0, 0, 2], 1, 0x0800)), 0, "ICMP to the host");
        assert_eq!(run(&p, &udp_to([239, 1, 1, 1], 17, 0x0806)), 0, "ARP");
        assert_eq!(run(&p, &[0u8; 10]), 0, "too short to be IP");
        // IPv4, but too short for its header: the worker counts it.
        let mut short = udp_to([239, 1, 1, 1], 17, 0x0800);
        short.truncate(30);
        assert_ne!(run(&p, &short), 0, "a truncated IPv4 header");
    }

    #[test]
    fn lets_in_ipv6_to_groups_beyond_the_link_and_named_unicast_only() {
        let p = filter(&["2001:db8::2", "10.0.0.2"], &[]);
        assert_ne!(run(&p, &udp6_to("ff3e::1", 17)), 0);
        assert_ne!(run(&p, &udp6_to("ff05::1:3", 17)), 0);
        assert_ne!(
            run(&p, &udp6_to("ff3e::1", 0)),
            0,
            "hop-by-hop first: the worker walks it"
        );
        assert_eq!(run(&p, &udp6_to("ff02::16", 0)), 0, "MLDv2 reports");
        assert_eq!(run(&p, &udp6_to("ff02::1:ff00:2", 58)), 0, "neighbour solicitation");
        assert_eq!(run(&p, &udp6_to("ff01::1", 17)), 0, "interface-local");
        assert_ne!(run(&p, &udp6_to("2001:db8::2", 17)), 0);
        assert_eq!(run(&p, &udp6_to("2001:db8::2", 6)), 0, "TCP to the host");
        assert_eq!(run(&p, &udp6_to("2001:db8::3", 17)), 0, "another address");
        assert_eq!(run(&p, &udp6_to("2001:db8:0:1::2", 17)), 0, "differs in one word");
        assert_ne!(run(&p, &udp_to([10, 0, 0, 2], 17, 0x0800)), 0, "IPv4 names stay");
        let mut short = udp6_to("ff3e::1", 17);
        short.truncate(40);
        assert_ne!(run(&p, &short), 0, "a truncated IPv6 header");
        assert_eq!(run(&filter(&[], &[]), &udp6_to("2001:db8::2", 17)), 0);
    }

    #[test]
    fn only_the_vlans_rules_take_are_let_in() {
        let p = filter(&[], &[100, 200]);
        let g = udp_to([239, 1, 1, 1], 17, 0x0800);
        assert_ne!(run(&p, &g), 0, "untagged");
        assert_ne!(run_tagged(&p, &g, Some(100)), 0);
        assert_ne!(run_tagged(&p, &g, Some(0xa000 | 200)), 0, "priority bits aside");
        assert_ne!(run_tagged(&p, &g, Some(0x6000)), 0, "priority-tagged only");
        assert_eq!(run_tagged(&p, &g, Some(300)), 0);
        assert_eq!(run_tagged(&p, &udp_to([10, 0, 0, 9], 17, 0x0800), Some(100)), 0);
        assert_eq!(run_tagged(&filter(&[], &[]), &g, Some(100)), 0, "no VLAN rules");
        assert_eq!(run_tpid(&p, &g, Some(100), 0x88a8), 0, "an 802.1ad service tag");
        // A second tag left in the frame behind an outer one of a rule's
        // VLAN: let in to be counted; behind another VLAN: kept out.
        let mut qinq = g.clone();
        qinq[12..14].copy_from_slice(&[0x81, 0x00]);
        assert_ne!(run_tagged(&p, &qinq, Some(100)), 0);
        assert_eq!(run_tagged(&p, &qinq, Some(300)), 0);
    }

    #[test]
    fn the_longest_lists_still_assemble_and_beyond_them_all_unicast_udp_passes() {
        let v4: Vec<String> = (0..MAX_UNICAST as u32)
            .map(|i| Ipv4Addr::from(0x0a00_0000 + i).to_string())
            .collect();
        let v6: Vec<String> = (0..MAX_UNICAST_V6).map(|i| format!("2001:db8::{:x}", i + 1)).collect();
        let vlans: Vec<u16> = (1..=MAX_VLANS as u16).collect();
        let all: Vec<&str> = v4.iter().chain(&v6).map(String::as_str).collect();
        let p = filter(&all, &vlans);
        for a in &v4 {
            let o: Ipv4Addr = a.parse().expect("literal");
            assert_ne!(
                run_tagged(&p, &udp_to(o.octets(), 17, 0x0800), Some(MAX_VLANS as u16)),
                0,
                "{a}"
            );
        }
        for a in &v6 {
            assert_ne!(run(&p, &udp6_to(a, 17)), 0, "{a}");
        }
        assert_eq!(run(&p, &udp_to([10, 9, 9, 9], 17, 0x0800)), 0);
        assert_eq!(run(&p, &udp6_to("2001:db8::ffff", 17)), 0);
        let mut more = all.clone();
        more.push("10.200.0.1");
        more.push("2001:db8::ffff");
        let p = filter(&more, &(1..=MAX_VLANS as u16 + 1).collect::<Vec<_>>());
        assert_ne!(run(&p, &udp_to([10, 9, 9, 9], 17, 0x0800)), 0);
        assert_ne!(run(&p, &udp6_to("2001:db8::1:1", 17)), 0);
        assert_ne!(run_tagged(&p, &udp_to([239, 1, 1, 1], 17, 0x0800), Some(4000)), 0);
        assert_eq!(run_tpid(&p, &udp_to([239, 1, 1, 1], 17, 0x0800), Some(4000), 0x88a8), 0);
        // Letting in any unicast UDP lets in nothing else.
        assert_eq!(run(&p, &udp_to([10, 9, 9, 9], 6, 0x0800)), 0, "TCP to the host");
        assert_eq!(run(&p, &udp_to([10, 9, 9, 9], 17, 0x0806)), 0, "ARP");
        assert_eq!(run(&p, &udp6_to("2001:db8::1:1", 6)), 0, "TCP over IPv6");
        assert_eq!(run(&p, &udp_to([224, 0, 0, 22], 2, 0x0800)), 0, "link-local control");
        assert_eq!(run(&p, &udp_to([240, 0, 0, 1], 17, 0x0800)), 0, "reserved");
    }
}
