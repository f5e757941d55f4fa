//! RIST endpoints, inputs and outputs alike: one librist context each
//! (`mcr_sys::rist`), a sender for an output and a receiver for an input,
//! whose one peer listens or connects as the endpoint says.
//!
//! Worker 0 holds every RIST endpoint, as it holds SRT's (the fanout
//! program pins the inputs of their rules to it). librist runs its own
//! protocol thread per context, which sends, retransmits, answers and
//! times out peers; this module hands it each datagram of an output
//! (`rist_sender_data_write`, which copies and never blocks here), takes
//! what an input's receiver released, and reads what librist's callbacks
//! learned (peers, statistics) once a second.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use mcr_core::control::{SrtConnection, SrtStatus};
use mcr_core::rist::{RistEndpoint, RistMode, RistProfile};
use mcr_core::stats::OutputCounter;
use mcr_core::table::{MatchTable, OutputKind};
use mcr_sys::rist::{self as sys, MAX_PAYLOAD_BYTES, Role};

use super::counts::Counts;
use super::liblog::LibLog;
use super::srt::{Carried, Target, wanted};
use crate::channel::{Problem, Scope};

/// How often each endpoint's peers and statistics are sent on.
const STATUS_EVERY_NS: u64 = 1_000_000_000;
/// Statistics older than this are of a peer that is gone.
const STATS_FRESH_MS: u64 = 3_000;
/// The most datagrams taken from one input per turn of the loop.
const RECV_BUDGET: usize = 256;

/// Every RIST endpoint of this worker.
pub struct Rist {
    /// Whether this worker holds RIST endpoints (worker 0).
    owner: bool,
    worker: usize,
    ends: HashMap<Target, End>,
    last_status_ns: u64,
}

impl std::fmt::Debug for Rist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rist").field("ends", &self.ends.len()).finish()
    }
}

struct End {
    endpoint: RistEndpoint,
    /// librist's context, or why there is none.
    ctx: Result<sys::Rist, String>,
    /// Datagrams librist would not take (an output's).
    queue_full: u64,
}

/// Reads a secret file: its first line, 10 to 127 characters.
fn read_secret(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("secret-file {}: {e}", path.display()))?;
    let p = text.lines().next().unwrap_or_default();
    if !(10..=127).contains(&p.chars().count()) || p.contains(['&', '?', '#', ',']) {
        return Err(format!(
            "secret-file {}: a RIST secret is one line of 10 to 127 characters, without & ? # or ,",
            path.display()
        ));
    }
    Ok(p.to_string())
}

/// librist's log lines, into the worker's log ([`LibLog`]).
fn log_line(level: i32, msg: &str) {
    static LOG: LibLog = LibLog::new("librist");
    LOG.line(level <= sys::LEVEL_ERROR, msg);
}

/// Makes the librist context of `e` in `role`.
fn open(e: &RistEndpoint, role: Role) -> Result<sys::Rist, String> {
    sys::set_log_sink(log_line);
    let secret = e.secret_file.as_deref().map(read_secret).transpose()?;
    let profile = match e.profile {
        RistProfile::Simple => sys::Profile::Simple,
        RistProfile::Main => sys::Profile::Main,
    };
    let max_peers = match e.mode {
        RistMode::Listener => e.max_peers as usize,
        RistMode::Caller => 0,
    };
    // (librist starts the context's protocol thread here.)
    crate::worker::unpinned(|| sys::Rist::new(role, profile, &e.url(secret.as_deref()), max_peers)).map_err(|err| {
        match (e.mode, &err) {
            // (What librist could not do, it says only in its log.)
            (RistMode::Listener, sys::RistError::Call { op, .. }) if op.starts_with("rist_peer_create") => format!(
                "could not listen on {} ({err}): is a port of it taken by another program, or the address not one of this host's? Choose another port or address",
                e.address
            ),
            _ => err.to_string(),
        }
    })
}

impl Rist {
    /// The RIST endpoints of worker `worker` (only worker 0 holds any).
    pub fn new(worker: usize) -> Self {
        Rist {
            owner: worker == 0,
            worker,
            ends: HashMap::new(),
            last_status_ns: 0,
        }
    }

    /// Whether there is anything to poll.
    pub fn active(&self) -> bool {
        !self.ends.is_empty()
    }

    /// Whether an input waits for datagrams.
    pub fn has_inputs(&self) -> bool {
        self.ends.keys().any(|t| matches!(t, Target::Input(..)))
    }

    /// Makes, keeps and ends contexts to match `table`. An endpoint that
    /// did not change keeps its context and peers; one that failed is
    /// tried again.
    pub fn reconcile(&mut self, table: &MatchTable) -> Vec<Problem> {
        let mut problems = Vec::new();
        if !self.owner {
            return problems;
        }
        let wanted = wanted(
            table,
            |r| &r.rist_inputs,
            |k| match k {
                OutputKind::Rist(e) => Some(e),
                _ => None,
            },
        );
        self.ends
            .retain(|t, end| end.ctx.is_ok() && wanted.iter().any(|(_, w, e)| w == t && **e == end.endpoint));
        for (rule, target, e) in wanted {
            if self.ends.contains_key(&target) {
                continue;
            }
            let role = match target {
                Target::Output(_) => Role::Sender,
                Target::Input(..) => Role::Receiver,
            };
            let ctx = open(e, role);
            match &ctx {
                Ok(_) => tracing::info!(
                    "RIST {e}: {}",
                    if e.mode == RistMode::Listener {
                        "listening"
                    } else {
                        "calling"
                    }
                ),
                Err(why) => problems.push(Problem {
                    scope: Scope::Rule(rule.to_string()),
                    error: format!("RIST {e}: {why}"),
                }),
            }
            self.ends.insert(
                target,
                End {
                    endpoint: e.clone(),
                    ctx,
                    queue_full: 0,
                },
            );
        }
        problems
    }

