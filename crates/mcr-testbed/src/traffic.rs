//! Running `mcrgen` inside a test bed's namespaces and reading its reports.

use std::fmt::Display;
use std::time::Duration;

use mcrgen::impair::ImpairReport;
use mcrgen::report::{RecvReport, SendReport};

use crate::Signal;

use crate::{Error, Finished, Ns, Proc, Result, bin};

/// The arguments of an `mcrgen send` or `mcrgen recv`, with the common
/// ones named: `Mcrgen::streams("239.1.1.1:5001", "veth0").count(1000)
/// .rate("10k").send(&ns, timeout)`, or `.expect(1000).recv(&ns)`. Any
/// other option goes in with [`Mcrgen::arg`].
#[derive(Debug, Clone, Default)]
pub struct Mcrgen {
    args: Vec<String>,
}

impl Mcrgen {
    /// The streams (`-s`, as mcrgen reads them: `GROUP:PORT`, `A+N:PORT`,
    /// ...) on `interface` (`-i`).
    pub fn streams(streams: impl Display, interface: impl Display) -> Mcrgen {
        Mcrgen::default().opt("-s", streams).opt("-i", interface)
    }

    fn opt(mut self, name: &str, value: impl Display) -> Mcrgen {
        self.args.push(name.to_string());
        self.args.push(value.to_string());
        self
    }

    /// `--count`: packets per stream to send.
    pub fn count(self, n: impl Display) -> Mcrgen {
        self.opt("--count", n)
    }

    /// `--rate`: packets per second (`10k`, `max`).
    pub fn rate(self, r: impl Display) -> Mcrgen {
        self.opt("--rate", r)
    }

    /// `--size`: payload bytes.
    pub fn size(self, n: impl Display) -> Mcrgen {
        self.opt("--size", n)
    }

    /// `--expect`: packets per stream the receiver must get.
    pub fn expect(self, n: impl Display) -> Mcrgen {
        self.opt("--expect", n)
    }

    /// `--via`: how to send or receive (`ring`, `udp`, ...).
    pub fn via(self, how: impl Display) -> Mcrgen {
        self.opt("--via", how)
    }

    /// `--duration`: how long to send or receive (`8s`).
    pub fn duration(self, d: impl Display) -> Mcrgen {
        self.opt("--duration", d)
    }

    /// `--wrap`: how the test payload is carried (`rtp`, `ts`, `rtp-ts`).
    pub fn wrap(self, how: impl Display) -> Mcrgen {
        self.opt("--wrap", how)
    }

    /// `--ids`: the stream ids a receiver takes.
    pub fn ids(self, ids: impl Display) -> Mcrgen {
        self.opt("--ids", ids)
    }

    /// Any other argument, as written on the command line.
    pub fn arg(mut self, a: impl Display) -> Mcrgen {
        self.args.push(a.to_string());
        self
    }

    /// Runs `mcrgen send` with these arguments in `ns` (see [`send`]).
    pub fn send(&self, ns: &Ns, timeout: Duration) -> Result<SendReport> {
        send(ns, &self.strs(), timeout)
    }

    /// Starts `mcrgen recv` with these arguments in `ns` (see
    /// [`Receiver::start`]).
    pub fn recv(&self, ns: &Ns) -> Result<Receiver> {
        Receiver::start(ns, &self.strs())
    }

    fn strs(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }
}

/// A running `mcrgen recv`, started with `--json`.
#[derive(Debug)]
pub struct Receiver {
    proc: Proc,
}

/// A finished `mcrgen recv`: its report and exit code.
#[derive(Debug, Clone)]
pub struct Received {
    /// The parsed report.
    pub report: RecvReport,
    /// The exit code (0: clean or no expectation; 1: the expectation failed).
    pub code: Option<i32>,
    /// What it printed on stderr.
    pub stderr: String,
}

impl Receiver {
    /// Starts `mcrgen recv --json ARGS...` in `ns` and waits until it has
    /// joined its groups and is ready for traffic.
    pub fn start(ns: &Ns, args: &[&str]) -> Result<Receiver> {
        let mut cmd = ns.command(bin("mcrgen")?);
        cmd.arg("recv").arg("--json").args(args);
        let mut proc = ns.spawn(cmd)?;
        proc.wait_for_stderr("ready:", Duration::from_secs(60))?;
        Ok(Receiver { proc })
    }

