//! Market-data framings for the test payload: MoldUDP64 (Nasdaq), MDP 3.0
//! (CME), PITCH (Cboe) and MITCH (LSE), laid out as their specifications
//! say, so that a relay that arbitrates A/B lines by the feed's own
//! sequence number can be tested (and a third-party decoder such as
//! tshark's MoldUDP64 dissector reads them).
//!
//! The test payload is cut into `messages` messages of one packet:
//!
//! | framing | header | each message |
//! |---|---|---|
//! | `moldudp64` | session (10 bytes), sequence number (u64 BE), count (u16 BE) | length (u16 BE, of what follows), type `T`, part of the payload |
//! | `mdp3` | sequence number (u32 LE), sending time (u64 LE, ns) | size (u16 LE, of the whole message), part of the payload (one message a packet) |
//! | `pitch`, `mitch` | length (u16 LE, of the datagram), count (u8), unit (u8), sequence number (u32 LE) | length (u8, of the whole message), type `T`, part of the payload (at most 253 bytes) |
//!
//! Sequence numbers start at 1 and count messages (MDP 3.0: packets).
//! A plan may start a new session (MoldUDP64: the session's name changes
//! and numbering starts again at 1) or reset the sequence to 1 at a given
//! packet, as a feed does at the start of a day or week.

/// A market-data framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Nasdaq MoldUDP64.
    MoldUdp64,
    /// CME MDP 3.0.
    Mdp3,
    /// Cboe PITCH.
    Pitch,
    /// LSE MITCH.
    Mitch,
}

/// How a run's packets are numbered and framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The framing.
    pub framing: Framing,
    /// Messages per packet (1 for MDP 3.0).
    pub messages: u16,
    /// The unit (PITCH) or market data group (MITCH).
    pub unit: u8,
    /// From this packet on, a new session (MoldUDP64) numbered from 1.
    pub new_session_at: Option<u64>,
    /// From this packet on, sequence numbers start again at 1.
    pub reset_at: Option<u64>,
}

/// The session names of a run: the first, and the one a new session takes.
pub const SESSIONS: [&[u8; 10]; 2] = [b"MCRFEED001", b"MCRFEED002"];

/// The header fields of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// MoldUDP64's session.
    pub session: &'static [u8; 10],
    /// The sequence number of its first message (MDP 3.0: of the packet).
    pub seq: u64,
    /// Its messages.
    pub count: u16,
}

impl Framing {
    /// Bytes before the first message.
    pub fn header_len(self) -> usize {
        match self {
            Framing::MoldUdp64 => 20,
            Framing::Mdp3 => 12,
            Framing::Pitch | Framing::Mitch => 8,
        }
    }

    /// Bytes each message adds to its part of the payload.
    pub fn message_overhead(self) -> usize {
        match self {
            Framing::MoldUdp64 => 3,
            Framing::Mdp3 | Framing::Pitch | Framing::Mitch => 2,
        }
    }

    /// The most payload one message carries.
    fn message_max(self) -> usize {
        match self {
            Framing::Pitch | Framing::Mitch => 255 - 2,
            Framing::MoldUdp64 | Framing::Mdp3 => 65_535 - 3,
        }
    }
}

impl Plan {
    /// A plan of `framing` with one message a packet, unit 1, and neither
    /// a new session nor a reset.
    pub fn new(framing: Framing) -> Self {
        Plan {
            framing,
            messages: 1,
            unit: 1,
            new_session_at: None,
            reset_at: None,
        }
    }

    /// The header of packet `k` of the run.
    pub fn header(&self, k: u64) -> Header {
        let new_session = self.new_session_at.is_some_and(|at| k >= at);
        let from = [self.new_session_at, self.reset_at]
            .into_iter()
            .flatten()
            .filter(|&at| k >= at)
            .max()
            .unwrap_or(0);
        let per = u64::from(self.messages_per_packet());
        Header {
            session: SESSIONS[usize::from(new_session)],
            seq: 1 + (k - from) * per,
            count: self.messages_per_packet(),
        }
    }

