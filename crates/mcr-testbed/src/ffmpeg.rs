//! ffmpeg as a third-party peer (Debian's ffmpeg, whose libavformat links
//! libsrt and librist), run inside a test bed's namespace.
//!
//! [`Ffmpeg::datagrams`] carries datagrams from one URL to another byte
//! for byte: the `data` demuxer and muxer copy bytes without parsing them,
//! and `-raw_packet_size` set to the datagrams' size makes each datagram
//! read one packet, written as one message (one SRT message, one UDP
//! datagram). With the demuxer's default (1,024 bytes) a 1,316-byte
//! datagram would leave as two messages, of 1,024 and 292 bytes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::{Finished, Ns, Proc, Result, Signal};

/// A running `ffmpeg`, killed (by its PID) on drop.
#[derive(Debug)]
pub struct Ffmpeg {
    proc: Proc,
    ns: Ns,
}

/// An `srt://` URL in ffmpeg's syntax for `host:port`, calling it
/// (`mode=caller`) or listening on it, with `latency` (ffmpeg takes it in
/// microseconds, where srt-live-transmit and MCR take milliseconds),
/// messages of `payload_bytes` and, if not empty, a stream ID.
pub fn srt_url(host_port: &str, caller: bool, latency: Duration, payload_bytes: usize, stream_id: &str) -> String {
    let mode = if caller { "caller" } else { "listener" };
    let mut url = format!(
        "srt://{host_port}?mode={mode}&latency={}&pkt_size={payload_bytes}",
        latency.as_micros()
    );
    if !stream_id.is_empty() {
        url.push_str("&streamid=");
        url.push_str(stream_id);
    }
    url
}

impl Ffmpeg {
    /// Starts `ffmpeg -nostdin ARGS...` in `ns`, logging at `warning`.
    pub fn start(ns: &Ns, args: &[&str]) -> Result<Ffmpeg> {
        let mut cmd = ns.command("ffmpeg");
        cmd.args(["-nostdin", "-hide_banner", "-loglevel", "warning"])
            .args(args)
            .stdin(Stdio::null());
        Ok(Ffmpeg {
            proc: ns.spawn(cmd)?,
            ns: ns.clone(),
        })
    }

    /// Starts ffmpeg carrying the datagrams of `input` (a URL, such as
    /// `udp://10.0.0.1:5000?fifo_size=100000&overrun_nonfatal=1`) to
    /// `output` (such as [`srt_url`]'s) unchanged, each of
    /// `datagram_bytes` (a datagram of another size would be cut or joined
    /// to others on the way).
    pub fn datagrams(ns: &Ns, input: &str, output: &str, datagram_bytes: usize) -> Result<Ffmpeg> {
        let size = datagram_bytes.to_string();
        Ffmpeg::start(
            ns,
            &[
                "-f",
                "data",
                "-raw_packet_size",
                &size,
                "-i",
                input,
                "-map",
                "0",
                "-c",
                "copy",
                "-f",
                "data",
                output,
            ],
        )
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// What it printed so far (stderr, then stdout).
    pub fn log(&self) -> String {
        format!("{}{}", self.proc.stderr_so_far(), self.proc.stdout_so_far())
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> Result<bool> {
        Ok(self.proc.try_status()?.is_some())
    }

    /// Waits until its output contains `needle`, at most `timeout`; an
    /// error (with what it printed) if it exits first or time runs out.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        while !self.log().contains(needle) {
            if self.proc.try_status()?.is_some() || start.elapsed() >= timeout {
                return self.proc.wait_for_stderr(needle, Duration::ZERO);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Waits until it has bound UDP port `port` (its `udp://` input, say),
    /// at most `timeout`. ffmpeg opens its output only once its input has
    /// given it something: an `srt://` caller calls when the first
    /// datagram arrives, not before, and holds what arrives meanwhile.
    pub fn wait_for_udp_port(&mut self, port: u16, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let filter = format!("sport = :{port}");
        while self.ns.exec("ss", ["-Hlun", filter.as_str()])?.trim().is_empty() {
            if self.proc.try_status()?.is_some() || start.elapsed() >= timeout {
                return self
                    .proc
                    .wait_for_stderr(&format!("(bound UDP port {port})"), Duration::ZERO);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Ends it as `q` or Ctrl-C at a terminal would (SIGINT: it flushes
    /// what it holds and closes its outputs) and returns what it printed.
    pub fn stop(self) -> Result<Finished> {
        self.proc.stop(Signal::Int, Duration::from_secs(10))
    }
}
