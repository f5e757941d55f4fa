//! An SRT listener: one socket on one address, and the hook that decides,
//! in libsrt's receive thread during each caller's handshake, which
//! endpoint it gets by the stream ID it sent, sets that endpoint's
//! passphrase, key length, latency, idle timeout and bandwidth cap on the
//! new connection, or refuses it with a reason the caller sees.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mcr_core::srt::{MAX_PAYLOAD_BYTES, SrtEndpoint};
use mcr_sys::srt::{self as sys, HookRequest, ListenHook, RejectCode, SrtSocket};

use super::Target;
use crate::worker::liblog::LibLog;

/// Callers waiting for their handshake to be accepted, per listener.
const BACKLOG: i32 = 256;
/// How long a caller the hook let in may take to complete its handshake
/// before it counts as refused (libsrt's connection timeout is 3 s).
const HANDSHAKE_LIMIT_NS: u64 = 5_000_000_000;
/// After a caller's handshake fails (a wrong passphrase), its endpoint
/// lets no caller in for this long: a flood of callers with the wrong key
/// makes libsrt set up (and drop) at most ten connections a second for it,
/// each with its buffers, and a caller with the right key still gets in.
const AFTER_FAILURE_NS: u64 = 100_000_000;

pub(super) struct Listener {
    /// The socket, or why there is none.
    pub socket: Result<SrtSocket, String>,
    pub routes: Arc<Routes>,
}

/// What a listener's hook decides by, shared with libsrt's thread.
#[derive(Default)]
pub(super) struct Routes {
    table: Mutex<RouteTable>,
}

#[derive(Default)]
struct RouteTable {
    routes: Vec<Route>,
    /// Connections the hook let in and no `accept` has taken yet: whose,
    /// and since when.
    pending: HashMap<i32, (Target, u64)>,
    /// When a handshake for each endpoint last failed.
    failed_at: HashMap<Target, u64>,
    /// Each endpoint's refusals: callers whose stream ID it serves.
    refused: HashMap<Target, Refused>,
    /// The port's: callers whose stream ID no endpoint serves
    /// (`not_found`), shown under its first endpoint.
    port: Refused,
}

/// Refusals counted once each, by reason, and the last.
#[derive(Default, Clone)]
struct Refused {
    by_reason: std::collections::BTreeMap<String, u64>,
    /// When, who and why.
    last: Option<(u64, String)>,
}

impl Refused {
    fn count(&mut self, reason: &str, now: u64, last: Option<String>) {
        *self.by_reason.entry(reason.to_string()).or_default() += 1;
        if let Some(l) = last {
            self.last = Some((now, l));
        }
    }
}

/// One endpoint a listener serves.
pub(super) struct Route {
    pub target: Target,
    pub endpoint: SrtEndpoint,
    pub passphrase: Option<String>,
    /// How many callers it takes at once (an input: its one sender).
    pub max: usize,
    /// Its connections (the endpoint's count, shared).
    pub connected: Arc<AtomicUsize>,
}

impl ListenHook for Routes {
    fn decide(&self, req: &mut HookRequest<'_>) -> Result<(), RejectCode> {
        self.decide_at(req, mcr_sys::clock::monotonic_ns())
    }
}

