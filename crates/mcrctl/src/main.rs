//! `mcrctl`, the control client of `mcrd`.
//!
//! Not built yet: it arrives with the relay. Until then this binary says so
//! and exits.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("mcrctl: the control client is not implemented yet; see README.md");
    ExitCode::from(2)
}
