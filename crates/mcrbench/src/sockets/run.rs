//! Running one point: namespaces for its path, receiver sockets and
//! threads, sender threads, a measured window after the warm-up, and the
//! exact accounting of every sequence number.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use anyhow::Context;
use mcr_sys::clock::{monotonic_ns, sleep_until_ns, thread_cpu_ns};
use mcr_testbed::{Ns, Testbed};
use mcrgen::histogram::Histogram;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::backends::{Backend, Ends, Rx, Tx};
use super::matrix::{Conn, Family, PathKind, Point, Reuse};
use super::payload::{self, Seen};

/// How each point runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub duration: Duration,
    pub warmup: Duration,
    pub count: Option<u64>,
    pub runs: usize,
    pub pace: Option<f64>,
    pub inject_loss: f64,
    pub rcvbuf: usize,
    pub cpu: Option<usize>,
}

impl Options {
    /// `--quick`: 2,000 datagrams per sender at 20,000 a second, 2 % of
    /// sequence numbers left out, one run.
    pub fn quick() -> Options {
        Options {
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            count: Some(2000),
            runs: 1,
            pace: Some(20_000.0),
            inject_loss: 0.02,
            rcvbuf: 4 << 20,
            cpu: None,
        }
    }

    /// For the report.
    pub fn describe(&self) -> String {
        let what = match self.count {
            Some(n) => format!("{n} datagrams per sender"),
            None => format!(
                "{} ms measured after {} ms of warm-up",
                self.duration.as_millis(),
                self.warmup.as_millis()
            ),
        };
        let pace = self.pace.map_or("as fast as each sender goes".to_string(), |p| {
            format!("paced at {p} per sender a second")
        });
        let cpu = self.cpu.map_or("threads not pinned".to_string(), |c| {
            format!("senders pinned to CPU {c}, receivers to the next")
        });
        format!(
            "{what}, {pace}, {} run(s) per point, receive buffers of {} asked, injected loss {}, {cpu}",
            self.runs, self.rcvbuf, self.inject_loss
        )
    }
}

/// One run of a point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Datagrams the senders handed to the kernel, in the window.
    pub tx_packets: u64,
    /// Datagrams the receivers took, in the window.
    pub rx_packets: u64,
    /// Rates over the window, datagrams a second.
    pub tx_pps: f64,
    pub rx_pps: f64,
    /// Payload megabits a second.
    pub tx_mbps: f64,
    pub rx_mbps: f64,
    /// CPU nanoseconds per datagram, senders' and receivers' threads
    /// (× 1000 = µs per million).
    pub tx_cpu_ns: f64,
    pub rx_cpu_ns: f64,
    /// Over the whole run: datagrams sent, sequence numbers left out on
    /// purpose, sequence numbers that never arrived (left out ones
    /// included), arrivals of one already seen, first arrivals after a
    /// higher one from the same sender, wrong sizes, damaged.
    pub sent: u64,
    pub injected: u64,
    pub missing: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub truncated: u64,
    pub damaged: u64,
    /// Send errors by kind.
    pub enobufs: u64,
    pub eagain: u64,
    pub other_errors: u64,
    /// The receive buffer the kernel granted (as `SO_RCVBUF` reports it).
    pub rcvbuf: usize,
    /// One-way latency in the paced mode.
    pub latency: Option<mcrgen::histogram::Summary>,
}

/// The namespaces of a path, and addresses in them.
struct Net {
    _tb: Testbed,
    tx_ns: Ns,
    rx_ns: Ns,
    tx_if: String,
    rx_if: String,
}

const PORT: u16 = 40_000;

fn group(f: Family) -> IpAddr {
    match f {
        Family::V4 => IpAddr::V4(Ipv4Addr::new(239, 77, 0, 1)),
        Family::V6 => IpAddr::V6(Ipv6Addr::new(0xff3e, 0, 0, 0, 0, 0, 0x77, 1)),
    }
}

fn addrs(f: Family, path: PathKind) -> (IpAddr, IpAddr) {
    match (f, path.veth()) {
        (Family::V4, false) => (Ipv4Addr::LOCALHOST.into(), Ipv4Addr::LOCALHOST.into()),
        (Family::V6, false) => (Ipv6Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()),
        (Family::V4, true) => (Ipv4Addr::new(10, 77, 0, 1).into(), Ipv4Addr::new(10, 77, 0, 2).into()),
        (Family::V6, true) => (
            "fd77::1".parse().unwrap_or(Ipv6Addr::LOCALHOST).into(),
            "fd77::2".parse().unwrap_or(Ipv6Addr::LOCALHOST).into(),
        ),
    }
}

