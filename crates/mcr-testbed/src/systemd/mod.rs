//! systemd as PID 1 of a container whose network is a test bed's
//! namespace, for tests of a service under a real service manager:
//! `systemctl restart`, a crash that `Restart=` answers, `systemctl stop`,
//! the file-descriptor store.
//!
//! [`Systemd::boot`] starts, for namespace `NS` and the test's directory
//! `DIR`, in a cgroup of its own (below):
//!
//! ```text
//! SYSTEMD_SECCOMP=0 systemd-nspawn --quiet --directory=/ --volatile=yes
//!     --register=no --keep-unit --boot --machine=mcrtb-PID-START-SEQ
//!     --network-namespace-path=/run/netns/NS --console=pipe
//!     --link-journal=no --capability=all
//!     --bind=DIR --bind-ro=BIN_DIR --bind-ro=DIR/MACHINE.machine-id:/etc/machine-id
//!     -- systemd.firstboot=off systemd.mask=systemd-machine-id-commit.service
//!        systemd.mask=systemd-sysctl.service
//! ```
//!
//! - The container's root is an empty tmpfs with the host's `/usr` mounted
//!   read-only (`--volatile=yes`): every program the host has is there,
//!   nothing written inside reaches the host, and `/etc` and `/var` start
//!   empty, so none of the services the host has enabled starts.
//! - Its network is the test's namespace: a service sees the namespace's
//!   links and addresses, and the test's traffic reaches it.
//! - `DIR` (the test's [`TempDir`]) and the workspace's binaries (the
//!   directory [`crate::bin`] looks in) are at the same paths inside, `DIR`
//!   writable: configurations, control sockets and logs are exchanged there.
//! - A machine ID of its own in `/etc/machine-id` tells systemd that this is
//!   not its first boot: no first-boot wizard, and no preset-all (which
//!   would enable in the empty `/etc` every service the host has
//!   installed: etcd, keepalived, PostgreSQL... in the test's namespace).
//!   Masked: `systemd-machine-id-commit` (it would try to write that file
//!   and fail) and `systemd-sysctl` (it would apply `/usr/lib/sysctl.d` to
//!   the test's namespace: `rp_filter=2` on every link, among others).
//! - `--capability=all` and `SYSTEMD_SECCOMP=0` (nspawn's own system-call
//!   filter refuses `bpf(2)` whatever the capabilities) give the
//!   container's root what the test's root has, so mcrd can load its eBPF
//!   data path. A unit's own `CapabilityBoundingSet=`, `SystemCallFilter=`
//!   and the like still apply inside.
//! - nspawn starts in a cgroup named after the container, below the test's
//!   own, in the unified hierarchy and (on a hybrid host) the v1
//!   `name=systemd` one. With `--keep-unit` it puts the container under the
//!   cgroup it runs in: containers started from one cgroup would share a
//!   tree, and each one's systemd would stop, kill and remove the other's
//!   units as its own.
//!
//! The container has a PID namespace of its own, where systemd is PID 1.
//! Every PID this module takes or returns is the host's (the test's):
//! [`Systemd::main_pid`] maps a unit's `MainPID` out of the container.
//! Commands run inside through `nsenter --all` (with `--register=no`, there
//! is no `machinectl`).
//!
//! Dropping a [`Systemd`] powers the container off (SIGTERM to nspawn,
//! which halts systemd), kills its PID 1 if that takes longer than 10 s (the
//! kernel then ends every process of its PID namespace), and waits until
//! they are all gone; also while a test panics. A run killed outright
//! leaves its container in its test bed's namespace, where the next
//! [`crate::Testbed::new`] kills it.

mod cgroup;
mod nspawn;
mod pids;

use std::ffi::OsStr;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use mcr_sys::process::{PidFd, kill_with_parent};

use crate::{Error, Ns, Proc, Result, Signal, TempDir, command};

/// How long booting may take, on a loaded machine too (it takes well under
/// a second).
const BOOT_PATIENCE: Duration = Duration::from_secs(60);
/// How long powering off may take before the container is killed.
const HALT_PATIENCE: Duration = Duration::from_secs(10);
/// The search path of commands run inside.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// systemd running as PID 1 of a container in a test bed's namespace.
/// Dropping it powers the container off and waits until every process of
/// it is gone.
#[derive(Debug)]
pub struct Systemd {
    machine: String,
    nspawn: Option<Proc>,
    /// The host PID of the container's PID 1 (0 until it is known).
    leader: u32,
    /// The inode of the container's PID namespace.
    pidns: Option<u64>,
    machine_id: PathBuf,
    cgroup: Option<cgroup::Cgroup>,
}

