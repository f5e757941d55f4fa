//! One relay fanning out to many sinks, each on its own link.

use std::net::Ipv4Addr;

use crate::{Ns, Result, Testbed};

/// gen → relay → K sinks:
///
/// ```text
/// gen (veth0 10.0.0.1) ↔ (veth1 10.0.0.2) relay ─(e{k} 10.A.B.1)─(eth0 10.A.B.2) sinks[k]
/// ```
///
/// where link `k` uses subnet 10.(1 + k/256).(k%256).0/24. Sinks route back
/// to the generator's subnet through the relay.
#[derive(Debug)]
pub struct Star {
    /// The namespaces (removed when this is dropped).
    pub tb: Testbed,
    /// The generator's namespace.
    pub generator: Ns,
    /// The relay's namespace.
    pub relay: Ns,
    /// One namespace per egress link.
    pub sinks: Vec<Ns>,
}

impl Star {
    /// The generator's interface.
    pub const GEN_IF: &'static str = "veth0";
    /// The generator's address.
    pub const GEN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    /// The relay's ingress interface.
    pub const RELAY_IN_IF: &'static str = "veth1";
    /// The relay's ingress address.
    pub const RELAY_IN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    /// Each sink's interface.
    pub const SINK_IF: &'static str = "eth0";
    /// The most egress links.
    pub const MAX_OUTPUTS: usize = 4096;

    /// Builds the star with `outputs` egress links (1 to [`Self::MAX_OUTPUTS`]).
    pub fn new(tag: &str, outputs: usize) -> Result<Star> {
        let outputs = outputs.clamp(1, Self::MAX_OUTPUTS);
        let mut tb = Testbed::new(tag)?;
        let generator = tb.ns("gen")?;
        let relay = tb.ns("relay")?;
        generator.rp_filter_off()?;
        relay.rp_filter_off()?;
        tb.veth(&generator, Self::GEN_IF, &relay, Self::RELAY_IN_IF)?;
        generator.addr(Self::GEN_IF, &format!("{}/24", Self::GEN_ADDR))?;
        relay.addr(Self::RELAY_IN_IF, &format!("{}/24", Self::RELAY_IN_ADDR))?;
        generator.route(&["10.0.0.0/8", "via", &Self::RELAY_IN_ADDR.to_string()])?;
        let mut sinks = Vec::with_capacity(outputs);
        for k in 0..outputs {
            let sink = tb.ns(&format!("sink{k}"))?;
            sink.rp_filter_off()?;
            let out_if = Self::relay_out_if(k);
            tb.veth(&relay, &out_if, &sink, Self::SINK_IF)?;
            relay.addr(&out_if, &format!("{}/24", Self::relay_out_addr(k)))?;
            sink.addr(Self::SINK_IF, &format!("{}/24", Self::sink_addr(k)))?;
            sink.route(&["10.0.0.0/24", "via", &Self::relay_out_addr(k).to_string()])?;
            sinks.push(sink);
        }
        Ok(Star {
            tb,
            generator,
            relay,
            sinks,
        })
    }

    fn subnet(k: usize) -> (u8, u8) {
        let k = k.min(Self::MAX_OUTPUTS - 1);
        ((1 + k / 256) as u8, (k % 256) as u8)
    }

    /// The relay's interface towards sink `k`.
    pub fn relay_out_if(k: usize) -> String {
        format!("e{k}")
    }

    /// The relay's address on link `k`.
    pub fn relay_out_addr(k: usize) -> Ipv4Addr {
        let (a, b) = Self::subnet(k);
        Ipv4Addr::new(10, a, b, 1)
    }

    /// Sink `k`'s address.
    pub fn sink_addr(k: usize) -> Ipv4Addr {
        let (a, b) = Self::subnet(k);
        Ipv4Addr::new(10, a, b, 2)
    }
}