    fn messages_per_packet(&self) -> u16 {
        match self.framing {
            Framing::Mdp3 => 1,
            _ => self.messages.max(1),
        }
    }

    /// The test payload's length in a datagram of `datagram` bytes.
    pub fn payload_len(&self, datagram: usize) -> Result<usize, String> {
        let n = usize::from(self.messages_per_packet());
        let overhead = self.framing.header_len() + n * self.framing.message_overhead();
        let payload = datagram
            .checked_sub(overhead)
            // The test header (16 bytes) in the first message.
            .filter(|p| *p >= 16 * n)
            .ok_or_else(|| {
                format!("a datagram of {datagram} bytes is too small for {n} message(s) and the test header")
            })?;
        if payload.div_ceil(n) > self.framing.message_max() {
            return Err(format!(
                "{payload} bytes of test payload in {n} message(s) is more than {} a message: give more --messages or a smaller --size",
                self.framing.message_max()
            ));
        }
        Ok(payload)
    }

    /// Writes packet `k`, sent at `send_ns`, into `buf` (the whole
    /// datagram), its messages carrying `payload` in order.
    pub fn write(&self, buf: &mut [u8], k: u64, send_ns: u64, payload: &[u8]) {
        let h = self.header(k);
        let n = usize::from(h.count);
        let hl = self.framing.header_len();
        match self.framing {
            Framing::MoldUdp64 => {
                buf[..10].copy_from_slice(h.session);
                buf[10..18].copy_from_slice(&h.seq.to_be_bytes());
                buf[18..20].copy_from_slice(&h.count.to_be_bytes());
            }
            Framing::Mdp3 => {
                buf[..4].copy_from_slice(&(h.seq as u32).to_le_bytes());
                buf[4..12].copy_from_slice(&send_ns.to_le_bytes());
            }
            Framing::Pitch | Framing::Mitch => {
                let len = buf.len() as u16;
                buf[..2].copy_from_slice(&len.to_le_bytes());
                buf[2] = n as u8;
                buf[3] = self.unit;
                buf[4..8].copy_from_slice(&(h.seq as u32).to_le_bytes());
            }
        }
        let mut at = hl;
        for part in parts(payload, n) {
            match self.framing {
                Framing::MoldUdp64 => {
                    buf[at..at + 2].copy_from_slice(&((part.len() + 1) as u16).to_be_bytes());
                    buf[at + 2] = b'T';
                    at += 3;
                }
                Framing::Mdp3 => {
                    buf[at..at + 2].copy_from_slice(&((part.len() + 2) as u16).to_le_bytes());
                    at += 2;
                }
                Framing::Pitch | Framing::Mitch => {
                    buf[at] = (part.len() + 2) as u8;
                    buf[at + 1] = b'T';
                    at += 2;
                }
            }
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
    }
}

/// `payload` cut into `n` parts, the first ones a byte longer where it
/// does not divide evenly.
fn parts(payload: &[u8], n: usize) -> impl Iterator<Item = &[u8]> {
    let n = n.max(1);
    let (base, extra) = (payload.len() / n, payload.len() % n);
    let mut at = 0;
    (0..n).map(move |i| {
        let len = base + usize::from(i < extra);
        let p = &payload[at..at + len];
        at += len;
        p
    })
}

/// What a received datagram of `framing` said: its header, and its
/// messages' payloads gathered into `into`; `None` if the framing does not
/// hold together (lengths that do not add up, a count that is not the
/// number of messages).
pub fn read(framing: Framing, datagram: &[u8], into: &mut Vec<u8>) -> Option<(u64, u16)> {
    into.clear();
    let hl = framing.header_len();
    let body = datagram.get(hl..)?;
    let (seq, count) = match framing {
        Framing::MoldUdp64 => (
            u64::from_be_bytes(datagram.get(10..18)?.try_into().ok()?),
            u16::from_be_bytes(datagram.get(18..20)?.try_into().ok()?),
        ),
        Framing::Mdp3 => (u64::from(u32::from_le_bytes(datagram.get(..4)?.try_into().ok()?)), 1),
        Framing::Pitch | Framing::Mitch => {
            let len = u16::from_le_bytes(datagram.get(..2)?.try_into().ok()?);
            if usize::from(len) != datagram.len() {
                return None;
            }
            (
                u64::from(u32::from_le_bytes(datagram.get(4..8)?.try_into().ok()?)),
                u16::from(datagram[2]),
            )
        }
    };
    let mut at = 0;
    let mut found = 0u16;
    while at < body.len() {
        let (skip, len) = match framing {
            Framing::MoldUdp64 => {
                let l = usize::from(u16::from_be_bytes(body.get(at..at + 2)?.try_into().ok()?));
                (3, l.checked_sub(1)?)
            }
            Framing::Mdp3 => {
                let l = usize::from(u16::from_le_bytes(body.get(at..at + 2)?.try_into().ok()?));
                (2, l.checked_sub(2)?)
            }
            Framing::Pitch | Framing::Mitch => (2, usize::from(*body.get(at)?).checked_sub(2)?),
        };
        into.extend_from_slice(body.get(at + skip..at + skip + len)?);
        at += skip + len;
        found += 1;
    }
    (found == count).then_some((seq, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_framing_carries_the_payload_in_its_messages_and_reads_back() {
        let payload: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        for (framing, messages) in [
            (Framing::MoldUdp64, 3),
            (Framing::Mdp3, 1),
            (Framing::Pitch, 3),
            (Framing::Mitch, 4),
        ] {
            let plan = Plan {
                messages,
                ..Plan::new(framing)
            };
            let len = framing.header_len() + usize::from(messages) * framing.message_overhead() + payload.len();
            assert_eq!(plan.payload_len(len), Ok(payload.len()), "{framing:?}");
            let mut buf = vec![0u8; len];
            plan.write(&mut buf, 10, 5, &payload);
            let mut back = Vec::new();
            let (seq, count) = read(framing, &buf, &mut back).unwrap_or_else(|| panic!("{framing:?} reads back"));
            assert_eq!(back, payload, "{framing:?}");
            assert_eq!((seq, count), (1 + 10 * u64::from(messages), messages), "{framing:?}");
            // The arbitration's reading of the same header agrees.
            let core = match framing {
                Framing::MoldUdp64 => mcr_core::arbitrate::framing::Framing::MoldUdp64,
                Framing::Mdp3 => mcr_core::arbitrate::framing::Framing::Mdp3,
                Framing::Pitch => mcr_core::arbitrate::framing::Framing::Pitch,
                Framing::Mitch => mcr_core::arbitrate::framing::Framing::Mitch,
            };
            let s = core.parse(&buf).expect("the relay reads it");
            assert_eq!((s.seq, s.messages), (seq, u32::from(messages)));
            // A message cut short is noticed.
            buf.truncate(len - 1);
            if framing.header_len() + 2 < len - 1 {
                assert_eq!(read(framing, &buf, &mut back), None, "{framing:?}");
            }
        }
        // PITCH messages hold at most 253 bytes of payload.
        assert!(Plan::new(Framing::Pitch).payload_len(1024).is_err());
    }

    #[test]
    fn a_new_session_or_a_reset_numbers_from_one_again() {
        let plan = Plan {
            messages: 2,
            new_session_at: Some(100),
            reset_at: Some(50),
            ..Plan::new(Framing::MoldUdp64)
        };
        assert_eq!(plan.header(0).seq, 1);
        assert_eq!(plan.header(49).seq, 99);
        assert_eq!(plan.header(50).seq, 1);
        assert_eq!(plan.header(99).session, SESSIONS[0]);
        let h = plan.header(100);
        assert_eq!((h.seq, h.session), (1, SESSIONS[1]));
        assert_eq!(plan.header(101).seq, 3);
    }
}
