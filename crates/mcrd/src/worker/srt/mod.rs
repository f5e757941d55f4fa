//! SRT endpoints, inputs and outputs alike: a listener per address that
//! serves every caller of the endpoints bound there, chosen by the caller's
//! stream ID ([`listener`]), callers that call their peer ([`call`]), the
//! datagrams of each output handed to every one of its connections, and
//! those of each input taken from its connection.
//!
//! Worker 0 holds every SRT endpoint (the fanout program pins the inputs
//! of rules with an SRT output to it, as it does those of rules with
//! several inputs). libsrt runs its own threads: one pair (send and
//! receive queue) per UDP port, which paces, retransmits and encrypts
//! each connection's packets; this module only accepts, hands datagrams
//! over (`srt_sendmsg2`, which copies into the connection's send buffer
//! and never blocks here), takes them (`srt_recvmsg2`, when libsrt's
//! latency buffer releases them) and reads the statistics.

mod call;
mod listener;

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use mcr_core::control::{SrtConnection, SrtStatus};
use mcr_core::srt::{MAX_PAYLOAD_BYTES, SrtEndpoint, SrtMode};
use mcr_core::stats::OutputCounter;
use mcr_core::table::{CompiledRule, MatchTable, OutputKind};
use mcr_core::wire::UDP_V4_HEADERS;
use mcr_sys::srt::{self as sys, SrtSocket, SrtState};

use super::counts::Counts;
use crate::channel::{Problem, Scope};
use call::Call;
use listener::{Listener, Route};

/// How often listeners are asked for new connections, at most.
const ACCEPT_EVERY_NS: u64 = 10_000_000;
/// How often each connection's statistics are read and sent on.
const STATUS_EVERY_NS: u64 = 1_000_000_000;
/// The most datagrams taken from one input per turn of the loop.
const RECV_BUDGET: usize = 256;
/// Room for one datagram carried in: its headers, written in front of it,
/// and the largest payload SRT carries.
pub const CARRIED_FRAME: usize = UDP_V4_HEADERS + MAX_PAYLOAD_BYTES;

/// Which endpoint of which rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// An output, by its statistics slot.
    Output(u32),
    /// An input: its rule's statistics slot and which of its inputs.
    Input(u32, usize),
}

/// Statuses of outputs, by slot.
pub type ByOutput<S> = Vec<(u32, S)>;
/// Statuses of inputs, by rule slot and which input.
pub type ByInput<S> = Vec<(u32, usize, S)>;

/// Statuses by endpoint, split into the outputs' and the inputs', as the
/// supervisor takes them.
pub fn by_side<S>(ends: Vec<(Target, S)>) -> (ByOutput<S>, ByInput<S>) {
    let (mut outputs, mut inputs) = (Vec::new(), Vec::new());
    for (t, s) in ends {
        match t {
            Target::Output(slot) => outputs.push((slot, s)),
            Target::Input(rule, k) => inputs.push((rule, k, s)),
        }
    }
    (outputs, inputs)
}

/// Every endpoint of one kind the rules of `table` have: each rule's
/// inputs of the kind (`inputs`) and outputs whose kind `output` takes,
/// with the rule's name and where its status goes.
pub fn wanted<'t, E>(
    table: &'t MatchTable,
    inputs: fn(&'t CompiledRule) -> &'t [(usize, E)],
    output: fn(&'t OutputKind) -> Option<&'t E>,
) -> Vec<(&'t str, Target, &'t E)> {
    let mut v = Vec::new();
    for r in table.rules() {
        for (k, e) in inputs(r) {
            v.push((r.name.as_str(), Target::Input(r.slot, *k), e));
        }
        for o in &r.outputs {
            if let Some(e) = output(&o.kind) {
                v.push((r.name.as_str(), Target::Output(o.slot), e));
            }
        }
    }
    v
}

/// Every SRT endpoint of this worker.
pub struct Srt {
    /// Whether this worker holds SRT endpoints (worker 0).
    owner: bool,
    worker: usize,
    listeners: HashMap<SocketAddr, Listener>,
    ends: HashMap<Target, End>,
    /// Tells which listeners have callers to accept (an `accept` that finds
    /// none makes libsrt log an error), once there is a listener.
    epoll: Option<sys::SrtEpoll>,
    ready: Vec<(i32, sys::Events)>,
    last_accept_ns: u64,
    last_status_ns: u64,
}

impl std::fmt::Debug for Srt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srt")
            .field("listeners", &self.listeners.len())
            .field("ends", &self.ends.len())
            .finish()
    }
}

struct End {
    endpoint: SrtEndpoint,
    /// A caller's calls (none for a listener's).
    call: Option<Call>,
    conns: Vec<Conn>,
    connected: Arc<AtomicUsize>,
    /// Why it serves no one, if it does not.
    problem: Option<String>,
}

