//! Running a command and turning a failure into an [`Error`] that says which.

use std::process::{Command, Output};

use crate::{Error, Result};

/// The command line of `cmd`, for error messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion; returns its stdout, or an error carrying its
/// stderr when it fails.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let out: Output = cmd.output().map_err(|source| Error::Spawn {
        program: describe(cmd),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: describe(cmd),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip ARGS...` in the root namespace.
pub(crate) fn ip(args: &[&str]) -> Result<String> {
    run(Command::new("ip").args(args))
}
