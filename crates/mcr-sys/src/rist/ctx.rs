//! One librist context and what its callbacks learn.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ptr::{self, NonNull};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Instant;

use super::ffi;

/// The RIST profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// TR-06-1: RTP over UDP, an even port and the next one.
    Simple,
    /// TR-06-2: GRE over one UDP port, optional AES.
    Main,
}

impl Profile {
    fn c(self) -> c_int {
        match self {
            Profile::Simple => ffi::RIST_PROFILE_SIMPLE,
            Profile::Main => ffi::RIST_PROFILE_MAIN,
        }
    }
}

/// Whether a context sends or receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends datagrams to its peers.
    Sender,
    /// Receives the datagrams its peers send.
    Receiver,
}

/// A failed librist call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RistError {
    /// librist refused: the call and what it returned.
    #[error("{op} failed ({code}); librist's log says why")]
    Call {
        /// The call and what it was given.
        op: String,
        /// What it returned.
        code: i32,
    },
    /// An argument refused before the call.
    #[error("{op}: {reason}")]
    Invalid {
        /// The call that was not made.
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// The librist loaded at run time does not have the API these
    /// bindings mirror.
    #[error(
        "librist with API {found} is loaded, but MCR's RIST bindings are written for API 4.x \
         (librist 0.2, Debian: librist4); install it or rebuild MCR against the installed one"
    )]
    Version {
        /// The API version found.
        found: String,
    },
}

fn check(op: impl FnOnce() -> String, code: c_int) -> Result<(), RistError> {
    if code < 0 {
        Err(RistError::Call { op: op(), code })
    } else {
        Ok(())
    }
}

/// A peer that connected: its address (unspecified for the peer a
/// caller reached, which is the one it called) and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Where it sends from.
    pub address: SocketAddr,
    /// When it connected.
    pub since: Instant,
}

/// What librist last said of one peer (a sender's) or one flow (a
/// receiver's), with the counts summed since it appeared (librist reports
/// each interval's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RistStats {
    /// librist's id of the peer (a sender's) or the flow (a receiver's).
    pub id: u32,
    /// The peer's or flow's name (its RTCP CNAME).
    pub cname: String,
    /// Peers of the flow (a receiver's; 1 for a sender's peer).
    pub peers: u32,
    /// Round-trip time, in ms.
    pub rtt_ms: u32,
    /// Bit rate of the last interval, in bit/s.
    pub bandwidth_bps: u64,
    /// Of which retransmissions, in bit/s.
    pub retry_bandwidth_bps: u64,
    /// Packets sent (a sender) or received (a receiver).
    pub packets: u64,
    /// Packets sent again (a sender's).
    pub retransmitted: u64,
    /// Packets that arrived out of order or were missing and then came
    /// (a receiver's).
    pub recovered: u64,
    /// Packets found missing (a receiver's, reordered ones included).
    pub missing: u64,
    /// Packets that arrived out of order (a receiver's).
    pub reordered: u64,
    /// Packets lost for good: never recovered within the buffer (a
    /// receiver's).
    pub lost: u64,
    /// librist's quality figure of the last interval, in percent.
    pub quality: f64,
    /// When librist last reported it.
    pub at: Option<Instant>,
}