struct Conn {
    socket: SrtSocket,
    peer: SocketAddr,
    stream_id: String,
    since_ns: u64,
    queue_full: u64,
}

/// Datagrams taken from SRT and RIST inputs, each in a frame of its own, the
/// payload at [`UDP_V4_HEADERS`]: room made once, used again each turn.
#[derive(Default)]
pub struct Carried {
    frames: Vec<u8>,
    /// For each datagram: its rule's slot, which input, its length and
    /// the peer it came from.
    pub meta: Vec<(u32, usize, usize, SocketAddrV4)>,
}

impl Carried {
    /// Frame `i` (headers room and payload).
    pub fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.frames[i * CARRIED_FRAME..(i + 1) * CARRIED_FRAME]
    }

    /// Forgets every datagram (the room stays).
    pub fn clear(&mut self) {
        self.meta.clear();
    }

    /// Room for the payload of the next datagram.
    pub fn next_payload(&mut self) -> &mut [u8] {
        let n = self.meta.len();
        if self.frames.len() < (n + 1) * CARRIED_FRAME {
            self.frames.resize((n + 1) * CARRIED_FRAME, 0);
        }
        &mut self.frames[n * CARRIED_FRAME + UDP_V4_HEADERS..(n + 1) * CARRIED_FRAME]
    }

    /// Keeps the datagram written at [`Carried::next_payload`]: `len`
    /// bytes from `from`, for input `k` of the rule in `slot`.
    pub fn push(&mut self, slot: u32, k: usize, len: usize, from: SocketAddrV4) {
        self.meta.push((slot, k, len, from));
    }
}

/// Reads a passphrase file: its first line, 10 to 79 characters.
fn read_passphrase(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("passphrase-file {}: {e}", path.display()))?;
    let p = text.strip_suffix('\n').unwrap_or(&text);
    let p = p.strip_suffix('\r').unwrap_or(p);
    if !(10..=79).contains(&p.chars().count()) || p.contains('\n') {
        return Err(format!(
            "passphrase-file {}: an SRT passphrase is one line of 10 to 79 characters",
            path.display()
        ));
    }
    Ok(p.to_string())
}

impl Srt {
    /// The SRT endpoints of worker `worker` (only worker 0 holds any).
    pub fn new(worker: usize) -> Self {
        Srt {
            owner: worker == 0,
            worker,
            listeners: HashMap::new(),
            ends: HashMap::new(),
            epoll: None,
            ready: Vec::new(),
            last_accept_ns: 0,
            last_status_ns: 0,
        }
    }

    /// Whether there is anything to poll.
    pub fn active(&self) -> bool {
        !self.ends.is_empty()
    }

    /// Whether an input waits for datagrams (the loop then turns every
    /// millisecond).
    pub fn has_inputs(&self) -> bool {
        self.ends.keys().any(|t| matches!(t, Target::Input(..)))
    }

    /// Opens, keeps and closes listeners, calls and connections to match
    /// `table`. An endpoint that did not change keeps its connections.
    pub fn reconcile(&mut self, table: &MatchTable) -> Vec<Problem> {
        let mut problems = Vec::new();
        if !self.owner {
            return problems;
        }
        let wanted = wanted(
            table,
            |r| &r.srt_inputs,
            |k| match k {
                OutputKind::Srt(e) => Some(e),
                _ => None,
            },
        );
        self.ends
            .retain(|t, end| wanted.iter().any(|(_, w, e)| w == t && **e == end.endpoint));
        let mut by_listener: HashMap<SocketAddr, Vec<Route>> = HashMap::new();
        for &(rule, target, e) in &wanted {
            let end = self.ends.entry(target).or_insert_with(|| End {
                endpoint: e.clone(),
                call: None,
                conns: Vec::new(),
                connected: Arc::new(AtomicUsize::new(0)),
                problem: None,
            });
            let passphrase = match e.passphrase_file.as_deref().map(read_passphrase).transpose() {
                Ok(p) => p,
                Err(why) => {
                    end.problem = Some(why.clone());
                    problems.push(Problem {
                        scope: Scope::Rule(rule.to_string()),
                        error: format!("SRT {e}: {why}"),
                    });
                    continue;
                }
            };
            end.problem = None;
            if e.mode == SrtMode::Caller {
                if end.call.is_none() {
                    end.call = Some(Call::new(e.clone(), passphrase));
                }
                continue;
            }
            by_listener.entry(e.address).or_default().push(Route {
                target,
                endpoint: e.clone(),
                passphrase,
                max: match target {
                    Target::Output(_) => e.max_callers as usize,
                    Target::Input(..) => 1,
                },
                connected: end.connected.clone(),
            });
        }
        self.listeners.retain(|a, _| by_listener.contains_key(a));
        for (addr, routes) in by_listener {
            let epoll = &mut self.epoll;
            let l = self
                .listeners
                .entry(addr)
                .or_insert_with(|| listener::open(addr, epoll));
            if l.socket.is_err() {
                // Taken before: perhaps free now.
                *l = listener::open(addr, epoll);
            }
            l.routes.set(routes);
            if let Err(why) = &l.socket {
                for (rule, _, e) in wanted.iter().filter(|(_, _, e)| e.address == addr) {
                    problems.push(Problem {
                        scope: Scope::Rule(rule.to_string()),
                        error: format!("SRT listener {}: {why}", e.address),
                    });
                }
                for end in self.ends.values_mut().filter(|o| o.endpoint.address == addr) {
                    end.problem = Some(why.clone());
                }
            }
        }
        problems
    }

