//! Line topologies: gen → relay 1 → … → relay n → sink.

use std::net::Ipv4Addr;

use crate::{Ns, Result, Testbed};

/// gen → relay 1 → … → relay n → sink; with no relays, gen ↔ sink over a
/// single veth pair.
///
/// Link `k` (0-based, from the generator) joins node `k` on interface
/// `veth{2k}` with address 10.0.k.1/24 to node `k+1` on `veth{2k+1}` with
/// 10.0.k.2/24. Every node has routes to every subnet of the line, so
/// unicast and the kernel's reverse-path checks work end to end; IP
/// forwarding stays off.
#[derive(Debug)]
pub struct Pipeline {
    /// The namespaces (removed when this is dropped).
    pub tb: Testbed,
    /// The generator's namespace.
    pub generator: Ns,
    /// The relays' namespaces, from the generator's side.
    pub relays: Vec<Ns>,
    /// The sink's namespace.
    pub sink: Ns,
}

impl Pipeline {
    /// Builds a line with `relays` relay namespaces (0 for a direct link).
    pub fn new(tag: &str, relays: usize) -> Result<Pipeline> {
        let mut tb = Testbed::new(tag)?;
        let mut nodes = vec![tb.ns("gen")?];
        for i in 1..=relays {
            nodes.push(tb.ns(&if relays == 1 {
                "relay".to_string()
            } else {
                format!("relay{i}")
            })?);
        }
        nodes.push(tb.ns("sink")?);
        for ns in &nodes {
            ns.rp_filter_off()?;
        }
        let links = nodes.len() - 1;
        for k in 0..links {
            let (a_if, b_if) = Self::link_ifs(k);
            let (a_ip, b_ip) = Self::link_addrs(k);
            tb.veth(&nodes[k], &a_if, &nodes[k + 1], &b_if)?;
            nodes[k].addr(&a_if, &format!("{a_ip}/24"))?;
            nodes[k + 1].addr(&b_if, &format!("{b_ip}/24"))?;
        }
        for (j, ns) in nodes.iter().enumerate() {
            for k in 0..links {
                let subnet = format!("10.0.{k}.0/24");
                if k > j {
                    // To the right, through the next node on link j.
                    ns.route(&[&subnet, "via", &Self::link_addrs(j).1.to_string()])?;
                } else if k + 1 < j {
                    // To the left, through the previous node on link j-1.
                    ns.route(&[&subnet, "via", &Self::link_addrs(j - 1).0.to_string()])?;
                }
            }
        }
        let sink = nodes.pop().expect("a line has a sink: it was pushed above");
        let generator = nodes.remove(0);
        Ok(Pipeline {
            tb,
            generator,
            relays: nodes,
            sink,
        })
    }

    /// The interfaces of link `k`: (`veth{2k}`, `veth{2k+1}`).
    pub fn link_ifs(k: usize) -> (String, String) {
        (format!("veth{}", 2 * k), format!("veth{}", 2 * k + 1))
    }

    /// The addresses of link `k`: (10.0.k.1, 10.0.k.2).
    pub fn link_addrs(k: usize) -> (Ipv4Addr, Ipv4Addr) {
        let k = u8::try_from(k).unwrap_or(u8::MAX);
        (Ipv4Addr::new(10, 0, k, 1), Ipv4Addr::new(10, 0, k, 2))
    }

    /// Relay `i`'s (0-based) ingress interface and address.
    pub fn relay_in(i: usize) -> (String, Ipv4Addr) {
        (Self::link_ifs(i).1, Self::link_addrs(i).1)
    }

    /// Relay `i`'s (0-based) egress interface and address.
    pub fn relay_out(i: usize) -> (String, Ipv4Addr) {
        (Self::link_ifs(i + 1).0, Self::link_addrs(i + 1).0)
    }
}

/// The classic three-namespace chain:
///
/// ```text
/// gen (veth0 10.0.0.1/24) ↔ (veth1 10.0.0.2/24) relay (veth2 10.0.1.1/24) ↔ (veth3 10.0.1.2/24) sink
/// ```
#[derive(Debug)]
pub struct Chain {
    /// The namespaces (removed when this is dropped).
    pub tb: Testbed,
    /// The generator's namespace.
    pub generator: Ns,
    /// The relay's namespace.
    pub relay: Ns,
    /// The sink's namespace.
    pub sink: Ns,
}