/// What librist's callbacks write, on librist's threads.
#[derive(Default)]
struct Shared {
    /// The most peers a listener takes at once (0: no limit).
    max_peers: usize,
    /// How many peers are connected (the length of `State::peers`, read
    /// for every datagram without the lock).
    connected: std::sync::atomic::AtomicUsize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Connected peers, by librist's peer pointer (as an address).
    peers: Vec<(usize, Peer)>,
    /// Peers refused for want of room.
    refused: u64,
    stats: Vec<RistStats>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `connected` in step with `state.peers` (under its lock).
    fn count(&self, state: &State) {
        self.connected
            .store(state.peers.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// librist's error level (syslog's number).
pub const LEVEL_ERROR: i32 = ffi::RIST_LOG_ERROR;
/// librist's warning level, the most verbose a context logs.
pub const LEVEL_WARN: i32 = ffi::RIST_LOG_WARN;

/// Receives each log line of librist: its level (syslog's numbers) and
/// text.
pub type LogSink = fn(level: i32, msg: &str);

static SINK: RwLock<Option<LogSink>> = RwLock::new(None);

/// Sends librist's log lines (warnings and errors) to `sink` from now on;
/// it runs on librist's threads, so it must be quick. Until a sink is set
/// they are dropped.
pub fn set_log_sink(sink: LogSink) {
    *SINK.write().unwrap_or_else(PoisonError::into_inner) = Some(sink);
}

/// One librist context (a sender or a receiver) with one peer.
pub struct Rist {
    ctx: NonNull<ffi::rist_ctx>,
    log: *mut ffi::rist_logging_settings,
    /// Owned: freed in `Drop`, after `rist_destroy` has stopped the
    /// threads that call back with it.
    shared: NonNull<Shared>,
    role: Role,
    url: String,
}

impl fmt::Debug for Rist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rist")
            .field("role", &self.role)
            .field("url", &self.url)
            .finish()
    }
}

// SAFETY: a librist context may be used from any thread (librist locks
// its own state); `Shared` is Sync. `Rist` is not Sync: send and receive
// take `&self` but are only ever called from the thread that owns it.
unsafe impl Send for Rist {}

/// Checks once that the loaded librist has API 4.
fn check_version() -> Result<(), RistError> {
    // SAFETY: librist_api_version takes nothing and returns a static
    // NUL-terminated string.
    let p = unsafe { ffi::librist_api_version() };
    let found = if p.is_null() {
        String::new()
    } else {
        // SAFETY: static, NUL-terminated (above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    if found.split('.').next() == Some(&ffi::LIBRIST_API_VERSION_MAJOR.to_string()) {
        Ok(())
    } else {
        Err(RistError::Version { found })
    }
}

impl Rist {
    /// A context in `role` and `profile` with one peer, from `url` (a
    /// librist URL: `rist://@ADDRESS:PORT?...` listens,
    /// `rist://ADDRESS:PORT?...` connects; its parameters, e.g. `buffer=`,
    /// `secret=`, `aes-type=`, `bandwidth=`, are librist's). A listener
    /// takes at most `max_peers` peers at once (0: no limit); the next is
    /// refused and counted. Started at once: a listener binds its port
    /// here (in the calling thread's network namespace).
    pub fn new(role: Role, profile: Profile, url: &str, max_peers: usize) -> Result<Rist, RistError> {
        check_version()?;
        if !url.starts_with("rist://") {
            return Err(RistError::Invalid {
                op: format!("rist_parse_address2 {}", redact(url)),
                reason: "librist takes a rist:// URL here".into(),
            });
        }
        let c_url = CString::new(url).map_err(|_| RistError::Invalid {
            op: "rist_parse_address2".into(),
            reason: "the URL holds a NUL byte".into(),
        })?;
        let mut log: *mut ffi::rist_logging_settings = ptr::null_mut();
        // SAFETY: `log` is a valid out pointer (NULL asks librist to
        // allocate); `log_line` matches the callback type and never
        // unwinds; the address and FILE are NULL (unused).
        let rc = unsafe {
            ffi::rist_logging_set(
                &raw mut log,
                ffi::RIST_LOG_WARN,
                Some(log_line),
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        check(|| "rist_logging_set".into(), rc)?;
        let mut ctx: *mut ffi::rist_ctx = ptr::null_mut();
        let rc = match role {
            // SAFETY: `ctx` is a valid out pointer; `log` was made by
            // rist_logging_set and outlives the context (freed in Drop).
            Role::Sender => unsafe {
                ffi::rist_sender_create(&raw mut ctx, profile.c(), ffi::rist_flow_id_create(), log)
            },
            // SAFETY: as above.
            Role::Receiver => unsafe { ffi::rist_receiver_create(&raw mut ctx, profile.c(), log) },
        };
        let Some(ctx) = NonNull::new(ctx).filter(|_| rc == 0) else {
            // SAFETY: `log` came from rist_logging_set and nothing uses it.
            unsafe { ffi::rist_logging_settings_free2(&raw mut log) };
            return Err(RistError::Call {
                op: format!(
                    "rist_{}_create",
                    if role == Role::Sender { "sender" } else { "receiver" }
                ),
                code: rc,
            });
        };
        let shared = NonNull::from(Box::leak(Box::new(Shared {
            max_peers,
            ..Default::default()
        })));
        // From here on Drop frees all three.
        let rist = Rist {
            ctx,
            log,
            shared,
            role,
            url: redact(url),
        };
        rist.setup(&c_url)?;
        Ok(rist)
    }

    fn setup(&self, url: &CStr) -> Result<(), RistError> {
        let ctx = self.ctx.as_ptr();
        let arg = self.shared.as_ptr().cast::<c_void>();
        // SAFETY: `ctx` is live; the callbacks match librist's types and
        // never unwind; `arg` points to the `Shared` that outlives the
        // context (freed in Drop after rist_destroy).
        let rc = unsafe { ffi::rist_auth_handler_set(ctx, Some(on_connect), Some(on_disconnect), arg) };
        check(|| "rist_auth_handler_set".into(), rc)?;
        // SAFETY: as above.
        let rc = unsafe { ffi::rist_connection_status_callback_set(ctx, Some(on_status), arg) };
        check(|| "rist_connection_status_callback_set".into(), rc)?;
        // SAFETY: as above.
        let rc = unsafe { ffi::rist_stats_callback_set(ctx, 1000, Some(on_stats), arg) };
        check(|| "rist_stats_callback_set".into(), rc)?;
        let mut config: *mut ffi::rist_peer_config = ptr::null_mut();
        // SAFETY: `url` is NUL-terminated; `config` is a valid out pointer
        // (NULL: librist allocates one, freed below).
        let rc = unsafe { ffi::rist_parse_address2(url.as_ptr(), &raw mut config) };
        if rc != 0 || config.is_null() {
            if !config.is_null() {
                // SAFETY: made by rist_parse_address2 above.
                unsafe { ffi::rist_peer_config_free2(&raw mut config) };
            }
            return Err(RistError::Invalid {
                op: format!("rist_parse_address2 {}", self.url),
                reason: "librist does not take this URL (its log says which parameter)".into(),
            });
        }
        let mut peer: *mut ffi::rist_peer = ptr::null_mut();
        // SAFETY: `ctx` is live, `peer` a valid out pointer, `config` made
        // by rist_parse_address2 (librist copies what it needs).
        let rc = unsafe { ffi::rist_peer_create(ctx, &raw mut peer, config) };
        // SAFETY: made by rist_parse_address2; the peer no longer needs it.
        unsafe { ffi::rist_peer_config_free2(&raw mut config) };
        check(|| format!("rist_peer_create {}", self.url), rc)?;
        // SAFETY: `ctx` is live and fully set up.
        let rc = unsafe { ffi::rist_start(ctx) };
        check(|| "rist_start".into(), rc)
    }

    /// Whether it sends or receives.
    pub fn role(&self) -> Role {
        self.role
    }

    fn shared(&self) -> &Shared {
        // SAFETY: `shared` is live until Drop.
        unsafe { self.shared.as_ref() }
    }

    /// Queues `payload` for every peer (a sender). librist copies it.
    pub fn send(&self, payload: &[u8]) -> Result<(), RistError> {
        if self.role != Role::Sender {
            return Err(RistError::Invalid {
                op: "rist_sender_data_write".into(),
                reason: "a receiver does not send".into(),
            });
        }
        // SAFETY: an all-zero rist_data_block is valid (null pointers,
        // zero numbers); the fields librist reads are set below.
        let mut block: ffi::rist_data_block = unsafe { std::mem::zeroed() };
        block.payload = payload.as_ptr().cast();
        block.payload_len = payload.len();
        // SAFETY: `ctx` is live; `block` points to `payload`, which
        // librist copies before returning.
        let rc = unsafe { ffi::rist_sender_data_write(self.ctx.as_ptr(), &raw const block) };
        check(|| "rist_sender_data_write".into(), rc)
    }

    /// Takes the next datagram librist released (a receiver), copied into
    /// `buf`: its length (cut to `buf`'s), or `None` if none waits.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>, RistError> {
        let mut block: *mut ffi::rist_data_block = ptr::null_mut();
        // SAFETY: `ctx` is live; `block` is a valid out pointer; timeout 0
        // does not wait.
        let rc = unsafe { ffi::rist_receiver_data_read2(self.ctx.as_ptr(), &raw mut block, 0) };
        if rc < 0 {
            return Err(RistError::Call {
                op: "rist_receiver_data_read2".into(),
                code: rc,
            });
        }
        if block.is_null() {
            return Ok(None);
        }
        // SAFETY: librist handed us this block; it stays valid until
        // rist_receiver_data_block_free2.
        let b = unsafe { &*block };
        let len = b.payload_len.min(buf.len());
        if len > 0 && !b.payload.is_null() {
            // SAFETY: `payload` holds `payload_len` bytes (librist's
            // contract) and `len` is at most that; `buf` holds `len`.
            let data = unsafe { std::slice::from_raw_parts(b.payload.cast::<u8>(), len) };
            buf[..len].copy_from_slice(data);
        }
        // SAFETY: the block came from rist_receiver_data_read2 and is not
        // used after this.
        unsafe { ffi::rist_receiver_data_block_free2(&raw mut block) };
        Ok(Some(len))
    }

    /// The peers connected now (those that connected to a listener, or
    /// the one a caller reached).
    pub fn peers(&self) -> Vec<Peer> {
        self.shared().state().peers.iter().map(|(_, p)| p.clone()).collect()
    }

    /// Whether any peer is connected now.
    pub fn has_peers(&self) -> bool {
        self.shared().connected.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Peers a listener refused for want of room (`max_peers`).
    pub fn refused(&self) -> u64 {
        self.shared().state().refused
    }

    /// What librist last said of each peer (a sender) or flow (a
    /// receiver) that reported within the last `fresh_ms`.
    pub fn stats(&self, fresh_ms: u64) -> Vec<RistStats> {
        let now = Instant::now();
        let mut state = self.shared().state();
        state.stats.retain(|s| {
            s.at.is_some_and(|at| now.duration_since(at).as_millis() <= u128::from(fresh_ms))
        });
        state.stats.clone()
    }
}

impl Drop for Rist {
    fn drop(&mut self) {
        // SAFETY: `ctx` is live and not used after this; rist_destroy
        // stops (joins) librist's threads, so no callback runs after it.
        unsafe { ffi::rist_destroy(self.ctx.as_ptr()) };
        // SAFETY: made by rist_logging_set; the context that used it is
        // gone.
        unsafe { ffi::rist_logging_settings_free2(&raw mut self.log) };
        // SAFETY: made by Box::leak in `new`; no callback can use it any
        // more (above).
        drop(unsafe { Box::from_raw(self.shared.as_ptr()) });
    }
}

/// `url` with the value of `secret=` hidden, for messages.
fn redact(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some(("secret", _)) => "secret=***".to_string(),
            _ => p.to_string(),
        })
        .collect();
    format!("{base}?{}", params.join("&"))
}

/// Runs `f` on the `Shared` behind `arg`, catching a panic (which must not
/// unwind into C).
fn with_shared<R: Default>(arg: *mut c_void, f: impl FnOnce(&Shared) -> R) -> R {
    if arg.is_null() {
        return R::default();
    }
    // SAFETY: `arg` is the `Shared` pointer set in `setup`, live until
    // Drop, which runs only after rist_destroy stopped every callback.
    let shared = unsafe { &*arg.cast::<Shared>() };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(shared))).unwrap_or_default()
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: librist passes NUL-terminated strings valid for the call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// librist's auth handler: a peer connects. Refuses it (-1) when the
/// listener is full.
unsafe extern "C" fn on_connect(
    arg: *mut c_void,
    conn_ip: *const c_char,
    conn_port: u16,
    _local_ip: *const c_char,
    _local_port: u16,
    peer: *mut ffi::rist_peer,
) -> c_int {
    let ip = text(conn_ip);
    with_shared(arg, |s| {
        let mut state = s.state();
        if s.max_peers > 0 && state.peers.len() >= s.max_peers {
            state.refused += 1;
            return -1;
        }
        let ip: IpAddr = ip.parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        state.peers.retain(|(p, _)| *p != peer as usize);
        state.peers.push((
            peer as usize,
            Peer {
                address: SocketAddr::new(ip, conn_port),
                since: Instant::now(),
            },
        ));
        s.count(&state);
        0
    })
}

