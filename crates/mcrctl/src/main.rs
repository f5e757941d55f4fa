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

use clap::{CommandFactory, Parser, Subcommand};
use mcr_core::control::{Reply, Request, Response, WATCH_INTERVAL_MS};
use mcr_core::rule::{Input, Mode, Output, Redundancy, Rule};

#[derive(Parser, Debug)]
#[command(
    name = "mcrctl",
    version,
    about = "Control mcrd, MCR's multicast relay",
    after_help = "Exit codes: 0 done; 1 the daemon refused the request; 2 it could not be asked; 3 the change \
                  was taken but is not fully in effect (printed)."
)]
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
        after_help = "Examples:\n  mcrctl add feed-a --input eth0:239.1.1.1:5001 --output eth1:239.10.1.1:6001\n  mcrctl add feed-b --input eth0:239.1.1.2:5001,source=10.0.0.1 \\\n      --output eth1:239.10.1.2:6001,ttl=8 --output eth2:10.0.2.9:7000\n  mcrctl add v6 --input eth0:[ff3e::1]:5001,vlan=100 --output eth1:[ff3e::10]:6001,dscp=ef\n  mcrctl add news --input eth0:239.1.1.1:5001 --input eth3:239.2.1.1:5001 --mode merge \\\n      --output eth1:239.10.1.1:6001\n  mcrctl add feed-c --input eth0:239.1.1.3:5001 --input eth3:239.2.1.3:5001 \\\n      --mode failover,hold=30s --output eth1:239.10.1.3:6001\n  mcrctl add itch --input eth0:233.54.12.1:26400 --input eth3:233.49.196.1:26400 \\\n      --mode arbitrate,framing=moldudp64 --output eth1:239.20.1.1:26400"
    )]
    Add {
        /// The rule's name.
        name: String,
        /// IFACE:ADDRESS:PORT[,vlan=ID][,source=ADDRESS]...: the stream to
        /// take (IPv6 in brackets; source= once per source). Repeat, with
        /// --mode, for a stream that comes on several paths (the first is
        /// a failover's primary).
        #[arg(long = "input", short, required = true)]
        inputs: Vec<Input>,
        /// How several inputs make one stream: merge[,differential=50ms]
        /// (SMPTE ST 2022-7: every RTP packet once, from whichever input
        /// brings it first), failover[,loss-of-signal=200ms][,hold=10s][,errors=N]
        /// or arbitrate,framing=moldudp64|mdp3|pitch|mitch[,window=65536]
        /// (market-data A/B lines: the first copy of each sequence number
        /// goes out at once; a generic feed gives
        /// sequence=u32le@0[,count=u16be@4][,session=OFF+LEN][,unit=u8@OFF]
        /// instead of framing=).
        #[arg(long, value_parser = |s: &str| s.parse::<Mode>())]
        mode: Option<Mode>,
        /// IFACE:ADDRESS:PORT[,vlan=ID][,ttl=N|decrement][,dscp=D|keep][,source=interface|keep|ADDRESS],
        /// or srt://HOST:PORT[,latency=MS][,passphrase-file=PATH][,streamid=ID][,max-callers=N],
        /// or rist://HOST:PORT[,profile=simple|main][,buffer=MS][,secret-file=PATH][,max-peers=N]:
        /// where to send it; repeat for several outputs.
        #[arg(long = "output", short, required = true)]
        outputs: Vec<Output>,
        /// Do not follow the inputs' health (RTP sequence and jitter,
        /// MPEG-TS continuity, sync and PAT): saves the little it costs.
        #[arg(long)]
        no_health: bool,
        /// Add it turned off: it joins nothing and forwards nothing until
        /// added again without this (its counters stay). An output alone
        /// is turned off with `enabled=false` in its spec.
        #[arg(long)]
        disabled: bool,
    },
    /// Remove a rule.
    Remove {
        /// The rule's name.
        name: String,
    },
    /// Hold a failover rule to one of its inputs, whatever their health,
    /// until `auto` gives the choice back (a rule replaced by add or a
    /// reload chooses again).
    #[command(
        after_help = "Examples:\n  mcrctl switch feed-c 2        # forward from the second input (the first backup)\n  mcrctl switch feed-c eth3:239.2.1.3:5001\n  mcrctl switch feed-c auto     # the rule chooses again"
    )]
    Switch {
        /// The rule's name.
        rule: String,
        /// The input: its number from 1 (1 is the primary), its text as
        /// `mcrctl list` shows it, or `auto`.
        input: String,
    },
    /// The relay's role: active (it sends) or standby (it holds every
    /// membership, ring and output ready, counts what it would send, and
    /// sends nothing). With a role, take it: the next frame is sent (or
    /// held). keepalived's notify script (packaging/keepalived) calls this.
    #[command(
        after_help = "Examples:\n  mcrctl role            # show it\n  mcrctl role active     # send from the next frame\n  mcrctl role standby    # stop sending; keep everything ready"
    )]
    Role {
        /// active or standby.
        #[arg(value_parser = |s: &str| s.parse::<mcr_core::config::Role>())]
        role: Option<mcr_core::config::Role>,
    },
    /// The etcd store the rules come from (`[daemon.etcd]`): whether mcrd
    /// follows it, at which revision, what the workers run, and every key
    /// it refused and why.
    Store,
    /// The relay as an AMWA NMOS Node (`[daemon.nmos]`): its node and
    /// device ids, each rule's receiver and senders with their ids and
    /// addresses, and what of the rules is not an NMOS resource.
    Nmos,
    /// Every rule and its group memberships.
    List,
    /// Packets, bytes, rates and drops per rule, output and worker.
    Stats,
    /// The worker processes.
    Workers,
    /// What the daemon did lately, oldest first: rules added, changed and
    /// removed, reloads, interfaces that came and went, workers that
    /// started, ended or were restarted.
    Events,
    /// Hand everything to a new mcrd program, without systemd (under
    /// systemd, `systemctl restart mcrd` does the same): the program is
    /// checked, the workers stop, and the daemon runs the program in its
    /// own place (same PID), which takes over the eBPF data path (it
    /// forwards throughout), the memberships, the ports and the control
    /// socket. Waits until the new program serves.
    Restart {
        /// The program to run (an absolute path); by default the daemon's
        /// own file, as a package upgrade left it.
        #[arg(long)]
        binary: Option<std::path::PathBuf>,
    },
    /// Read the daemon's config file again and apply what changed: rules
    /// that did not change are not touched. A file with a mistake changes
    /// nothing (the mistake is printed with its line and column).
    Reload,
    /// Write the running rules, with the config file's [daemon] settings,
    /// to the daemon's config file (or to --to, in the same directory)
    /// atomically; with --print, to standard output instead.
    Save {
        /// Where to write instead of the daemon's config file: a file in
        /// the config file's directory (the daemon writes nowhere else).
        #[arg(long, value_name = "PATH", conflicts_with = "print")]
        to: Option<PathBuf>,
        /// Print the file instead of writing it (`mcrctl save --print >
        /// FILE` writes it anywhere you may write).
        #[arg(long)]
        print: bool,
    },
    /// A live view of every rule and output (rates, drops, state),
    /// refreshed every second; with --json, one stats object per line.
    Watch {
        /// Seconds between refreshes (0.1 to 60).
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until Ctrl-C).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Print a completion script for a shell (bash, zsh, fish, elvish,
    /// powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (mcrctl.1 and one per command) into a
    /// directory.
    Man {
        /// The directory.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let list = matches!(cli.command, Command::List);
    let request = match cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "mcrctl", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man { dir } => {
            return match clap_mangen::generate_to(Cli::command(), &dir) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mcrctl: write the manual pages into {}: {e}", dir.display());
                    ExitCode::from(2)
                }
            };
        }
        Command::Watch { interval, count } => return watch(&cli.socket, cli.json, interval, count),
        Command::Restart { binary } => return restart(&cli.socket, cli.json, binary),
        Command::Reload => Request::Reload {},
        Command::Save { print: true, .. } => Request::Config {},
        Command::Save { to, print: false } => Request::Save {
            // The daemon has its own working directory: send it a full path.
            to: to.map(|p| std::path::absolute(&p).unwrap_or(p)),
        },
        Command::Version => Request::Version { protocol: None },
        Command::Add {
            name,
            mut inputs,
            mode,
            outputs,
            no_health,
            disabled,
        } => {
            let others = inputs.split_off(1);
            let redundancy = match (mode, others.is_empty()) {
                (Some(mode), true) => {
                    eprintln!(
                        "mcrctl: --mode {} takes the stream from several inputs: give a second --input (or leave --mode out)",
                        mode.name()
                    );
                    return ExitCode::from(2);
                }
                (Some(mode), false) => Some(Redundancy { mode, inputs: others }),
                (None, true) => None,
                (None, false) => {
                    eprintln!(
                        "mcrctl: {} inputs need --mode merge (ST 2022-7, packet by packet), --mode failover or --mode arbitrate,framing=... (market-data A/B lines)",
                        others.len() + 1
                    );
                    return ExitCode::from(2);
                }
            };
            let input = inputs.remove(0);
            Request::Add {
                rule: Rule {
                    redundancy,
                    health: !no_health,
                    enabled: !disabled,
                    ..Rule::new(name, input, outputs)
                },
            }
        }
        Command::Remove { name } => Request::Remove { name },
        Command::Switch { rule, input } => Request::Switch {
            rule,
            input: Some(input),
        },
        Command::Role { role } => Request::Role { set: role },
        Command::Store => Request::Store {},
        Command::Nmos => Request::Nmos {},
        Command::List => Request::List {},
        Command::Stats => Request::Stats {},
        Command::Workers => Request::Workers {},
        Command::Events => Request::Events {},
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
            other if list => print!(
                "{}",
                tables::render_list(other, connections(&cli.socket, other).as_ref())
            ),
            other => print!("{}", tables::render(other)),
        }
    }
    ExitCode::from(exit_code(&response))
}

