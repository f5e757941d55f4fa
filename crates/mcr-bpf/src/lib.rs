//! MCR's in-kernel data path: the BPF object built from `bpf/datapath.c`
//! by this crate's build script, loaded with mcr-sys's loader, its maps
//! written from the plans mcr-core's `datapath` module makes. Tests hold the
//! Rust mirrors of the C layouts and constants against the source.

use std::io;

use mcr_core::datapath::{self, Plan};
use mcr_sys::bpf::{LoadError, Map, MappedCounters, Object, Program};
use zerocopy::IntoBytes;

/// The compiled object (ELF, BPF target).
pub const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/datapath.o"));

/// The compiler and flags the object was built with, one a line (the
/// compiler first), run from this crate's directory as
/// `COMPILER -c bpf/datapath.c -o OUT`: for a test that needs a variant of
/// the object built exactly the same way.
pub const COMPILER: &str = include_str!(concat!(env!("OUT_DIR"), "/compiler"));

/// The program's C source, so tests can hold the Rust mirrors of its
/// layouts and constants against it.
pub const SOURCE: &str = include_str!("../bpf/datapath.c");

/// The tc ingress program.
pub const INGRESS: &str = "mcr_ingress";
/// The socket filter of the workers' rings.
pub const RING_FILTER: &str = "mcr_ring_filter";

/// The value of `#define NAME value` in the C source, if it is there.
pub fn define(name: &str) -> Option<u64> {
    SOURCE.lines().find_map(|l| {
        let rest = l.strip_prefix("#define ")?;
        let (n, v) = rest.split_once(char::is_whitespace)?;
        if n != name {
            return None;
        }
        let v = v.split("//").next()?.trim();
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    })
}

/// The object loaded: its programs verified, its maps created and its
/// counters mapped into this process.
#[derive(Debug)]
pub struct Loaded {
    // Field order: unmapped before the object (and the maps) go.
    counters: MappedCounters,
    race: MappedCounters,
    obj: Object,
}

/// Buckets of one line's lag histogram (`RACE_BUCKETS`).
pub const RACE_BUCKETS: usize = mcr_core::arbitrate::race::BUCKETS;

impl Loaded {
    /// Loads the object with room for `counters` counters (one statistics
    /// block) and `outputs` outputs.
    pub fn load(counters: u32, outputs: u32) -> Result<Loaded, LoadError> {
        let obj = Object::load(OBJECT, &[("counters", counters), ("outputs", outputs)])?;
        obj.program(INGRESS)?;
        obj.program(RING_FILTER)?;
        if obj.map("health").is_none() {
            return Err(LoadError::Missing("health".into()));
        }
        let map = obj
            .map("counters")
            .ok_or_else(|| LoadError::Missing("counters".into()))?;
        let counters = MappedCounters::new(map).map_err(|source| LoadError::Map {
            name: "counters".into(),
            source,
        })?;
        let map = obj
            .map("arb_race")
            .ok_or_else(|| LoadError::Missing("arb_race".into()))?;
        let race = MappedCounters::new(map).map_err(|source| LoadError::Map {
            name: "arb_race".into(),
            source,
        })?;
        Ok(Loaded { counters, race, obj })
    }

    /// The tc ingress program.
    pub fn ingress(&self) -> &Program {
        // Checked present in `load`.
        self.obj
            .program(INGRESS)
            .unwrap_or_else(|_| unreachable!("checked in load"))
    }

    /// The rings' socket filter.
    pub fn ring_filter(&self) -> &Program {
        self.obj
            .program(RING_FILTER)
            .unwrap_or_else(|_| unreachable!("checked in load"))
    }

    /// The ring the program hands the payloads of rules whose health is
    /// followed to (`struct health_record` each).
    pub fn health_ring(&self) -> io::Result<&Map> {
        self.map("health")
    }

    /// The counters the program adds to.
    pub fn counters(&self) -> &MappedCounters {
        &self.counters
    }

    fn map(&self, name: &str) -> io::Result<&Map> {
        self.obj
            .map(name)
            .ok_or_else(|| io::Error::other(format!("the object has no map `{name}`")))
    }

    /// The lag histogram of each line of the arbitrated rule in entry
    /// `arb` (`RACE_BUCKETS` counts a line, as the program adds them).
    pub fn race(&self, arb: u32) -> Vec<Vec<u64>> {
        let lines = datapath::ARB_LINES as usize;
        (0..lines)
            .map(|l| {
                let at = (arb as usize * lines + l) * RACE_BUCKETS;
                (at..at + RACE_BUCKETS).map(|i| self.race.get(i)).collect()
            })
            .collect()
    }