fn net(path: PathKind) -> anyhow::Result<Net> {
    let mut tb = Testbed::new("sockets")?;
    if path.veth() {
        let tx = tb.ns("tx")?;
        let rx = tb.ns("rx")?;
        tb.veth(&tx, "s0", &rx, "r0")?;
        tx.addr("s0", "10.77.0.1/24")?;
        rx.addr("r0", "10.77.0.2/24")?;
        tx.addr6("s0", "fd77::1/64")?;
        rx.addr6("r0", "fd77::2/64")?;
        Ok(Net {
            _tb: tb,
            tx_ns: tx,
            rx_ns: rx,
            tx_if: "s0".into(),
            rx_if: "r0".into(),
        })
    } else {
        let ns = tb.ns("lo")?;
        ns.ip(&["link", "set", "lo", "up", "multicast", "on"])?;
        // Frames written on lo (the packet backend) enter IPv4 input
        // routing, which refuses a 127/8 destination and a local source
        // unless told otherwise.
        for key in ["route_localnet", "accept_local"] {
            for dev in ["lo", "all"] {
                ns.sysctl(&format!("net.ipv4.conf.{dev}.{key}"), "1")?;
            }
        }
        Ok(Net {
            _tb: tb,
            tx_ns: ns.clone(),
            rx_ns: ns,
            tx_if: "lo".into(),
            rx_if: "lo".into(),
        })
    }
}

