//! Where lost packets went: the counters MEASURING.md names, read before
//! and after each run, over every namespace of the topology.

use serde::Serialize;

use mcr_testbed::Ns;

use super::relays::Relay;
use super::topo::Topology;

/// Drop counters along the path.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Losses {
    /// The relay's own receive side (MCR: ring full).
    pub relay_in: u64,
    /// The relay's own send side (MCR: output queue full, send errors).
    pub relay_out: u64,
    /// UDP receive buffers overflowed in the relay namespaces
    /// (`RcvbufErrors`: a socket-based relay that fell behind).
    pub relay_rcvbuf: u64,
    /// Frames veth ends could not hand to their peer (`tx_dropped`): the
    /// peer CPU's input backlog was full, so these are also counted in
    /// `backlog`.
    pub veth: u64,
    /// The per-CPU input backlog overflowed (`/proc/net/softnet_stat`).
    pub backlog: u64,
    /// UDP receive buffers overflowed in the sink namespaces.
    pub sink_rcvbuf: u64,
    /// UDP datagrams dropped because all UDP sockets of the host together
    /// reached `net.ipv4.udp_mem` (`MemErrors`, any namespace): hundreds of
    /// socket-based relay processes with large buffers get there.
    pub udp_mem: u64,
    /// The receivers' own sockets or rings overflowed.
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
}

fn rcvbuf_errors(ns: &Ns) -> u64 {
    udp_counter(ns, "RcvbufErrors")
}

fn udp_counter(ns: &Ns, name: &str) -> u64 {
    ns.snmp("Udp", name).unwrap_or(0)
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
    pub fn read(topo: &Topology, relay: &dyn Relay) -> Losses {
        let (relay_in, relay_out) = relay.own_drops();
        Losses {
            relay_in,
            relay_out,
            relay_rcvbuf: topo.sites.iter().map(|s| rcvbuf_errors(&s.ns)).sum(),
            veth: topo
                .all
                .iter()
                .map(|(ns, ifs)| ifs.iter().map(|i| veth_drops(ns, i)).sum::<u64>())
                .sum(),
            backlog: backlog_drops(),
            sink_rcvbuf: topo.sinks.iter().map(|k| rcvbuf_errors(&k.ns)).sum(),
            udp_mem: topo.all.iter().map(|(ns, _)| udp_counter(ns, "MemErrors")).sum(),
            sink_socket: 0,
        }
    }

    /// What changed since `before`; `sink_socket` comes from the receivers.
    pub fn minus(&self, before: &Losses, sink_socket: u64) -> Losses {
        Losses {
            relay_in: self.relay_in.saturating_sub(before.relay_in),
            relay_out: self.relay_out.saturating_sub(before.relay_out),
            relay_rcvbuf: self.relay_rcvbuf.saturating_sub(before.relay_rcvbuf),
            veth: self.veth.saturating_sub(before.veth),
            backlog: self.backlog.saturating_sub(before.backlog),
            sink_rcvbuf: self.sink_rcvbuf.saturating_sub(before.sink_rcvbuf),
            udp_mem: self.udp_mem.saturating_sub(before.udp_mem),
            sink_socket,
        }
    }

    /// "none", or each place with a count, and what no counter explains.
    pub fn describe(&self, lost: u64) -> String {
        if lost == 0 {
            return "none".into();
        }
        let places = [
            ("relay in", self.relay_in),
            ("relay out", self.relay_out),
            ("relay rcvbuf", self.relay_rcvbuf),
            ("veth", self.veth),
            ("backlog", self.backlog),
            ("sink rcvbuf", self.sink_rcvbuf),
            ("udp_mem", self.udp_mem),
            ("sink", self.sink_socket),
        ];
        let parts: Vec<String> = places
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        // veth drops are backlog drops seen from the sending end: count the
        // larger of the two, not both.
        let counted = self.relay_in
            + self.relay_out
            + self.relay_rcvbuf
            + self.veth.max(self.backlog)
            + self.sink_rcvbuf
            + self.udp_mem
            + self.sink_socket;
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
