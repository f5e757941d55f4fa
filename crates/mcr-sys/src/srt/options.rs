//! Socket options (`srt_setsockflag`/`srt_getsockflag`), typed. Options
//! set on a listener are inherited by the sockets it accepts; most must be
//! set before bind or connect (libsrt refuses them later).

use std::ffi::c_void;

use super::ffi::{self, SRTSOCKET};
use super::{SrtError, SrtSocket};

/// The longest stream id libsrt carries (`SRTO_STREAMID`), in bytes.
pub const STREAM_ID_MAX_BYTES: usize = 512;

/// Sets an option whose value is `len` bytes at `value`.
///
/// # Safety
/// `value` must point to `len` readable bytes of the type the option takes.
unsafe fn set_raw(
    id: SRTSOCKET,
    opt: i32,
    value: *const c_void,
    len: usize,
    op: impl FnOnce() -> String,
) -> Result<(), SrtError> {
    let Ok(len) = i32::try_from(len) else {
        return Err(SrtError::invalid(op(), "the value is too long"));
    };
    // SAFETY: the caller guarantees `value` points to `len` bytes; libsrt
    // copies them before returning.
    let rc = unsafe { ffi::srt_setsockflag(id, opt, value, len) };
    if rc == ffi::SRT_ERROR {
        return Err(SrtError::last(op()));
    }
    Ok(())
}

pub(super) fn set_i32(id: SRTSOCKET, opt: i32, name: &str, v: i32) -> Result<(), SrtError> {
    // SAFETY: `v` is an i32 on the stack for the duration of the call, as
    // the int32 options take.
    unsafe {
        set_raw(id, opt, (&raw const v).cast(), size_of::<i32>(), || {
            format!("srt_setsockflag @{id} {name}={v}")
        })
    }
}

pub(super) fn set_i64(id: SRTSOCKET, opt: i32, name: &str, v: i64) -> Result<(), SrtError> {
    // SAFETY: as in set_i32, for the int64 options.
    unsafe {
        set_raw(id, opt, (&raw const v).cast(), size_of::<i64>(), || {
            format!("srt_setsockflag @{id} {name}={v}")
        })
    }
}

/// Sets a string option; `shown` is how it appears in an error (never a
/// secret).
fn set_str(id: SRTSOCKET, opt: i32, name: &str, v: &str, shown: &str) -> Result<(), SrtError> {
    // SAFETY: string options take the bytes and their length (no NUL).
    unsafe {
        set_raw(id, opt, v.as_ptr().cast(), v.len(), || {
            format!("srt_setsockflag @{id} {name}={shown}")
        })
    }
}

/// libsrt's rule for `SRTO_PASSPHRASE`: 10 to 79 bytes.
pub(super) fn set_passphrase(id: SRTSOCKET, passphrase: &str) -> Result<(), SrtError> {
    if !(10..=79).contains(&passphrase.len()) {
        return Err(SrtError::invalid(
            format!("srt_setsockflag @{id} SRTO_PASSPHRASE"),
            format!("a passphrase has 10 to 79 bytes, this one has {}", passphrase.len()),
        ));
    }
    set_str(id, ffi::SRTO_PASSPHRASE, "SRTO_PASSPHRASE", passphrase, "(secret)")
}

/// The AES key length in bytes: 16, 24 or 32.
pub(super) fn set_pbkeylen(id: SRTSOCKET, bytes: i32) -> Result<(), SrtError> {
    if ![16, 24, 32].contains(&bytes) {
        return Err(SrtError::invalid(
            format!("srt_setsockflag @{id} SRTO_PBKEYLEN={bytes}"),
            "the key length is 16, 24 or 32 bytes (AES-128, -192, -256)",
        ));
    }
    set_i32(id, ffi::SRTO_PBKEYLEN, "SRTO_PBKEYLEN", bytes)
}

