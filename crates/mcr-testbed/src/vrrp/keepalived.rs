//! A keepalived running one VRRP instance in a test bed's namespace, and
//! what its notify script did.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcr_sys::process::send_signal;

use super::VrrpConfig;
use crate::{Error, Finished, Ns, Proc, Result, Signal};

/// How long keepalived gets to start, and its processes to end.
const PATIENCE: Duration = Duration::from_secs(15);

/// keepalived (VRRP only) with its own configuration, pid files and notify
/// fifo, all in one directory. Dropping it kills it as
/// [`Keepalived::kill`] does.
///
/// keepalived is two processes: the parent, started here, and the VRRP
/// process it forks (which it starts again if it dies). The VRRP process
/// runs the notify script, whose record of what it did
/// ([`Keepalived::transitions`]) stands for the instance's state.
#[derive(Debug)]
pub struct Keepalived {
    proc: Option<Proc>,
    finished: Option<Finished>,
    pid: u32,
    vrrp_pid: u32,
    files: Files,
}

/// One line of the notify script's record (`MCR_VRRP_LOG`): an event it
/// acted on and the role it set.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// When the script finished acting, in seconds since the Unix epoch.
    pub at_unix_s: f64,
    /// `INSTANCE` or `GROUP` (`keepalived` when the VRRP process died).
    pub kind: String,
    /// The instance's or group's name (`vrrp-process` when it died).
    pub name: String,
    /// The state keepalived reported: `MASTER`, `BACKUP`, `FAULT`, `STOP`,
    /// `DELETED` (`EOF` when the VRRP process died without a `STOP`).
    pub state: String,
    /// The role it asked mcrd for: `active` or `standby`.
    pub role: String,
    /// Whether `mcrctl` succeeded (within its retries).
    pub ok: bool,
}

/// The files of one keepalived, named after its namespace.
#[derive(Debug, Clone)]
struct Files {
    conf: PathBuf,
    pid: PathBuf,
    vrrp_pid: PathBuf,
    checkers_pid: PathBuf,
    fifo: PathBuf,
    transitions: PathBuf,
    script: PathBuf,
}

impl Files {
    fn new(dir: &Path, ns: &Ns) -> Files {
        let f = |ext: &str| dir.join(format!("{}.{ext}", ns.name()));
        Files {
            conf: f("keepalived.conf"),
            pid: f("keepalived.pid"),
            vrrp_pid: f("vrrp.pid"),
            checkers_pid: f("checkers.pid"),
            fifo: f("notify.fifo"),
            transitions: f("transitions"),
            script: f("mcr-vrrp-notify"),
        }
    }
}

impl Keepalived {
    /// Starts `keepalived -n -l -G -P` in `ns` with `conf`, its files in
    /// `dir` (named after the namespace, so one directory serves a pair),
    /// and waits until its VRRP process runs. Pid files and a fifo left by
    /// a keepalived that was killed there are removed first.
    ///
    /// The notify script is copied into `dir`: keepalived runs no script
    /// from a path that anyone but root may write, and a checkout may be
    /// anyone's. `dir` must therefore be root's and not group- or
    /// world-writable (as a [`crate::TempDir`] made by root is).
    pub fn start(ns: &Ns, dir: &Path, conf: &VrrpConfig) -> Result<Keepalived> {
        Keepalived::start_with_env(ns, dir, conf, &[])
    }

