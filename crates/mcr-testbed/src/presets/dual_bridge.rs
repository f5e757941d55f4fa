//! Two Ethernet segments, joined only by the relay.

use std::net::Ipv4Addr;

use crate::{BridgeOptions, Ns, Result, Testbed};

/// Two bridges in a switch namespace:
///
/// ```text
/// senders[i] (eth0 10.0.0.(10+i)) ─┐                    ┌─ (eth0 10.0.1.(10+i)) sinks[i]
///                                  br0 ── (in0 10.0.0.2) relay (out0 10.0.1.2) ── br1
/// ```
///
/// The relay namespace has an address on each segment but forwards nothing
/// (IP forwarding is off), and senders and sinks have no route to each
/// other's subnet: only a relay that carries frames itself joins them.
#[derive(Debug)]
pub struct DualBridge {
    /// The namespaces (removed when this is dropped).
    pub tb: Testbed,
    /// The switch: bridges `br0` (10.0.0.254) and `br1` (10.0.1.254).
    pub switch: Ns,
    /// The senders, on br0.
    pub senders: Vec<Ns>,
    /// The relay, with `in0` on br0 and `out0` on br1.
    pub relay: Ns,
    /// The sinks, on br1.
    pub sinks: Vec<Ns>,
}

impl DualBridge {
    /// Each sender's and each sink's interface.
    pub const HOST_IF: &'static str = "eth0";
    /// The relay's interface on br0.
    pub const RELAY_IN_IF: &'static str = "in0";
    /// The relay's address on br0.
    pub const RELAY_IN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    /// The relay's interface on br1.
    pub const RELAY_OUT_IF: &'static str = "out0";
    /// The relay's address on br1.
    pub const RELAY_OUT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
    /// The most senders or sinks a segment takes.
    pub const MAX_HOSTS: usize = 240;

    /// Builds the topology with `senders` and `sinks` hosts (each at least 1,
    /// at most [`Self::MAX_HOSTS`]) and bridges that treat multicast as
    /// `opts` says.
    pub fn new(tag: &str, senders: usize, sinks: usize, opts: BridgeOptions) -> Result<DualBridge> {
        let senders = senders.clamp(1, Self::MAX_HOSTS);
        let sinks = sinks.clamp(1, Self::MAX_HOSTS);
        let mut tb = Testbed::new(tag)?;
        let switch = tb.ns("switch")?;
        switch.rp_filter_off()?;
        tb.bridge(&switch, "br0", opts)?;
        tb.bridge(&switch, "br1", opts)?;
        switch.addr("br0", "10.0.0.254/24")?;
        switch.addr("br1", "10.0.1.254/24")?;

        let relay = tb.ns("relay")?;
        relay.rp_filter_off()?;
        tb.veth(&relay, Self::RELAY_IN_IF, &switch, "r0")?;
        tb.attach(&switch, "r0", "br0")?;
        relay.addr(Self::RELAY_IN_IF, &format!("{}/24", Self::RELAY_IN_ADDR))?;
        tb.veth(&relay, Self::RELAY_OUT_IF, &switch, "r1")?;
        tb.attach(&switch, "r1", "br1")?;
        relay.addr(Self::RELAY_OUT_IF, &format!("{}/24", Self::RELAY_OUT_ADDR))?;

        // Switch ports are named after their segment: a0.. on br0, b0.. on br1.
        let mut hosts = |role: &str, port_prefix: &str, n: usize, bridge: &str, subnet: u8| -> Result<Vec<Ns>> {
            (0..n)
                .map(|i| {
                    let ns = tb.ns(&format!("{role}{i}"))?;
                    ns.rp_filter_off()?;
                    let port = format!("{port_prefix}{i}");
                    tb.veth(&ns, Self::HOST_IF, &switch, &port)?;
                    tb.attach(&switch, &port, bridge)?;
                    ns.addr(Self::HOST_IF, &format!("{}/24", Self::host_addr(subnet, i)))?;
                    Ok(ns)
                })
                .collect()
        };
        let senders = hosts("sender", "a", senders, "br0", 0)?;
        let sinks = hosts("sink", "b", sinks, "br1", 1)?;
        Ok(DualBridge {
            tb,
            switch,
            senders,
            relay,
            sinks,
        })
    }

    fn host_addr(subnet: u8, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, subnet, 10 + u8::try_from(i).unwrap_or(u8::MAX - 10))
    }

    /// Sender `i`'s address.
    pub fn sender_addr(i: usize) -> Ipv4Addr {
        Self::host_addr(0, i)
    }

    /// Sink `i`'s address.
    pub fn sink_addr(i: usize) -> Ipv4Addr {
        Self::host_addr(1, i)
    }
}