    /// The receiver's process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Waits for it to stop on its own (expected count, idle timeout,
    /// duration), at most `timeout`, and reads its report.
    pub fn finish(self, timeout: Duration) -> Result<Received> {
        let f = self.proc.finish(timeout)?;
        Ok(Received {
            report: parse("mcrgen recv", &f)?,
            code: f.status.code(),
            stderr: f.stderr,
        })
    }
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, f: &Finished) -> Result<T> {
    let line = f.stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
    serde_json::from_str(line).map_err(|e| Error::Report {
        what: what.to_string(),
        reason: format!("{e} (exit status {})", f.status),
        stdout: f.stdout.clone(),
        stderr: f.stderr.clone(),
    })
}

/// Runs `mcrgen send --json ARGS...` in `ns` to completion (at most
/// `timeout`) and returns its report; a failed run is an error.
pub fn send(ns: &Ns, args: &[&str], timeout: Duration) -> Result<SendReport> {
    let mut cmd = ns.command(bin("mcrgen")?);
    cmd.arg("send").arg("--json").args(args);
    let f = ns.spawn(cmd)?.finish(timeout)?;
    if !f.status.success() {
        return Err(Error::Report {
            what: "mcrgen send".into(),
            reason: format!("it failed ({})", f.status),
            stdout: f.stdout,
            stderr: f.stderr,
        });
    }
    parse("mcrgen send", &f)
}

/// A running `mcrgen send`, started with `--json`, for a test that ends
/// the stream when it has done what it does meanwhile (the receiver is
/// then told nothing in advance: [`SendReport::sent_to`] says what each
/// stream must have delivered).
#[derive(Debug)]
pub struct Sender {
    proc: Proc,
}

impl Sender {
    /// Starts `mcrgen send --json ARGS...` in `ns`.
    pub fn start(ns: &Ns, args: &[&str]) -> Result<Sender> {
        let mut cmd = ns.command(bin("mcrgen")?);
        cmd.arg("send").arg("--json").args(args);
        Ok(Sender { proc: ns.spawn(cmd)? })
    }

    /// Whether it has stopped on its own (sent its count, or failed).
    pub fn has_stopped(&mut self) -> Result<bool> {
        Ok(self.proc.try_status()?.is_some())
    }

    /// Stops it (SIGTERM: it ends after the packet it is sending) and
    /// reads what it sent.
    pub fn stop(self) -> Result<SendReport> {
        let f = self.proc.stop(Signal::Term, Duration::from_secs(30))?;
        parse("mcrgen send", &f)
    }
}

/// A running `mcrgen impair`, started with `--json`.
#[derive(Debug)]
pub struct Impairer {
    proc: Proc,
}

impl Impairer {
    /// Starts `mcrgen impair --json ARGS...` in `ns` and waits until its
    /// sockets are open.
    pub fn start(ns: &Ns, args: &[&str]) -> Result<Impairer> {
        let mut cmd = ns.command(bin("mcrgen")?);
        cmd.arg("impair").arg("--json").args(args);
        let mut proc = ns.spawn(cmd)?;
        proc.wait_for_stderr("ready:", Duration::from_secs(60))?;
        Ok(Impairer { proc })
    }

    /// Stops it (SIGTERM) and reads what it did.
    pub fn stop(self) -> Result<ImpairReport> {
        let f = self.proc.stop(Signal::Term, Duration::from_secs(30))?;
        parse("mcrgen impair", &f)
    }
}

/// Sends `count` packets to `dest` from `gen_ns` out of `gen_if` at `rate`,
/// while `sink_ns` receives `expect_at` on `sink_if` and checks every one
/// (sequence, payload, checksums); an error unless every packet arrived, in
/// order, once.
#[allow(clippy::too_many_arguments)]
pub fn every_packet_crosses(
    gen_ns: &Ns,
    gen_if: &str,
    dest: &str,
    sink_ns: &Ns,
    sink_if: &str,
    expect_at: &str,
    count: u64,
    rate: &str,
) -> Result<Received> {
    let rx = Mcrgen::streams(expect_at, sink_if).expect(count).recv(sink_ns)?;
    Mcrgen::streams(dest, gen_if)
        .count(count)
        .rate(rate)
        .send(gen_ns, Duration::from_secs(180))?;
    let got = rx.finish(Duration::from_secs(180))?;
    if got.code != Some(0) {
        return Err(Error::Report {
            what: "mcrgen recv".into(),
            reason: format!("not every packet crossed: {:?}", got.report.problems),
            stdout: String::new(),
            stderr: got.stderr,
        });
    }
    Ok(got)
}