    /// Hands `payload` to every connection of output `slot`.
    pub fn send(&mut self, slot: u32, payload: &[u8], counts: &Counts<'_>) {
        let Some(o) = self.ends.get_mut(&Target::Output(slot)) else {
            // Not this worker's (its rule's frames go to worker 0).
            counts.output(slot, OutputCounter::SendError, 1);
            return;
        };
        if o.conns.is_empty() {
            return;
        }
        if payload.len() > MAX_PAYLOAD_BYTES {
            counts.output(slot, OutputCounter::TooBig, 1);
            return;
        }
        let mut sent = false;
        let before = o.conns.len();
        o.conns.retain_mut(|c| match c.socket.send(payload) {
            Ok(sys::Sent::Queued(_)) => {
                sent = true;
                true
            }
            Ok(sys::Sent::WouldBlock) => {
                c.queue_full += 1;
                counts.output(slot, OutputCounter::QueueFull, 1);
                true
            }
            Err(e) if e.is_closed() => {
                tracing::info!("SRT output {}: caller {} gone ({e})", o.endpoint, c.peer);
                false
            }
            Err(e) => {
                counts.output(slot, OutputCounter::SendError, 1);
                tracing::debug!("SRT output {}: send to {}: {e}", o.endpoint, c.peer);
                true
            }
        });
        if o.conns.len() != before {
            o.connected.store(o.conns.len(), Ordering::Relaxed);
        }
        if sent {
            counts.output(slot, OutputCounter::Packets, 1);
            counts.output(slot, OutputCounter::Bytes, payload.len() as u64);
        }
    }

