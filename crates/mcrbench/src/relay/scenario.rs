//! The scenarios: the classic multicast-relay experiments, each a set of
//! points (a topology size and an offered load).

use super::topo::Topology;

/// The shape a point runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The chain with this many streams.
    Chain(usize),
    /// The dual bridge with this many streams.
    DualBridge(usize),
    /// The star with this many outputs.
    Star(usize),
    /// The pipeline with this many relays.
    Pipeline(usize),
}

impl Shape {
    /// Builds the topology; `rewrite` false keeps groups and ports.
    pub fn build(self, rewrite: bool) -> anyhow::Result<Topology> {
        match self {
            Shape::Chain(n) => Topology::chain(n, rewrite),
            Shape::DualBridge(n) => Topology::dual_bridge(n, rewrite),
            Shape::Star(k) => Topology::star(k, rewrite),
            Shape::Pipeline(h) => Topology::pipeline(h, rewrite),
        }
    }

    /// For tables: `chain, 1 stream`, `star, 50 outputs`.
    pub fn describe(self) -> String {
        let n = |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
        match self {
            Shape::Chain(k) => format!("chain, {}", n(k, "stream", "streams")),
            Shape::DualBridge(k) => format!("dual bridge, {}", n(k, "stream", "streams")),
            Shape::Star(k) => format!("star, {}", n(k, "output", "outputs")),
            Shape::Pipeline(h) => format!("pipeline, {}", n(h, "relay", "relays")),
        }
    }

    /// Whether its topology has a second path for each stream, to send
    /// the copies a merging relay (`mcr --merge`) takes (the chain).
    pub fn has_second_path(self) -> bool {
        matches!(self, Shape::Chain(_))
    }

    /// Outputs one input has.
    pub fn outputs(self) -> usize {
        match self {
            Shape::Star(k) => k,
            _ => 1,
        }
    }
}

/// How packets arrive at the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// One at a time, each through the kernel's UDP send path at its own
    /// due time (`mcrgen send --via udp --pace each`): spaced by at least
    /// the sender's cost per datagram, as encoders and software senders
    /// send them.
    Spaced,
    /// In bursts: every packet that is due built here and handed to an
    /// AF_PACKET socket in one `sendmmsg` (`mcrgen send --via frames --pace
    /// batch`), so that the relay's ring fills a dozen frames at a time.
    Burst,
    /// In small bursts on a pacing tick: every 100 µs the datagrams due by
    /// then through the kernel's UDP send path in one `sendmmsg` (`mcrgen
    /// send --via udp --pace tick`), rate/10,000 at a time (5 at 50k pps,
    /// 10 at 100k), as software senders with a pacing timer send them.
    Tick,
}

impl Arrivals {
    /// Every shape, the one that decides the cost first.
    pub const ALL: [Arrivals; 3] = [Arrivals::Spaced, Arrivals::Tick, Arrivals::Burst];

    /// Its name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Arrivals::Spaced => "spaced",
            Arrivals::Burst => "burst",
            Arrivals::Tick => "tick",
        }
    }

    /// The `mcrgen send` options that produce it.
    pub fn sender_args(self) -> [&'static str; 4] {
        match self {
            Arrivals::Spaced => ["--via", "udp", "--pace", "each"],
            Arrivals::Burst => ["--via", "frames", "--pace", "batch"],
            Arrivals::Tick => ["--via", "udp", "--pace", "tick"],
        }
    }
}

impl std::str::FromStr for Arrivals {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Arrivals::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("`{s}`: write spaced, tick or burst"))
    }
}

/// How fast the generator sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rate {
    /// All streams together (`max`: as fast as it goes).
    Total(String),
    /// Each stream.
    PerStream(String),
}

/// One measured point.
#[derive(Debug, Clone)]
pub struct Point {
    /// Its scenario.
    pub scenario: &'static str,
    /// The parameter that varies, for tables (`200k pps`, `50 streams`).
    pub label: String,
    /// The topology.
    pub shape: Shape,
    /// The offered rate.
    pub rate: Rate,
    /// Packets per stream.
    pub count: u64,
    /// UDP payload bytes.
    pub size: usize,
    /// How the packets arrive.
    pub arrivals: Arrivals,
}

/// The scenarios, in order.
pub const ALL: [&str; 6] = [
    "chain-rate",
    "dual-bridge",
    "streams",
    "high-density",
    "fanout",
    "pipeline",
];

/// What the scenarios run, full-size or `quick`.
#[derive(Debug, Clone)]
pub struct Params {
    pub rates: Vec<String>,
    pub count: u64,
    pub stream_counts: Vec<usize>,
    pub per_stream_pps: u64,
    pub seconds: u64,
    pub fanouts: Vec<usize>,
    pub fanout_rates: Vec<u64>,
    pub dense_streams: usize,
    pub dense_pps: u64,
    pub pipeline_size: usize,
    pub pipeline_rates: Vec<String>,
}

