//! `mcrctl`: talks to `mcrd` over its control socket. Tables for people,
//! `--json` for programs. The exit code is 0 on success, 1 when the daemon
//! refused the request, 2 when it could not be asked at all (no daemon,
//! no permission, another protocol version), and 3 when it took a change
//! that is not fully in effect: a worker did not run it within the wait,
//! or the rule has problems (both printed).

#![forbid(unsafe_code)]

mod client;
mod tables;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mcr_core::control::{Reply, Request, Response};
use mcr_core::rule::{Input, Output, Rule};

#[derive(Parser, Debug)]
#[command(name = "mcrctl", version, about = "Control mcrd, MCR's multicast relay")]
struct Cli {
    /// The daemon's control socket.
    #[arg(long, global = true, default_value = "/run/mcr/mcrd.sock")]
    socket: PathBuf,
    /// Print the daemon's JSON response instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The daemon's version and protocol.
    Version,
    /// Add a rule, or replace the rule of the same name.
    #[command(
        after_help = "Examples:\n  mcrctl add feed-a --input eth0:239.1.1.1:5001 --output eth1:239.10.1.1:6001\n  mcrctl add feed-b --input eth0:239.1.1.2:5001,source=10.0.0.1 \\\n      --output eth1:239.10.1.2:6001,ttl=8 --output eth2:10.0.2.9:7000"
    )]
    Add {
        /// The rule's name.
        name: String,
        /// IFACE:ADDRESS:PORT[,source=ADDRESS]: the stream to take.
        #[arg(long, short)]
        input: Input,
        /// IFACE:ADDRESS:PORT[,ttl=N|decrement][,source=interface|keep|ADDRESS]:
        /// where to send it; repeat for several outputs.
        #[arg(long = "output", short, required = true)]
        outputs: Vec<Output>,
    },
    /// Remove a rule.
    Remove {
        /// The rule's name.
        name: String,
    },
    /// Every rule and its group memberships.
    List,
    /// Packets, bytes, rates and drops per rule, output and worker.
    Stats,
    /// The worker processes.
    Workers,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let request = match cli.command {
        Command::Version => Request::Version { protocol: None },
        Command::Add { name, input, outputs } => Request::Add {
            rule: Rule { name, input, outputs },
        },
        Command::Remove { name } => Request::Remove { name },
        Command::List => Request::List {},
        Command::Stats => Request::Stats {},
        Command::Workers => Request::Workers {},
    };
    let response = match client::ask(&cli.socket, &request) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcrctl: {e:#}");
            return ExitCode::from(2);
        }
    };
    if cli.json {
        match serde_json::to_string(&response) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("mcrctl: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        match &response.reply {
            Reply::Error { error } => eprintln!("mcrctl: {}", error.message),
            other => print!("{}", tables::render(other)),
        }
    }
    ExitCode::from(exit_code(&response))
}

/// 0 done, 1 refused, 3 taken but not fully in effect (2, could not ask,
/// is decided before there is a response).
fn exit_code(response: &Response) -> u8 {
    match &response.reply {
        _ if !response.ok => 1,
        Reply::Added { applied, problems, .. } if !*applied || !problems.is_empty() => 3,
        Reply::Removed { applied: false, .. } => 3,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcr_core::control::{ControlError, ErrorKind};

    fn added(applied: bool, problems: &[&str]) -> Response {
        Reply::Added {
            rule: "a".into(),
            replaced: false,
            applied,
            joins: Vec::new(),
            problems: problems.iter().map(|p| p.to_string()).collect(),
        }
        .into()
    }

    #[test]
    fn a_change_not_fully_in_effect_exits_3() {
        assert_eq!(exit_code(&added(true, &[])), 0);
        assert_eq!(exit_code(&added(false, &[])), 3);
        assert_eq!(exit_code(&added(true, &["output interface `x`: gone"])), 3);
        let removed = |applied| -> Response {
            Reply::Removed {
                rule: "a".into(),
                applied,
            }
            .into()
        };
        assert_eq!(exit_code(&removed(true)), 0);
        assert_eq!(exit_code(&removed(false)), 3);
        let refused: Response = Reply::Error {
            error: ControlError::new(ErrorKind::NotFound, "no rule named `a`"),
        }
        .into();
        assert_eq!(exit_code(&refused), 1);
    }
}
