//! Where a market-data feed keeps its sequence number: the four framings
//! MCR knows by name, and a generic form for any other feed whose header
//! holds the sequence number at a fixed place of the UDP payload.
//!
//! | framing | sequence | message count | unit | session |
//! |---|---|---|---|---|
//! | `moldudp64` (Nasdaq) | u64 big-endian at 10 | u16 big-endian at 18 (0: heartbeat, 0xFFFF: end of session) | — | bytes 0–9 |
//! | `mdp3` (CME MDP 3.0) | u32 little-endian at 0 | — (it counts packets) | — | — |
//! | `pitch` (Cboe) | u32 little-endian at 4 | u8 at 2 (0: heartbeat) | u8 at 3 | — |
//! | `mitch` (LSE) | u32 little-endian at 4 | u8 at 2 (0: heartbeat) | u8 at 3 (market data group) | — |
//!
//! PITCH and MITCH start with the datagram's length (u16 little-endian at
//! 0), which must be the payload's. MDP 3.0 has an 8-byte sending time
//! after its sequence number, so a packet is at least 12 bytes.
//!
//! A generic framing is written `sequence=u32le@0` (the type, `u8`,
//! `u16`, `u32` or `u64`, with `be` or `le` for the wider ones, then `@`
//! and the offset), with an optional `count=TYPE@OFFSET` (the sequence
//! number counts messages, and a packet carries this many; 0 is a
//! heartbeat), `session=OFFSET+LEN` (bytes that name the session, at most
//! 16) and `unit=u8@OFFSET` (the sequence numbers of each unit are
//! independent).

use std::fmt;
use std::str::FromStr;

/// A framing MCR knows by name, or a generic one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// Nasdaq MoldUDP64.
    MoldUdp64,
    /// CME MDP 3.0 (packet sequence number).
    Mdp3,
    /// Cboe PITCH (sequenced unit header).
    Pitch,
    /// LSE MITCH (unit header).
    Mitch,
    /// Fields at fixed places.
    Generic(Generic),
}

/// An unsigned integer field of the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Field {
    /// Its first byte.
    pub offset: u16,
    /// Its width in bytes: 1, 2, 4 or 8.
    pub width: u8,
    /// Big-endian (network order); else little-endian.
    pub big_endian: bool,
}

/// Bytes of the payload that name a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    /// The first byte.
    pub offset: u16,
    /// How many (1 to [`SESSION_MAX`]).
    pub len: u8,
}

/// The longest session name.
pub const SESSION_MAX: usize = 16;

/// The fields of a generic framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Generic {
    /// The sequence number (of the packet, or of its first message).
    pub sequence: Field,
    /// How many messages the packet carries, if the sequence counts
    /// messages.
    pub count: Option<Field>,
    /// The session's name.
    pub session: Option<Span>,
    /// The unit (one byte): each unit's sequence is its own.
    pub unit: Option<Field>,
}

/// What a packet is, by its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Messages, numbered from `seq`.
    Data,
    /// No message: the sender is alive, and its next sequence number is
    /// `seq` (MoldUDP64, a generic count of 0; PITCH and MITCH send theirs
    /// with count 0).
    Heartbeat,
    /// MoldUDP64's end of session (count 0xFFFF).
    EndOfSession,
}

/// A session's name as a packet carries it (unused bytes zero).
pub type Session = [u8; SESSION_MAX];

/// The header of one sequenced packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequenced {
    /// Its unit (0 where the framing has none).
    pub unit: u32,
    /// Its session (all zeros where the framing has none).
    pub session: Session,
    /// The sequence number of the packet (or of its first message).
    pub seq: u64,
    /// Sequence numbers it takes: its messages (1 for a framing that
    /// numbers packets; 0 for a heartbeat or an end of session).
    pub messages: u32,
    /// Data, heartbeat or end of session.
    pub kind: Kind,
}

/// Why a packet does not carry the framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than the header.
    TooShort {
        /// Bytes the header needs.
        need: usize,
    },
    /// Its own length field is not the payload's length.
    Length {
        /// What the field says.
        says: usize,
    },
}