impl SrtSocket {
    /// Live mode (`SRTO_TRANSTYPE=SRTT_LIVE`): messages up to the payload
    /// size, delivered at their send time plus the latency, too-late packets
    /// dropped. Sets live defaults for the other options, so call it first.
    pub fn set_live(&self) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_TRANSTYPE, "SRTO_TRANSTYPE", ffi::SRTT_LIVE)
    }

    /// Both the receive latency and the latency asked of the peer
    /// (`SRTO_LATENCY`, ms; default 120). Each side ends up with the larger
    /// of its receive latency and the peer's.
    pub fn set_latency_ms(&self, ms: i32) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_LATENCY, "SRTO_LATENCY", ms)
    }

    /// The latency this side's receiver keeps (`SRTO_RCVLATENCY`, ms).
    pub fn set_rcv_latency_ms(&self, ms: i32) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_RCVLATENCY, "SRTO_RCVLATENCY", ms)
    }

    /// The least latency asked of the peer's receiver (`SRTO_PEERLATENCY`,
    /// ms).
    pub fn set_peer_latency_ms(&self, ms: i32) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_PEERLATENCY, "SRTO_PEERLATENCY", ms)
    }

    /// Encrypts with a key derived from `passphrase` (`SRTO_PASSPHRASE`,
    /// 10 to 79 bytes). Both sides need the same one: with enforced
    /// encryption (the default) a mismatch refuses the connection.
    pub fn set_passphrase(&self, passphrase: &str) -> Result<(), SrtError> {
        set_passphrase(self.id(), passphrase)
    }

    /// The AES key length (`SRTO_PBKEYLEN`): 16, 24 or 32 bytes.
    pub fn set_pbkeylen(&self, bytes: i32) -> Result<(), SrtError> {
        set_pbkeylen(self.id(), bytes)
    }

    /// The stream id a caller sends to the listener (`SRTO_STREAMID`, at
    /// most 512 bytes).
    pub fn set_stream_id(&self, stream_id: &str) -> Result<(), SrtError> {
        if stream_id.len() > STREAM_ID_MAX_BYTES {
            return Err(SrtError::invalid(
                format!("srt_setsockflag @{} SRTO_STREAMID", self.id()),
                format!(
                    "a stream id has at most {STREAM_ID_MAX_BYTES} bytes, this one has {}",
                    stream_id.len()
                ),
            ));
        }
        set_str(self.id(), ffi::SRTO_STREAMID, "SRTO_STREAMID", stream_id, stream_id)
    }

    /// The stream id: the one set, or on an accepted socket the caller's.
    pub fn stream_id(&self) -> Result<String, SrtError> {
        let mut buf = [0u8; STREAM_ID_MAX_BYTES + 1];
        let mut len = i32::try_from(buf.len()).unwrap_or(i32::MAX);
        // SAFETY: `buf` has `len` writable bytes; libsrt writes at most that
        // many and stores the length written in `len`.
        let rc = unsafe { ffi::srt_getsockflag(self.id(), ffi::SRTO_STREAMID, buf.as_mut_ptr().cast(), &raw mut len) };
        if rc == ffi::SRT_ERROR {
            return Err(SrtError::last(format!("srt_getsockflag @{} SRTO_STREAMID", self.id())));
        }
        let len = usize::try_from(len).unwrap_or(0).min(buf.len());
        let bytes = &buf[..len];
        let bytes = bytes.split(|&b| b == 0).next().unwrap_or(bytes);
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// The most this socket sends (`SRTO_MAXBW`, bytes/s, an int64):
    /// -1 for libsrt's ceiling (1 Gb/s in live mode), 0 to derive it from
    /// the input rate.
    pub fn set_max_bw_bytes_per_s(&self, bytes_per_s: i64) -> Result<(), SrtError> {
        set_i64(self.id(), ffi::SRTO_MAXBW, "SRTO_MAXBW", bytes_per_s)
    }

    /// The largest message (`SRTO_PAYLOADSIZE`, bytes; live default 1316,
    /// at most [`super::LIVE_MAX_PAYLOAD_BYTES`]).
    pub fn set_payload_size(&self, bytes: i32) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_PAYLOADSIZE, "SRTO_PAYLOADSIZE", bytes)
    }

    /// How long a connection survives hearing nothing from its peer
    /// (`SRTO_PEERIDLETIMEO`, ms; default 5000).
    pub fn set_peer_idle_timeout_ms(&self, ms: i32) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_PEERIDLETIMEO, "SRTO_PEERIDLETIMEO", ms)
    }

    /// How long a connect may take (`SRTO_CONNTIMEO`, ms; default 3000).
    pub fn set_conn_timeout_ms(&self, ms: i32) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_CONNTIMEO, "SRTO_CONNTIMEO", ms)
    }

    /// Non-blocking (`SRTO_RCVSYN` and `SRTO_SNDSYN` false): accept,
    /// connect, send and receive return at once; [`super::SrtEpoll`] says
    /// when to retry. Accepted sockets inherit it from the listener.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<(), SrtError> {
        let blocking = i32::from(!nonblocking);
        set_i32(self.id(), ffi::SRTO_RCVSYN, "SRTO_RCVSYN", blocking)?;
        set_i32(self.id(), ffi::SRTO_SNDSYN, "SRTO_SNDSYN", blocking)
    }

    /// The send buffer (`SRTO_SNDBUF`, bytes; set before bind or connect).
    pub fn set_snd_buf_bytes(&self, bytes: i32) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_SNDBUF, "SRTO_SNDBUF", bytes)
    }

    /// The receive buffer (`SRTO_RCVBUF`, bytes; set before bind or
    /// connect). It must hold the latency's worth of data.
    pub fn set_rcv_buf_bytes(&self, bytes: i32) -> Result<(), SrtError> {
        set_i32(self.id(), ffi::SRTO_RCVBUF, "SRTO_RCVBUF", bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_bad_passphrases_and_key_lengths_before_libsrt() {
        let e = set_passphrase(-1, "short").expect_err("5 bytes");
        assert!(matches!(e, SrtError::Invalid { .. }));
        assert!(e.to_string().contains("10 to 79 bytes, this one has 5"), "{e}");
        assert!(!e.to_string().contains("short"), "the secret is not shown: {e}");
        assert!(set_passphrase(-1, &"x".repeat(80)).is_err());
        assert!(matches!(set_pbkeylen(-1, 20), Err(SrtError::Invalid { .. })));
    }

    #[test]
    fn options_and_stream_id_round_trip() {
        let s = SrtSocket::new().expect("a socket");
        s.set_live().expect("live");
        s.set_latency_ms(400).expect("latency");
        s.set_max_bw_bytes_per_s(5_000_000_000).expect("an int64 value");
        s.set_payload_size(1456).expect("payload");
        s.set_passphrase("0123456789").expect("10 bytes");
        s.set_pbkeylen(32).expect("AES-256");
        s.set_nonblocking(true).expect("nonblocking");
        s.set_stream_id("#!::r=feed-a,m=request").expect("stream id");
        assert_eq!(s.stream_id().expect("read back"), "#!::r=feed-a,m=request");
        assert!(s.set_stream_id(&"s".repeat(513)).is_err());
        // libsrt's own refusal carries its code and names the option.
        let e = s.set_payload_size(100_000).expect_err("too big");
        assert_eq!(e.code(), Some(ffi::SRT_EINVPARAM), "{e}");
        assert!(e.to_string().contains("SRTO_PAYLOADSIZE=100000"), "{e}");
    }
}
