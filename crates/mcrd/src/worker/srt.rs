//! SRT outputs: a listener per address that serves every caller of the
//! outputs bound there, chosen by the caller's stream ID, callers that call
//! their peer ([`super::srt_call`]), and the datagrams of each output
//! handed to every one of its connections.
//!
//! Worker 0 holds every SRT endpoint (the fanout program pins the inputs
//! of rules with an SRT output to it, as it does those of rules with
//! several inputs). libsrt runs its own threads: one pair (send and
//! receive queue) per UDP port, which paces, retransmits and encrypts
//! each connection's packets; this module only accepts, hands datagrams
//! over (`srt_sendmsg2`, which copies into the connection's send buffer
//! and never blocks here) and reads the statistics.
//!
//! Which output a caller gets is decided in libsrt's receive thread, during
//! the handshake, by the listener's hook ([`Routes::decide`]): the stream ID
//! picks the output, whose passphrase, key length and latency are set on
//! the new connection, and a caller with a stream ID that nothing serves,
//! or one too many, is refused with a reason the caller sees.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mcr_core::control::{SrtConnection, SrtStatus};
use mcr_core::srt::{MAX_PAYLOAD_BYTES, SrtEndpoint, SrtMode};
use mcr_core::stats::OutputCounter;
use mcr_core::table::{MatchTable, OutputKind};
use mcr_sys::srt::{self as sys, HookRequest, ListenHook, RejectCode, SrtSocket, SrtState};

use super::egress::Counts;
use super::srt_call::Call;
use crate::channel::{Problem, Scope};

/// How often listeners are asked for new connections, at most.
const ACCEPT_EVERY_NS: u64 = 10_000_000;
/// How often each connection's statistics are read and sent on.
const STATUS_EVERY_NS: u64 = 1_000_000_000;
/// How long a caller the hook let in may take to complete its handshake
/// before it counts as refused (libsrt's connection timeout is 3 s).
const HANDSHAKE_LIMIT_NS: u64 = 5_000_000_000;
/// Callers waiting for their handshake to be accepted, per listener.
const BACKLOG: i32 = 256;

/// Every SRT output of this worker.
pub struct SrtOutputs {
    /// Whether this worker holds SRT endpoints (worker 0).
    owner: bool,
    worker: usize,
    listeners: HashMap<SocketAddr, Listener>,
    outputs: HashMap<u32, Output>,
    /// Tells which listeners have callers to accept (an `accept` that finds
    /// none makes libsrt log an error), once there is a listener.
    epoll: Option<sys::SrtEpoll>,
    ready: Vec<(i32, sys::Events)>,
    last_accept_ns: u64,
    last_status_ns: u64,
}

impl std::fmt::Debug for SrtOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrtOutputs")
            .field("listeners", &self.listeners.len())
            .field("outputs", &self.outputs.len())
            .finish()
    }
}

struct Listener {
    /// The socket, or why there is none.
    socket: Result<SrtSocket, String>,
    routes: Arc<Routes>,
}

/// What a listener's hook decides by, shared with libsrt's thread.
#[derive(Default)]
struct Routes {
    table: Mutex<RouteTable>,
    not_found: AtomicU64,
    overload: AtomicU64,
    handshake: AtomicU64,
    /// The last refusal: who, and why.
    last_refusal: Mutex<Option<String>>,
}

#[derive(Default)]
struct RouteTable {
    routes: Vec<Route>,
    /// Connections the hook let in and no `accept` has taken yet: the
    /// output's slot and when.
    pending: HashMap<i32, (u32, u64)>,
}

struct Route {
    slot: u32,
    endpoint: SrtEndpoint,
    passphrase: Option<String>,
    /// Its connections (the output's count, shared).
    connected: Arc<AtomicUsize>,
}

