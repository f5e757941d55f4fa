//! `mcrd`: MCR's daemon. `mcrd` runs the supervisor, which starts its
//! workers by re-executing itself as `mcrd worker`.

#![forbid(unsafe_code)]

mod args;
mod channel;
mod logging;
mod supervisor;
mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use args::named_arg;
use clap::{CommandFactory, Parser, Subcommand};
use mcr_core::config::{self, Config, Datapath, HttpListen, LogFormat, LogLevel, RingFormat, Role};

#[derive(Parser, Debug)]
#[command(
    name = "mcrd",
    version,
    about = "MCR's multicast relay daemon (run as root, or with CAP_NET_RAW and CAP_NET_ADMIN)",
    after_help = "Settings come from the command line, then the config file's [daemon] table, then the defaults \
                  shown here. The config file (TOML) also holds the rules: docs/CONFIGURATION.md.\n\
                  SIGHUP reloads the config file; SIGTERM and SIGINT stop the daemon."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// A worker process; the supervisor starts these itself.
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
    /// Write the manual page, mcrd.8, into a directory.
    Man {
        /// The directory.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The config file [default: /etc/mcr/mcrd.toml when it exists].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Check a config file (syntax, keys, values, rules against this
    /// host's interfaces), print what is wrong with line and column, and
    /// exit: 0 valid, 1 not.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// Worker processes, each pinned to its own core [default: 1].
    #[arg(long)]
    workers: Option<u32>,
    /// The CPUs to pin workers to, comma separated [default: the CPUs this
    /// process may run on, in turn].
    #[arg(long, value_delimiter = ',')]
    cpus: Option<Vec<usize>>,
    /// The control socket [default: /run/mcr/mcrd.sock].
    #[arg(long)]
    control_socket: Option<PathBuf>,
    /// Disconnect a control client that sends no whole request, or reads
    /// no response, for this many seconds [default: 60].
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..=3600))]
    control_timeout: Option<u32>,
    /// Once the control socket and listeners are open, run as this user
    /// with only CAP_NET_RAW and CAP_NET_ADMIN (mcrd must start as root).
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// The group whose members may use the control socket [default: the
    /// daemon's group].
    #[arg(long, value_name = "GROUP")]
    control_group: Option<String>,
    /// Serve the web page, the JSON API (/api/) and Prometheus metrics
    /// (/metrics) at ADDRESS:PORT, or `none` [default: 127.0.0.1:9808,
    /// skipped with a warning when in use]. Beyond loopback it needs TLS
    /// or --http-insecure.
    #[arg(long, value_name = "ADDR", alias = "metrics-listen")]
    http_listen: Option<HttpListen>,
    /// The file holding the bearer token that changes over HTTP (and any
    /// request from beyond loopback) need; others may not read it.
    #[arg(long, value_name = "PATH")]
    http_token_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM); with --http-tls-key.
    #[arg(long, value_name = "PATH")]
    http_tls_cert: Option<PathBuf>,
    /// The private key of --http-tls-cert (PEM).
    #[arg(long, value_name = "PATH")]
    http_tls_key: Option<PathBuf>,
    /// Serve plain HTTP beyond loopback (without it, such an address needs
    /// TLS).
    #[arg(long)]
    http_insecure: bool,
    /// Every HTTP request needs the token, from loopback too (without it,
    /// clients on this host may read without one).
    #[arg(long)]
    http_reads_need_token: bool,
    /// Receive ring format: v2 (frame by frame) or v3 (block by block)
    /// [default: v2].
    #[arg(long, value_parser = named_arg::<RingFormat>())]
    ring: Option<RingFormat>,
    /// Receive ring memory per worker and input interface, in MiB [default: 32].
    #[arg(long)]
    ring_mb: Option<u32>,
    /// With --ring v3: how long a part-filled block waits, in ms [default: 1].
    #[arg(long)]
    block_timeout_ms: Option<u32>,
    /// Which data path forwards: ebpf (MCR's eBPF program at each input
    /// interface's tc ingress hook, for every rule it can carry; the
    /// workers forward the rest) or packet (the workers, from their
    /// AF_PACKET rings, forward every rule) [default: ebpf].
    #[arg(long, value_parser = named_arg::<Datapath>())]
    datapath: Option<Datapath>,
    /// The role to start in: active (forward) or standby (hold every
    /// membership, ring and output ready, count what would be sent, send
    /// nothing until `mcrctl role active`) [default: active].
    #[arg(long, value_parser = named_arg::<Role>())]
    role: Option<Role>,
    /// Log level [default: info].
    #[arg(long, value_parser = named_arg::<LogLevel>())]
    log_level: Option<LogLevel>,
    /// Log format: text, json (one object per line, for collectors) or
    /// journal [default: journal under systemd, text otherwise].
    #[arg(long, value_parser = named_arg::<LogFormat>())]
    log_format: Option<LogFormat>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Worker(a)) => {
            logging::init(LogLevel::Warn, a.log_format.unwrap_or_else(logging::default_format));
            raise_fd_limit();
            let index = a.index;
            finish(worker::run(a).map_err(|e| e.context(format!("worker {index}"))))
        }
        Some(Command::Man { dir }) => finish(
            clap_mangen::Man::new(Cli::command())
                .section("8")
                .generate_to(&dir)
                .map(|p| println!("{}", p.display()))
                .with_context(|| format!("write the manual page into {}", dir.display())),
        ),
        None => match cli.run.check_config.clone() {
            Some(path) => check_config(&path, &cli.run),
            None => {
                // What the mcrd before left (systemd's file-descriptor
                // store, or `mcrctl restart`): taken before anything else
                // opens a descriptor or starts a thread.
                let inherited = supervisor::handover::Inherited::take();
                finish(run(cli.run, inherited))
            }
        },
    }
}

fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcrd: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Every stream may need a socket or a ring: take all the descriptors the
/// hard limit allows (a worker inherits the raised limit).
fn raise_fd_limit() {
    if let Err(e) = mcr_sys::process::raise_fd_limit() {
        tracing::warn!("could not raise the open-file limit: {e}");
    }
}

/// `--check-config`: what is wrong, or how many rules the file holds.
/// The HTTP settings are checked as a start would, with their files (the
/// token, the TLS certificate and key) read.
fn check_config(path: &Path, a: &RunArgs) -> ExitCode {
    match supervisor::load_config(path) {
        Ok(c) => match supervisor::check_http(&http_options(a, &c.settings))
            .map(|unheeded| {
                for said in unheeded {
                    eprintln!("mcrd: {}: warning: {said}", path.display());
                }
            })
            .and_then(|()| match &c.settings.etcd {
                Some(e) => supervisor::etcd::store_settings(e)
                    .and_then(|s| s.check())
                    .map_err(anyhow::Error::from),
                None => Ok(()),
            })
            .and_then(|()| match &c.settings.nmos {
                Some(n) => n.check().map_err(anyhow::Error::msg),
                None => Ok(()),
            }) {
            Ok(()) => {
                println!("{}: valid, {} rule(s)", path.display(), c.rules.len());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mcrd: {}: {e:#}", path.display());
                ExitCode::from(1)
            }
        },
        Err(e) => {
            eprintln!("mcrd: {}", e.message);
            ExitCode::from(1)
        }
    }
}

/// The HTTP settings: the command line's, then the file's.
fn http_options(a: &RunArgs, f: &config::Settings) -> supervisor::HttpOptions {
    supervisor::HttpOptions {
        listen: a.http_listen.or(f.http_listen),
        token_file: a.http_token_file.clone().or_else(|| f.http_token_file.clone()),
        tls_cert: a.http_tls_cert.clone().or_else(|| f.http_tls_cert.clone()),
        tls_key: a.http_tls_key.clone().or_else(|| f.http_tls_key.clone()),
        insecure: a.http_insecure || f.http_insecure.unwrap_or(false),
        reads_need_token: a.http_reads_need_token || f.http_reads_need_token.unwrap_or(false),
        // (Checked with the rest of [daemon.nmos] when the node starts.)
        nmos_networks: f
            .nmos
            .as_ref()
            .filter(|n| n.is_on())
            .and_then(|n| n.networks().ok())
            .unwrap_or_default(),
        nmos_changes: f.nmos.as_ref().is_some_and(|n| n.control_changes == Some(true)),
    }
}

fn run(a: RunArgs, inherited: supervisor::handover::Inherited) -> anyhow::Result<()> {
    // The config file: the one named, else the default one if present.
    let config_path = a
        .config
        .clone()
        .or_else(|| {
            let default = PathBuf::from(config::DEFAULT_PATH);
            default.exists().then_some(default)
        })
        // `save` and reload may come long after a change of directory.
        .map(|p| std::path::absolute(&p).unwrap_or(p));
    let config = match &config_path {
        Some(p) => supervisor::load_config(p).map_err(|e| anyhow::anyhow!("{}; not starting", e.message))?,
        None => Config::parse("").map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    let f = &config.settings;
    let level = a.log_level.or(f.log_level).unwrap_or(LogLevel::Info);
    let format = a.log_format.or(f.log_format).unwrap_or_else(logging::default_format);
    logging::init(level, format);
    raise_fd_limit();
    let workers = a.workers.or(f.workers).unwrap_or(1);
    anyhow::ensure!(
        (1..=config::MAX_WORKERS).contains(&workers),
        "--workers {workers} is outside 1-{}",
        config::MAX_WORKERS
    );
    let workers = workers as usize;
    let ring_mb = a.ring_mb.or(f.ring_mb).unwrap_or(32);
    anyhow::ensure!(
        (1..=config::MAX_RING_MB).contains(&ring_mb),
        "--ring-mb {ring_mb} is outside 1-{}",
        config::MAX_RING_MB
    );
    let allowed = mcr_sys::process::allowed_cpus().context("read this process's CPU affinity")?;
    anyhow::ensure!(!allowed.is_empty(), "this process may run on no CPU");
    let cpus: Vec<usize> = match a.cpus.clone().or_else(|| f.cpus.clone()) {
        Some(c) if !c.is_empty() => c,
        _ => (0..workers).map(|i| allowed[i % allowed.len()]).collect(),
    };
    if let Some(c) = cpus.iter().find(|c| !allowed.contains(c)) {
        anyhow::bail!("cpus: mcrd may not run on CPU {c} (it may use CPUs {allowed:?})");
    }
    let ring_format = a.ring.or(f.ring).unwrap_or(RingFormat::V2);
    let block_timeout_ms = a.block_timeout_ms.or(f.block_timeout_ms).unwrap_or(1);
    let worker_args = vec![
        "--workers".into(),
        workers.to_string(),
        "--ring".into(),
        ring_format.to_string(),
        "--ring-mb".into(),
        ring_mb.to_string(),
        "--block-timeout-ms".into(),
        block_timeout_ms.to_string(),
        "--log-format".into(),
        format.to_string(),
    ];
    if let Some(p) = &config_path {
        tracing::info!("config {}: {} rule(s)", p.display(), config.rules.len());
    }
    let http = http_options(&a, f);
    supervisor::run(
        supervisor::Options {
            workers,
            cpus,
            control_socket: a
                .control_socket
                .or_else(|| f.control_socket.clone())
                .unwrap_or_else(|| PathBuf::from("/run/mcr/mcrd.sock")),
            worker_args,
            http,
            user: a.user.or_else(|| f.user.clone()),
            control_group: a.control_group.or_else(|| f.control_group.clone()),
            control_timeout: std::time::Duration::from_secs(u64::from(
                a.control_timeout.or(f.control_timeout_s).unwrap_or(60),
            )),
            datapath: a.datapath.or(f.datapath).unwrap_or_default(),
            role: a.role.or(f.role).unwrap_or_default(),
            // The same shape the workers give their rings (see `worker_args`).
            ring: mcr_sys::ring::RingConfig {
                version: worker::ring_version(ring_format),
                bytes: (ring_mb as usize) << 20,
                max_frame: 1518,
                block_timeout_ms,
            },
            file_settings: config.settings,
            rules: config.rules,
            config_path,
        },
        inherited,
    )
}
