//! The topologies of the scenarios, and what a relay must do in them:
//! which namespaces relay, which streams each forwards where, where the
//! sinks listen.

use std::net::{Ipv4Addr, SocketAddrV4};

use mcr_testbed::presets::{Chain, DualBridge, Pipeline, Star};
use mcr_testbed::{BridgeOptions, Ns, Testbed};

/// One stream a relay forwards: its input and every output.
#[derive(Debug, Clone)]
pub struct Forward {
    /// The input interface.
    pub in_if: String,
    /// The input interface's address.
    pub in_addr: Ipv4Addr,
    /// The group and port it arrives on.
    pub input: SocketAddrV4,
    /// The same stream's second path, where the topology has one: another
    /// group on the same interface and port, to which the generator sends
    /// every packet again when a relay merges the two (`mcr --merge`).
    pub second: Option<SocketAddrV4>,
    /// Each output: interface, the interface's address, group and port.
    pub outputs: Vec<Output>,
}

/// One output of a [`Forward`].
#[derive(Debug, Clone)]
pub struct Output {
    /// The output interface.
    pub out_if: String,
    /// Its address.
    pub out_addr: Ipv4Addr,
    /// Where the stream goes.
    pub dest: SocketAddrV4,
}

/// A namespace that relays, with its work.
#[derive(Debug, Clone)]
pub struct Site {
    /// The namespace.
    pub ns: Ns,
    /// Its ingress interfaces (for receive steering).
    pub ingress: Vec<String>,
    /// What it forwards.
    pub forwards: Vec<Forward>,
    /// Whether a switch that snoops IGMP stands between the generator and
    /// this site: then a relay must join its input groups to receive them
    /// (elsewhere a join is work the topology does not need).
    pub snooped: bool,
}

/// A namespace with a receiver.
#[derive(Debug, Clone)]
pub struct Sink {
    /// The namespace.
    pub ns: Ns,
    /// Its interface.
    pub ifname: String,
    /// The destinations it listens to, in stream-id order.
    pub streams: Vec<SocketAddrV4>,
    /// `mcrgen recv --ids`: `0+`, or `0` when every destination carries
    /// stream 0 (a fan-out).
    pub ids: String,
}

/// A built topology and its work.
pub struct Topology {
    /// Keeps the namespaces alive.
    _tb: Testbed,
    /// Every namespace, for loss counters.
    pub all: Vec<(Ns, Vec<String>)>,
    /// The generator's namespace and interface.
    pub generator: (Ns, String),
    /// The streams the generator sends, stream id = position.
    pub streams: Vec<SocketAddrV4>,
    /// Each stream's second path, in the same order, where the topology
    /// has them: where the generator sends the copies (`mcrgen send
    /// --copy`) for a relay that merges (the [`Forward::second`] of the
    /// stream's input).
    pub copies: Option<Vec<SocketAddrV4>>,
    /// Where relays run.
    pub sites: Vec<Site>,
    /// Where receivers run.
    pub sinks: Vec<Sink>,
}

/// The groups and ports of stream `i` at hop `hop` (0: as sent; the
/// relay maps hop h to h+1): 239.(1+10h).X.Y:(5000+1000h+i+1).
pub fn stream_addr(hop: usize, i: usize) -> SocketAddrV4 {
    let n = i as u32 + 1;
    let second = (1 + 9 * hop.min(1) + hop.saturating_sub(1)) as u8;
    let ip = Ipv4Addr::new(239, second, (1 + n / 250) as u8, (n % 250) as u8);
    SocketAddrV4::new(ip, (5000 + 1000 * hop as u32 + n) as u16)
}

/// The second path of stream `i` as sent (hop 0): the same port and the
/// same group but for its second byte, 2 where the first path's is 1
/// (239.1.X.Y:P → 239.2.X.Y:P), which no hop of [`stream_addr`] uses.
pub fn second_path_addr(i: usize) -> SocketAddrV4 {
    let first = stream_addr(0, i);
    let [a, _, c, d] = first.ip().octets();
    SocketAddrV4::new(Ipv4Addr::new(a, 2, c, d), first.port())
}

/// Stream addresses at `hop`, or at hop 0 when the relay cannot rewrite.
fn hop_addrs(streams: usize, hop: usize, rewrite: bool) -> Vec<SocketAddrV4> {
    (0..streams)
        .map(|i| stream_addr(if rewrite { hop } else { 0 }, i))
        .collect()
}

fn ifaces(ns: &Ns, names: &[&str]) -> (Ns, Vec<String>) {
    (ns.clone(), names.iter().map(|s| s.to_string()).collect())
}