impl Params {
    /// The sizes the scenarios were specified with.
    pub fn full() -> Self {
        Params {
            rates: vec!["50k".into(), "100k".into(), "200k".into(), "max".into()],
            count: 1_000_000,
            stream_counts: vec![1, 2, 5, 10, 20, 50, 100, 150, 500, 1000],
            per_stream_pps: 2000,
            seconds: 5,
            fanouts: vec![1, 3, 50, 200],
            fanout_rates: vec![1000, 20_000],
            dense_streams: 50,
            dense_pps: 3000,
            pipeline_size: 1400,
            pipeline_rates: vec!["max".into()],
        }
    }

    /// Every scenario at a small scale, for CI.
    pub fn quick() -> Self {
        Params {
            rates: vec!["20k".into()],
            count: 2000,
            stream_counts: vec![1, 5],
            per_stream_pps: 500,
            seconds: 1,
            fanouts: vec![1, 3],
            fanout_rates: vec![1000],
            dense_streams: 5,
            dense_pps: 1000,
            pipeline_size: 1400,
            pipeline_rates: vec!["max".into()],
        }
    }
}

/// The points of `scenario`, under each of `arrivals` in turn.
pub fn points(scenario: &str, p: &Params, arrivals: &[Arrivals]) -> anyhow::Result<Vec<Point>> {
    let mut all = Vec::new();
    for &a in arrivals {
        all.extend(points_of(scenario, p)?.into_iter().map(|mut pt| {
            pt.arrivals = a;
            pt
        }));
    }
    Ok(all)
}

fn points_of(scenario: &str, p: &Params) -> anyhow::Result<Vec<Point>> {
    let per_stream_count = p.per_stream_pps * p.seconds;
    let pts = match scenario {
        "chain-rate" | "dual-bridge" => {
            let (scenario, shape) = if scenario == "chain-rate" {
                ("chain-rate", Shape::Chain(1))
            } else {
                ("dual-bridge", Shape::DualBridge(1))
            };
            p.rates
                .iter()
                .map(|r| Point {
                    scenario,
                    label: format!("{r} pps"),
                    shape,
                    rate: Rate::Total(r.clone()),
                    count: p.count,
                    size: 1024,
                    arrivals: Arrivals::Spaced,
                })
                .collect()
        }
        "streams" => p
            .stream_counts
            .iter()
            .map(|&n| Point {
                scenario: "streams",
                label: format!("{n} streams"),
                shape: Shape::Chain(n),
                rate: Rate::PerStream(p.per_stream_pps.to_string()),
                count: per_stream_count,
                size: 1024,
                arrivals: Arrivals::Spaced,
            })
            .collect(),
        "high-density" => vec![Point {
            scenario: "high-density",
            label: format!("{} x {} pps", p.dense_streams, p.dense_pps),
            shape: Shape::DualBridge(p.dense_streams),
            rate: Rate::PerStream(p.dense_pps.to_string()),
            count: p.dense_pps * p.seconds,
            size: 1024,
            arrivals: Arrivals::Spaced,
        }],
        "fanout" => p
            .fanouts
            .iter()
            .flat_map(|&k| {
                p.fanout_rates.iter().map(move |&r| Point {
                    scenario: "fanout",
                    label: format!("1 to {k} at {r} pps"),
                    shape: Shape::Star(k),
                    rate: Rate::Total(r.to_string()),
                    count: r * p.seconds,
                    size: 1024,
                    arrivals: Arrivals::Spaced,
                })
            })
            .collect(),
        "pipeline" => p
            .pipeline_rates
            .iter()
            .map(|r| Point {
                scenario: "pipeline",
                label: if r == "max" {
                    format!("3 hops, {} B, max", p.pipeline_size)
                } else {
                    format!("3 hops, {} B, {r} pps", p.pipeline_size)
                },
                shape: Shape::Pipeline(3),
                rate: Rate::Total(r.clone()),
                count: p.count,
                size: p.pipeline_size,
                arrivals: Arrivals::Spaced,
            })
            .collect(),
        other => anyhow::bail!("unknown scenario `{other}` (known: {})", ALL.join(", ")),
    };
    Ok(pts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_chain_has_a_second_path_for_a_merge() {
        assert!(Shape::Chain(1).has_second_path());
        assert!(Shape::Chain(50).has_second_path());
        assert!(!Shape::DualBridge(1).has_second_path());
        assert!(!Shape::Star(3).has_second_path());
        assert!(!Shape::Pipeline(3).has_second_path());
        // chain-rate and streams run on the chain, the others do not.
        let p = Params::quick();
        for (sc, merges) in [
            ("chain-rate", true),
            ("streams", true),
            ("dual-bridge", false),
            ("high-density", false),
            ("fanout", false),
            ("pipeline", false),
        ] {
            let pts = points(sc, &p, &Arrivals::ALL).expect("points");
            assert!(pts.iter().all(|pt| pt.shape.has_second_path() == merges), "{sc}");
        }
    }

    #[test]
    fn each_arrival_shape_has_its_name_and_sender() {
        for a in Arrivals::ALL {
            assert_eq!(a.name().parse::<Arrivals>(), Ok(a));
        }
        assert_eq!("tick".parse::<Arrivals>(), Ok(Arrivals::Tick));
        assert_eq!(Arrivals::Tick.sender_args(), ["--via", "udp", "--pace", "tick"]);
        assert!("bursts".parse::<Arrivals>().is_err());
    }
}