impl Chain {
    /// The generator's interface.
    pub const GEN_IF: &'static str = "veth0";
    /// The generator's address.
    pub const GEN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    /// The relay's ingress interface.
    pub const RELAY_IN_IF: &'static str = "veth1";
    /// The relay's ingress address.
    pub const RELAY_IN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    /// The relay's egress interface.
    pub const RELAY_OUT_IF: &'static str = "veth2";
    /// The relay's egress address.
    pub const RELAY_OUT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
    /// The sink's interface.
    pub const SINK_IF: &'static str = "veth3";
    /// The sink's address.
    pub const SINK_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);

    /// The generator's IPv6 address (after [`Chain::add_ipv6`]).
    pub const GEN_ADDR6: &'static str = "fd00::1";
    /// The relay's ingress IPv6 address.
    pub const RELAY_IN_ADDR6: &'static str = "fd00::2";
    /// The relay's egress IPv6 address.
    pub const RELAY_OUT_ADDR6: &'static str = "fd00:1::1";
    /// The sink's IPv6 address.
    pub const SINK_ADDR6: &'static str = "fd00:1::2";

    /// Gives the chain IPv6 as well: fd00::/64 on the generator's link,
    /// fd00:1::/64 on the sink's, addresses usable at once, and routes
    /// between the two through the relay.
    pub fn add_ipv6(&self) -> Result<()> {
        self.generator.addr6(Self::GEN_IF, &format!("{}/64", Self::GEN_ADDR6))?;
        self.relay
            .addr6(Self::RELAY_IN_IF, &format!("{}/64", Self::RELAY_IN_ADDR6))?;
        self.relay
            .addr6(Self::RELAY_OUT_IF, &format!("{}/64", Self::RELAY_OUT_ADDR6))?;
        self.sink.addr6(Self::SINK_IF, &format!("{}/64", Self::SINK_ADDR6))?;
        self.generator.route(&["fd00:1::/64", "via", Self::RELAY_IN_ADDR6])?;
        self.sink.route(&["fd00::/64", "via", Self::RELAY_OUT_ADDR6])
    }

    /// Starts `mcrgen recv` at the sink for `streams`, expecting `n`
    /// packets of each; `extra` are more of its options (`--via ring`,
    /// `--ids`, `--idle-timeout`).
    pub fn expect_at_sink(&self, streams: &str, n: u64, extra: &[&str]) -> Result<crate::traffic::Receiver> {
        let n = n.to_string();
        let mut args = vec!["-s", streams, "-i", Self::SINK_IF, "--expect", &n];
        args.extend_from_slice(extra);
        crate::traffic::Receiver::start(&self.sink, &args)
    }

    /// Sends `count` packets of each of `streams` from the generator with
    /// `mcrgen send`, at `rate` for all of them together; waits for it up
    /// to `timeout`.
    pub fn send_from_generator(
        &self,
        streams: &str,
        count: u64,
        rate: &str,
        timeout: std::time::Duration,
    ) -> Result<mcrgen::report::SendReport> {
        send_streams(&self.generator, streams, count, rate, timeout)
    }

    /// [`Chain::send_from_generator`] on a thread of its own, for traffic
    /// that flows while the test does something else.
    pub fn send_from_generator_meanwhile(
        &self,
        streams: &str,
        count: u64,
        rate: &str,
        timeout: std::time::Duration,
    ) -> std::thread::JoinHandle<Result<mcrgen::report::SendReport>> {
        let (generator, streams, rate) = (self.generator.clone(), streams.to_string(), rate.to_string());
        std::thread::spawn(move || send_streams(&generator, &streams, count, &rate, timeout))
    }

    /// Streams from the generator (`from`, `rate` for all together) to the
    /// sink (`to`) that flow while the test does something, and end when
    /// it has ([`Flowing::end`]): the receiver is told no count, the
    /// sender's report says what each stream must have delivered
    /// ([`mcrgen::report::SendReport::sent_to`]). `most` packets of each at
    /// the most.
    pub fn flowing(&self, from: &str, to: &str, most: u64, rate: &str) -> Result<Flowing> {
        let rx = crate::traffic::Receiver::start(&self.sink, &["-s", to, "-i", Self::SINK_IF])?;
        let most = most.to_string();
        let sender = crate::traffic::Sender::start(
            &self.generator,
            &["-s", from, "-i", Self::GEN_IF, "--count", &most, "--rate", rate],
        )?;
        Ok(Flowing { rx, sender })
    }

    /// The three feeds the restart tests carry, as a config file's rules:
    /// `feed-i` takes 239.1.1.i:500i on the relay's input to 239.10.1.i:600i
    /// on its output (i = 1, 2, 3).
    pub fn three_feeds_toml() -> String {
        (1..=3)
            .map(|i| {
                format!(
                    "\n[[rule]]\nname = \"feed-{i}\"\ninput = \"{}:239.1.1.{i}:{}\"\noutputs = [\"{}:239.10.1.{i}:{}\"]\n",
                    Self::RELAY_IN_IF,
                    5000 + i,
                    Self::RELAY_OUT_IF,
                    6000 + i
                )
            })
            .collect()
    }

    /// The three feeds of [`Chain::three_feeds_toml`] flowing, `rate_each`
    /// packets a second each, until the test ends them (a minute at the
    /// most): stream i of the report is feed-(i+1).
    pub fn three_feeds_flowing(&self, rate_each: u64) -> Result<Flowing> {
        self.flowing(
            "239.1.1.1+3:5001+",
            "239.10.1.1+3:6001+",
            60 * rate_each,
            &(3 * rate_each).to_string(),
        )
    }

    /// Builds the chain.
    pub fn new(tag: &str) -> Result<Chain> {
        let Pipeline {
            tb,
            generator,
            mut relays,
            sink,
        } = Pipeline::new(tag, 1)?;
        let relay = relays.pop().expect("Pipeline::new(_, 1) makes exactly one relay");
        Ok(Chain {
            tb,
            generator,
            relay,
            sink,
        })
    }
}