/// librist's auth handler: a peer is gone (timed out or closed).
unsafe extern "C" fn on_disconnect(arg: *mut c_void, peer: *mut ffi::rist_peer) -> c_int {
    with_shared(arg, |s| {
        let mut state = s.state();
        state.peers.retain(|(p, _)| *p != peer as usize);
        s.count(&state);
        0
    })
}

/// librist's connection status callback: a peer this context connected
/// to answered or timed out (a listener's peers come and go through the
/// auth handler, which also gives their address).
unsafe extern "C" fn on_status(arg: *mut c_void, peer: *mut ffi::rist_peer, status: c_int) {
    with_shared(arg, |s| {
        let mut state = s.state();
        let known = state.peers.iter().any(|(p, _)| *p == peer as usize);
        match status {
            ffi::RIST_CONNECTION_ESTABLISHED | ffi::RIST_CLIENT_CONNECTED if !known => state.peers.push((
                peer as usize,
                Peer {
                    address: SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0),
                    since: Instant::now(),
                },
            )),
            ffi::RIST_CONNECTION_TIMED_OUT | ffi::RIST_CLIENT_TIMED_OUT => {
                state.peers.retain(|(p, _)| *p != peer as usize);
            }
            _ => {}
        }
        s.count(&state);
    });
}