impl Field {
    const fn new(offset: u16, width: u8, big_endian: bool) -> Self {
        Field {
            offset,
            width,
            big_endian,
        }
    }

    /// One past its last byte.
    pub fn end(&self) -> usize {
        usize::from(self.offset) + usize::from(self.width)
    }

    /// Its value in `p` (which holds it: the caller checked the length).
    fn read(&self, p: &[u8]) -> u64 {
        let at = usize::from(self.offset);
        let bytes = p.get(at..at + usize::from(self.width)).unwrap_or(&[]);
        let mut v = 0u64;
        if self.big_endian {
            for &b in bytes {
                v = v << 8 | u64::from(b);
            }
        } else {
            for &b in bytes.iter().rev() {
                v = v << 8 | u64::from(b);
            }
        }
        v
    }

    /// The largest value it holds.
    fn max(&self) -> u64 {
        if self.width >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * u32::from(self.width))) - 1
        }
    }
}

const MOLD_SESSION: Span = Span { offset: 0, len: 10 };
const MOLD_SEQ: Field = Field::new(10, 8, true);
const MOLD_COUNT: Field = Field::new(18, 2, true);
const MOLD_HEADER: usize = 20;
const MDP3_SEQ: Field = Field::new(0, 4, false);
const MDP3_HEADER: usize = 12;
const UNIT_LEN: Field = Field::new(0, 2, false);
const UNIT_COUNT: Field = Field::new(2, 1, false);
const UNIT_UNIT: Field = Field::new(3, 1, false);
const UNIT_SEQ: Field = Field::new(4, 4, false);
const UNIT_HEADER: usize = 8;

impl Framing {
    /// Its name (`generic` for one given by its fields).
    pub fn name(&self) -> &'static str {
        match self {
            Framing::MoldUdp64 => "moldudp64",
            Framing::Mdp3 => "mdp3",
            Framing::Pitch => "pitch",
            Framing::Mitch => "mitch",
            Framing::Generic(_) => "generic",
        }
    }

    /// The generic form of the framing: where each field lies.
    pub fn fields(&self) -> Generic {
        match *self {
            Framing::MoldUdp64 => Generic {
                sequence: MOLD_SEQ,
                count: Some(MOLD_COUNT),
                session: Some(MOLD_SESSION),
                unit: None,
            },
            Framing::Mdp3 => Generic {
                sequence: MDP3_SEQ,
                count: None,
                session: None,
                unit: None,
            },
            Framing::Pitch | Framing::Mitch => Generic {
                sequence: UNIT_SEQ,
                count: Some(UNIT_COUNT),
                session: None,
                unit: Some(UNIT_UNIT),
            },
            Framing::Generic(g) => g,
        }
    }

    /// The shortest payload that carries the framing.
    pub fn header_len(&self) -> usize {
        match self {
            Framing::MoldUdp64 => MOLD_HEADER,
            Framing::Mdp3 => MDP3_HEADER,
            Framing::Pitch | Framing::Mitch => UNIT_HEADER,
            Framing::Generic(g) => g.end(),
        }
    }

    /// Whether the payload starts with its own length (PITCH, MITCH).
    pub fn has_length(&self) -> bool {
        matches!(self, Framing::Pitch | Framing::Mitch)
    }

    /// Reads the header of `payload`.
    pub fn parse(&self, payload: &[u8]) -> Result<Sequenced, Malformed> {
        let need = self.header_len();
        if payload.len() < need {
            return Err(Malformed::TooShort { need });
        }
        if self.has_length() {
            let says = UNIT_LEN.read(payload) as usize;
            if says != payload.len() {
                return Err(Malformed::Length { says });
            }
        }
        let g = self.fields();
        let mut session = [0u8; SESSION_MAX];
        if let Some(s) = g.session {
            let at = usize::from(s.offset);
            let len = usize::from(s.len).min(SESSION_MAX);
            if let Some(bytes) = payload.get(at..at + len) {
                session[..len].copy_from_slice(bytes);
            }
        }
        let seq = g.sequence.read(payload);
        let (messages, kind) = match g.count {
            None => (1, Kind::Data),
            Some(c) => match c.read(payload) {
                0 => (0, Kind::Heartbeat),
                0xffff if *self == Framing::MoldUdp64 => (0, Kind::EndOfSession),
                n => (u32::try_from(n).unwrap_or(u32::MAX), Kind::Data),
            },
        };
        Ok(Sequenced {
            unit: g.unit.map_or(0, |u| u.read(payload) as u32),
            session,
            seq,
            messages,
            kind,
        })
    }
}