    /// An arbitrated rule's entry starts afresh: its framing written, its
    /// units' state and race histogram zeroed, and a new window for each
    /// unit (one where the framing has no units).
    fn arb_afresh(&self, i: u32, a: &datapath::ArbValue) -> io::Result<()> {
        self.map("arbs")?.update(&i.to_ne_bytes(), a.as_bytes())?;
        let (units, windows) = (self.map("arb_units")?, self.map("arb_windows")?);
        let zero = [0u8; datapath::ARB_UNIT_SIZE];
        let lines = datapath::ARB_LINES as usize;
        for l in 0..lines {
            let at = (i as usize * lines + l) * RACE_BUCKETS;
            for b in at..at + RACE_BUCKETS {
                self.race.set(b, 0);
            }
        }
        let with_windows = if a.unit_width > 0 { datapath::ARB_UNITS } else { 1 };
        for k in 0..datapath::ARB_UNITS {
            let at = i * datapath::ARB_UNITS + k;
            units.update(&at.to_ne_bytes(), &zero)?;
            if k < with_windows {
                let w = Map::array_u64("arb_window", a.window())?;
                windows.set_inner(at, &w)?;
            } else {
                windows.delete(&at.to_ne_bytes())?;
            }
        }
        Ok(())
    }

    /// Carries out `plan`, in its order: outputs and admissions first, then
    /// the rules map, then what is no longer needed.
    pub fn write(&self, plan: &Plan) -> io::Result<()> {
        let (outputs, rules) = (self.map("outputs")?, self.map("rules")?);
        let (unicast, vlans) = (self.map("unicast_inputs")?, self.map("vlans")?);
        for (at, o) in &plan.outputs {
            outputs.update(at.as_bytes(), o.as_bytes())?;
        }
        for (i, a) in &plan.arbs {
            self.arb_afresh(*i, a)?;
        }
        for u in &plan.unicast_add {
            unicast.update(u.as_bytes(), &[1])?;
        }
        for v in &plan.vlan_add {
            vlans.update(v.as_bytes(), &[1])?;
        }
        for (k, v) in &plan.set {
            rules.update(k.as_bytes(), v.as_bytes())?;
        }
        for k in &plan.remove {
            rules.delete(k.as_bytes())?;
        }
        for u in &plan.unicast_remove {
            unicast.delete(u.as_bytes())?;
        }
        for v in &plan.vlan_remove {
            vlans.delete(v.as_bytes())?;
        }
        let windows = self.map("arb_windows")?;
        for i in &plan.arbs_gone {
            for k in 0..datapath::ARB_UNITS {
                windows.delete(&(i * datapath::ARB_UNITS + k).to_ne_bytes())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use mcr_core::stats::{InputCounter, LineCounter, OutputCounter, RuleCounter, StatsLayout, WorkerCounter};

    #[test]
    fn the_constants_are_those_of_the_c_program() {
        let d = |n: &str| define(n).unwrap_or_else(|| panic!("#define {n}"));
        assert_eq!(d("MAX_FANOUT"), datapath::MAX_FANOUT as u64);
        assert_eq!(d("MCR_SOCKET_MARK"), u64::from(datapath::SOCKET_MARK));
        assert_eq!(d("RULE_FAST"), u64::from(datapath::RULE_FAST));
        assert_eq!(d("RULE_SSM_ONLY"), u64::from(datapath::RULE_SSM_ONLY));
        assert_eq!(d("RULE_HAS_SOURCES"), u64::from(datapath::RULE_HAS_SOURCES));
        assert_eq!(d("RULE_HEALTH"), u64::from(datapath::RULE_HEALTH));
        assert_eq!(d("RULE_ARB"), u64::from(datapath::RULE_ARB));
        assert_eq!(d("RULE_CHECKSUM_FOR_V6"), u64::from(datapath::RULE_CHECKSUM_FOR_V6));
        assert_eq!(d("ARB_RULES"), u64::from(datapath::ARB_RULES));
        assert_eq!(d("ARB_UNITS"), u64::from(datapath::ARB_UNITS));
        assert_eq!(d("ARB_LINES"), u64::from(datapath::ARB_LINES));
        assert_eq!(d("ARB_HEADER") as usize, datapath::ARB_HEADER);
        assert_eq!(d("RACE_BUCKETS") as usize, RACE_BUCKETS);
        assert_eq!(d("RESET_BACK"), mcr_core::arbitrate::RESET_BACK);
        assert_eq!(d("HEARTBEAT_COPY_NS"), mcr_core::arbitrate::HEARTBEAT_COPY_NS);
        assert_eq!(d("TIME_SHIFT"), u64::from(mcr_core::arbitrate::window::TIME_SHIFT));
        for (name, c) in [
            ("C_IN_PACKETS", InputCounter::Packets),
            ("C_IN_BYTES", InputCounter::Bytes),
            ("C_IN_FORWARDED", InputCounter::Forwarded),
            ("C_IN_DUPLICATES", InputCounter::Duplicates),
            ("C_IN_TOO_LATE", InputCounter::TooLate),
            ("C_IN_STRAYS", InputCounter::Strays),
        ] {
            assert_eq!(d(name), c as u64, "{name}");
        }
        for (name, c) in [
            ("C_LINE_MESSAGES", LineCounter::Messages),
            ("C_LINE_GAPS", LineCounter::Gaps),
            ("C_LINE_REPEATS", LineCounter::Repeats),
            ("C_LINE_HEARTBEATS", LineCounter::Heartbeats),
            ("C_LINE_WRONG_SESSION", LineCounter::WrongSession),
            ("C_LINE_MALFORMED", LineCounter::Malformed),
            ("C_LINE_RESETS", LineCounter::Resets),
        ] {
            assert_eq!(d(name), c as u64, "{name}");
        }
        assert_eq!(d("C_RULE_GAPS_OPENED"), RuleCounter::GapsOpened as u64);
        assert_eq!(d("C_RULE_GAPS_FILLED"), RuleCounter::GapsFilled as u64);
        assert_eq!(d("HEALTH_PAYLOAD") as usize, datapath::HEALTH_PAYLOAD);
        assert_eq!(d("OUT_KEEP_SRC"), u64::from(datapath::OUT_KEEP_SRC));
        assert_eq!(d("OUT_TTL_FIXED"), u64::from(datapath::OUT_TTL_FIXED));
        assert_eq!(d("OUT_DSCP_SET"), u64::from(datapath::OUT_DSCP_SET));
        assert_eq!(d("OUT_OTHER_FAMILY"), u64::from(datapath::OUT_OTHER_FAMILY));
        // The counters are one worker block of the statistics layout.
        let l = StatsLayout::new(1);
        assert_eq!(d("C_RX_FRAMES") as usize, l.worker(0, WorkerCounter::RxFrames));
        assert_eq!(d("C_RX_BYTES") as usize, l.worker(0, WorkerCounter::RxBytes));
        assert_eq!(d("C_TX_PACKETS") as usize, l.worker(0, WorkerCounter::TxPackets));
        assert_eq!(d("C_HEALTH_MISSED") as usize, l.worker(0, WorkerCounter::HealthMissed));
        assert_eq!(d("C_STANDBY") as usize, l.worker(0, WorkerCounter::Standby));
        assert_eq!(d("C_RULE_PACKETS"), RuleCounter::Packets as u64);
        assert_eq!(d("C_RULE_BYTES"), RuleCounter::Bytes as u64);
        assert_eq!(d("C_RULE_HEALTH_SAMPLED"), RuleCounter::HealthSampled as u64);
        assert_eq!(
            d("HEALTH_SAMPLE_NS"),
            datapath::HEALTH_SAMPLE_NS,
            "one datagram in this long of a stream that is neither RTP nor MPEG-TS"
        );
        for (name, c) in [
            ("C_OUT_PACKETS", OutputCounter::Packets),
            ("C_OUT_BYTES", OutputCounter::Bytes),
            ("C_OUT_QUEUE_FULL", OutputCounter::QueueFull),
            ("C_OUT_SEND_ERROR", OutputCounter::SendError),
            ("C_OUT_TTL_EXPIRED", OutputCounter::TtlExpired),
            ("C_OUT_TOO_BIG", OutputCounter::TooBig),
            ("C_OUT_HELD", OutputCounter::Held),
        ] {
            assert_eq!(d(name), c as u64, "{name}");
        }
        // Every layout the Rust side writes is the size the C side reads.
        for (c_struct, size) in [
            ("rule_key", std::mem::size_of::<datapath::RuleKey>()),
            ("rule", std::mem::size_of::<datapath::RuleValue>()),
            ("output", std::mem::size_of::<datapath::OutputValue>()),
            ("unicast_key", std::mem::size_of::<datapath::UnicastKey>()),
            ("vlan_key", std::mem::size_of::<datapath::VlanKey>()),
            ("health_record", datapath::HEALTH_RECORD),
            ("arb", std::mem::size_of::<datapath::ArbValue>()),
            ("arb_unit", datapath::ARB_UNIT_SIZE),
        ] {
            let assert = format!("_Static_assert(sizeof(struct {c_struct}) == {size},");
            assert!(SOURCE.contains(&assert), "{assert}");
        }
    }

    #[test]
    fn the_object_is_a_bpf_elf_and_the_source_is_readable() {
        assert_eq!(&OBJECT[..4], b"\x7fELF");
        assert_eq!(define("MAX_FANOUT"), Some(datapath::MAX_FANOUT as u64));
        assert_eq!(define("MCR_SOCKET_MARK"), Some(0x4d43_5200));
        assert_eq!(define("NO_SUCH_THING"), None);
    }
}