struct Output {
    endpoint: SrtEndpoint,
    /// A caller's calls (none for a listener's output).
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

impl ListenHook for Routes {
    fn decide(&self, req: &mut HookRequest<'_>) -> Result<(), RejectCode> {
        self.decide_at(req, mcr_sys::clock::monotonic_ns())
    }
}

impl Routes {
    fn decide_at(&self, req: &mut HookRequest<'_>, now: u64) -> Result<(), RejectCode> {
        let Ok(mut t) = self.table.lock() else {
            return Err(RejectCode::OVERLOAD);
        };
        let t = &mut *t;
        let Some(r) = t.routes.iter().find(|r| r.endpoint.serves(req.stream_id())) else {
            self.not_found.fetch_add(1, Ordering::Relaxed);
            self.refused(req, "no output here serves that stream ID");
            return Err(RejectCode::NOT_FOUND);
        };
        let waiting = t.pending.values().filter(|(s, _)| *s == r.slot).count();
        if r.connected.load(Ordering::Relaxed) + waiting >= r.endpoint.max_callers as usize {
            self.overload.fetch_add(1, Ordering::Relaxed);
            self.refused(
                req,
                &format!("its output has max-callers={} already", r.endpoint.max_callers),
            );
            return Err(RejectCode::OVERLOAD);
        }
        let set = |req: &mut HookRequest<'_>| -> Result<(), sys::SrtError> {
            let e = &r.endpoint;
            if let Some(p) = &r.passphrase {
                req.set_passphrase(p)?;
                if let Some(k) = e.pbkeylen {
                    req.set_pbkeylen(i32::from(k))?;
                }
            }
            req.set_latency_ms(ms(e.latency_ms))?;
            req.set_peer_idle_timeout_ms(ms(e.idle_timeout_ms))?;
            if let Some(bps) = e.max_bw_bps {
                req.set_max_bw_bytes_per_s(i64::try_from(bps / 8).unwrap_or(i64::MAX))?;
            }
            Ok(())
        };
        if let Err(e) = set(req) {
            tracing::warn!("SRT caller {}: could not set its connection up: {e}", req.peer());
            return Err(RejectCode::BAD_REQUEST);
        }
        t.pending.insert(req.socket_id(), (r.slot, now));
        Ok(())
    }
}

impl Routes {
    fn refused(&self, req: &HookRequest<'_>, why: &str) {
        if let Ok(mut last) = self.last_refusal.lock() {
            *last = Some(format!("{} with stream ID `{}`: {why}", req.peer(), req.stream_id()));
        }
    }
}

