//! What the supervisor and a worker say to each other, one JSON object per
//! line over a Unix stream socket pair.

use mcr_core::snapshot::TableSnapshot;
use serde::{Deserialize, Serialize};

/// The worker's end of the pair is this descriptor number.
pub const WORKER_CHANNEL_FD: i32 = 3;
/// The statistics memory is this descriptor number in the worker.
pub const WORKER_STATS_FD: i32 = 4;
/// With `--ring-filter`, the eBPF socket filter of the rings (the kernel
/// data path's counterpart) is this descriptor number in the worker.
pub const WORKER_FILTER_FD: i32 = 5;
/// With `--health-ring` (worker 0, with the eBPF data path), the ring the
/// kernel data path hands the payloads of followed inputs to is this
/// descriptor number in the worker.
pub const WORKER_HEALTH_FD: i32 = 7;

/// Supervisor to worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToWorker {
    /// The whole rule table; replaces the one the worker has.
    Table(TableSnapshot),
    /// Finish the current batch and exit.
    Stop,
}

/// Worker to supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum FromWorker {
    /// Started; ready for a table.
    Ready {
        /// The worker's process id.
        pid: u32,
    },
    /// Runs table `version` now, without the parts listed in `problems`
    /// (an interface that vanished, say).
    Applied {
        /// The version.
        version: u64,
        /// What could not be set up.
        #[serde(default)]
        problems: Vec<Problem>,
    },
    /// Its SRT endpoints, once a second while it has any.
    Srt {
        /// Each output's (by its slot) endpoint and connections.
        outputs: Vec<(u32, mcr_core::control::SrtStatus)>,
        /// Each input's (by its rule's slot and which input) endpoint and
        /// connection.
        #[serde(default)]
        inputs: Vec<(u32, usize, mcr_core::control::SrtStatus)>,
    },
    /// Its RIST endpoints, once a second while it has any (in SRT's
    /// shape, see [`mcr_core::control::RistInputStatus`]).
    Rist {
        /// Each output's (by its slot) endpoint and peers.
        outputs: Vec<(u32, mcr_core::control::SrtStatus)>,
        /// Each input's (by its rule's slot and which input) endpoint and
        /// peers.
        inputs: Vec<(u32, usize, mcr_core::control::SrtStatus)>,
    },
    /// The line race of its arbitrated rules, once a second while it has
    /// any: by rule slot, each line's lag behind the first copy.
    Race {
        /// (rule slot, each line's lags).
        rules: Vec<(u32, Vec<mcr_core::arbitrate::race::LagSummary>)>,
    },
}

/// Something a worker could not set up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// What it keeps from forwarding.
    pub scope: Scope,
    /// What went wrong, naming the interface.
    pub error: String,
}

/// The rules a [`Problem`] concerns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This rule.
    Rule(String),
    /// Every rule that reads this interface.
    Input(String),
    /// Every rule with an output on this interface.
    Output(String),
}

impl Problem {
    /// True if it keeps `rule` (or part of it) from forwarding.
    pub fn concerns(&self, rule: &mcr_core::rule::Rule) -> bool {
        match &self.scope {
            Scope::Rule(name) => *name == rule.name,
            Scope::Input(i) => rule.inputs().any(|x| x.interface() == Some(i.as_str())),
            Scope::Output(i) => rule.outputs.iter().any(|o| o.interface() == Some(i.as_str())),
        }
    }
}

/// The ring config for an interface of this MTU (the frame, its Ethernet
/// header and one VLAN tag), the same whoever opens the ring.
pub fn ring_for_mtu(cfg: &mcr_sys::ring::RingConfig, mtu: Option<u32>) -> mcr_sys::ring::RingConfig {
    mcr_sys::ring::RingConfig {
        max_frame: mtu.map_or(1500, |m| m as usize) + 14 + 4,
        ..*cfg
    }
}

/// The worker's end of the ring channel (a `SOCK_SEQPACKET` pair that
/// carries descriptors) is this descriptor number.
pub const WORKER_RINGS_FD: i32 = 6;

/// On the ring channel: the supervisor keeps a copy of every receive ring a
/// worker holds, so that the socket, its place in the fanout group and the
/// frames waiting in it outlive the worker; a restarted worker is handed
/// them back and reads on where the dead one stopped. Each message is one
/// note per line; each `hold` line comes with one descriptor, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingNote {
    /// This descriptor is the ring of interface `ifindex`, of this shape.
    Hold {
        /// The interface.
        ifindex: u32,
        /// The ring's shape.
        geometry: mcr_sys::ring::RingGeometry,
    },
    /// The worker no longer reads interface `ifindex`: close it.
    Release {
        /// The interface.
        ifindex: u32,
    },
}

impl RingNote {
    /// The notes as message text.
    pub fn encode(notes: &[RingNote]) -> Vec<u8> {
        let mut s = String::new();
        for n in notes {
            match n {
                RingNote::Hold { ifindex, geometry } => s.push_str(&format!("hold {ifindex} {geometry}\n")),
                RingNote::Release { ifindex } => s.push_str(&format!("release {ifindex}\n")),
            }
        }
        s.into_bytes()
    }

    /// The notes of a message, checked against the descriptors it carried.
    pub fn decode(text: &[u8], fds: usize) -> Result<Vec<RingNote>, String> {
        let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_string())?;
        let mut notes = Vec::new();
        for line in text.lines() {
            let mut w = line.split(' ');
            let ifindex = |w: Option<&str>| {
                w.and_then(|x| x.parse::<u32>().ok())
                    .ok_or_else(|| format!("`{line}`: no interface index"))
            };
            let note = match w.next() {
                Some("hold") => RingNote::Hold {
                    ifindex: ifindex(w.next())?,
                    geometry: w.next().ok_or_else(|| format!("`{line}`: no shape"))?.parse()?,
                },
                Some("release") => RingNote::Release {
                    ifindex: ifindex(w.next())?,
                },
                _ => return Err(format!("`{line}`: not a ring note")),
            };
            if w.next().is_some() {
                return Err(format!("`{line}`: more than a note"));
            }
            notes.push(note);
        }
        let holds = notes.iter().filter(|n| matches!(n, RingNote::Hold { .. })).count();
        if holds != fds {
            return Err(format!("{holds} rings named, {fds} descriptors passed"));
        }
        Ok(notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_notes_read_back_and_must_match_their_descriptors() {
        let g: mcr_sys::ring::RingGeometry = "v2/2048x16384".parse().expect("geometry");
        let notes = vec![
            RingNote::Hold {
                ifindex: 7,
                geometry: g,
            },
            RingNote::Release { ifindex: 3 },
        ];
        let text = RingNote::encode(&notes);
        assert_eq!(RingNote::decode(&text, 1), Ok(notes));
        assert!(RingNote::decode(&text, 0).is_err());
        assert!(RingNote::decode(b"hold x v2/2048x1\n", 1).is_err());
        assert!(RingNote::decode(b"hold 1 v9/2048x1\n", 1).is_err());
        assert!(RingNote::decode(b"drop 1\n", 0).is_err());
        assert!(RingNote::decode(b"release 1 2\n", 0).is_err());
    }
}
