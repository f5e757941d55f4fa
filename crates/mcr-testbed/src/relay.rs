//! Running `mcrd` inside a test bed's namespace and talking to it with
//! `mcrctl`.

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use mcr_core::control::{Reply, Response, RuleStatus, StatsReport, WorkerStatus};

use crate::{Error, Finished, Ns, Proc, Result, Signal, bin, command};

/// A running `mcrd` with a control socket of its own.
#[derive(Debug)]
pub struct Relay {
    proc: Proc,
    socket: SocketFile,
    /// Where its `mcrd` and `mcrctl` are, if not with the workspace's.
    bin_dir: Option<PathBuf>,
}

/// A relay's control socket, removed with it however it ends (stopped, or
/// killed when a test fails), so that none is left in /tmp.
#[derive(Debug)]
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl std::ops::Deref for SocketFile {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

/// What `mcrctl` did: its exit code and output.
#[derive(Debug, Clone)]
pub struct CtlOutput {
    /// The exit code.
    pub code: Option<i32>,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

impl From<Output> for CtlOutput {
    fn from(o: Output) -> Self {
        CtlOutput {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Relay {
    /// Starts `mcrd ARGS...` in `ns` with a control socket unique to this
    /// relay, and waits until it answers.
    pub fn start(ns: &Ns, args: &[&str]) -> Result<Relay> {
        Relay::start_with_env(ns, args, &[])
    }

    /// [`Relay::start`] with these environment variables set for `mcrd`.
    pub fn start_with_env(ns: &Ns, args: &[&str], env: &[(&str, &str)]) -> Result<Relay> {
        Relay::start_wrapped(ns, &[], args, env)
    }

    /// [`Relay::start_with_env`] with `mcrd` run by `wrapper` (a program and
    /// its arguments, e.g. `setpriv` to start it as another user).
    pub fn start_wrapped(ns: &Ns, wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> Result<Relay> {
        Relay::launch(ns, wrapper, args, env, None)
    }

    /// [`Relay::start`] with the `mcrd` and `mcrctl` of `dir` (another
    /// build, to compare with this one).
    pub fn start_from(dir: &std::path::Path, ns: &Ns, args: &[&str]) -> Result<Relay> {
        Relay::launch(ns, &[], args, &[], Some(dir.to_path_buf()))
    }

    fn program(bin_dir: Option<&std::path::Path>, name: &str) -> Result<PathBuf> {
        match bin_dir {
            Some(d) if d.join(name).is_file() => Ok(d.join(name)),
            Some(d) => Err(Error::MissingBinary {
                name: name.to_string(),
                path: d.join(name).display().to_string(),
            }),
            None => bin(name),
        }
    }

    fn launch(
        ns: &Ns,
        wrapper: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
        bin_dir: Option<PathBuf>,
    ) -> Result<Relay> {
        let socket = PathBuf::from(format!("/tmp/{}.sock", ns.name()));
        let mcrd = Relay::program(bin_dir.as_deref(), "mcrd")?;
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = ns.command(program);
                c.args(rest).arg(&mcrd);
                c
            }
            None => ns.command(&mcrd),
        };
        cmd.arg("--control-socket").arg(&socket).args(args);
        cmd.envs(env.iter().copied());
        let mut relay = Relay {
            proc: ns.spawn(cmd)?,
            socket: SocketFile(socket),
            bin_dir,
        };
        // Ready as mcrd means it: it answers its control socket only once
        // every worker runs the initial table, rings open and filters
        // attached (as it tells systemd READY=1). Nothing more is waited
        // for, so the tests see what a user who sends at once sees.
        let start = Instant::now();
        loop {
            if relay.ctl(&["version"])?.code == Some(0) {
                return Ok(relay);
            }
            if relay.proc.try_status()?.is_some() || start.elapsed() > Duration::from_secs(30) {
                return Err(Error::Timeout {
                    what: "mcrd".into(),
                    awaited: "answer on its control socket".into(),
                    seconds: start.elapsed().as_secs_f64(),
                    stderr: relay.proc.stderr_so_far(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The control socket's path.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// What the daemon has logged so far (as far as the reader of its
    /// stderr has caught up: a line it wrote just now may not be here yet;
    /// [`Relay::wait_for_log`] waits for one).
    pub fn log(&self) -> String {
        self.proc.stderr_so_far()
    }

    /// The daemon's log once it holds `needle`, or as it is after 30 s (its
    /// stderr is collected by a thread, so a line may show up a little
    /// after the fact): for a test to assert on, with the whole log to show.
    pub fn log_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.log();
            if log.contains(needle) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `timeout` for the daemon's log to contain `needle`.
    pub fn wait_for_log(&mut self, needle: &str, timeout: std::time::Duration) -> Result<()> {
        self.proc.wait_for_stderr(needle, timeout)
    }

    /// Runs `mcrctl --socket SOCKET ARGS...` (from the host: the socket is
    /// a file) and returns what it did.
    pub fn ctl(&self, args: &[&str]) -> Result<CtlOutput> {
        let mut cmd = std::process::Command::new(Relay::program(self.bin_dir.as_deref(), "mcrctl")?);
        cmd.arg("--socket").arg(&*self.socket).args(args);
        let out = cmd.output().map_err(|source| Error::Spawn {
            program: command::describe(&cmd),
            source,
        })?;
        Ok(out.into())
    }

    /// Runs `mcrctl`, which must succeed; returns its stdout.
    pub fn ctl_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.ctl(args)?;
        if out.code != Some(0) {
            return Err(Error::Command {
                command: format!("mcrctl {}", args.join(" ")),
                status: format!("{:?}", out.code),
                stderr: format!("{}\n--- mcrd log:\n{}", out.stderr, self.log()),
            });
        }
        Ok(out.stdout)
    }

    /// `mcrctl add NAME --input INPUT --output OUTPUT...`, which must
    /// succeed; returns its stdout.
    pub fn add_rule(&self, name: &str, input: &str, outputs: &[&str]) -> Result<String> {
        let mut args = vec!["add", name, "--input", input];
        for o in outputs {
            args.push("--output");
            args.push(o);
        }
        self.ctl_ok(&args)
    }

    /// Runs `mcrctl --json ARGS...`, which must succeed, and returns the
    /// daemon's reply.
    pub fn ask(&self, args: &[&str]) -> Result<Reply> {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.ctl_ok(&full)?;
        let r: Response = serde_json::from_str(out.trim()).map_err(|e| Error::Report {
            what: "mcrctl --json".into(),
            reason: e.to_string(),
            stdout: out.clone(),
            stderr: String::new(),
        })?;
        Ok(r.reply)
    }

    /// `mcrctl stats`, as the daemon answered it.
    pub fn stats(&self) -> Result<StatsReport> {
        match self.ask(&["stats"])? {
            Reply::Stats(s) => Ok(*s),
            other => Err(self.unexpected("stats", &other)),
        }
    }

    /// `mcrctl workers`.
    pub fn workers(&self) -> Result<Vec<WorkerStatus>> {
        match self.ask(&["workers"])? {
            Reply::Workers { workers } => Ok(workers),
            other => Err(self.unexpected("workers", &other)),
        }
    }

    /// `mcrctl list`: every rule and how it stands.
    pub fn rules(&self) -> Result<Vec<RuleStatus>> {
        match self.ask(&["list"])? {
            Reply::Rules { rules, .. } => Ok(rules),
            other => Err(self.unexpected("list", &other)),
        }
    }

    /// The rules as `list` gives them, without their state.
    pub fn rule_list(&self) -> Result<Vec<mcr_core::rule::Rule>> {
        Ok(self.rules()?.into_iter().map(|r| r.rule).collect())
    }

    fn unexpected(&self, what: &str, reply: &Reply) -> Error {
        Error::Report {
            what: format!("mcrctl {what}"),
            reason: format!("another reply: {reply:?}"),
            stdout: String::new(),
            stderr: self.log(),
        }
    }

    /// Sends the daemon `signal` (`Hup` to reload its config file).
    pub fn signal(&mut self, signal: Signal) -> Result<()> {
        self.proc.signal(signal)
    }

    /// Stops the daemon with SIGTERM and returns what it printed (its final
    /// totals on stdout).
    pub fn stop(self) -> Result<Finished> {
        // (The socket file goes when the rest of `self` does.)
        self.proc.stop(Signal::Term, Duration::from_secs(30))
    }
}
