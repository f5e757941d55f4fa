//! An SRT endpoint in caller mode: it calls its peer, and calls again, with
//! a backoff from 1 s doubling to 30 s, while the call fails; once the
//! connection it made breaks, it calls again at once (at most once a
//! second).

use std::net::SocketAddr;

use mcr_core::srt::{MAX_PAYLOAD_BYTES, SrtEndpoint};
use mcr_sys::srt::{self as sys, SrtSocket, SrtState};

const FIRST_BACKOFF_NS: u64 = 1_000_000_000;
const MAX_BACKOFF_NS: u64 = 30_000_000_000;
/// How long a call may take (SRTO_CONNTIMEO), in ms.
const CALL_TIMEOUT_MS: i32 = 3_000;

/// One caller output's calls.
pub(super) struct Call {
    endpoint: SrtEndpoint,
    passphrase: Option<String>,
    /// The call under way.
    socket: Option<SrtSocket>,
    next_try_ns: u64,
    backoff_ns: u64,
    /// Why the last call failed, until one succeeds.
    pub last_error: Option<String>,
}

impl Call {
    pub fn new(endpoint: SrtEndpoint, passphrase: Option<String>) -> Call {
        Call {
            endpoint,
            passphrase,
            socket: None,
            next_try_ns: 0,
            backoff_ns: FIRST_BACKOFF_NS,
            last_error: None,
        }
    }

    /// Moves the call on (while its output has no connection): returns the
    /// connection once it is made.
    pub fn step(&mut self, now: u64) -> Option<(SrtSocket, SocketAddr)> {
        let Some(s) = &self.socket else {
            if now >= self.next_try_ns {
                match self.dial() {
                    Ok(s) => self.socket = Some(s),
                    Err(why) => self.failed(now, why),
                }
            }
            return None;
        };
        match s.state() {
            SrtState::Init | SrtState::Opened | SrtState::Connecting => None,
            SrtState::Connected => {
                self.backoff_ns = FIRST_BACKOFF_NS;
                self.last_error = None;
                // Should it break at once, the next call waits a little.
                self.next_try_ns = now + FIRST_BACKOFF_NS;
                self.socket.take().map(|s| (s, self.endpoint.address))
            }
            _ => {
                let why = format!("the call failed: {}", s.reject_reason());
                self.socket = None;
                self.failed(now, why);
                None
            }
        }
    }

    fn failed(&mut self, now: u64, why: String) {
        tracing::debug!(
            "SRT output {}: {why}; calling again in {} s",
            self.endpoint,
            self.backoff_ns / 1_000_000_000
        );
        self.last_error = Some(why);
        self.next_try_ns = now + self.backoff_ns;
        self.backoff_ns = (self.backoff_ns * 2).min(MAX_BACKOFF_NS);
    }

    fn dial(&self) -> Result<SrtSocket, String> {
        let e = &self.endpoint;
        let ms = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        let open = || -> Result<SrtSocket, sys::SrtError> {
            sys::startup()?;
            let s = SrtSocket::new()?;
            s.set_live()?;
            s.set_nonblocking(true)?;
            s.set_payload_size(i32::try_from(MAX_PAYLOAD_BYTES).unwrap_or(1456))?;
            s.set_latency_ms(ms(e.latency_ms))?;
            s.set_peer_idle_timeout_ms(ms(e.idle_timeout_ms))?;
            s.set_conn_timeout_ms(CALL_TIMEOUT_MS)?;
            if let Some(p) = &self.passphrase {
                s.set_passphrase(p)?;
                if let Some(k) = e.pbkeylen {
                    s.set_pbkeylen(i32::from(k))?;
                }
            }
            if let Some(id) = &e.stream_id {
                s.set_stream_id(id)?;
            }
            if let Some(bps) = e.max_bw_bps {
                s.set_max_bw_bytes_per_s(i64::try_from(bps / 8).unwrap_or(i64::MAX))?;
            }
            s.connect(e.address)?;
            Ok(s)
        };
        // (libsrt starts its threads here: the call's send and receive
        // threads, and on the first call its collector.)
        crate::worker::unpinned(|| {
            super::listener::start()?;
            open().map_err(|err| err.to_string())
        })
        .map_err(|err| format!("could not call: {err}"))
    }
}