impl Systemd {
    /// Boots systemd in a container whose network namespace is `ns`, with
    /// `dir` shared at the same path (see the module's documentation), and
    /// returns once `systemctl is-system-running` says `running` (or
    /// `degraded`, after printing the failed units). nspawn is killed if the
    /// thread that booted it ends (see [`Ns::command`]), so boot from the
    /// test's own thread. Drop it before `dir` and the test bed.
    pub fn boot(ns: &Ns, dir: &TempDir) -> Result<Systemd> {
        let start = Instant::now();
        nspawn::reap_stale();
        cgroup::reap_stale(nspawn::is_stale);
        let bins = crate::bins::bin_dir()?;
        let machine = nspawn::new_machine_name()?;
        let machine_id = dir.path().join(format!("{machine}.machine-id"));
        let mut sd = Systemd {
            machine,
            nspawn: None,
            leader: 0,
            pidns: None,
            machine_id,
            cgroup: None,
        };
        // From here on, dropping `sd` removes whatever was made.
        fs::write(&sd.machine_id, format!("{}\n", nspawn::new_machine_id())).map_err(|source| Error::Io {
            what: format!("write the machine ID of container {}", sd.machine),
            source,
        })?;
        let cgroup = sd.cgroup.insert(cgroup::Cgroup::create(&sd.machine)?);
        // The binaries are under /usr when installed: there already.
        let binds_ro = if bins.is_dir() && !bins.starts_with("/usr") {
            vec![bins.as_path()]
        } else {
            Vec::new()
        };
        let mut cmd = nspawn::command(
            &sd.machine,
            ns,
            &cgroup.procs_files(),
            &[dir.path()],
            &binds_ro,
            &sd.machine_id,
        );
        kill_with_parent(&mut cmd);
        sd.nspawn = Some(Proc::spawn(cmd)?);
        sd.find_leader(start)?;
        sd.wait_running(start)?;
        Ok(sd)
    }

    /// The container's name (also its host name), `mcrtb-PID-START-SEQ`.
    pub fn machine(&self) -> &str {
        &self.machine
    }

    /// The host PID of the container's PID 1, systemd.
    pub fn leader_pid(&self) -> u32 {
        self.leader
    }

