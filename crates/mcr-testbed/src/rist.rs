//! Third-party RIST peers for the tests: Debian's `ristsender` and
//! `ristreceiver` (package rist-tools, librist's own tools), run inside a
//! test bed's namespace.

use std::process::Stdio;
use std::time::Duration;

use crate::{Finished, Ns, Proc, Result, Signal};

/// A running `ristsender` or `ristreceiver`, ended on drop.
#[derive(Debug)]
pub struct RistTool {
    proc: Proc,
}

impl RistTool {
    /// Starts `tool` (`ristsender` or `ristreceiver`) in `ns` with
    /// `-p profile` (0 simple, 1 main), input URL `input` and output URL
    /// `output` (librist's syntax: `rist://@ADDR:PORT?buffer=MS` listens,
    /// `rist://ADDR:PORT` connects; `udp://@ADDR:PORT` binds,
    /// `udp://GROUP:PORT?miface=IF` sends to a group), logging at info
    /// level so its connection shows, statistics every second.
    pub fn start(ns: &Ns, tool: &str, profile: u8, input: &str, output: &str) -> Result<RistTool> {
        let mut cmd = ns.command(tool);
        cmd.arg("-p")
            .arg(profile.to_string())
            .arg("-i")
            .arg(input)
            .arg("-o")
            .arg(output)
            .args(["-v", "6", "-S", "1000"])
            .stdin(Stdio::null());
        Ok(RistTool { proc: ns.spawn(cmd)? })
    }

    /// What it printed on stderr and stdout so far.
    pub fn log(&self) -> String {
        format!("{}{}", self.proc.stderr_so_far(), self.proc.stdout_so_far())
    }

    /// Ends it (SIGINT, as at a terminal) and returns what it printed.
    pub fn stop(self) -> Result<Finished> {
        self.proc.stop(Signal::Int, Duration::from_secs(10))
    }
}