/// Streams under way ([`Chain::flowing`]).
#[derive(Debug)]
pub struct Flowing {
    rx: crate::traffic::Receiver,
    sender: crate::traffic::Sender,
}

impl Flowing {
    /// Whether the sender has stopped on its own (it sent its most, or
    /// failed): a test that meant to end the streams itself ran longer
    /// than they did.
    pub fn ran_out(&mut self) -> Result<bool> {
        self.sender.has_stopped()
    }

    /// Ends the streams: the sender stops, the receiver 2 s after the last
    /// packet (its idle timeout). What was sent, and what arrived.
    pub fn end(self, timeout: std::time::Duration) -> Result<(mcrgen::report::SendReport, crate::traffic::Received)> {
        let sent = self.sender.stop()?;
        let got = self.rx.finish(timeout)?;
        Ok((sent, got))
    }
}

/// `mcrgen send` of `count` packets of each of `streams` out of the
/// chain's generator interface in `generator`, at `rate` in all.
fn send_streams(
    generator: &Ns,
    streams: &str,
    count: u64,
    rate: &str,
    timeout: std::time::Duration,
) -> Result<mcrgen::report::SendReport> {
    let count = count.to_string();
    crate::traffic::send(
        generator,
        &["-s", streams, "-i", Chain::GEN_IF, "--count", &count, "--rate", rate],
        timeout,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_names_match_the_line_scheme() {
        assert_eq!(Pipeline::link_ifs(0), (Chain::GEN_IF.into(), Chain::RELAY_IN_IF.into()));
        assert_eq!(
            Pipeline::link_ifs(1),
            (Chain::RELAY_OUT_IF.into(), Chain::SINK_IF.into())
        );
        assert_eq!(Pipeline::link_addrs(0), (Chain::GEN_ADDR, Chain::RELAY_IN_ADDR));
        assert_eq!(Pipeline::link_addrs(1), (Chain::RELAY_OUT_ADDR, Chain::SINK_ADDR));
        assert_eq!(Pipeline::relay_in(0), (Chain::RELAY_IN_IF.into(), Chain::RELAY_IN_ADDR));
        assert_eq!(
            Pipeline::relay_out(0),
            (Chain::RELAY_OUT_IF.into(), Chain::RELAY_OUT_ADDR)
        );
    }
}