impl Generic {
    /// One past the last byte any field reads.
    pub fn end(&self) -> usize {
        let mut end = self.sequence.end();
        for f in [self.count, self.unit].into_iter().flatten() {
            end = end.max(f.end());
        }
        if let Some(s) = self.session {
            end = end.max(usize::from(s.offset) + usize::from(s.len));
        }
        end
    }

    /// Checks the fields (a count field that cannot hold a message count
    /// of at least one, a unit wider than a byte, overlapping fields are
    /// refused).
    pub fn check(&self) -> Result<(), String> {
        if self.unit.is_some_and(|u| u.width != 1) {
            return Err("unit: write u8@OFFSET (a unit is one byte)".into());
        }
        if self.count.is_some_and(|c| c.width > 4) {
            return Err("count: a message count is u8, u16 or u32".into());
        }
        let mut spans: Vec<(&str, usize, usize)> = vec![("sequence", self.sequence.offset.into(), self.sequence.end())];
        if let Some(c) = self.count {
            spans.push(("count", c.offset.into(), c.end()));
        }
        if let Some(u) = self.unit {
            spans.push(("unit", u.offset.into(), u.end()));
        }
        if let Some(s) = self.session {
            spans.push(("session", s.offset.into(), usize::from(s.offset) + usize::from(s.len)));
        }
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                if a.1 < b.2 && b.1 < a.2 {
                    return Err(format!("{} and {} overlap: each field has bytes of its own", a.0, b.0));
                }
            }
        }
        Ok(())
    }

    /// The largest sequence number the field holds.
    pub fn sequence_max(&self) -> u64 {
        self.sequence.max()
    }
}

impl fmt::Display for Field {
    /// `u32le@4`, `u64be@10`, `u8@3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let order = match (self.width, self.big_endian) {
            (1, _) => "",
            (_, true) => "be",
            (_, false) => "le",
        };
        write!(f, "u{}{order}@{}", u32::from(self.width) * 8, self.offset)
    }
}

impl FromStr for Field {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: write a type and an offset, such as u32le@4, u64be@10 or u8@3");
        let (ty, at) = s.trim().split_once('@').ok_or_else(bad)?;
        let offset: u16 = at.trim().parse().map_err(|_| bad())?;
        let (width, big_endian) = match ty.trim() {
            "u8" => (1, true),
            "u16be" => (2, true),
            "u16le" => (2, false),
            "u32be" => (4, true),
            "u32le" => (4, false),
            "u64be" => (8, true),
            "u64le" => (8, false),
            "u16" | "u32" | "u64" => {
                return Err(format!("`{s}`: say the byte order: {ty}be or {ty}le"));
            }
            _ => return Err(bad()),
        };
        if usize::from(offset) + width > 1400 {
            return Err(format!(
                "`{s}`: the offset must leave the field within the first 1,400 bytes"
            ));
        }
        Ok(Field::new(offset, width as u8, big_endian))
    }
}

impl fmt::Display for Span {
    /// `0+10`: the first byte, then how many.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.offset, self.len)
    }
}