impl Topology {
    /// The chain: gen → relay → sink, `streams` streams.
    pub fn chain(streams: usize, rewrite: bool) -> anyhow::Result<Topology> {
        let c = Chain::new("bench-chain")?;
        let (ins, outs) = (hop_addrs(streams, 0, true), hop_addrs(streams, 1, rewrite));
        let seconds: Vec<SocketAddrV4> = (0..streams).map(second_path_addr).collect();
        let forwards = ins
            .iter()
            .zip(&outs)
            .zip(&seconds)
            .map(|((i, o), second)| Forward {
                in_if: Chain::RELAY_IN_IF.into(),
                in_addr: Chain::RELAY_IN_ADDR,
                input: *i,
                second: Some(*second),
                outputs: vec![Output {
                    out_if: Chain::RELAY_OUT_IF.into(),
                    out_addr: Chain::RELAY_OUT_ADDR,
                    dest: *o,
                }],
            })
            .collect();
        Ok(Topology {
            all: vec![
                ifaces(&c.generator, &[Chain::GEN_IF]),
                ifaces(&c.relay, &[Chain::RELAY_IN_IF, Chain::RELAY_OUT_IF]),
                ifaces(&c.sink, &[Chain::SINK_IF]),
            ],
            generator: (c.generator.clone(), Chain::GEN_IF.into()),
            streams: ins,
            copies: Some(seconds),
            sites: vec![Site {
                ns: c.relay.clone(),
                ingress: vec![Chain::RELAY_IN_IF.into()],
                forwards,
                snooped: false,
            }],
            sinks: vec![Sink {
                ns: c.sink.clone(),
                ifname: Chain::SINK_IF.into(),
                streams: outs,
                ids: "0+".into(),
            }],
            _tb: c.tb,
        })
    }

    /// Two bridged segments joined only by the relay; bridges snoop IGMP
    /// and query, so every relay must join its groups.
    pub fn dual_bridge(streams: usize, rewrite: bool) -> anyhow::Result<Topology> {
        let opts = BridgeOptions {
            snooping: true,
            querier: true,
        };
        let d = DualBridge::new("bench-dual", 1, 1, opts)?;
        let (ins, outs) = (hop_addrs(streams, 0, true), hop_addrs(streams, 1, rewrite));
        let forwards = ins
            .iter()
            .zip(&outs)
            .map(|(i, o)| Forward {
                in_if: DualBridge::RELAY_IN_IF.into(),
                in_addr: DualBridge::RELAY_IN_ADDR,
                input: *i,
                second: None,
                outputs: vec![Output {
                    out_if: DualBridge::RELAY_OUT_IF.into(),
                    out_addr: DualBridge::RELAY_OUT_ADDR,
                    dest: *o,
                }],
            })
            .collect();
        Ok(Topology {
            all: vec![
                ifaces(&d.senders[0], &[DualBridge::HOST_IF]),
                ifaces(&d.relay, &[DualBridge::RELAY_IN_IF, DualBridge::RELAY_OUT_IF]),
                ifaces(&d.sinks[0], &[DualBridge::HOST_IF]),
                ifaces(&d.switch, &["r0", "r1", "a0", "b0"]),
            ],
            generator: (d.senders[0].clone(), DualBridge::HOST_IF.into()),
            streams: ins,
            copies: None,
            sites: vec![Site {
                ns: d.relay.clone(),
                ingress: vec![DualBridge::RELAY_IN_IF.into()],
                forwards,
                snooped: true,
            }],
            sinks: vec![Sink {
                ns: d.sinks[0].clone(),
                ifname: DualBridge::HOST_IF.into(),
                streams: outs,
                ids: "0+".into(),
            }],
            _tb: d.tb,
        })
    }

    /// One input to `outputs` outputs, each on its own link and sink.
    pub fn star(outputs: usize, rewrite: bool) -> anyhow::Result<Topology> {
        let s = Star::new("bench-star", outputs)?;
        let input = stream_addr(0, 0);
        let dest = if rewrite { stream_addr(1, 0) } else { input };
        let forward = Forward {
            in_if: Star::RELAY_IN_IF.into(),
            in_addr: Star::RELAY_IN_ADDR,
            input,
            second: None,
            outputs: (0..outputs)
                .map(|k| Output {
                    out_if: Star::relay_out_if(k),
                    out_addr: Star::relay_out_addr(k),
                    dest,
                })
                .collect(),
        };
        let relay_ifs: Vec<String> = std::iter::once(Star::RELAY_IN_IF.to_string())
            .chain((0..outputs).map(Star::relay_out_if))
            .collect();
        let mut all = vec![ifaces(&s.generator, &[Star::GEN_IF]), (s.relay.clone(), relay_ifs)];
        all.extend(s.sinks.iter().map(|ns| ifaces(ns, &[Star::SINK_IF])));
        Ok(Topology {
            all,
            generator: (s.generator.clone(), Star::GEN_IF.into()),
            streams: vec![input],
            copies: None,
            sites: vec![Site {
                ns: s.relay.clone(),
                ingress: vec![Star::RELAY_IN_IF.into()],
                forwards: vec![forward],
                snooped: false,
            }],
            sinks: s
                .sinks
                .iter()
                .map(|ns| Sink {
                    ns: ns.clone(),
                    ifname: Star::SINK_IF.into(),
                    streams: vec![dest],
                    ids: "0".into(),
                })
                .collect(),
            _tb: s.tb,
        })
    }