    /// Adds what the inputs' connections released to `into`: at most
    /// [`RECV_BUDGET`] datagrams from each.
    pub fn receive(&mut self, into: &mut Carried) {
        for (target, end) in &mut self.ends {
            let Target::Input(rule, k) = *target else { continue };
            let Some(c) = end.conns.first() else { continue };
            let from = match c.peer {
                SocketAddr::V4(a) => a,
                SocketAddr::V6(_) => SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
            };
            let mut broken = false;
            for _ in 0..RECV_BUDGET {
                match c.socket.recv(into.next_payload()) {
                    Ok(Some(len)) => into.push(rule, k, len, from),
                    Ok(None) => break,
                    Err(e) => {
                        if e.is_closed() {
                            tracing::info!("SRT input {}: {} gone ({e})", end.endpoint, c.peer);
                            broken = true;
                        }
                        break;
                    }
                }
            }
            if broken {
                end.conns.clear();
                end.connected.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Takes new connections, moves calls on, drops broken connections
    /// and, once a second, says what every endpoint has (`None` in
    /// between).
    pub fn poll(&mut self, now: u64) -> Option<Vec<(Target, SrtStatus)>> {
        if !self.active() {
            return None;
        }
        if now.saturating_sub(self.last_accept_ns) >= ACCEPT_EVERY_NS {
            self.last_accept_ns = now;
            self.accept(now);
            self.call(now);
        }
        if now.saturating_sub(self.last_status_ns) < STATUS_EVERY_NS {
            return None;
        }
        self.last_status_ns = now;
        Some(self.status(now))
    }

    fn accept(&mut self, now: u64) {
        self.ready.clear();
        if let Some(ep) = &self.epoll
            && let Err(e) = ep.wait(&mut self.ready, 0)
        {
            tracing::debug!("SRT epoll: {e}");
        }
        for (addr, l) in &self.listeners {
            let Ok(socket) = &l.socket else { continue };
            l.routes.sweep(now);
            // One caller per listener and turn: the next is reported again.
            if !self
                .ready
                .iter()
                .any(|(id, ev)| *id == socket.id() && ev.contains(sys::Events::IN))
            {
                continue;
            }
            let (conn, peer) = match socket.accept() {
                Ok(Some(c)) => c,
                Ok(None) => continue,
                Err(e) => {
                    tracing::debug!("SRT listener {addr}: accept: {e}");
                    continue;
                }
            };
            let Some(end) = l.routes.take_pending(conn.id()).and_then(|t| self.ends.get_mut(&t)) else {
                // Its endpoint went away during the handshake.
                continue;
            };
            let stream_id = conn.stream_id().unwrap_or_default();
            tracing::info!("SRT {}: {peer} connected (stream ID `{stream_id}`)", end.endpoint);
            end.conns.push(Conn {
                socket: conn,
                peer,
                stream_id,
                since_ns: now,
                queue_full: 0,
            });
            end.connected.store(end.conns.len(), Ordering::Relaxed);
        }
    }

    /// Moves the calls of callers without a connection on.
    fn call(&mut self, now: u64) {
        for end in self.ends.values_mut() {
            let Some(call) = &mut end.call else { continue };
            if !end.conns.is_empty() {
                continue;
            }
            if let Some((socket, peer)) = call.step(now) {
                tracing::info!("SRT {}: connected to {peer}", end.endpoint);
                end.conns.push(Conn {
                    socket,
                    peer,
                    stream_id: end.endpoint.stream_id.clone().unwrap_or_default(),
                    since_ns: now,
                    queue_full: 0,
                });
                end.connected.store(1, Ordering::Relaxed);
            }
        }
    }

    fn status(&mut self, now: u64) -> Vec<(Target, SrtStatus)> {
        let mut v = Vec::with_capacity(self.ends.len());
        for (target, end) in &mut self.ends {
            end.conns.retain(|c| {
                let alive = matches!(c.socket.state(), SrtState::Connected);
                if !alive {
                    tracing::info!("SRT {}: {} gone", end.endpoint, c.peer);
                }
                alive
            });
            end.connected.store(end.conns.len(), Ordering::Relaxed);
            let listener = end
                .call
                .is_none()
                .then(|| self.listeners.get(&end.endpoint.address))
                .flatten();
            let (state, error) = match (&end.problem, &end.call) {
                (Some(p), _) => ("failed", Some(p.clone())),
                (None, None) => ("listening", None),
                (None, Some(_)) if !end.conns.is_empty() => ("connected", None),
                (None, Some(c)) => ("calling", c.last_error.clone()),
            };
            let input = matches!(target, Target::Input(..));
            let (refused, last_refusal) = listener.map(|l| l.routes.refusals(*target)).unwrap_or_default();
            v.push((
                *target,
                SrtStatus {
                    state: state.into(),
                    error,
                    worker: self.worker,
                    refused,
                    last_refusal,
                    connections: end.conns.iter().map(|c| connection(c, now, input)).collect(),
                },
            ));
        }
        v.sort_by_key(|(t, _)| *t);
        v
    }
}

fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn state_name(s: SrtState) -> String {
    match s {
        SrtState::Init => "init".into(),
        SrtState::Opened => "opened".into(),
        SrtState::Listening => "listening".into(),
        SrtState::Connecting => "connecting".into(),
        SrtState::Connected => "connected".into(),
        SrtState::Broken => "broken".into(),
        SrtState::Closing => "closing".into(),
        SrtState::Closed => "closed".into(),
        SrtState::NonExistent => "gone".into(),
        SrtState::Other(n) => format!("state {n}"),
    }
}

/// What one connection shows: what it sent for an output, what it
/// received for an `input`.
fn connection(c: &Conn, now: u64, input: bool) -> SrtConnection {
    let mut s = SrtConnection {
        peer: c.peer.to_string(),
        stream_id: c.stream_id.clone(),
        state: state_name(c.socket.state()),
        connected_s: now.saturating_sub(c.since_ns) / 1_000_000_000,
        queue_full: c.queue_full,
        ..Default::default()
    };
    if let Ok(st) = c.socket.stats() {
        s.rtt_ms = st.rtt_ms;
        s.send_mbps = st.send_rate_mbps;
        s.recv_mbps = st.recv_rate_mbps;
        if input {
            s.packets = count(st.received_unique_packets);
            s.retransmitted = count(st.received_retransmitted_packets);
            s.reported_missing = count(st.receive_lost_packets);
            s.lost = count(st.receive_dropped_packets);
            s.dropped_too_late = count(st.receive_dropped_packets);
            s.buffer_ms = u64::try_from(st.receive_buffer_ms).unwrap_or(0);
            s.latency_ms = u64::try_from(st.receive_tsbpd_delay_ms).unwrap_or(0);
        } else {
            s.packets = count(st.sent_unique_packets);
            s.retransmitted = count(st.retransmitted_packets);
            s.reported_missing = count(st.send_lost_packets);
            s.lost = count(st.send_dropped_packets);
            s.dropped_too_late = count(st.send_dropped_packets);
            s.buffer_ms = u64::try_from(st.send_buffer_ms).unwrap_or(0);
            s.latency_ms = u64::try_from(st.send_tsbpd_delay_ms).unwrap_or(0);
        }
    }
    s
}