/// For `mcrctl list`: when a rule has an SRT or RIST endpoint, the
/// statistics that hold its connections (one more request; none without
/// such endpoints, and nothing shown if it fails: the list stands alone).
fn connections(socket: &std::path::Path, reply: &Reply) -> Option<mcr_core::control::StatsReport> {
    let Reply::Rules { rules, .. } = reply else { return None };
    let linked = rules.iter().any(|r| {
        r.rule.inputs().any(|i| i.as_srt().is_some() || i.as_rist().is_some())
            || r.rule
                .outputs
                .iter()
                .any(|o| o.as_srt().is_some() || o.as_rist().is_some())
    });
    if !linked {
        return None;
    }
    match client::ask(socket, &Request::Stats {}).ok()?.reply {
        Reply::Stats(s) => Some(*s),
        _ => None,
    }
}

/// How long `mcrctl restart` waits for the new program to serve.
const RESTART_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `mcrctl restart`: asks for it, then waits until the new program
/// answers (its uptime began after the answer) and prints what it took
/// over.
fn restart(socket: &std::path::Path, json: bool, binary: Option<std::path::PathBuf>) -> ExitCode {
    let binary = binary.map(|p| std::path::absolute(&p).unwrap_or(p));
    let asked = std::time::Instant::now();
    let response = match client::ask(socket, &Request::Restart { binary }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcrctl: {e:#}");
            return ExitCode::from(2);
        }
    };
    let (binary, version, pid) = match &response.reply {
        Reply::Restarting { binary, version, pid } => (binary.clone(), version.clone(), *pid),
        Reply::Error { error } => {
            eprintln!("mcrctl: {}", error.message);
            return ExitCode::from(exit_code(&response));
        }
        other => {
            eprintln!("mcrctl: unexpected answer to restart: {other:?}");
            return ExitCode::from(2);
        }
    };
    if !json {
        println!("mcrd (pid {pid}) hands over to {} ({version})", binary.display());
    }
    // The new program serves once a stats answer comes from a process
    // that started after the restart was asked for.
    let serving = loop {
        if let Ok(r) = client::ask(socket, &Request::Stats {})
            && let Reply::Stats(s) = &r.reply
            && s.uptime_s < asked.elapsed().as_secs_f64()
        {
            break Some(s.uptime_s);
        }
        if asked.elapsed() > RESTART_LIMIT {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let Some(uptime_s) = serving else {
        eprintln!(
            "mcrctl: the new mcrd did not answer within {} s (see its log)",
            RESTART_LIMIT.as_secs()
        );
        return ExitCode::from(1);
    };
    let took_over = match client::ask(socket, &Request::Events {}) {
        Ok(r) => match r.reply {
            Reply::Events { events } => events
                .into_iter()
                .filter(|e| e.message.starts_with("restart: "))
                .map(|e| e.message)
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        },
        Err(_) => Vec::new(),
    };
    if json {
        let out = serde_json::json!({
            "binary": binary,
            "version": version,
            "pid": pid,
            "serving_after_s": asked.elapsed().as_secs_f64() - uptime_s,
            "events": took_over,
        });
        println!("{out}");
    } else {
        println!(
            "the new mcrd serves (pid {pid}, up {:.2} s after {:.2} s)",
            uptime_s,
            asked.elapsed().as_secs_f64()
        );
        for line in took_over {
            println!("  {line}");
        }
    }
    ExitCode::SUCCESS
}

/// `mcrctl watch`: redraws the stats table (or prints JSON lines) every
/// `interval_s` until `count` refreshes or Ctrl-C.
fn watch(socket: &std::path::Path, json: bool, interval_s: f64, count: Option<u64>) -> ExitCode {
    let ms = (interval_s * 1000.0).round();
    if !(ms >= *WATCH_INTERVAL_MS.start() as f64 && ms <= *WATCH_INTERVAL_MS.end() as f64) {
        eprintln!("mcrctl: --interval {interval_s} is outside 0.1-60 seconds");
        return ExitCode::from(2);
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut shown = 0u64;
    let mut code = 0u8;
    let result = client::watch(socket, ms as u64, |r| {
        let text = match (&r.reply, json) {
            (Reply::Error { error }, _) => {
                eprintln!("mcrctl: {}", error.message);
                code = 1;
                return false;
            }
            (_, true) => serde_json::to_string(r).map(|j| j + "\n").unwrap_or_default(),
            (Reply::Stats(s), false) => {
                let screen = tables::watch_screen(s, &socket.display().to_string());
                // On a terminal, draw over the last screen; else one after another.
                if tty {
                    format!("\x1b[H\x1b[2J{screen}")
                } else {
                    format!("{screen}\n")
                }
            }
            (other, false) => tables::render(other),
        };
        let mut out = std::io::stdout().lock();
        if std::io::Write::write_all(&mut out, text.as_bytes())
            .and_then(|()| std::io::Write::flush(&mut out))
            .is_err()
        {
            return false;
        }
        shown += 1;
        count.is_none_or(|c| shown < c)
    });
    match result {
        Ok(()) => ExitCode::from(code),
        Err(e) => {
            eprintln!("mcrctl: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// 0 done, 1 refused, 3 taken but not fully in effect (2, could not ask,
/// is decided before there is a response).
fn exit_code(response: &Response) -> u8 {
    match &response.reply {
        _ if !response.ok => 1,
        Reply::Added { applied, problems, .. } if !*applied || !problems.is_empty() => 3,
        Reply::Removed { applied: false, .. } | Reply::Switched { applied: false, .. } => 3,
        Reply::Reloaded { applied, problems, .. } if !*applied || !problems.is_empty() => 3,
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