impl FromStr for Span {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("session `{s}`: write the first byte and how many, such as 0+10 (at most {SESSION_MAX})");
        let (at, len) = s.trim().split_once('+').ok_or_else(bad)?;
        let offset: u16 = at.trim().parse().map_err(|_| bad())?;
        let len: u8 = len.trim().parse().map_err(|_| bad())?;
        if len == 0 || usize::from(len) > SESSION_MAX || usize::from(offset) + usize::from(len) > 1400 {
            return Err(bad());
        }
        Ok(Span { offset, len })
    }
}

impl fmt::Display for Framing {
    /// Its name, or a generic one's fields (`sequence=u32le@0,count=u8@4`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Framing::Generic(g) = self else {
            return f.write_str(self.name());
        };
        write!(f, "sequence={}", g.sequence)?;
        if let Some(c) = g.count {
            write!(f, ",count={c}")?;
        }
        if let Some(s) = g.session {
            write!(f, ",session={s}")?;
        }
        if let Some(u) = g.unit {
            write!(f, ",unit={u}")?;
        }
        Ok(())
    }
}

/// The names of the framings MCR knows.
pub const NAMES: &str = "moldudp64, mdp3, pitch, mitch";

impl Framing {
    /// A framing by its name.
    pub fn by_name(name: &str) -> Result<Framing, String> {
        match name.trim() {
            "moldudp64" => Ok(Framing::MoldUdp64),
            "mdp3" => Ok(Framing::Mdp3),
            "pitch" => Ok(Framing::Pitch),
            "mitch" => Ok(Framing::Mitch),
            other => Err(format!(
                "framing `{other}`: write one of {NAMES}, or give the fields (sequence=TYPE@OFFSET ...)"
            )),
        }
    }

    /// A generic framing from its settings (`sequence`, `count`,
    /// `session`, `unit`, as `KEY=VALUE` pairs).
    pub fn generic<'a>(settings: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Framing, String> {
        let (mut sequence, mut count, mut session, mut unit) = (None, None, None, None);
        for (k, v) in settings {
            let what = |e: String| format!("{k}: {e}");
            match k {
                "sequence" => sequence = Some(v.parse::<Field>().map_err(what)?),
                "count" => count = Some(v.parse::<Field>().map_err(what)?),
                "session" => session = Some(v.parse::<Span>()?),
                "unit" => unit = Some(v.parse::<Field>().map_err(what)?),
                other => {
                    return Err(format!(
                        "a framing has no field `{other}` (it has sequence, count, session, unit)"
                    ));
                }
            }
        }
        let sequence = sequence.ok_or("a generic framing needs sequence=TYPE@OFFSET (such as sequence=u32le@0)")?;
        let g = Generic {
            sequence,
            count,
            session,
            unit,
        };
        g.check()?;
        Ok(Framing::Generic(g))
    }
}

impl FromStr for Framing {
    type Err = String;
    /// A name, or `sequence=TYPE@OFFSET[,count=...][,session=...][,unit=...]`.
    fn from_str(s: &str) -> Result<Self, String> {
        if !s.contains('=') {
            return Framing::by_name(s);
        }
        let pairs: Result<Vec<(&str, &str)>, String> = s
            .split(',')
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.trim(), v.trim()))
                    .ok_or_else(|| format!("framing `{s}`: `{kv}` is not KEY=VALUE"))
            })
            .collect();
        Framing::generic(pairs?)
    }
}