/// Runs `f` on a thread inside namespace `ns` and returns what it gives:
/// every socket (and every AF_PACKET interface index) is of the
/// namespace it is made in, never of the host's.
fn in_ns<T: Send>(ns: &Ns, f: impl FnOnce() -> anyhow::Result<T> + Send) -> anyhow::Result<T> {
    let name = ns.name().to_string();
    std::thread::scope(|s| {
        s.spawn(move || {
            mcr_sys::netns::enter(&name)?;
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("a setup thread panicked"))?
    })
}

fn domain(f: Family) -> Domain {
    match f {
        Family::V4 => Domain::IPV4,
        Family::V6 => Domain::IPV6,
    }
}

/// The receiver sockets of a point: one, or one per thread with the reuse
/// option.
fn receiver_sockets(p: &Point, dst: SocketAddr, rx_if: u32, rcvbuf: usize) -> anyhow::Result<(Vec<Socket>, usize)> {
    let n = if p.reuse == Reuse::None { 1 } else { p.threads };
    let mut socks = Vec::with_capacity(n);
    let mut granted = 0;
    for _ in 0..n {
        let s = Socket::new(domain(p.family), Type::DGRAM, Some(Protocol::UDP))?;
        if p.family == Family::V6 {
            s.set_only_v6(true)?;
        }
        match p.reuse {
            Reuse::None => {}
            Reuse::Addr => s.set_reuse_address(true)?,
            Reuse::Port => s.set_reuse_port(true)?,
        }
        granted = mcr_sys::sockopt::force_recv_buffer(s.as_fd(), rcvbuf)?;
        let bind = if p.path.multicast() {
            SocketAddr::new(super::backends::any_like(dst), dst.port())
        } else {
            dst
        };
        s.bind(&bind.into())?;
        if p.path.multicast() {
            mcr_sys::sockopt::set_multicast_all(s.as_fd(), p.family == Family::V6, false)?;
            mcr_sys::membership::join(s.as_fd(), rx_if, dst.ip(), None)?;
        }
        socks.push(s);
    }
    Ok((socks, granted))
}

fn sender_socket(p: &Point, src: IpAddr, dst: SocketAddr, tx_if: u32) -> anyhow::Result<Socket> {
    let s = Socket::new(domain(p.family), Type::DGRAM, Some(Protocol::UDP))?;
    if p.family == Family::V6 {
        s.set_only_v6(true)?;
    }
    mcr_sys::sockopt::force_send_buffer(s.as_fd(), 4 << 20)?;
    // Without it a UDP sender never hears ENOBUFS; with a send timeout, a
    // blocked send ends (EAGAIN) and every run stays bounded.
    mcr_sys::sockopt::set_recv_errors(s.as_fd(), p.family == Family::V6)?;
    s.set_write_timeout(Some(Duration::from_secs(1)))?;
    s.bind(&SockAddr::from(SocketAddr::new(src, 0)))?;
    if p.path.multicast() {
        match p.family {
            Family::V4 => {
                mcr_sys::sockopt::set_multicast_if_v4_index(s.as_fd(), tx_if)?;
                s.set_multicast_loop_v4(p.path == PathKind::LoMcast)?;
                s.set_multicast_ttl_v4(8)?;
            }
            Family::V6 => {
                s.set_multicast_if_v6(tx_if)?;
                s.set_multicast_loop_v6(p.path == PathKind::LoMcast)?;
                s.set_multicast_hops_v6(8)?;
            }
        }
    }
    if p.conn == Conn::Connected {
        s.connect(&dst.into())?;
    }
    Ok(s)
}

/// What one sender thread did.
#[derive(Default)]
struct SendDone {
    /// The next sequence number it would have used: every one below was
    /// sent or left out on purpose.
    next_seq: u64,
    sent: u64,
    window: (u64, u64, u64),
    enobufs: u64,
    eagain: u64,
    other: u64,
    error: Option<String>,
}

/// What one receiver thread saw, per sender: a bitmap of sequence
/// numbers, and the highest so far.
#[derive(Default)]
struct RecvDone {
    seen: Vec<Vec<u64>>,
    highest: Vec<Option<u64>>,
    duplicated: u64,
    reordered: u64,
    truncated: u64,
    damaged: u64,
    window: (u64, u64, u64),
    latency: Histogram,
    error: Option<String>,
}

impl RecvDone {
    fn note(&mut self, sender: usize, seq: u64) {
        if sender >= self.seen.len() {
            self.seen.resize_with(sender + 1, Vec::new);
            self.highest.resize(sender + 1, None);
        }
        let (w, b) = ((seq / 64) as usize, seq % 64);
        let bits = &mut self.seen[sender];
        if w >= bits.len() {
            bits.resize(w + 1 + w / 2, 0);
        }
        if bits[w] & (1 << b) != 0 {
            self.duplicated += 1;
            return;
        }
        bits[w] |= 1 << b;
        match self.highest[sender] {
            Some(h) if seq < h => self.reordered += 1,
            _ => self.highest[sender] = Some(seq),
        }
    }
}

/// A thread's counters at the start and end of the measured window:
/// packets, CPU ns and clock ns at each.
struct Window {
    start_at: u64,
    end_at: Arc<AtomicU64>,
    start: Option<(u64, u64, u64)>,
}

impl Window {
    fn tick(&mut self, packets: u64) {
        if self.start.is_none() && monotonic_ns() >= self.start_at {
            self.start = Some((packets, thread_cpu_ns(), monotonic_ns()));
        }
    }

    /// (packets, cpu ns, clock ns) over the window, closed now, or for
    /// the clock at `last` (a receiver's last arrival).
    fn close(&self, packets: u64, last: Option<u64>) -> (u64, u64, u64) {
        let now = monotonic_ns();
        let (p0, c0, t0) = self.start.unwrap_or((0, thread_cpu_ns(), now));
        let end = last.filter(|&l| l > t0).unwrap_or(now);
        (packets - p0, thread_cpu_ns() - c0, end.saturating_sub(t0))
    }

    fn over(&self) -> bool {
        monotonic_ns() >= self.end_at.load(Ordering::Relaxed)
    }
}

/// Sets a flag when dropped: the receivers stop however `once` ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The longest a counted run may send.
const COUNTED_RUN_LIMIT_NS: u64 = 60_000_000_000;

/// Runs every run of point `p`; the first error ends it.
pub fn point(b: &dyn Backend, p: &Point, o: &Options) -> Result<Vec<RunResult>, String> {
    let mut runs = Vec::with_capacity(o.runs);
    for _ in 0..o.runs {
        runs.push(once(b, p, o).map_err(|e| format!("{e:#}"))?);
    }
    Ok(runs)
}

fn once(b: &dyn Backend, p: &Point, o: &Options) -> anyhow::Result<RunResult> {
    let net = net(p.path)?;
    let (src_ip, dst_ip) = addrs(p.family, p.path);
    let dst = SocketAddr::new(if p.path.multicast() { group(p.family) } else { dst_ip }, PORT);
    let tx_if = index_in(&net.tx_ns, &net.tx_if)?;
    let rx_if = index_in(&net.rx_ns, &net.rx_if)?;
    let src_mac = mac_of(&net.tx_ns, &net.tx_if)?;
    let dst_mac = match (p.path.multicast(), p.path.veth()) {
        (true, _) => mcr_core::wire::ethernet::multicast_mac(dst.ip()).unwrap_or([0; 6]),
        (false, true) => mac_of(&net.rx_ns, &net.rx_if)?,
        (false, false) => [0; 6],
    };
    let (rx_socks, granted) = {
        let p2 = p.clone();
        let rcvbuf = o.rcvbuf;
        in_ns(&net.rx_ns, move || receiver_sockets(&p2, dst, rx_if, rcvbuf))
            .with_context(|| format!("receiver socket for {dst} on {} ({})", net.rx_if, p.reuse.word()))?
    };
    let mut tx_socks = Vec::with_capacity(p.threads);
    for _ in 0..p.threads {
        let p2 = p.clone();
        tx_socks.push(
            in_ns(&net.tx_ns, move || sender_socket(&p2, src_ip, dst, tx_if))
                .with_context(|| format!("sender socket from {src_ip} to {dst} on {}", net.tx_if))?,
        );
    }
    let ends_for = |s: &Socket| -> anyhow::Result<Ends> {
        let src = s.local_addr()?.as_socket().unwrap_or(SocketAddr::new(src_ip, 0));
        Ok(Ends {
            dst,
            connected: p.conn == Conn::Connected,
            size: p.size,
            tx_ifindex: tx_if,
            src,
            src_mac,
            dst_mac,
        })
    };
    let rx_ends = ends_for(&tx_socks[0])?;
    // Receiver threads: one per thread; with one shared socket, each
    // thread its own handle on it.
    let mut rxs: Vec<Box<dyn Rx>> = Vec::with_capacity(p.threads);
    for t in 0..p.threads {
        let s = if rx_socks.len() == 1 {
            rx_socks[0].try_clone()?
        } else {
            rx_socks[t].try_clone()?
        };
        let e = &rx_ends;
        rxs.push(in_ns(&net.rx_ns, move || Ok(b.rx(s, e)?)).with_context(|| format!("{} receiver", b.name()))?);
    }
    drop(rx_socks);
    let mut txs: Vec<Box<dyn Tx>> = Vec::with_capacity(p.threads);
    for s in tx_socks {
        let e = ends_for(&s)?;
        txs.push(in_ns(&net.tx_ns, move || Ok(b.tx(s, &e)?)).with_context(|| format!("{} sender", b.name()))?);
    }

    let measured = o.count.is_none();
    let start_at = monotonic_ns() + 50_000_000;
    let warm_end = start_at + if measured { o.warmup.as_nanos() as u64 } else { 0 };
    let send_end = Arc::new(AtomicU64::new(if measured {
        warm_end + o.duration.as_nanos() as u64
    } else {
        start_at + COUNTED_RUN_LIMIT_NS
    }));
    let senders_done = Arc::new(AtomicBool::new(false));
    let _stop = StopOnDrop(senders_done.clone());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = p.threads;
    let last_rx = Arc::new(AtomicU64::new(0));
    // With one receiver, the datagrams it took so far (a plain store of
    // its own count, as cheap as `last_rx`'s).
    let rx_got = Arc::new(AtomicU64::new(0));
    let one_receiver = rxs.len() == 1;
    let go = Arc::new(Barrier::new(2 * p.threads + 1));

    let receivers: Vec<std::thread::JoinHandle<RecvDone>> = rxs
        .into_iter()
        .map(|mut rx| {
            let (go, done, last_rx, send_end) = (go.clone(), senders_done.clone(), last_rx.clone(), send_end.clone());
            let rx_got = rx_got.clone();
            // Every receiver on the CPU after the senders'.
            let (size, paced, cpu) = (p.size, o.pace.is_some(), o.cpu.map(|c| (c + 1) % cpus));
            std::thread::spawn(move || {
                if let Some(c) = cpu {
                    let _ = mcr_sys::process::pin_current_thread(c);
                }
                let mut r = RecvDone::default();
                let mut w = Window {
                    start_at: warm_end,
                    end_at: send_end,
                    start: None,
                };
                let mut got = 0u64;
                let mut last = None;
                let mut closed = None;
                go.wait();
                loop {
                    w.tick(got);
                    let res = rx.recv(Duration::from_millis(20), &mut |d| match payload::check(d, size) {
                        // A header naming no sender of this run, or an
                        // impossible sequence number, is damage.
                        Seen::Good { sender, seq, .. } if sender as usize >= threads || seq >= 1 << 40 => {
                            r.damaged += 1
                        }
                        Seen::Good { sender, seq, sent_ns } => {
                            r.note(sender as usize, seq);
                            if paced {
                                r.latency.record(monotonic_ns().saturating_sub(sent_ns));
                            }
                        }
                        Seen::Truncated => r.truncated += 1,
                        Seen::Damaged => r.damaged += 1,
                    });
                    match res {
                        Ok(n) if n > 0 => {
                            got += n as u64;
                            let now = monotonic_ns();
                            last = Some(now);
                            last_rx.store(now, Ordering::Relaxed);
                            rx_got.store(got, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(e) => {
                            r.error = Some(format!("receive: {e}"));
                            break;
                        }
                    }
                    if closed.is_none() && w.over() {
                        closed = Some(w.close(got, last));
                    }
                    if done.load(Ordering::Relaxed) {
                        break;
                    }
                }
                r.window = closed.unwrap_or_else(|| w.close(got, last));
                r
            })
        })
        .collect();

    let senders: Vec<std::thread::JoinHandle<SendDone>> = txs
        .into_iter()
        .enumerate()
        .map(|(i, mut tx)| {
            let (go, send_end) = (go.clone(), send_end.clone());
            let (size, batch, count, pace, share) = (p.size, p.batch, o.count, o.pace, o.inject_loss);
            let cpu = o.cpu;
            std::thread::spawn(move || {
                if let Some(c) = cpu {
                    let _ = mcr_sys::process::pin_current_thread(c);
                }
                let mut bufs: Vec<Vec<u8>> = (0..batch).map(|_| vec![0u8; size]).collect();
                for b in &mut bufs {
                    payload::fill(b);
                }
                let mut s = SendDone::default();
                let mut w = Window {
                    start_at: warm_end,
                    end_at: send_end,
                    start: None,
                };
                let gap = pace.map(|r| (1e9 / r.max(1.0)) as u64);
                go.wait();
                sleep_until_ns(start_at);
                let mut due = start_at;
                let mut seqs = Vec::with_capacity(batch);
                loop {
                    w.tick(s.sent);
                    if w.over() || count.is_some_and(|c| s.next_seq >= c) {
                        break;
                    }
                    // The next batch's sequence numbers, skipping those
                    // left out on purpose.
                    seqs.clear();
                    let mut q = s.next_seq;
                    while seqs.len() < batch && count.is_none_or(|c| q < c) {
                        if !payload::injected(q, share) {
                            seqs.push(q);
                        }
                        q += 1;
                    }
                    if seqs.is_empty() {
                        s.next_seq = q;
                        continue;
                    }
                    if let Some(g) = gap {
                        due += g * seqs.len() as u64;
                        sleep_until_ns(due);
                    }
                    let now = monotonic_ns();
                    for (b, &seq) in bufs.iter_mut().zip(&seqs) {
                        payload::stamp(b, i as u32, seq, now);
                    }
                    let refs: Vec<&[u8]> = bufs[..seqs.len()].iter().map(Vec::as_slice).collect();
                    match tx.send(&refs) {
                        Ok(n) => {
                            s.sent += n as u64;
                            // Everything up to the first datagram not taken
                            // is done; that one is sent again next time.
                            s.next_seq = if n >= seqs.len() { q } else { seqs[n] };
                        }
                        Err(e) => match e.raw_os_error() {
                            Some(libc::ENOBUFS) => s.enobufs += 1,
                            Some(libc::EAGAIN) => s.eagain += 1,
                            _ if e.kind() == std::io::ErrorKind::WouldBlock => s.eagain += 1,
                            _ => {
                                s.other += 1;
                                if s.other > 1000 {
                                    s.error = Some(format!("send: {e}"));
                                    break;
                                }
                            }
                        },
                    }
                }
                s.window = w.close(s.sent, None);
                s
            })
        })
        .collect();

    go.wait();
    let sent: Vec<SendDone> = senders
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a sender panicked")))
        .collect::<anyhow::Result<_>>()?;
    if !measured {
        // Counted runs: the receivers' window closes when the senders end.
        send_end.store(monotonic_ns(), Ordering::Relaxed);
    }
    // Let the receivers drain: until nothing arrived for 300 ms (at most
    // 3 s), or, with one receiver, until it took every datagram sent (a
    // counted run that lost nothing need not wait out the quiet).
    let quiet_from = monotonic_ns();
    let sent_total: u64 = sent.iter().map(|s| s.sent).sum();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        if one_receiver && rx_got.load(Ordering::Relaxed) >= sent_total {
            break;
        }
        let last = last_rx.load(Ordering::Relaxed).max(quiet_from);
        let now = monotonic_ns();
        if now - last > 300_000_000 || now - quiet_from > 3_000_000_000 {
            break;
        }
    }
    senders_done.store(true, Ordering::Relaxed);
    let recvd: Vec<RecvDone> = receivers
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a receiver panicked")))
        .collect::<anyhow::Result<_>>()?;
    if let Some(e) = sent
        .iter()
        .find_map(|s| s.error.clone())
        .or_else(|| recvd.iter().find_map(|r| r.error.clone()))
    {
        anyhow::bail!(e);
    }
    Ok(account(p, o, &sent, &recvd, granted))
}

fn index_in(ns: &Ns, ifname: &str) -> anyhow::Result<u32> {
    let name = ifname.to_string();
    in_ns(ns, move || Ok(mcr_sys::iface::index(&name)?))
}

fn mac_of(ns: &Ns, ifname: &str) -> anyhow::Result<[u8; 6]> {
    let text = ns.mac(ifname)?;
    mcr_core::wire::ethernet::parse_mac(&text).ok_or_else(|| anyhow::anyhow!("`{text}` is not a MAC"))
}

fn account(p: &Point, o: &Options, sent: &[SendDone], recvd: &[RecvDone], granted: usize) -> RunResult {
    let mut r = RunResult {
        rcvbuf: granted,
        ..Default::default()
    };
    let mut latency = Histogram::default();
    for (i, s) in sent.iter().enumerate() {
        r.sent += s.sent;
        r.enobufs += s.enobufs;
        r.eagain += s.eagain;
        r.other_errors += s.other;
        r.injected += (0..s.next_seq).filter(|&q| payload::injected(q, o.inject_loss)).count() as u64;
        // Sequence numbers below next_seq that no receiver saw.
        let words = s.next_seq.div_ceil(64) as usize;
        let mut union = vec![0u64; words];
        let mut overlap = 0u64;
        for rd in recvd {
            if let Some(bits) = rd.seen.get(i) {
                for (w, u) in union.iter_mut().enumerate() {
                    let b = bits.get(w).copied().unwrap_or(0);
                    overlap += u64::from((*u & b).count_ones());
                    *u |= b;
                }
            }
        }
        let unique: u64 = union.iter().map(|w| u64::from(w.count_ones())).sum();
        r.missing += s.next_seq - unique.min(s.next_seq);
        r.duplicated += overlap;
    }
    for rd in recvd {
        r.duplicated += rd.duplicated;
        r.reordered += rd.reordered;
        r.truncated += rd.truncated;
        r.damaged += rd.damaged;
        latency.merge(&rd.latency);
    }
    let rate = |w: &[(u64, u64, u64)]| -> (u64, f64, f64) {
        let packets: u64 = w.iter().map(|x| x.0).sum();
        let cpu: u64 = w.iter().map(|x| x.1).sum();
        let secs = w.iter().map(|x| x.2).max().unwrap_or(0) as f64 / 1e9;
        let pps = if secs > 0.0 { packets as f64 / secs } else { 0.0 };
        let cpu_per = if packets > 0 { cpu as f64 / packets as f64 } else { 0.0 };
        (packets, pps, cpu_per)
    };
    let tw: Vec<_> = sent.iter().map(|s| s.window).collect();
    let rw: Vec<_> = recvd.iter().map(|x| x.window).collect();
    (r.tx_packets, r.tx_pps, r.tx_cpu_ns) = rate(&tw);
    (r.rx_packets, r.rx_pps, r.rx_cpu_ns) = rate(&rw);
    r.tx_mbps = r.tx_pps * p.size as f64 * 8.0 / 1e6;
    r.rx_mbps = r.rx_pps * p.size as f64 * 8.0 / 1e6;
    r.latency = if o.pace.is_some() { latency.summary() } else { None };
    r
}