fn ms(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

impl Routes {
    fn decide_at(&self, req: &mut HookRequest<'_>, now: u64) -> Result<(), RejectCode> {
        let Ok(mut t) = self.table.lock() else {
            return Err(RejectCode::OVERLOAD);
        };
        let t = &mut *t;
        let Some(r) = t.routes.iter().find(|r| r.endpoint.serves(req.stream_id())) else {
            t.port
                .count("not_found", now, refusal(req, "nothing here serves that stream ID"));
            return Err(RejectCode::NOT_FOUND);
        };
        if t.failed_at
            .get(&r.target)
            .is_some_and(|&at| now.saturating_sub(at) < AFTER_FAILURE_NS)
        {
            let why = refusal(
                req,
                "a caller's handshake for it failed just now (a wrong passphrase?); the next may call 100 ms later",
            );
            t.refused.entry(r.target).or_default().count("overload", now, why);
            return Err(RejectCode::OVERLOAD);
        }
        let waiting = t.pending.values().filter(|(s, _)| *s == r.target).count();
        if r.connected.load(Ordering::Relaxed) + waiting >= r.max {
            let why = match r.target {
                Target::Output(_) => format!("its output has max-callers={} already", r.max),
                Target::Input(..) => "its input has its sender already".to_string(),
            };
            t.refused
                .entry(r.target)
                .or_default()
                .count("overload", now, refusal(req, &why));
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
        t.pending.insert(req.socket_id(), (r.target, now));
        Ok(())
    }

    /// Serves `routes` from now on; callers in their handshake for an
    /// endpoint no longer served are forgotten.
    pub fn set(&self, routes: Vec<Route>) {
        if let Ok(mut t) = self.table.lock() {
            t.pending.retain(|_, (s, _)| routes.iter().any(|r| r.target == *s));
            t.failed_at.retain(|s, _| routes.iter().any(|r| r.target == *s));
            t.refused.retain(|s, _| routes.iter().any(|r| r.target == *s));
            t.routes = routes;
        }
    }

    /// Whose connection `id` is (the hook let it in), taking it off the
    /// waiting list.
    pub fn take_pending(&self, id: i32) -> Option<Target> {
        self.table.lock().ok()?.pending.remove(&id).map(|(t, _)| t)
    }

    /// Counts callers the hook let in whose handshake never completed:
    /// those libsrt gave up on (a wrong passphrase: the key exchange fails
    /// after the hook, and libsrt drops the socket), at once, so that
    /// their reservation does not keep the next caller out, and any still
    /// pending after [`HANDSHAKE_LIMIT_NS`].
    pub fn sweep(&self, now: u64) {
        if let Ok(mut t) = self.table.lock() {
            let RouteTable {
                pending,
                failed_at,
                refused,
                ..
            } = &mut *t;
            pending.retain(|id, (target, since)| {
                let keep = now.saturating_sub(*since) < HANDSHAKE_LIMIT_NS && !sys::SrtState::of(*id).is_over();
                if !keep {
                    failed_at.insert(*target, now);
                    // (The hook's last word on it was to let it in.)
                    refused.entry(*target).or_default().count("handshake", now, None);
                }
                keep
            });
        }
    }

    /// The refusals of the endpoint `target` by reason, each counted once
    /// on the port: those of callers whose stream ID it serves, and, for
    /// the port's first endpoint, the port's own (`not_found`); and the
    /// last of them, who and why.
    pub fn refusals(&self, target: Target) -> (std::collections::BTreeMap<String, u64>, Option<String>) {
        let Ok(t) = self.table.lock() else {
            return Default::default();
        };
        let mut own = t.refused.get(&target).cloned().unwrap_or_default();
        for reason in ["overload", "handshake"] {
            own.by_reason.entry(reason.to_string()).or_default();
        }
        if t.routes.iter().map(|r| r.target).min() == Some(target) {
            own.by_reason.entry("not_found".to_string()).or_default();
            for (reason, n) in &t.port.by_reason {
                *own.by_reason.entry(reason.clone()).or_default() += n;
            }
            if t.port.last.as_ref().map(|l| l.0) > own.last.as_ref().map(|l| l.0) {
                own.last.clone_from(&t.port.last);
            }
        }
        (own.by_reason, own.last.map(|(_, l)| l))
    }
}

/// What a refusal says: who, with which stream ID, and why.
fn refusal(req: &HookRequest<'_>, why: &str) -> Option<String> {
    Some(format!("{} with stream ID `{}`: {why}", req.peer(), req.stream_id()))
}

/// A listener on `addr`, its hook deciding by `routes` and `epoll`
/// (made on first use) telling when a caller waits, or why not.
pub(super) fn open(addr: SocketAddr, epoll: &mut Option<sys::SrtEpoll>) -> Listener {
    let routes = Arc::new(Routes::default());
    // (libsrt starts the port's send and receive threads here.)
    let socket = crate::worker::unpinned(|| listen(addr, routes.clone(), epoll));
    if let Err(e) = &socket {
        tracing::warn!("SRT listener {addr}: {e}");
    }
    Listener { socket, routes }
}

/// libsrt's log lines, into the worker's log ([`LibLog`]).
fn log_line(level: i32, msg: &str) {
    static LOG: LibLog = LibLog::new("libsrt");
    LOG.line(level <= sys::LEVEL_ERR, msg);
}

/// Starts libsrt (once) with its log in the worker's.
pub(super) fn start() -> Result<(), String> {
    sys::startup().map_err(|e| e.to_string())?;
    sys::set_log_sink(log_line);
    Ok(())
}

fn listen(addr: SocketAddr, routes: Arc<Routes>, epoll: &mut Option<sys::SrtEpoll>) -> Result<SrtSocket, String> {
    start()?;
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
