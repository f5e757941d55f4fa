//! A process started inside a namespace: its PID, its captured output, and
//! a guarantee that it does not outlive its owner.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mcr_sys::process::{Signal, send_signal};

use crate::{Error, Result, command};

/// A spawned process whose stdout and stderr are collected in the
/// background. Dropping it kills the process (SIGKILL) if it still runs.
#[derive(Debug)]
pub struct Proc {
    what: String,
    child: Child,
    status: Option<ExitStatus>,
    stdout: Captured,
    stderr: Captured,
}

/// How a process ended and what it printed.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

#[derive(Debug)]
struct Captured {
    buf: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Captured {
    fn start(src: Option<impl Read + Send + 'static>) -> Captured {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let reader = src.map(|mut src| {
            let buf = Arc::clone(&buf);
            std::thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                while let Ok(n) = src.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    lock(&buf).extend_from_slice(&chunk[..n]);
                }
            })
        });
        Captured { buf, reader }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.buf)).into_owned()
    }

    /// Waits (briefly) for the reader to reach end of file. A grandchild
    /// that inherited the pipe could hold it open forever, so the wait is
    /// bounded; the reader thread is then left to finish on its own.
    fn join(&mut self) {
        if let Some(r) = self.reader.take() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !r.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if r.is_finished() {
                let _ = r.join();
            }
        }
    }
}

fn lock(buf: &Mutex<Vec<u8>>) -> std::sync::MutexGuard<'_, Vec<u8>> {
    // A reader thread that panicked leaves the bytes it had; use them.
    buf.lock().unwrap_or_else(|e| e.into_inner())
}

impl Proc {
    /// Spawns `cmd` with stdin closed and stdout and stderr captured.
    pub fn spawn(mut cmd: Command) -> Result<Proc> {
        let what = command::describe(&cmd);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| Error::Spawn {
            program: what.clone(),
            source,
        })?;
        let stdout = Captured::start(child.stdout.take());
        let stderr = Captured::start(child.stderr.take());
        Ok(Proc {
            what,
            child,
            status: None,
            stdout,
            stderr,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal to the process (by its PID), unless it has been reaped.
    pub fn signal(&mut self, signal: Signal) -> Result<()> {
        if self.try_status()?.is_some() {
            return Ok(());
        }
        send_signal(self.pid(), signal).map_err(|source| Error::Io {
            what: format!("signal {signal:?} to {}", self.what),
            source,
        })
    }

    /// Its exit status if it has ended, without waiting.
    pub fn try_status(&mut self) -> Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait().map_err(|source| Error::Io {
                what: format!("wait for {}", self.what),
                source,
            })?;
        }
        Ok(self.status)
    }

    /// What it has written to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.text()
    }

    /// What it has written to stdout so far.
    pub fn stdout_so_far(&self) -> String {
        self.stdout.text()
    }

    /// Waits until its stderr contains `needle` (a readiness line, say).
    /// Fails if the process exits first or `timeout` passes.
    pub fn wait_for_stderr(&mut self, needle: &str, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if self.stderr.text().contains(needle) {
                return Ok(());
            }
            if let Some(status) = self.try_status()? {
                self.stderr.join();
                if self.stderr.text().contains(needle) {
                    return Ok(());
                }
                return Err(self.timeout_error(&format!("print {needle:?} before exiting ({status})"), start));
            }
            if start.elapsed() >= timeout {
                return Err(self.timeout_error(&format!("print {needle:?}"), start));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the process to exit, at most `timeout`; if it does not, it
    /// is killed and an error returned.
    pub fn finish(mut self, timeout: Duration) -> Result<Finished> {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.try_status()? {
                break s;
            }
            if start.elapsed() >= timeout {
                let err = self.timeout_error("exit", start);
                // Drop kills it.
                return Err(err);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.stdout.join();
        self.stderr.join();
        Ok(Finished {
            status,
            stdout: self.stdout.text(),
            stderr: self.stderr.text(),
        })
    }

    /// Sends `signal` and then waits as [`Proc::finish`] does.
    pub fn stop(mut self, signal: Signal, timeout: Duration) -> Result<Finished> {
        self.signal(signal)?;
        self.finish(timeout)
    }

    fn timeout_error(&self, awaited: &str, start: Instant) -> Error {
        Error::Timeout {
            what: self.what.clone(),
            awaited: awaited.to_string(),
            seconds: start.elapsed().as_secs_f64(),
            stderr: self.stderr.text(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.try_status(), Ok(None)) {
            let _ = send_signal(self.pid(), Signal::Kill);
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_exit_status() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo ready >&2; exit 3"]);
        let mut p = Proc::spawn(cmd).expect("spawn");
        p.wait_for_stderr("ready", Duration::from_secs(10)).expect("ready");
        let f = p.finish(Duration::from_secs(10)).expect("finish");
        assert_eq!(f.status.code(), Some(3));
        assert_eq!(f.stdout, "out\n");
        assert_eq!(f.stderr, "ready\n");
    }

    #[test]
    fn a_process_that_exits_without_the_line_is_an_error() {
        let mut cmd = Command::new("true");
        cmd.arg("x");
        let mut p = Proc::spawn(cmd).expect("spawn");
        let e = p
            .wait_for_stderr("never", Duration::from_secs(10))
            .expect_err("exits first");
        assert!(e.to_string().contains("before exiting"), "{e}");
    }

    #[test]
    fn dropping_kills_a_running_process() {
        let mut cmd = Command::new("sleep");
        cmd.arg("60");
        let p = Proc::spawn(cmd).expect("spawn");
        let pid = p.pid();
        drop(p);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn finish_times_out_and_kills() {
        let mut cmd = Command::new("sleep");
        cmd.arg("60");
        let p = Proc::spawn(cmd).expect("spawn");
        let pid = p.pid();
        let e = p.finish(Duration::from_millis(50)).expect_err("still running");
        assert!(matches!(e, Error::Timeout { .. }));
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