/// librist's statistics callback: sums each interval's counts into the
/// peer's or flow's totals. Owns `stats` and frees it.
unsafe extern "C" fn on_stats(arg: *mut c_void, stats: *const ffi::rist_stats) -> c_int {
    if stats.is_null() {
        return 0;
    }
    // SAFETY: librist hands a valid container, ours until rist_stats_free.
    let c = unsafe { &*stats };
    let update = match c.stats_type {
        ffi::RIST_STATS_SENDER_PEER => {
            // SAFETY: `stats_type` says the sender member is filled.
            let p = unsafe { c.stats.sender_peer };
            Some((
                p.peer_id,
                cname(&p.cname),
                1,
                p.rtt,
                p.bandwidth,
                p.retry_bandwidth,
                p.quality,
                [p.sent, p.retransmitted, 0, 0, 0, 0],
            ))
        }
        ffi::RIST_STATS_RECEIVER_FLOW => {
            // SAFETY: `stats_type` says the receiver member is filled.
            let f = unsafe { c.stats.receiver_flow };
            Some((
                f.flow_id,
                cname(&f.cname),
                f.peer_count,
                f.rtt,
                f.bandwidth,
                f.retry_bandwidth,
                f.quality,
                [
                    f.received,
                    0,
                    u64::from(f.recovered),
                    u64::from(f.missing),
                    u64::from(f.reordered),
                    u64::from(f.lost),
                ],
            ))
        }
        _ => None,
    };
    if let Some((id, cname, peers, rtt, bw, retry_bw, quality, counts)) = update {
        with_shared(arg, |s| {
            let mut state = s.state();
            let i = match state.stats.iter().position(|x| x.id == id) {
                Some(i) => i,
                None => {
                    state.stats.push(RistStats {
                        id,
                        ..Default::default()
                    });
                    state.stats.len() - 1
                }
            };
            let x = &mut state.stats[i];
            x.cname = cname;
            x.peers = peers;
            x.rtt_ms = rtt;
            x.bandwidth_bps = bw as u64;
            x.retry_bandwidth_bps = retry_bw as u64;
            x.quality = quality;
            x.packets += counts[0];
            x.retransmitted += counts[1];
            x.recovered += counts[2];
            x.missing += counts[3];
            x.reordered += counts[4];
            x.lost += counts[5];
            x.at = Some(Instant::now());
        });
    }
    // SAFETY: the container is ours (librist's contract for the callback)
    // and not used after this.
    unsafe { ffi::rist_stats_free(stats) };
    0
}

fn cname(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.cast_unsigned())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// librist's log callback (warnings and errors only).
unsafe extern "C" fn log_line(_arg: *mut c_void, level: c_int, msg: *const c_char) -> c_int {
    let Some(sink) = *SINK.read().unwrap_or_else(PoisonError::into_inner) else {
        return 0;
    };
    let line = text(msg);
    let _ = std::panic::catch_unwind(|| sink(level, line.trim_end()));
    0
}