impl serde::Serialize for Framing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Framing {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A MoldUDP64 packet of session `ABCDEFGHIJ`, `seq`, and `count`
    /// messages of 4 bytes each.
    pub fn mold(seq: u64, count: u16) -> Vec<u8> {
        let mut p = b"ABCDEFGHIJ".to_vec();
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&count.to_be_bytes());
        if count != 0xffff {
            for _ in 0..count {
                p.extend_from_slice(&[0, 2, b'A', b'x']);
            }
        }
        p
    }

    fn unit_header(unit: u8, seq: u32, count: u8, body: usize) -> Vec<u8> {
        let len = (8 + body) as u16;
        let mut p = len.to_le_bytes().to_vec();
        p.extend_from_slice(&[count, unit]);
        p.extend_from_slice(&seq.to_le_bytes());
        p.resize(8 + body, 0x55);
        p
    }

    #[test]
    fn each_named_framing_reads_its_header() {
        let m = Framing::MoldUdp64.parse(&mold(1_000_000_007, 3)).expect("mold");
        assert_eq!((m.seq, m.messages, m.kind, m.unit), (1_000_000_007, 3, Kind::Data, 0));
        assert_eq!(&m.session[..10], b"ABCDEFGHIJ");
        assert_eq!(Framing::MoldUdp64.parse(&mold(9, 0)).expect("hb").kind, Kind::Heartbeat);
        assert_eq!(
            Framing::MoldUdp64.parse(&mold(9, 0xffff)).expect("end").kind,
            Kind::EndOfSession
        );

        let mut mdp = 77u32.to_le_bytes().to_vec();
        mdp.extend_from_slice(&123u64.to_le_bytes());
        mdp.extend_from_slice(b"body");
        let d = Framing::Mdp3.parse(&mdp).expect("mdp3");
        assert_eq!((d.seq, d.messages, d.kind), (77, 1, Kind::Data));

        for f in [Framing::Pitch, Framing::Mitch] {
            let p = f.parse(&unit_header(5, 4242, 2, 20)).expect("unit");
            assert_eq!((p.unit, p.seq, p.messages, p.kind), (5, 4242, 2, Kind::Data));
            assert_eq!(f.parse(&unit_header(5, 4244, 0, 0)).expect("hb").kind, Kind::Heartbeat);
        }
    }

    #[test]
    fn a_packet_without_the_framing_is_malformed_by_reason() {
        assert_eq!(
            Framing::MoldUdp64.parse(&mold(1, 1)[..19]),
            Err(Malformed::TooShort { need: 20 })
        );
        assert_eq!(Framing::Mdp3.parse(&[0; 11]), Err(Malformed::TooShort { need: 12 }));
        let mut p = unit_header(1, 1, 1, 10);
        p.pop();
        assert_eq!(Framing::Pitch.parse(&p), Err(Malformed::Length { says: 18 }));
        assert_eq!(Framing::Mitch.parse(&[]), Err(Malformed::TooShort { need: 8 }));
    }

    #[test]
    fn a_generic_framing_is_written_and_read_back() {
        let f: Framing = "sequence=u32be@2,count=u16le@6,session=8+4,unit=u8@0"
            .parse()
            .expect("generic");
        assert_eq!(f.to_string(), "sequence=u32be@2,count=u16le@6,session=8+4,unit=u8@0");
        assert_eq!(f.header_len(), 12);
        let p = [9, 0, 0, 0, 1, 2, 3, 0, b'S', b'E', b'S', b'S', 0xee];
        let s = f.parse(&p).expect("parse");
        assert_eq!((s.unit, s.seq, s.messages), (9, 0x0102, 3));
        assert_eq!(&s.session[..4], b"SESS");
        // The named ones are their names, and their fields are generic.
        for name in ["moldudp64", "mdp3", "pitch", "mitch"] {
            let f: Framing = name.parse().expect("named");
            assert_eq!(f.to_string(), name);
            assert!(f.fields().check().is_ok(), "{name}");
        }
        let j = serde_json::to_string(&f).expect("json");
        assert_eq!(serde_json::from_str::<Framing>(&j).expect("back"), f);
    }

    #[test]
    fn a_wrong_generic_framing_says_what_to_write() {
        for (bad, says) in [
            ("nasdaq", "write one of moldudp64"),
            ("count=u8@1", "needs sequence="),
            ("sequence=u32@0", "byte order"),
            ("sequence=u32le@0,count=u8@2", "overlap"),
            ("sequence=u32le@0,unit=u16le@4", "one byte"),
            ("sequence=u32le@0,session=4+17", "at most 16"),
            ("sequence=u32le@0,color=u8@9", "no field `color`"),
            ("sequence=u32le@70000", "type and an offset"),
        ] {
            let e = bad.parse::<Framing>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
