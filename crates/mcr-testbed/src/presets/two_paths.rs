//! Two paths to one relay, for a stream sent twice (SMPTE ST 2022-7) or a
//! primary and a backup: each path crosses a namespace of its own where
//! `mcrgen impair` can drop, delay or cut what crosses it.
//!
//! ```text
//!      (veth0 10.0.0.1) ↔ [path_a: a_in … a_out] ↔ (in0 10.0.0.2)
//! gen                                                              relay (out0 10.0.1.1) ↔ (veth1 10.0.1.2) sink
//!      (veth2 10.0.2.1) ↔ [path_b: b_in … b_out] ↔ (in1 10.0.2.2)
//! ```
//!
//! A path namespace forwards nothing by itself: a path carries traffic
//! only while an impairer runs in it ([`TwoPaths::impair`]).

use crate::traffic::Impairer;
use crate::{Ns, Result, Testbed};

/// gen → path a / path b → relay → sink.
#[derive(Debug)]
pub struct TwoPaths {
    /// The namespaces (removed when this is dropped).
    pub tb: Testbed,
    /// The generator: `veth0` towards path a, `veth2` towards path b.
    pub generator: Ns,
    /// Path a's namespace (`a_in` from the generator, `a_out` to the relay).
    pub path_a: Ns,
    /// Path b's namespace (`b_in`, `b_out`).
    pub path_b: Ns,
    /// The relay: `in0` from path a, `in1` from path b, `out0` to the sink.
    pub relay: Ns,
    /// The sink: `veth1`.
    pub sink: Ns,
}

impl TwoPaths {
    /// The generator's interface towards path a.
    pub const GEN_A_IF: &'static str = "veth0";
    /// The generator's interface towards path b.
    pub const GEN_B_IF: &'static str = "veth2";
    /// The relay's input from path a.
    pub const RELAY_A_IF: &'static str = "in0";
    /// The relay's input from path b.
    pub const RELAY_B_IF: &'static str = "in1";
    /// The relay's output.
    pub const RELAY_OUT_IF: &'static str = "out0";
    /// The sink's interface.
    pub const SINK_IF: &'static str = "veth1";

    /// Builds the five namespaces and their links.
    pub fn new(tag: &str) -> Result<TwoPaths> {
        let mut tb = Testbed::new(tag)?;
        let generator = tb.ns("gen")?;
        let path_a = tb.ns("patha")?;
        let path_b = tb.ns("pathb")?;
        let relay = tb.ns("relay")?;
        let sink = tb.ns("sink")?;
        for ns in [&generator, &path_a, &path_b, &relay, &sink] {
            ns.rp_filter_off()?;
        }
        tb.veth(&generator, Self::GEN_A_IF, &path_a, "a_in")?;
        tb.veth(&path_a, "a_out", &relay, Self::RELAY_A_IF)?;
        tb.veth(&generator, Self::GEN_B_IF, &path_b, "b_in")?;
        tb.veth(&path_b, "b_out", &relay, Self::RELAY_B_IF)?;
        tb.veth(&relay, Self::RELAY_OUT_IF, &sink, Self::SINK_IF)?;
        generator.addr(Self::GEN_A_IF, "10.0.0.1/24")?;
        relay.addr(Self::RELAY_A_IF, "10.0.0.2/24")?;
        generator.addr(Self::GEN_B_IF, "10.0.2.1/24")?;
        relay.addr(Self::RELAY_B_IF, "10.0.2.2/24")?;
        relay.addr(Self::RELAY_OUT_IF, "10.0.1.1/24")?;
        sink.addr(Self::SINK_IF, "10.0.1.2/24")?;
        Ok(TwoPaths {
            tb,
            generator,
            path_a,
            path_b,
            relay,
            sink,
        })
    }

    /// Starts `mcrgen impair` on path a (`b`: false) or b with `faults`
    /// (e.g. `["--loss-band", "0-1%"]`); the path carries nothing until it
    /// runs.
    pub fn impair(&self, b: bool, faults: &[&str]) -> Result<Impairer> {
        let (ns, input, output) = if b {
            (&self.path_b, "b_in", "b_out")
        } else {
            (&self.path_a, "a_in", "a_out")
        };
        let mut args = vec!["--in", input, "--out", output];
        args.extend_from_slice(faults);
        Impairer::start(ns, &args)
    }
}