    /// The container's file tree as the host sees it
    /// (`/proc/LEADER/root`): `root().join("run/mcr")` is its `/run/mcr`.
    pub fn root(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.leader))
    }

    /// A command that will run `program` inside the container (all its
    /// namespaces, through `nsenter`, which waits for it), with a plain
    /// `PATH` and no other environment. It is killed if the thread that
    /// spawns it ends, and ends with the container.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--target={}", self.leader))
            .arg("--all")
            .arg(program)
            .env_clear()
            .env("PATH", PATH);
        kill_with_parent(&mut cmd);
        cmd
    }

    /// Runs `program args...` inside the container to completion and
    /// returns its stdout; a non-zero exit is an error carrying its stderr.
    pub fn exec<I, S>(&self, program: &str, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        command::run(self.command(program).args(args))
    }

    /// `systemctl ARGS...` inside the container; its stdout.
    pub fn systemctl(&self, args: &[&str]) -> Result<String> {
        self.exec("systemctl", args)
    }

    /// Writes unit `name` (or a drop-in, `mcrd.service.d/test.conf`) into
    /// the container's `/etc/systemd/system` and reloads systemd.
    pub fn install_unit(&self, name: &str, text: &str) -> Result<()> {
        let io = |source| Error::Io {
            what: format!("install unit {name} in container {}", self.machine),
            source,
        };
        if name.starts_with('/') || name.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a unit's name is a relative path without `.` or `..`",
            )));
        }
        let path = self.root().join("etc/systemd/system").join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io)?;
        }
        fs::write(&path, text).map_err(io)?;
        self.systemctl(&["daemon-reload"]).map(|_| ())
    }

    /// The host PID of `unit`'s main process, or `None` if it has none
    /// (stopped, or between a crash and its restart). Signal it from the
    /// host as any other process, or use [`Systemd::kill_main`].
    pub fn main_pid(&self, unit: &str) -> Result<Option<u32>> {
        Ok(self.main_pids(unit)?.map(|(_, host)| host))
    }

    /// Sends `signal` to `unit`'s main process from the host (as a crash or
    /// an operator's `kill` would; systemd learns of it only from the
    /// process's end) and returns the host PID it went to.
    pub fn kill_main(&self, unit: &str, signal: Signal) -> Result<u32> {
        let io = |source| Error::Io {
            what: format!(
                "send {signal:?} to the main process of {unit} in container {}",
                self.machine
            ),
            source,
        };
        let (inner, host) = self
            .main_pids(unit)?
            .ok_or_else(|| io(std::io::Error::other("it has no main process")))?;
        let pidfd = PidFd::open(host).map_err(io)?;
        // The PID could have been reused between the lookup and the open.
        if self.host_pid(inner) != Some(host) {
            return Err(io(std::io::Error::other("its main process ended meanwhile")));
        }
        pidfd.signal(signal).map_err(io)?;
        Ok(host)
    }

    /// Waits until `unit` is active with a main process other than `old`
    /// (the host PID of one that was killed or restarted, if any), and
    /// returns that process's host PID. A unit that fails (`Restart=` gave
    /// up, or there is none) is an error carrying its journal.
    pub fn wait_active(&self, unit: &str, old: Option<u32>, timeout: Duration) -> Result<u32> {
        let start = Instant::now();
        loop {
            let show = self.systemctl(&["show", "--property=ActiveState", "--property=MainPID", unit])?;
            let state = property(&show, "ActiveState").unwrap_or_default();
            let inner = property(&show, "MainPID").and_then(|p| p.parse().ok()).unwrap_or(0);
            if state == "active" && inner != 0 {
                match self.host_pid(inner) {
                    Some(host) if Some(host) != old => return Ok(host),
                    _ => {}
                }
            }
            if state == "failed" || start.elapsed() > timeout {
                return Err(Error::Timeout {
                    what: format!("{unit} in container {}", self.machine),
                    awaited: match old {
                        Some(pid) => format!("become active with a main process other than {pid} (it is {state})"),
                        None => format!("become active (it is {state})"),
                    },
                    seconds: start.elapsed().as_secs_f64(),
                    stderr: self.journal(unit),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The last lines of `unit`'s journal, for a failure's message (or why
    /// it could not be read).
    pub fn journal(&self, unit: &str) -> String {
        let args = ["--unit", unit, "--no-pager", "--output=short-monotonic", "--lines=200"];
        self.exec("journalctl", args)
            .unwrap_or_else(|e| format!("(the journal of {unit} could not be read: {e})"))
    }

    /// The main process of `unit`: its PID inside the container and on the
    /// host.
    fn main_pids(&self, unit: &str) -> Result<Option<(u32, u32)>> {
        let value = self.systemctl(&["show", "--property=MainPID", "--value", unit])?;
        let inner: u32 = value.trim().parse().map_err(|e| Error::Report {
            what: format!("systemctl show --property=MainPID {unit}"),
            reason: format!("not a PID: {e}"),
            stdout: value.clone(),
            stderr: String::new(),
        })?;
        if inner == 0 {
            return Ok(None);
        }
        Ok(self.host_pid(inner).map(|host| (inner, host)))
    }

    /// The host PID of the container's process `inner`.
    fn host_pid(&self, inner: u32) -> Option<u32> {
        pids::host_pid(self.pidns?, inner)
    }

    /// Every process of the container (host PIDs).
    fn processes(&self) -> Vec<u32> {
        self.pidns.map(pids::in_namespace).unwrap_or_default()
    }

    /// Waits for nspawn to start the container's PID 1, and notes it.
    fn find_leader(&mut self, start: Instant) -> Result<()> {
        loop {
            if let Some(pid) = self.nspawn.as_ref().and_then(|n| pids::container_init(n.pid())) {
                self.leader = pid;
                self.pidns = pids::pid_namespace(pid);
                if self.pidns.is_some() {
                    return Ok(());
                }
            }
            self.check_booting(start, "start the container's PID 1", |_| String::new())?;
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until systemd has finished booting.
    fn wait_running(&mut self, start: Instant) -> Result<()> {
        loop {
            let state = self
                .command("systemctl")
                .arg("is-system-running")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            match state.as_str() {
                "running" => return Ok(()),
                "degraded" => {
                    let failed = self.systemctl(&["--failed", "--no-legend"]).unwrap_or_default();
                    eprintln!(
                        "mcr-testbed: container {} booted degraded; failed units:\n{failed}",
                        self.machine
                    );
                    return Ok(());
                }
                _ => {}
            }
            let awaited = format!("boot systemd (`systemctl is-system-running` says {state:?})");
            self.check_booting(start, &awaited, |sd| {
                let jobs = sd.systemctl(&["list-jobs", "--no-legend"]);
                format!("\n--- systemctl list-jobs:\n{}", jobs.unwrap_or_else(|e| e.to_string()))
            })?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An error if nspawn has exited or booting has taken too long, with
    /// what nspawn printed and `detail`.
    fn check_booting(&mut self, start: Instant, awaited: &str, detail: impl FnOnce(&Self) -> String) -> Result<()> {
        let exited = match self.nspawn.as_mut() {
            Some(nspawn) => nspawn.try_status()?,
            None => return Ok(()),
        };
        if exited.is_none() && start.elapsed() < BOOT_PATIENCE {
            return Ok(());
        }
        let awaited = match exited {
            Some(status) => format!("{awaited} before exiting ({status})"),
            None => awaited.to_string(),
        };
        let printed = self
            .nspawn
            .as_ref()
            .map(|n| format!("{}{}", n.stdout_so_far(), n.stderr_so_far()))
            .unwrap_or_default();
        Err(Error::Timeout {
            what: format!("systemd-nspawn (container {})", self.machine),
            awaited,
            seconds: start.elapsed().as_secs_f64(),
            stderr: format!("{printed}{}", detail(self)),
        })
    }

    /// SIGKILLs the container's PID 1 (the kernel then ends every process
    /// of its PID namespace), if it is still that process.
    fn kill_leader(&self) {
        if self.leader == 0 {
            return;
        }
        if let Ok(pidfd) = PidFd::open(self.leader)
            && pids::pid_namespace(self.leader) == self.pidns
        {
            let _ = pidfd.signal(Signal::Kill);
        }
    }
}

impl Drop for Systemd {
    fn drop(&mut self) {
        if let Some(mut nspawn) = self.nspawn.take() {
            if self.leader == 0 {
                // Booting failed early: look once more for what it started.
                if let Some(pid) = pids::container_init(nspawn.pid()) {
                    self.leader = pid;
                    self.pidns = pids::pid_namespace(pid);
                }
            }
            // nspawn answers SIGTERM by asking systemd to power off.
            let _ = nspawn.signal(Signal::Term);
            if !exits_within(&mut nspawn, HALT_PATIENCE) {
                eprintln!(
                    "mcr-testbed: container {} did not power off within {} s; killing it",
                    self.machine,
                    HALT_PATIENCE.as_secs()
                );
                self.kill_leader();
                exits_within(&mut nspawn, HALT_PATIENCE);
            }
            // Dropping `nspawn` kills it if it still runs.
        }
        // nspawn may have been killed (its container outlives it then).
        self.kill_leader();
        let deadline = Instant::now() + HALT_PATIENCE;
        while !self.processes().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = self.processes();
        if !left.is_empty() {
            eprintln!("mcr-testbed: container {} left processes {left:?}", self.machine);
        }
        if let Some(cgroup) = &self.cgroup {
            cgroup.remove();
        }
        let _ = fs::remove_file(&self.machine_id);
        nspawn::remove_leftovers(&self.machine);
    }
}

/// True if `p` exits within `timeout`.
fn exits_within(p: &mut Proc, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if !matches!(p.try_status(), Ok(None)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// `Key=value` out of `systemctl show`.
fn property<'a>(show: &'a str, key: &str) -> Option<&'a str> {
    show.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_systemctl_show() {
        let show = "MainPID=93\nActiveState=active\n";
        assert_eq!(property(show, "MainPID"), Some("93"));
        assert_eq!(property(show, "ActiveState"), Some("active"));
        assert_eq!(property(show, "Active"), None);
    }
}