    /// gen → relay 1 → … → relay `hops` → sink, one stream translated at
    /// each hop.
    pub fn pipeline(hops: usize, rewrite: bool) -> anyhow::Result<Topology> {
        let p = Pipeline::new("bench-pipeline", hops)?;
        let mut sites = Vec::new();
        let mut all = vec![ifaces(&p.generator, &[&Pipeline::link_ifs(0).0])];
        for (i, ns) in p.relays.iter().enumerate() {
            let (in_if, in_addr) = Pipeline::relay_in(i);
            let (out_if, out_addr) = Pipeline::relay_out(i);
            let input = if rewrite { stream_addr(i, 0) } else { stream_addr(0, 0) };
            let dest = if rewrite { stream_addr(i + 1, 0) } else { input };
            all.push((ns.clone(), vec![in_if.clone(), out_if.clone()]));
            sites.push(Site {
                ns: ns.clone(),
                ingress: vec![in_if.clone()],
                forwards: vec![Forward {
                    in_if,
                    in_addr,
                    input,
                    second: None,
                    outputs: vec![Output { out_if, out_addr, dest }],
                }],
                snooped: false,
            });
        }
        let sink_if = Pipeline::link_ifs(hops).1;
        all.push((p.sink.clone(), vec![sink_if.clone()]));
        let last = if rewrite {
            stream_addr(hops, 0)
        } else {
            stream_addr(0, 0)
        };
        Ok(Topology {
            all,
            generator: (p.generator.clone(), Pipeline::link_ifs(0).0),
            streams: vec![stream_addr(0, 0)],
            copies: None,
            sites,
            sinks: vec![Sink {
                ns: p.sink.clone(),
                ifname: sink_if,
                streams: vec![last],
                ids: "0+".into(),
            }],
            _tb: p.tb,
        })
    }

    /// Receive steering as MEASURING.md prescribes: the relays' ingress
    /// work on the relay CPU, the sinks' on the load CPU.
    pub fn steer(&self, relay_cpu: usize, load_cpu: usize) -> anyhow::Result<()> {
        for s in &self.sites {
            for i in &s.ingress {
                s.ns.rps(i, 1 << relay_cpu)?;
            }
        }
        for k in &self.sinks {
            k.ns.rps(&k.ifname, 1 << load_cpu)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_addresses_are_distinct_per_hop_and_stream() {
        assert_eq!(stream_addr(0, 0).to_string(), "239.1.1.1:5001");
        assert_eq!(stream_addr(1, 0).to_string(), "239.10.1.1:6001");
        assert_eq!(stream_addr(2, 0).to_string(), "239.11.1.1:7001");
        let mut all = std::collections::HashSet::new();
        for hop in 0..4 {
            for i in 0..1000 {
                assert!(all.insert(stream_addr(hop, i)), "{hop} {i}");
                assert!(stream_addr(hop, i).ip().is_multicast());
            }
        }
    }

    #[test]
    fn a_second_path_keeps_the_port_and_takes_a_group_no_stream_uses() {
        assert_eq!(second_path_addr(0).to_string(), "239.2.1.1:5001");
        assert_eq!(second_path_addr(249).to_string(), "239.2.2.0:5250");
        let groups: std::collections::HashSet<Ipv4Addr> = (0..4)
            .flat_map(|hop| (0..1000).map(move |i| *stream_addr(hop, i).ip()))
            .collect();
        let mut seconds = std::collections::HashSet::new();
        for i in 0..1000 {
            let (first, second) = (stream_addr(0, i), second_path_addr(i));
            assert_eq!(second.port(), first.port(), "{i}");
            assert_ne!(second.ip(), first.ip(), "{i}");
            assert!(second.ip().is_multicast(), "{i}");
            assert!(!groups.contains(second.ip()), "{i}: {second} is a stream's group");
            assert!(seconds.insert(second), "{i}");
        }
    }
}