fn ms(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
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

impl SrtOutputs {
    /// The SRT outputs of worker `worker` (only worker 0 holds any).
    pub fn new(worker: usize) -> Self {
        SrtOutputs {
            owner: worker == 0,
            worker,
            listeners: HashMap::new(),
            outputs: HashMap::new(),
            epoll: None,
            ready: Vec::new(),
            last_accept_ns: 0,
            last_status_ns: 0,
        }
    }

    /// Whether there is anything to poll.
    pub fn active(&self) -> bool {
        !self.outputs.is_empty()
    }

    /// Opens, keeps and closes listeners and outputs to match `table`. An
    /// output whose endpoint did not change keeps its connections.
    pub fn reconcile(&mut self, table: &MatchTable) -> Vec<Problem> {
        let mut problems = Vec::new();
        if !self.owner {
            return problems;
        }
        let mut wanted: Vec<(String, u32, &SrtEndpoint)> = Vec::new();
        for r in table.rules() {
            for o in &r.outputs {
                if let OutputKind::Srt(e) = &o.kind {
                    wanted.push((r.name.clone(), o.slot, e));
                }
            }
        }
        // Outputs: kept as they are, or afresh.
        self.outputs
            .retain(|slot, o| wanted.iter().any(|(_, s, e)| s == slot && **e == o.endpoint));
        let mut by_listener: HashMap<SocketAddr, Vec<Route>> = HashMap::new();
        for (rule, slot, e) in &wanted {
            let out = self.outputs.entry(*slot).or_insert_with(|| Output {
                endpoint: (*e).clone(),
                call: None,
                conns: Vec::new(),
                connected: Arc::new(AtomicUsize::new(0)),
                problem: None,
            });
            let passphrase = match e.passphrase_file.as_deref().map(read_passphrase).transpose() {
                Ok(p) => p,
                Err(why) => {
                    out.problem = Some(why.clone());
                    problems.push(Problem {
                        scope: Scope::Rule(rule.clone()),
                        error: format!("SRT output {e}: {why}"),
                    });
                    continue;
                }
            };
            out.problem = None;
            if e.mode == SrtMode::Caller {
                if out.call.is_none() {
                    out.call = Some(Call::new((*e).clone(), passphrase));
                }
                continue;
            }
            by_listener.entry(e.address).or_default().push(Route {
                slot: *slot,
                endpoint: (*e).clone(),
                passphrase,
                connected: out.connected.clone(),
            });
        }
        self.listeners.retain(|a, _| by_listener.contains_key(a));
        for (addr, routes) in by_listener {
            let epoll = &mut self.epoll;
            let l = self.listeners.entry(addr).or_insert_with(|| open_listener(addr, epoll));
            if l.socket.is_err() {
                // Taken before: perhaps free now.
                *l = open_listener(addr, epoll);
            }
            if let Ok(mut t) = l.routes.table.lock() {
                let slots: Vec<u32> = routes.iter().map(|r| r.slot).collect();
                t.pending.retain(|_, (s, _)| slots.contains(s));
                t.routes = routes;
            }
            if let Err(why) = &l.socket {
                for (rule, _, e) in wanted.iter().filter(|(_, _, e)| e.address == addr) {
                    problems.push(Problem {
                        scope: Scope::Rule(rule.clone()),
                        error: format!("SRT listener {}: {why}", e.address),
                    });
                }
                for o in self.outputs.values_mut().filter(|o| o.endpoint.address == addr) {
                    o.problem = Some(why.clone());
                }
            }
        }
        problems
    }

    /// Hands `payload` to every connection of output `slot`.
    pub fn send(&mut self, slot: u32, payload: &[u8], counts: &Counts<'_>) {
        let Some(o) = self.outputs.get_mut(&slot) else {
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

    /// Takes new connections, drops broken ones and, once a second, says
    /// what every output has (`None` in between).
    pub fn poll(&mut self, now: u64) -> Option<Vec<(u32, SrtStatus)>> {
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
            // One caller per listener and poll: the next is reported again.
            if self
                .ready
                .iter()
                .any(|(id, ev)| *id == socket.id() && ev.contains(sys::Events::IN))
            {
                let (conn, peer) = match socket.accept() {
                    Ok(Some(c)) => c,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::debug!("SRT listener {addr}: accept: {e}");
                        continue;
                    }
                };
                let slot = l
                    .routes
                    .table
                    .lock()
                    .ok()
                    .and_then(|mut t| t.pending.remove(&conn.id()).map(|(s, _)| s));
                let Some(o) = slot.and_then(|s| self.outputs.get_mut(&s)) else {
                    // Its output went away during the handshake.
                    continue;
                };
                let stream_id = conn.stream_id().unwrap_or_default();
                tracing::info!(
                    "SRT output {}: caller {peer} connected (stream ID `{stream_id}`)",
                    o.endpoint
                );
                o.conns.push(Conn {
                    socket: conn,
                    peer,
                    stream_id,
                    since_ns: now,
                    queue_full: 0,
                });
                o.connected.store(o.conns.len(), Ordering::Relaxed);
            }
            // Callers the hook let in whose handshake never completed.
            if let Ok(mut t) = l.routes.table.lock() {
                let before = t.pending.len();
                t.pending
                    .retain(|_, (_, since)| now.saturating_sub(*since) < HANDSHAKE_LIMIT_NS);
                let gone = (before - t.pending.len()) as u64;
                if gone > 0 {
                    l.routes.handshake.fetch_add(gone, Ordering::Relaxed);
                }
            }
        }
    }

    /// Moves the calls of caller outputs without a connection on.
    fn call(&mut self, now: u64) {
        for o in self.outputs.values_mut() {
            let Some(call) = &mut o.call else { continue };
            if !o.conns.is_empty() {
                continue;
            }
            if let Some((socket, peer)) = call.step(now) {
                tracing::info!("SRT output {}: connected to {peer}", o.endpoint);
                o.conns.push(Conn {
                    socket,
                    peer,
                    stream_id: o.endpoint.stream_id.clone().unwrap_or_default(),
                    since_ns: now,
                    queue_full: 0,
                });
                o.connected.store(1, Ordering::Relaxed);
            }
        }
    }

    fn status(&mut self, now: u64) -> Vec<(u32, SrtStatus)> {
        let mut v = Vec::with_capacity(self.outputs.len());
        for (slot, o) in &mut self.outputs {
            o.conns.retain(|c| {
                let alive = matches!(c.socket.state(), SrtState::Connected);
                if !alive {
                    tracing::info!("SRT output {}: caller {} gone", o.endpoint, c.peer);
                }
                alive
            });
            o.connected.store(o.conns.len(), Ordering::Relaxed);
            let listener = o
                .call
                .is_none()
                .then(|| self.listeners.get(&o.endpoint.address))
                .flatten();
            let refused = listener
                .map(|l| {
                    [
                        ("not_found", &l.routes.not_found),
                        ("overload", &l.routes.overload),
                        ("handshake", &l.routes.handshake),
                    ]
                    .into_iter()
                    .map(|(k, c)| (k.to_string(), c.load(Ordering::Relaxed)))
                    .collect()
                })
                .unwrap_or_default();
            let last_refusal = listener.and_then(|l| l.routes.last_refusal.lock().ok()?.clone());
            let (state, error) = match (&o.problem, &o.call) {
                (Some(p), _) => ("failed", Some(p.clone())),
                (None, None) => ("listening", None),
                (None, Some(_)) if !o.conns.is_empty() => ("connected", None),
                (None, Some(c)) => ("calling", c.last_error.clone()),
            };
            v.push((
                *slot,
                SrtStatus {
                    state: state.into(),
                    error,
                    worker: self.worker,
                    refused,
                    last_refusal,
                    connections: o.conns.iter().map(|c| connection(c, now)).collect(),
                },
            ));
        }
        v.sort_by_key(|(s, _)| *s);
        v
    }
}

fn connection(c: &Conn, now: u64) -> SrtConnection {
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
        s.packets = count(st.sent_unique_packets);
        s.retransmitted = count(st.retransmitted_packets);
        s.lost = count(st.send_lost_packets);
        s.dropped_too_late = count(st.send_dropped_packets);
        s.buffer_ms = u64::try_from(st.send_buffer_ms).unwrap_or(0);
        s.latency_ms = u64::try_from(st.send_tsbpd_delay_ms).unwrap_or(0);
    }
    s
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

/// A listener on `addr`, its hook deciding by `routes` and `epoll`
/// (made on first use) telling when a caller waits, or why not.
fn open_listener(addr: SocketAddr, epoll: &mut Option<sys::SrtEpoll>) -> Listener {
    let routes = Arc::new(Routes::default());
    let socket = listen(addr, routes.clone(), epoll);
    if let Err(e) = &socket {
        tracing::warn!("SRT listener {addr}: {e}");
    }
    Listener { socket, routes }
}

/// libsrt's log lines, into the worker's log: errors and warnings at most
/// [`LOG_LINES_PER_S`] a second, the rest counted in the next line.
fn log_line(level: i32, msg: &str) {
    // Warnings (a refused handshake, say) are counted by mcrd itself and
    // shown in `mcrctl stats`; only errors reach the log.
    if level > sys::LEVEL_ERR {
        tracing::debug!("libsrt: {msg}");
        return;
    }
    static WINDOW: std::sync::Mutex<(u64, u32)> = std::sync::Mutex::new((0, 0));
    let now_s = mcr_sys::clock::monotonic_ns() / 1_000_000_000;
    let Ok(mut w) = WINDOW.lock() else { return };
    if w.0 != now_s {
        if w.1 > LOG_LINES_PER_S {
            tracing::warn!("libsrt: {} more line(s) not shown", w.1 - LOG_LINES_PER_S);
        }
        *w = (now_s, 0);
    }
    w.1 += 1;
    if w.1 > LOG_LINES_PER_S {
        return;
    }
    tracing::warn!("libsrt: {msg}");
}

/// How many of libsrt's lines a second reach the log.
const LOG_LINES_PER_S: u32 = 5;

fn listen(addr: SocketAddr, routes: Arc<Routes>, epoll: &mut Option<sys::SrtEpoll>) -> Result<SrtSocket, String> {
    sys::startup().map_err(|e| e.to_string())?;
    sys::set_log_sink(log_line);
    if epoll.is_none() {
        *epoll = Some(sys::SrtEpoll::new().map_err(|e| e.to_string())?);
    }
    let s = SrtSocket::new().map_err(|e| e.to_string())?;
    let setup = || -> Result<(), sys::SrtError> {
        s.set_live()?;
        s.set_nonblocking(true)?;
        s.set_payload_size(i32::try_from(MAX_PAYLOAD_BYTES).unwrap_or(1456))?;
        s.set_listen_hook(routes)?;
        Ok(())
    };
    setup().map_err(|e| e.to_string())?;
    s.bind(addr).map_err(|e| format!("bind: {e}"))?;
    // Watched before it listens: libsrt reports no caller that queued
    // before the socket joined the set.
    if let Some(ep) = epoll {
        ep.add(s.id(), sys::Events::IN).map_err(|e| e.to_string())?;
    }
    s.listen(BACKLOG).map_err(|e| format!("listen: {e}"))?;
    Ok(s)
}