    /// [`Keepalived::start`] with these environment variables set for
    /// keepalived, which passes them on to the notify script (`MCRCTL`, a
    /// stand-in for mcrctl, say). `MCR_VRRP_LOG` is set to the record that
    /// [`Keepalived::transitions`] reads.
    pub fn start_with_env(ns: &Ns, dir: &Path, conf: &VrrpConfig, env: &[(&str, &str)]) -> Result<Keepalived> {
        if !on_path("keepalived") {
            return Err(Error::Io {
                what: "find keepalived (apt-get install keepalived, or run scripts/deps)".into(),
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        let files = Files::new(dir, ns);
        for stale in [&files.pid, &files.vrrp_pid, &files.checkers_pid, &files.fifo] {
            match std::fs::remove_file(stale) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io(format!("remove {}", stale.display()), e));
                }
                _ => {}
            }
        }
        write_file(&files.transitions, "")?;
        std::fs::copy(&conf.notify_script, &files.script).map_err(|e| {
            io(
                format!("copy {} to {}", conf.notify_script.display(), files.script.display()),
                e,
            )
        })?;
        let ours = VrrpConfig {
            notify_script: files.script.clone(),
            ..conf.clone()
        };
        write_file(&files.conf, &ours.render(&files.fifo))?;

        let mut cmd = ns.command("keepalived");
        cmd.args(["-n", "-l", "-G", "-P", "-f"])
            .arg(&files.conf)
            .arg("-p")
            .arg(&files.pid)
            .arg("-r")
            .arg(&files.vrrp_pid)
            .arg("-c")
            .arg(&files.checkers_pid);
        cmd.env("MCR_VRRP_LOG", &files.transitions);
        cmd.envs(env.iter().copied());
        let mut proc = ns.spawn(cmd)?;
        let pid = proc.pid();
        // The VRRP process logs this once it runs its instances.
        proc.wait_for_stderr("Startup complete", PATIENCE)?;
        let start = Instant::now();
        let vrrp_pid = loop {
            if let Some(v) = read_pid(&files.vrrp_pid).filter(|&v| parent_of(v) == Some(pid)) {
                break v;
            }
            if start.elapsed() > PATIENCE || proc.try_status()?.is_some() {
                return Err(Error::Timeout {
                    what: "keepalived".into(),
                    awaited: format!("write its VRRP process's pid to {}", files.vrrp_pid.display()),
                    seconds: start.elapsed().as_secs_f64(),
                    stderr: proc.stderr_so_far(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Ok(Keepalived {
            proc: Some(proc),
            finished: None,
            pid,
            vrrp_pid,
            files,
        })
    }

    /// The parent process's id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The id of the VRRP process it started with.
    pub fn vrrp_pid(&self) -> u32 {
        self.vrrp_pid
    }

    /// The configuration file it runs.
    pub fn conf_path(&self) -> &Path {
        &self.files.conf
    }

    /// What keepalived has logged (both processes log to its stderr).
    pub fn log(&self) -> String {
        match (&self.proc, &self.finished) {
            (Some(p), _) => p.stderr_so_far(),
            (None, Some(f)) => f.stderr.clone(),
            (None, None) => String::new(),
        }
    }

    /// Stops keepalived as its service would be stopped (SIGTERM), and
    /// waits until it and every process it had started are gone. The
    /// instance goes to STOP on the way (its notify script sets standby).
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut proc) = self.proc.take() else {
            return Ok(());
        };
        let family = descendants(self.pid);
        proc.signal(Signal::Term)?;
        self.finished = Some(proc.finish(PATIENCE)?);
        wait_gone("keepalived's processes", &family)
    }

    /// Kills keepalived outright, as a crash would: SIGKILL to the parent
    /// and to its VRRP process (the one its pid file names, if the parent
    /// is still its parent), the parent stopped first so that it cannot
    /// start another. Returns once both are gone. Nothing sends a last
    /// advert or a STOP; the notify script sees the fifo close.
    pub fn kill(&mut self) -> Result<()> {
        let Some(mut proc) = self.proc.take() else {
            return Ok(());
        };
        proc.signal(Signal::Stop)?;
        let mut gone = Vec::new();
        if let Some(v) = read_pid(&self.files.vrrp_pid).filter(|&v| parent_of(v) == Some(self.pid)) {
            gone.extend(identify(v));
            send_signal(v, Signal::Kill).map_err(|e| io(format!("SIGKILL keepalived's VRRP process {v}"), e))?;
        }
        proc.signal(Signal::Kill)?;
        self.finished = Some(proc.finish(PATIENCE)?);
        wait_gone("keepalived's VRRP process", &gone)
    }

    /// Whether the parent still runs.
    pub fn running(&mut self) -> bool {
        match &mut self.proc {
            Some(p) => matches!(p.try_status(), Ok(None)),
            None => false,
        }
    }

    /// Everything the notify script has recorded since this keepalived
    /// started, oldest first.
    pub fn transitions(&self) -> Vec<Transition> {
        std::fs::read_to_string(&self.files.transitions)
            .unwrap_or_default()
            .lines()
            .filter_map(parse_transition)
            .collect()
    }

    /// The state of the last event the notify script acted on (`MASTER`,
    /// `BACKUP`, ...), if any yet.
    pub fn state(&self) -> Option<String> {
        self.transitions().pop().map(|t| t.state)
    }

    /// Waits up to `timeout` until `done` holds for the transitions, and
    /// returns them; `what` says what was awaited, for the error.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[Transition]) -> bool,
    ) -> Result<Vec<Transition>> {
        let start = Instant::now();
        loop {
            let t = self.transitions();
            if done(&t) {
                return Ok(t);
            }
            if start.elapsed() > timeout {
                return Err(Error::Timeout {
                    what: format!("keepalived in {}", self.files.conf.display()),
                    awaited: format!("{what} (transitions: {t:?})"),
                    seconds: start.elapsed().as_secs_f64(),
                    stderr: self.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Keepalived {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

fn parse_transition(line: &str) -> Option<Transition> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [at, kind, name, state, role, result] = f[..] else {
        return None;
    };
    Some(Transition {
        at_unix_s: at.parse().ok()?,
        kind: kind.into(),
        name: name.into(),
        state: state.into(),
        role: role.into(),
        ok: result == "ok",
    })
}

fn io(what: String, source: std::io::Error) -> Error {
    Error::Io { what, source }
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| io(format!("write {}", path.display()), e))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The fields of `/proc/PID/stat` after the command name (which may hold
/// spaces and parentheses): state, parent, ...
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(String::from).collect())
}

fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// A process as (pid, start time), so that a reused pid is not taken for it.
fn identify(pid: u32) -> Option<(u32, u64)> {
    let start = stat_fields(pid)?.get(22 - 3)?.parse().ok()?;
    Some((pid, start))
}

/// Whether the process runs yet: it exists, is the same one, and is not a
/// zombie (which runs no more; its parent may reap it late).
fn runs(&(pid, start): &(u32, u64)) -> bool {
    stat_fields(pid)
        .is_some_and(|f| f.first().is_some_and(|s| s != "Z" && s != "X") && identify(pid) == Some((pid, start)))
}

/// `root` and every process below it.
fn descendants(root: u32) -> Vec<(u32, u64)> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
            if let Some(parent) = parent_of(pid) {
                children.entry(parent).or_default().push(pid);
            }
        }
    }
    let mut all = vec![root];
    let mut i = 0;
    while let Some(&p) = all.get(i) {
        all.extend(children.get(&p).into_iter().flatten());
        i += 1;
    }
    all.into_iter().filter_map(identify).collect()
}

fn wait_gone(what: &str, procs: &[(u32, u64)]) -> Result<()> {
    let start = Instant::now();
    loop {
        let left: Vec<u32> = procs.iter().filter(|p| runs(p)).map(|p| p.0).collect();
        if left.is_empty() {
            return Ok(());
        }
        if start.elapsed() > PATIENCE {
            return Err(Error::Timeout {
                what: what.into(),
                awaited: format!("end (still running: {left:?})"),
                seconds: start.elapsed().as_secs_f64(),
                stderr: String::new(),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_line_reads_back() {
        let t = parse_transition("1795701470.179282045 INSTANCE MCR BACKUP standby ok").expect("parses");
        assert_eq!(t.kind, "INSTANCE");
        assert_eq!(t.name, "MCR");
        assert_eq!(t.state, "BACKUP");
        assert_eq!(t.role, "standby");
        assert!(t.ok);
        assert!((t.at_unix_s - 1_795_701_470.179).abs() < 0.01);
        let failed = parse_transition("1.5 keepalived vrrp-process EOF standby failed").expect("parses");
        assert!(!failed.ok);
        assert_eq!(parse_transition("1.5 INSTANCE MCR"), None);
    }

    #[test]
    fn descendants_include_the_root_and_its_children() {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "sleep 60 & wait"]);
        let p = Proc::spawn(cmd).expect("spawn");
        let start = Instant::now();
        let family = loop {
            let f = descendants(p.pid());
            if f.len() >= 2 || start.elapsed() > Duration::from_secs(10) {
                break f;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(family.len(), 2, "{family:?}");
        assert_eq!(family[0].0, p.pid());
        assert!(family.iter().all(runs));
        let sleeper = family[1];
        send_signal(sleeper.0, Signal::Kill).expect("kill");
        wait_gone("sleep", &[sleeper]).expect("gone");
    }
}
