//! `mcrctl restart [--binary PATH]`: the running mcrd hands everything to a
//! new program without systemd's help, as nginx and HAProxy hand over to
//! a new binary. The program is checked first (it must run and say its
//! version); then the workers stop and this process executes the program
//! in its own place, keeping its PID, with the descriptors that must
//! outlive it left open ([`super::handover`]), the workers' receive rings
//! among them. The eBPF data path forwards throughout, and the new process
//! switches it to its own program once its maps hold its whole table; on
//! the workers' path, frames that arrive meanwhile wait in the rings, and
//! the new workers read on where the last stopped.

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mcr_core::control::{ControlError, ErrorKind, Reply};
use mcr_core::plane::machine::Level;
use tokio::sync::mpsc;

use super::workers::WorkerEvent;
use super::{Supervisor, notify};

/// How long the new program may take to say its version.
const CHECK_LIMIT: Duration = Duration::from_secs(10);
/// How long workers may take to finish before they are killed.
const STOP_LIMIT: Duration = Duration::from_secs(2);

/// This process's own program, as a file name: the kernel says
/// "PATH (deleted)" once a package upgrade has replaced the file, and the
/// new file at PATH is the one to run.
fn own_program() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let s = exe.to_string_lossy();
    Ok(match s.strip_suffix(" (deleted)") {
        Some(p) => PathBuf::from(p),
        None => exe,
    })
}

/// Runs `binary --version`: the program exists, runs here, and is an
/// mcrd. Returns what it said.
fn check(binary: &Path) -> Result<String, String> {
    let mut child = std::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    let deadline = std::time::Instant::now() + CHECK_LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} --version did not finish within {CHECK_LIMIT:?}",
                    binary.display()
                ));
            }
            Err(e) => return Err(format!("{} --version: {e}", binary.display())),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{} --version: {e}", binary.display()))?;
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !said.starts_with("mcrd ") {
        return Err(format!(
            "{} is not an mcrd: `--version` said {:?}{}",
            binary.display(),
            said,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(said)
}

impl Supervisor {
    /// The answer to `restart`: the program checked, and this process
    /// marked to run it once the answer is on its way.
    pub(super) fn ask_restart(&mut self, binary: Option<PathBuf>) -> Reply {
        let refuse = |m: String| Reply::Error {
            error: ControlError::new(ErrorKind::InvalidRequest, m),
        };
        let binary = match binary {
            Some(b) if b.is_absolute() => b,
            Some(b) => return refuse(format!("--binary {}: give an absolute path", b.display())),
            None => match own_program() {
                Ok(p) => p,
                Err(e) => return refuse(format!("cannot find this mcrd's own program: {e}")),
            },
        };
        if let Err(why) = self.can_keep_the_datapath() {
            return refuse(format!("restart refused, nothing changed: {why}"));
        }
        match check(&binary) {
            Ok(version) => {
                self.journal.note(
                    Level::Info,
                    format!("restart: handing over to {} ({version})", binary.display()),
                );
                self.continuity.ask_restart(binary.clone());
                Reply::Restarting {
                    binary,
                    version,
                    pid: std::process::id(),
                }
            }
            Err(why) => refuse(format!("restart refused, nothing changed: {why}")),
        }
    }

    /// A program run in this process's place has the capabilities this
    /// process has in its ambient set (or all of them, as root): without
    /// CAP_BPF it could not load the eBPF data path, and the streams on it
    /// would stop.
    fn can_keep_the_datapath(&self) -> Result<(), String> {
        const CAP_BPF: u32 = 39;
        if self.kernel.is_none() || mcr_sys::process::effective_uid() == 0 {
            return Ok(());
        }
        let ambient = mcr_sys::privilege::caps_of(std::process::id())
            .map_err(|e| format!("cannot read this process's capabilities: {e}"))?
            .3;
        if ambient & (1 << CAP_BPF) == 0 {
            return Err(
                "this mcrd gave up CAP_BPF when it became an unprivileged user (--user), so a program run in its place could not load the eBPF data path and the streams on it would stop; under systemd, `systemctl restart mcrd` keeps it (the unit's ambient capabilities); otherwise stop mcrd and start it again as root"
                    .into(),
            );
        }
        Ok(())
    }

    /// Stops the workers, then runs the program `restart` was asked for in
    /// this process's place, with `control` and what must outlive the
    /// process left open. Returns only if that failed; then the workers
    /// start again (as after any exit) and mcrd serves on.
    pub(super) async fn restart_in_place(
        &mut self,
        control: BorrowedFd<'_>,
        events: &mut mpsc::UnboundedReceiver<WorkerEvent>,
    ) {
        let Some(binary) = self.continuity.take_restart() else {
            return;
        };
        // The answer to `restart` is on its way to the client: let its
        // connection write it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        notify::reloading();
        let deferred = self.stop_workers_for_restart(events).await;
        let mut cmd = std::process::Command::new(&binary);
        cmd.args(std::env::args_os().skip(1));
        let counts = super::stats::Counters::of(&self.counters, self.kernel.as_ref());
        let others = super::components_held(self.kernel.as_ref(), &self.members, &self.ports);
        let fds: Vec<(String, BorrowedFd<'_>)> = (self.continuity.outliving(others, counts))
            .into_iter()
            .map(|(name, _, fd)| (name, fd))
            .chain(self.workers.iter().flat_map(super::workers::WorkerSlot::kept_rings))
            .chain(std::iter::once(("control".to_string(), control)))
            .collect();
        tracing::info!(
            "restart: running {} in this process's place with {} descriptor(s)",
            binary.display(),
            fds.len()
        );
        let e = mcr_sys::handover::exec_with(&mut cmd, &fds);
        drop(fds);
        self.journal.note(
            Level::Error,
            format!(
                "restart: could not run {}: {e}; this mcrd serves on and starts its workers again",
                binary.display()
            ),
        );
        notify::ready("restart failed; serving on");
        for ev in deferred {
            self.on_worker(ev);
        }
    }

    /// Asks every worker to finish, waits for each to exit (killing what
    /// is left after [`STOP_LIMIT`]), and tells the plane. Returns the
    /// events that would start them again, held back for the case that
    /// this process goes on.
    async fn stop_workers_for_restart(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<WorkerEvent>,
    ) -> Vec<WorkerEvent> {
        let mut deferred = Vec::new();
        for w in self.workers.iter_mut() {
            w.ask_to_stop();
        }
        let deadline = tokio::time::Instant::now() + STOP_LIMIT;
        let mut killed = false;
        while self.workers.iter().any(|w| w.pid.is_some()) {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(ev @ WorkerEvent::RestartDue { .. })) => deferred.push(ev),
                Ok(Some(ev)) => self.on_worker(ev),
                Ok(None) => break,
                Err(_) if !killed => {
                    for w in self.workers.iter().filter(|w| w.pid.is_some()) {
                        tracing::warn!("restart: worker {} did not finish in time; killing it", w.index);
                        w.kill();
                    }
                    killed = true;
                }
                Err(_) => {
                    // Killed and still not reaped: wait for each a little more.
                    match tokio::time::timeout(STOP_LIMIT, events.recv()).await {
                        Ok(Some(ev @ WorkerEvent::RestartDue { .. })) => deferred.push(ev),
                        Ok(Some(ev)) => self.on_worker(ev),
                        _ => break,
                    }
                }
            }
        }
        deferred
    }
}
