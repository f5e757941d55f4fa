//! `mcrgen send` and `mcrgen recv`: see the crate documentation.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;

use clap::{Args, CommandFactory, Parser, Subcommand};
use mcrgen::impair::{Faults, ImpairConfig};
use mcrgen::recv::{IdPolicy, RecvConfig, RecvVia};
use mcrgen::send::{Pace, Rate, SendConfig, Via};
use mcrgen::units::{parse_duration, parse_rate};
use mcrgen::wrap::{Wrap, WrapArg};
use mcrgen::{payload, spec};

#[derive(Parser, Debug)]
#[command(name = "mcrgen", version, about = "Send and check test streams for MCR")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send paced UDP streams whose every packet can be checked.
    Send(SendArgs),
    /// Receive streams and account for every packet.
    Recv(RecvArgs),
    /// Forward frames between two interfaces, dropping, duplicating,
    /// reordering, delaying or corrupting a share of the test packets (or,
    /// with --match udp, of every UDP datagram): a userspace stand-in for
    /// netem.
    Impair(ImpairArgs),
    /// Send malformed frames of the given kinds to one group and port, for
    /// checking that a relay counts each and forwards none.
    Hostile(HostileArgs),
    /// Print a completion script for a shell (bash, zsh, fish, elvish,
    /// powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (mcrgen.1 and one per command) into a
    /// directory.
    Man {
        /// The directory.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
struct HostileArgs {
    /// Interface to send on.
    #[arg(short, long)]
    interface: String,
    /// GROUP:PORT every frame is aimed at.
    #[arg(short = 'd', long)]
    dst: std::net::SocketAddrV4,
    /// ADDRESS:PORT the frames claim to come from.
    #[arg(long, default_value = "10.0.0.1:4000")]
    src: std::net::SocketAddrV4,
    /// Kinds, comma separated: random, truncated, bad_length,
    /// bad_ip_checksum, bad_udp_checksum, ip_options, fragment, igmp, tcp
    /// (default: all).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<mcrgen::hostile::Kind>,
    /// Frames of each kind.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Frames per second, all kinds together (e.g. 20k).
    #[arg(long, default_value = "10k", value_parser = parse_pps)]
    rate: f64,
    /// Seed the frames are built from: the same seed, the same frames.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ImpairArgs {
    /// Interface frames come in on.
    #[arg(long = "in")]
    input: String,
    /// Interface frames go out on.
    #[arg(long = "out")]
    output: String,
    /// Which frames the faults act on: `test` (mcrgen's test packets;
    /// every other frame passes unchanged) or `udp` (every IPv4 UDP
    /// datagram, whatever it carries: SRT, RIST; then --corrupt,
    /// --sync-error, --sync-loss and --loss-band, which need a test
    /// payload, are refused). The other options' "test packets" are then
    /// UDP datagrams.
    #[arg(long = "match", value_enum, default_value = "test")]
    matching: mcrgen::impair::Match,
    /// Percent of test packets to drop (e.g. 5 or 5%).
    #[arg(long, default_value = "0", value_parser = parse_percent)]
    loss: f64,
    /// Percent of test packets to send twice.
    #[arg(long, default_value = "0", value_parser = parse_percent)]
    duplicate: f64,
    /// Percent of test packets to send after the next packet of their
    /// destination.
    #[arg(long, default_value = "0", value_parser = parse_percent)]
    reorder: f64,
    /// Percent of test packets with one payload bit flipped (checksums kept
    /// valid).
    #[arg(long, default_value = "0", value_parser = parse_percent)]
    corrupt: f64,
    /// Percent of MPEG-TS test packets (--wrap ts or rtp-ts) with the sync
    /// byte of one transport packet broken (TR 101 290 Sync_byte_error).
    #[arg(long, default_value = "0", value_parser = parse_percent)]
    sync_error: f64,
    /// Percent of MPEG-TS test packets with the sync bytes of two
    /// transport packets in a row broken (a TS_sync_loss).
    #[arg(long, default_value = "0", value_parser = parse_percent)]
    sync_loss: f64,
    /// Send every test packet this much later, in order (a longer path).
    #[arg(long, value_parser = parse_duration)]
    delay: Option<Duration>,
    /// Cut the path: drop every test packet from AFTER past the first test
    /// packet, for FOR (`AFTER+FOR`, e.g. 2s+5s). Repeat for several cuts
    /// (a path that comes and goes).
    #[arg(long, value_parser = parse_cut)]
    cut: Vec<(Duration, Duration)>,
    /// Drop the test packets whose stream and sequence number hash into
    /// this share of the range (`FROM-TO%`, e.g. 0-1%): the same packets
    /// whenever they pass, so impairers with the same --seed on two paths
    /// of one stream lose the same packets only where their bands overlap.
    #[arg(long, value_parser = parse_band)]
    loss_band: Option<(f64, f64)>,
    /// Seed of the fault generator: the same seed repeats the same faults.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this long (default: until SIGINT/SIGTERM).
    #[arg(short, long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// A rate that is a number (`max` is refused).
fn parse_pps(s: &str) -> Result<f64, String> {
    mcrgen::units::parse_rate(s)?.ok_or_else(|| "give a rate in packets per second (e.g. 20k), not max".into())
}

/// `FROM-TO%`: two percentages, the first not above the second.
fn parse_band(s: &str) -> Result<(f64, f64), String> {
    let (from, to) = s
        .split_once('-')
        .ok_or_else(|| format!("`{s}`: write FROM-TO%, e.g. 0-1%"))?;
    let (from, to) = (parse_percent(from)?, parse_percent(to)?);
    if from > to {
        return Err(format!("`{s}`: the band's start is past its end"));
    }
    Ok((from, to))
}

/// `AFTER+FOR`: two durations.
fn parse_cut(s: &str) -> Result<(Duration, Duration), String> {
    let (after, long) = s
        .split_once('+')
        .ok_or_else(|| format!("`{s}`: give AFTER+FOR, e.g. 2s+5s"))?;
    Ok((parse_duration(after)?, parse_duration(long)?))
}

/// A duration in ns (saturating).
fn as_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage"))?;
    if (0.0..=100.0).contains(&v) {
        Ok(v / 100.0)
    } else {
        Err(format!("`{s}` is not between 0% and 100%"))
    }
}

fn hostile(a: HostileArgs) -> anyhow::Result<ExitCode> {
    let cfg = mcrgen::hostile::HostileConfig {
        interface: a.interface,
        dst: a.dst,
        src: a.src,
        kinds: if a.kinds.is_empty() {
            mcrgen::hostile::Kind::ALL.to_vec()
        } else {
            a.kinds
        },
        count_per_kind: a.count,
        rate_pps: a.rate,
        seed: a.seed,
    };
    let r = mcrgen::hostile::run(&cfg).map_err(|e| anyhow::anyhow!("send on {}: {e}", cfg.interface))?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        let each: Vec<String> = r.sent.iter().map(|(k, n)| format!("{} {n}", k.name())).collect();
        println!("{} bad frames in {:.2} s: {}", r.total, r.duration_s, each.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn impair(a: ImpairArgs) -> anyhow::Result<ExitCode> {
    let cfg = ImpairConfig {
        input: a.input,
        output: a.output,
        faults: Faults {
            matching: a.matching,
            loss: a.loss,
            duplicate: a.duplicate,
            reorder: a.reorder,
            corrupt: a.corrupt,
            sync_error: a.sync_error,
            sync_loss: a.sync_loss,
            delay_ns: a.delay.map_or(0, as_ns),
            cut: a.cut.iter().map(|&(after, long)| (as_ns(after), as_ns(long))).collect(),
            loss_band: a.loss_band,
        },
        seed: a.seed,
        duration: a.duration,
    };
    let r = mcrgen::impair::run(&cfg, &*stop_flag()?, |line| eprintln!("mcrgen impair: {line}"))?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{} frames in, {} out; {} {}: {} dropped, {} duplicated, {} reordered ({} held and sent in order), {} corrupted; {} other frames; {} send errors",
            r.frames_in,
            r.frames_out,
            r.matched,
            a.matching.noun(),
            r.dropped,
            r.duplicated,
            r.reordered,
            r.released_in_order,
            r.corrupted,
            r.other_frames,
            r.send_errors
        );
        let more: Vec<String> = [
            ("delayed", r.delayed),
            ("dropped while cut", r.cut),
            ("dropped by the loss band", r.band_dropped),
            ("given a broken sync byte", r.sync_errors),
            ("given two broken sync bytes", r.sync_losses),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{n} {what}"))
        .collect();
        if !more.is_empty() {
            println!("{} also: {}", a.matching.noun(), more.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
struct SendArgs {
    /// Streams: a list like 239.1.1.1:5001,239.1.1.2:5002 or a range like
    /// 239.1.1.1+50:5001+ (50 groups and ports counting up).
    #[arg(short, long)]
    streams: String,
    /// Interface to send on.
    #[arg(short, long)]
    interface: Option<String>,
    /// Source address to send from.
    #[arg(long)]
    source: Option<std::net::IpAddr>,
    /// TTL (IPv4) or hop limit (IPv6).
    #[arg(long, default_value_t = 16)]
    ttl: u32,
    /// UDP payload size in bytes (64-8972; default 1024); --wrap ts and
    /// rtp-ts fix it at 1316 and 1328 (seven transport packets).
    #[arg(long)]
    size: Option<usize>,
    /// How the test payload is carried: `plain`, `rtp` (after an RTP
    /// header), `ts` (in seven MPEG-TS packets, with a PAT), `rtp-ts`
    /// (MPEG-TS in RTP, as IPTV and SMPTE ST 2022-2 carry it), or as a
    /// market-data feed: `moldudp64`, `mdp3`, `pitch` or `mitch` (the
    /// feed's header with its own sequence number from 1, the payload in
    /// --messages messages; with --copy, an A and a B line).
    #[arg(long, value_enum, default_value = "plain")]
    wrap: WrapArg,
    /// With a feed's --wrap: messages per packet (the feed's sequence
    /// number counts them; MDP 3.0 numbers packets and has one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=255))]
    messages: u16,
    /// With --wrap pitch or mitch: the unit (market data group).
    #[arg(long, default_value_t = 1)]
    unit: u8,
    /// With a feed's --wrap: from this packet of each stream on (counted
    /// from 0), a new session (MoldUDP64's name changes) numbered from 1.
    #[arg(long)]
    new_session_at: Option<u64>,
    /// With a feed's --wrap: from this packet on, the sequence number
    /// starts again at 1 (a feed's daily or weekly reset).
    #[arg(long)]
    reset_at: Option<u64>,
    /// With --wrap rtp or rtp-ts: the RTP sequence number of each stream's
    /// first packet (0-65535; it wraps at 65536, so 65000 wraps early).
    #[arg(long, default_value_t = 0)]
    rtp_seq_start: u16,
    /// Send every packet again, byte for byte, to these destinations (one
    /// per stream, in the syntax of --streams): a second path, as SMPTE
    /// ST 2022-7 senders do.
    #[arg(long)]
    copy: Option<String>,
    /// With --copy: how much later the copy goes (0s, 20ms, ...).
    #[arg(long, value_parser = parse_duration, default_value = "0s", requires = "copy")]
    copy_delay: Duration,
    /// With --copy: the interface the copies go out on (the first path's
    /// if none).
    #[arg(long, requires = "copy")]
    copy_interface: Option<String>,
    /// Packets per second, all streams together: a number (50000, 50k,
    /// 1.5M) or `max`.
    #[arg(short, long, default_value = "1000", conflicts_with = "rate_per_stream")]
    rate: String,
    /// Packets per second for each stream (instead of --rate).
    #[arg(long)]
    rate_per_stream: Option<String>,
    /// Packets to send per stream.
    #[arg(short, long)]
    count: Option<u64>,
    /// How long to send (10s, 500ms, 2m).
    #[arg(short, long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// The id of the first stream; the others count up.
    #[arg(long, default_value_t = 0)]
    first_id: u32,
    /// Pin the sender to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// How packets go out: `frames` (Ethernet frames on an AF_PACKET socket:
    /// fastest; IPv4 groups, or unicast neighbours the kernel knows), `udp`
    /// (kernel UDP sockets: any destination) or `auto` (frames when an
    /// interface is given and every destination is an IPv4 group).
    #[arg(long, default_value = "auto")]
    via: Via,
    /// Tag every frame with this 802.1Q VLAN id (1-4094), as a trunk
    /// port would carry it (frames path only).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4094))]
    vlan: Option<u16>,
    /// DSCP of every packet (0-63).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    dscp: u8,
    /// How due packets are handed to the kernel: `batch` (every packet
    /// that is due, up to 64, in one call: they arrive in bursts), `each`
    /// (one packet per call at its own due time: they arrive spaced, as an
    /// encoder sends them) or `tick` (every 100 µs, the packets due by then
    /// in one call: rate/10,000 at a time, as a software sender with a
    /// pacing tick sends them).
    #[arg(long, default_value = "batch")]
    pace: Pace,
    /// Report the busy time of this CPU over the sending window (comma
    /// separated for several): what a relay pinned there spent.
    #[arg(long, value_delimiter = ',')]
    watch_cpu: Vec<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct RecvArgs {
    /// Streams to receive, in the syntax of `send --streams`.
    #[arg(short, long)]
    streams: String,
    /// Interface to join the groups on.
    #[arg(short, long)]
    interface: Option<String>,
    /// Which stream id each destination must carry: N+ (destination i
    /// carries N+i; default 0+), N (all carry N, as after a fan-out) or any.
    #[arg(long, default_value = "0+")]
    ids: IdPolicy,
    /// Packets each stream must deliver: stop when all have, and exit
    /// non-zero unless each delivered exactly this many, each once, in
    /// order, intact.
    #[arg(short, long)]
    expect: Option<u64>,
    /// Stop after this long.
    #[arg(short, long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop when nothing arrived for this long after the first packet.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// Stop when no packet at all arrived for this long.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    first_packet_timeout: Duration,
    /// With --expect: listen this much longer for late duplicates.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    linger: Duration,
    /// How packets are taken in: `sockets` (UDP sockets, as an application
    /// receives) or `ring` (an AF_PACKET ring on the interface: far cheaper
    /// per packet, checks each frame's checksums; IPv4 multicast only).
    #[arg(long, default_value = "sockets")]
    via: RecvVia,
    /// With --via ring: take only frames tagged with this 802.1Q VLAN id
    /// (others are counted as other_vlan); without it, untagged frames.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4094))]
    vlan: Option<u16>,
    /// Receive buffer per socket (or ring memory with --via ring) in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    rcvbuf: usize,
    /// How many recent sequence numbers each stream remembers for telling
    /// duplicates from late arrivals (64 to 16777216).
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u64).range(64..=16_777_216))]
    window: u64,
    /// Pin the receiver to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Count loss from the first packet each stream delivers rather than
    /// from sequence number 0: for a receiver, or a rule, that starts after
    /// the sender.
    #[arg(long, conflicts_with = "expect")]
    late_join: bool,
    /// Packets of this stream id are not this run's: counted as
    /// `ignored` and otherwise passed over (the tail of a warm-up stream
    /// still on its way when the checked one starts).
    #[arg(long)]
    ignore_id: Option<u32>,
    /// How the test payload is carried (as `send --wrap`): with `rtp`,
    /// `ts` or `rtp-ts` the RTP sequence and jitter and the MPEG-TS
    /// first-priority errors (ETSI TR 101 290) are checked and reported too.
    #[arg(long, value_enum, default_value = "plain")]
    wrap: WrapArg,
    /// List every stream in the table, not only those with a problem.
    #[arg(long)]
    all_streams: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// The datagram's size: `--size` (1024 bytes by default), except that
/// MPEG-TS fixes it; a feed's messages must hold the test payload.
fn payload_bytes(arg: WrapArg, wrap: Wrap, size: Option<usize>) -> anyhow::Result<usize> {
    let name = || clap::ValueEnum::to_possible_value(&arg).map_or_else(String::new, |v| v.get_name().to_string());
    match (wrap, size) {
        (Wrap::Ts | Wrap::RtpTs, Some(n)) if n != wrap.datagram_len(n) => anyhow::bail!(
            "--size {n} with --wrap {}: a datagram of seven MPEG-TS packets is {} bytes; leave --size out",
            name(),
            wrap.datagram_len(n)
        ),
        (Wrap::Feed(plan), _) => {
            let n = wrap.datagram_len(size.unwrap_or(1024));
            plan.payload_len(n)
                .map_err(|e| anyhow::anyhow!("--wrap {}: {e}", name()))?;
            Ok(n)
        }
        _ => Ok(wrap.datagram_len(size.unwrap_or(1024))),
    }
}

/// The wrapping `--wrap` and the feed's settings make.
fn wrapping(arg: WrapArg, a: Option<&SendArgs>) -> anyhow::Result<Wrap> {
    let Some(framing) = arg.framing() else {
        if a.is_some_and(|a| a.new_session_at.is_some() || a.reset_at.is_some() || a.messages != 1) {
            anyhow::bail!(
                "--messages, --new-session-at and --reset-at number a feed's messages: give --wrap moldudp64, mdp3, pitch or mitch"
            );
        }
        return Ok(arg.with(mcrgen::feed::Plan::new(mcrgen::feed::Framing::Mdp3)));
    };
    let mut plan = mcrgen::feed::Plan::new(framing);
    if let Some(a) = a {
        if a.new_session_at.is_some() && framing != mcrgen::feed::Framing::MoldUdp64 {
            anyhow::bail!("--new-session-at: only MoldUDP64 names its sessions (use --reset-at for the others)");
        }
        plan.messages = a.messages;
        plan.unit = a.unit;
        plan.new_session_at = a.new_session_at;
        plan.reset_at = a.reset_at;
    }
    Ok(arg.with(plan))
}

fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("install signal handler")?;
    }
    Ok(stop)
}

fn send(a: SendArgs) -> anyhow::Result<ExitCode> {
    let streams = spec::parse(&a.streams)?;
    let rate = match &a.rate_per_stream {
        Some(r) => parse_rate(r)
            .map_err(anyhow::Error::msg)?
            .map_or(Rate::Max, Rate::PerStream),
        None => parse_rate(&a.rate)
            .map_err(anyhow::Error::msg)?
            .map_or(Rate::Max, Rate::Total),
    };
    if a.count.is_none() && a.duration.is_none() {
        eprintln!("mcrgen send: no --count or --duration: sending until interrupted");
    }
    let wrap = wrapping(a.wrap, Some(&a))?;
    let cfg = SendConfig {
        streams,
        first_id: a.first_id,
        interface: a.interface,
        source: a.source,
        ttl: a.ttl,
        payload_bytes: payload_bytes(a.wrap, wrap, a.size)?,
        wrap,
        rtp_start: a.rtp_seq_start,
        copy: match &a.copy {
            Some(c) => Some(mcrgen::send::Copy {
                streams: spec::parse(c)?,
                interface: a.copy_interface.clone(),
                delay: a.copy_delay,
            }),
            None => None,
        },
        rate,
        count: a.count,
        duration: a.duration,
        cpu: a.cpu,
        via: a.via,
        vlan: a.vlan,
        dscp: a.dscp,
        pace: a.pace,
        watch_cpus: a.watch_cpu,
    };
    let report = mcrgen::send::run(&cfg, &*stop_flag()?)?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(ExitCode::SUCCESS)
}

fn recv(a: RecvArgs) -> anyhow::Result<ExitCode> {
    let cfg = RecvConfig {
        streams: spec::parse(&a.streams)?,
        ids: a.ids,
        interface: a.interface,
        expect: a.expect,
        duration: a.duration,
        idle_timeout: a.idle_timeout,
        first_packet_timeout: a.first_packet_timeout,
        linger: a.linger,
        recv_buffer_bytes: a.rcvbuf,
        window: a.window,
        late_join: a.late_join,
        ignore_id: a.ignore_id,
        cpu: a.cpu,
        via: a.via,
        vlan: a.vlan,
        wrap: wrapping(a.wrap, None)?,
    };
    if a.vlan.is_some() && a.via != RecvVia::Ring {
        anyhow::bail!("--vlan reads the tag of each frame, so it needs --via ring");
    }
    let report = mcrgen::recv::run(&cfg, &*stop_flag()?, |line| eprintln!("mcrgen recv: {line}"))?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.table(a.all_streams));
    }
    Ok(if a.expect.is_some() && !report.problems.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Send(a) => send(a),
        Command::Recv(a) => recv(a),
        Command::Impair(a) => impair(a),
        Command::Hostile(a) => hostile(a),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "mcrgen", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir } => clap_mangen::generate_to(Cli::command(), &dir)
            .map(|()| ExitCode::SUCCESS)
            .with_context(|| format!("write the manual pages into {}", dir.display())),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcrgen: {e:#}");
            ExitCode::from(2)
        }
    }
}

// Keep the documented limits and the CLI's help in step.
const _: () = assert!(payload::MIN_PAYLOAD == 64 && payload::MAX_PAYLOAD == 8972);
