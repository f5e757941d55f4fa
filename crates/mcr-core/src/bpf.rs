//! The classic BPF program each ingress socket filters with, so that only
//! frames aimed at what rules take enter the ring: IPv4 to a multicast
//! group, or to one of the unicast addresses rules take. Everything else
//! (other protocols, other hosts' traffic, tagged frames) never costs the
//! worker a thing. What it lets in is checked by the worker, and whatever
//! is wrong with it counted by reason: IPv4 that is not UDP (IGMP, TCP) to
//! a group, and IPv4 frames too short to hold their header, are let in for
//! that reason.

use std::net::Ipv4Addr;

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
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;

/// The most unicast addresses the filter names one by one; with more, it
/// lets in UDP to any unicast address (the worker counts what no rule
/// takes).
pub const MAX_UNICAST: usize = 200;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// The ancillary load of "a VLAN tag was taken off this frame"
/// (SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT).
const VLAN_TAG_PRESENT: u32 = 0xffff_f000 + 48;

/// The filter for an input interface whose rules take `unicast` besides
/// multicast groups. Frames that carried a VLAN tag (which the kernel may
/// have taken off before the filter runs) are kept out: a rule's input is
/// the untagged interface.
pub fn ingress_filter(unicast: &[Ipv4Addr]) -> Vec<Insn> {
    let any_unicast = unicast.len() > MAX_UNICAST;
    let names: &[Ipv4Addr] = if any_unicast { &[] } else { unicast };
    let n = names.len() as u8;
    // Layout, with `drop` and `accept` at the end:
    //  0 ld  #vlan_tag_present
    //  1 jeq #0       ?  : drop
    //  2 ldh [12]                 ethertype
    //  3 jeq #0x0800  ?  : drop
    //  4 ld  len
    //  5 jge #34      ?  : accept  (too short for its header: let the worker count it)
    //  6 ld  [30]                 destination
    //  7 jge #0xe0000000 ? : unicast
    //  8 jge #0xf0000000 drop : ?   (240/4 is reserved)
    //  9 jge #0xe0000100 accept : drop  (224.0.0.0/24 is link-local control
    //                                    traffic, IGMP among it: no rule takes it)
    // 10 ldb [23]                 protocol: to a unicast address, only UDP
    // 11 jeq #17      ?  : drop    (the host's own TCP, ICMP... are not MCR's)
    // 12 ld  [30]
    // 13.. jeq #addr  accept : next     (one per unicast address)
    // 13+n ret #-1 when any unicast address is let in (n is then 0)
    //      drop: ret #0
    //      accept: ret #-1
    let unicast_at: u8 = 10;
    let names_at: u8 = 13;
    let drop_at = names_at + n + u8::from(any_unicast);
    let accept_at = drop_at + 1;
    let to = |from: u8, target: u8| target - from - 1;
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, VLAN_TAG_PRESENT),
        insn(JEQ_K, 0, to(1, drop_at), 0),
        insn(LD_H_ABS, 0, 0, 12),
        insn(JEQ_K, 0, to(3, drop_at), 0x0800),
        insn(LD_W_LEN, 0, 0, 0),
        insn(JGE_K, 0, to(5, accept_at), 34),
        insn(LD_W_ABS, 0, 0, 30),
        insn(JGE_K, 0, to(7, unicast_at), 0xe000_0000),
        insn(JGE_K, to(8, drop_at), 0, 0xf000_0000),
        insn(JGE_K, to(9, accept_at), to(9, drop_at), 0xe000_0100),
        insn(LD_B_ABS, 0, 0, 23),
        insn(JEQ_K, 0, to(11, drop_at), 17),
        insn(LD_W_ABS, 0, 0, 30),
    ];
    for (i, a) in names.iter().enumerate() {
        let at = names_at + i as u8;
        p.push(insn(JEQ_K, to(at, accept_at), 0, u32::from(*a)));
    }
    if any_unicast {
        p.push(insn(RET_K, 0, 0, u32::MAX));
    }
    debug_assert_eq!(p.len(), usize::from(drop_at));
    p.push(insn(RET_K, 0, 0, 0));
    p.push(insn(RET_K, 0, 0, u32::MAX));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a program of the opcodes above over a frame, as the kernel
    /// would: returns the number of bytes to keep (0: drop). `tagged` is
    /// what the VLAN ancillary load reads.
    fn run(p: &[Insn], frame: &[u8]) -> u32 {
        run_tagged(p, frame, false)
    }

    fn run_tagged(p: &[Insn], frame: &[u8], tagged: bool) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let load = |at: usize, n: usize| -> Option<u32> {
                frame
                    .get(at..at + n)
                    .map(|b| b.iter().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
            };
            match i.code {
                LD_W_LEN => {
                    a = frame.len() as u32;
                    pc += 1;
                }
                LD_W_ABS if i.k == VLAN_TAG_PRESENT => {
                    a = u32::from(tagged);
                    pc += 1;
                }
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
                    pc += 1;
                }
                JEQ_K | JGE_K => {
                    let t = if i.code == JEQ_K { a == i.k } else { a >= i.k };
                    pc += 1 + usize::from(if t { i.jt } else { i.jf });
                }
                RET_K => return i.k,
                other => panic!("opcode {other:#x} not used by the filter"),
            }
        }
    }

    fn udp_to(dst: [u8; 4], proto: u8, ethertype: u16) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[23] = proto;
        f[30..34].copy_from_slice(&dst);
        f
    }

    #[test]
    fn lets_in_ipv4_to_groups_and_named_unicast_only() {
        let p = ingress_filter(&[Ipv4Addr::new(10, 0, 0, 2)]);
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
        assert_eq!(run(&p, &[0u8; 10]), 0, "too short to be IPv4");
        // IPv4, but too short for its header: the worker counts it.
        let mut short = udp_to([239, 1, 1, 1], 17, 0x0800);
        short.truncate(30);
        assert_ne!(run(&p, &short), 0, "a truncated IPv4 header");
        assert_eq!(
            run_tagged(&p, &udp_to([239, 1, 1, 1], 17, 0x0800), true),
            0,
            "a frame whose tag the kernel took off"
        );
    }

    #[test]
    fn without_unicast_rules_only_groups_pass() {
        let p = ingress_filter(&[]);
        assert_ne!(run(&p, &udp_to([239, 1, 1, 1], 17, 0x0800)), 0);
        assert_eq!(run(&p, &udp_to([10, 0, 0, 2], 17, 0x0800)), 0);
    }

    #[test]
    fn many_unicast_addresses_fall_back_to_all_unicast() {
        let many: Vec<Ipv4Addr> = (0..=MAX_UNICAST as u32)
            .map(|i| Ipv4Addr::from(0x0a00_0000 + i))
            .collect();
        let p = ingress_filter(&many);
        assert!(p.len() < 24);
        assert_ne!(run(&p, &udp_to([10, 9, 9, 9], 17, 0x0800)), 0);
        // Letting in any unicast UDP lets in nothing else.
        assert_eq!(run(&p, &udp_to([10, 9, 9, 9], 6, 0x0800)), 0, "TCP to the host");
        assert_eq!(run(&p, &udp_to([10, 9, 9, 9], 17, 0x0806)), 0, "ARP");
        assert_eq!(run(&p, &udp_to([10, 9, 9, 9], 17, 0x86dd)), 0, "IPv6");
        assert_eq!(run(&p, &udp_to([224, 0, 0, 22], 2, 0x0800)), 0, "link-local control");
        assert_eq!(run(&p, &udp_to([240, 0, 0, 1], 17, 0x0800)), 0, "reserved");
        assert_eq!(run_tagged(&p, &udp_to([10, 9, 9, 9], 17, 0x0800), true), 0, "tagged");
        let p = ingress_filter(&many[..MAX_UNICAST]);
        for a in &many[..MAX_UNICAST] {
            assert_ne!(run(&p, &udp_to(a.octets(), 17, 0x0800)), 0, "{a}");
        }
        assert_eq!(run(&p, &udp_to([10, 9, 9, 9], 17, 0x0800)), 0);
    }
}