    /// Hands `payload` to output `slot`'s sender, for every peer.
    pub fn send(&mut self, slot: u32, payload: &[u8], counts: &Counts<'_>) {
        let Some(o) = self.ends.get_mut(&Target::Output(slot)) else {
            // Not this worker's (its rule's frames go to worker 0).
            counts.output(slot, OutputCounter::SendError, 1);
            return;
        };
        let Ok(ctx) = &o.ctx else { return };
        if !ctx.has_peers() {
            // No one to send to (an SRT output without callers counts
            // nothing either).
            return;
        }
        if payload.len() > MAX_PAYLOAD_BYTES {
            counts.output(slot, OutputCounter::TooBig, 1);
            return;
        }
        match ctx.send(payload) {
            Ok(()) => {
                counts.output(slot, OutputCounter::Packets, 1);
                counts.output(slot, OutputCounter::Bytes, payload.len() as u64);
            }
            Err(e) => {
                o.queue_full += 1;
                counts.output(slot, OutputCounter::QueueFull, 1);
                tracing::debug!("RIST output {}: {e}", o.endpoint);
            }
        }
    }

    /// Adds what the inputs' receivers released to `into`: at most
    /// [`RECV_BUDGET`] datagrams from each.
    pub fn receive(&mut self, into: &mut Carried) {
        for (target, end) in &mut self.ends {
            let Target::Input(rule, k) = *target else { continue };
            let Ok(ctx) = &end.ctx else { continue };
            // librist does not say which peer a datagram came from; the
            // first connected one stands for them all.
            let from = match ctx.peers().first().map(|p| p.address) {
                Some(SocketAddr::V4(a)) => a,
                _ => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            };
            for _ in 0..RECV_BUDGET {
                match ctx.recv(into.next_payload()) {
                    Ok(Some(len)) => into.push(rule, k, len, from),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!("RIST input {}: {e}", end.endpoint);
                        break;
                    }
                }
            }
        }
    }

    /// Once a second, what every endpoint has (`None` in between).
    pub fn poll(&mut self, now: u64) -> Option<Vec<(Target, SrtStatus)>> {
        if !self.active() || now.saturating_sub(self.last_status_ns) < STATUS_EVERY_NS {
            return None;
        }
        self.last_status_ns = now;
        let mut v: Vec<(Target, SrtStatus)> = self.ends.iter().map(|(t, end)| (*t, self.status(end))).collect();
        v.sort_by_key(|(t, _)| *t);
        Some(v)
    }

    fn status(&self, end: &End) -> SrtStatus {
        let e = &end.endpoint;
        let ctx = match &end.ctx {
            Ok(c) => c,
            Err(why) => {
                return SrtStatus {
                    state: "failed".into(),
                    error: Some(why.clone()),
                    worker: self.worker,
                    ..Default::default()
                };
            }
        };
        let peers = ctx.peers();
        let stats = ctx.stats(STATS_FRESH_MS);
        let state = match (e.mode, peers.is_empty()) {
            (_, false) => "connected",
            (RistMode::Listener, true) => "listening",
            (RistMode::Caller, true) => "calling",
        };
        let input = ctx.role() == Role::Receiver;
        let mut refused = std::collections::BTreeMap::new();
        if e.mode == RistMode::Listener {
            refused.insert("full".to_string(), ctx.refused());
        }
        // librist reports a sender's statistics per peer and a receiver's
        // per flow; peers and reports are matched in order (a caller has
        // one of each).
        let connections = peers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let s = stats.get(i).cloned().unwrap_or_default();
                let mbps = s.bandwidth_bps as f64 / 1e6;
                SrtConnection {
                    peer: if p.address.ip().is_unspecified() {
                        e.address.to_string()
                    } else {
                        p.address.to_string()
                    },
                    stream_id: s.cname,
                    state: "connected".into(),
                    connected_s: p.since.elapsed().as_secs(),
                    rtt_ms: f64::from(s.rtt_ms),
                    send_mbps: if input { 0.0 } else { mbps },
                    recv_mbps: if input { mbps } else { 0.0 },
                    packets: s.packets,
                    retransmitted: if input { s.recovered } else { s.retransmitted },
                    // (librist's statistics say what was lost, not what
                    // was reported missing.)
                    reported_missing: 0,
                    lost: s.lost,
                    dropped_too_late: 0,
                    queue_full: end.queue_full,
                    buffer_ms: u64::from(e.buffer_ms),
                    latency_ms: u64::from(e.buffer_ms),
                }
            })
            .collect();
        SrtStatus {
            state: state.into(),
            error: None,
            worker: self.worker,
            refused,
            last_refusal: None,
            connections,
        }
    }
}
