//! Where lost packets went: the counters MEASURING.md names, read before
//! and after each run.

use serde::Serialize;

use mcr_testbed::Ns;
use mcr_testbed::presets::Chain;

use super::RelayUnderTest;

/// Drop counters along the chain.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Losses {
    /// The relay's receive ring was full.
    pub relay_ring: u64,
    /// The relay's output queue was full or a send failed.
    pub relay_output: u64,
    /// veth pairs could not hand frames on (their tx_dropped and
    /// rx_dropped, all four ends).
    pub veth: u64,
    /// The per-CPU input backlog overflowed (`/proc/net/softnet_stat`).
    pub backlog: u64,
    /// UDP receive buffers overflowed in the sink namespace
    /// (`RcvbufErrors`); of which `sink_socket` at `mcrgen recv` itself.
    pub sink_rcvbuf: u64,
    /// `mcrgen recv`'s own sockets overflowed.
    pub sink_socket: u64,
}

fn counter(ns: &Ns, path: &str) -> u64 {
    ns.exec("cat", [path])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn veth_drops(ns: &Ns, ifname: &str) -> u64 {
    counter(ns, &format!("/sys/class/net/{ifname}/statistics/tx_dropped"))
        + counter(ns, &format!("/sys/class/net/{ifname}/statistics/rx_dropped"))
}

fn rcvbuf_errors(ns: &Ns) -> u64 {
    let snmp = ns.exec("cat", ["/proc/net/snmp"]).unwrap_or_default();
    let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
    if udp.len() < 2 {
        return 0;
    }
    let names: Vec<&str> = udp[0].split_whitespace().collect();
    let values: Vec<&str> = udp[1].split_whitespace().collect();
    names
        .iter()
        .position(|n| *n == "RcvbufErrors")
        .and_then(|i| values.get(i))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn backlog_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .sum()
}

impl Losses {
    /// Reads every counter now.
    pub fn read(chain: &Chain, relay: &dyn RelayUnderTest) -> anyhow::Result<Losses> {
        let (relay_ring, relay_output) = relay.own_drops();
        Ok(Losses {
            relay_ring,
            relay_output,
            veth: veth_drops(&chain.generator, Chain::GEN_IF)
                + veth_drops(&chain.relay, Chain::RELAY_IN_IF)
                + veth_drops(&chain.relay, Chain::RELAY_OUT_IF)
                + veth_drops(&chain.sink, Chain::SINK_IF),
            backlog: backlog_drops(),
            sink_rcvbuf: rcvbuf_errors(&chain.sink),
            sink_socket: 0,
        })
    }

    /// What changed since `before`; `sink_socket` comes from the receiver.
    pub fn minus(&self, before: &Losses, sink_socket: u64) -> Losses {
        Losses {
            relay_ring: self.relay_ring.saturating_sub(before.relay_ring),
            relay_output: self.relay_output.saturating_sub(before.relay_output),
            veth: self.veth.saturating_sub(before.veth),
            backlog: self.backlog.saturating_sub(before.backlog),
            sink_rcvbuf: self.sink_rcvbuf.saturating_sub(before.sink_rcvbuf),
            sink_socket,
        }
    }

    /// "none", or each place with a count, and what no counter explains.
    pub fn describe(&self, lost: u64) -> String {
        if lost == 0 {
            return "none".into();
        }
        let parts: Vec<String> = [
            ("relay ring", self.relay_ring),
            ("relay output", self.relay_output),
            ("veth", self.veth),
            ("backlog", self.backlog),
            ("sink rcvbuf", self.sink_rcvbuf),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
        let counted = self.relay_ring + self.relay_output + self.veth + self.backlog + self.sink_rcvbuf;
        let mut s = format!(
            "lost {lost}: {}",
            if parts.is_empty() {
                "no counter saw it".into()
            } else {
                parts.join(", ")
            }
        );
        if counted < lost {
            s.push_str(&format!(" (+{} unattributed)", lost - counted));
        }
        s
    }
}
