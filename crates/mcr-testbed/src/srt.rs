//! Third-party SRT peers for the tests: Debian's `srt-live-transmit`
//! (package srt-tools, libsrt built with GnuTLS, where mcrd links the
//! OpenSSL build), run inside a test bed's namespace.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::{Finished, Ns, Proc, Result, Signal};

/// A running `srt-live-transmit SOURCE TARGET`, ended on drop.
#[derive(Debug)]
pub struct LiveTransmit {
    proc: Proc,
}

impl LiveTransmit {
    /// Starts `srt-live-transmit source target` in `ns` (URIs in its own
    /// syntax: `srt://HOST:PORT?streamid=..&latency=MS`, `udp://GROUP:PORT?adapter=ADDR`),
    /// logging at `note` so its connection and its refusals show, with a
    /// statistics line every `stats_every` packets (0: none).
    pub fn start(ns: &Ns, source: &str, target: &str, stats_every: u32) -> Result<LiveTransmit> {
        Self::start_on(ns, None, source, target, stats_every)
    }

    /// [`LiveTransmit::start`], pinned to `cpu` if one is given (through
    /// `taskset`, which execs it: [`LiveTransmit::pid`] is still its own).
    pub fn start_on(ns: &Ns, cpu: Option<usize>, source: &str, target: &str, stats_every: u32) -> Result<LiveTransmit> {
        let mut cmd = match cpu {
            Some(cpu) => {
                let mut c = ns.command("taskset");
                c.args(["-c", &cpu.to_string(), "srt-live-transmit"]);
                c
            }
            None => ns.command("srt-live-transmit"),
        };
        cmd.arg("-loglevel:note");
        if stats_every > 0 {
            cmd.arg(format!("-s:{stats_every}")).arg("-pf:json");
        }
        cmd.arg(source).arg(target).stdin(Stdio::null());
        Ok(LiveTransmit { proc: ns.spawn(cmd)? })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// What it printed on stderr and stdout so far.
    pub fn log(&self) -> String {
        format!("{}{}", self.proc.stderr_so_far(), self.proc.stdout_so_far())
    }

    /// Waits until its output contains `needle`, at most `timeout`.
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

    /// Whether it has exited.
    pub fn exited(&mut self) -> Result<bool> {
        Ok(self.proc.try_status()?.is_some())
    }

    /// Sends it `signal` (`Stop` freezes it as a peer that vanished
    /// without a word: its socket stays open and says nothing).
    pub fn signal(&mut self, signal: Signal) -> Result<()> {
        self.proc.signal(signal)
    }

    /// Kills it (SIGKILL: its peers hear no goodbye).
    pub fn kill(&mut self) -> Result<()> {
        self.proc.signal(Signal::Kill)
    }

    /// Ends it (SIGINT, as at a terminal) and returns what it printed.
    pub fn stop(self) -> Result<Finished> {
        self.proc.stop(Signal::Int, Duration::from_secs(10))
    }
}
