//! `mcrd`, MCR's daemon: a supervisor and one worker process per core.
//!
//! Not built yet: the relay is the next piece of work. Until then this
//! binary says so and exits, rather than pretend to forward anything.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("mcrd: the relay daemon is not implemented yet; see README.md");
    ExitCode::from(2)
}
