//! SRT through the system libsrt, each test inside a network namespace of
//! its own (127.0.0.1 on its loopback): a listener whose hook accepts
//! stream id "a" (setting that connection's passphrase and latency) and
//! rejects others; every message of a transfer checked byte for byte and
//! in order; refusals as the caller sees them; a listener on a UDP socket
//! the test made itself.
//!
//! Namespaces: `setns` moves only the calling thread, and libsrt opens a
//! UDP socket in the namespace of the thread that calls bind or connect
//! (the threads libsrt starts there inherit it, but only use descriptors
//! they are given). So each test runs on a thread that enters its
//! namespace first and makes every SRT socket there. libsrt itself is
//! started once per process by whichever test comes first; its garbage
//! collector thread opens no socket, so its namespace does not matter.
//!
//! Ports: libsrt shares one UDP socket among SRT sockets bound to the same
//! port, looking the port up process-wide without regard to namespaces, so
//! the tests (which run in parallel in one process) use different ports.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcr_sys::srt::{Events, HookRequest, ListenHook, RejectCode, RejectReason, Sent, SrtEpoll, SrtSocket, SrtState};

const PASSPHRASE: &str = "0123456789abcdef";
/// The latency the hook gives stream "a"; callers ask for less, so seeing
/// it negotiated on both sides shows the hook's option took effect.
const HOOK_LATENCY_MS: i32 = 1000;
const CALLER_LATENCY_MS: i32 = 200;
const MESSAGES: u32 = 2000;
const MESSAGE_BYTES: usize = 1316;
/// Generous: the machine may be busy.
const WAIT: Duration = Duration::from_secs(20);

/// Runs `f` on a thread inside a fresh namespace of its own.
fn in_namespace<T: Send + 'static>(tag: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    mcr_testbed::on_thread_in_namespace(tag, f)
}

/// Accepts stream "a" (with its passphrase and latency), panics on stream
/// "panic", rejects every other with 1404; records what it saw.
#[derive(Default)]
struct StreamTable {
    calls: AtomicUsize,
    seen: Mutex<Vec<(String, SocketAddr)>>,
}

impl ListenHook for StreamTable {
    fn decide(&self, req: &mut HookRequest<'_>) -> Result<(), RejectCode> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.seen
            .lock()
            .expect("not poisoned")
            .push((req.stream_id().to_string(), req.peer()));
        match req.stream_id() {
            "a" => {
                let set = req
                    .set_passphrase(PASSPHRASE)
                    .and_then(|()| req.set_pbkeylen(16))
                    .and_then(|()| req.set_latency_ms(HOOK_LATENCY_MS));
                set.map_err(|_| RejectCode::INTERNAL_ERROR)
            }
            "panic" => panic!("a hook that panics (on purpose)"),
            _ => Err(RejectCode::NOT_FOUND),
        }
    }
}

/// A listening socket and an epoll watching it for callers, added before
/// it listens (libsrt does not report callers queued before the add).
fn listener_at(addr: SocketAddr, hook: Arc<StreamTable>) -> (SrtSocket, SrtEpoll) {
    let l = SrtSocket::new().expect("socket");
    l.set_live().expect("live");
    l.set_nonblocking(true).expect("nonblocking");
    l.set_listen_hook(hook).expect("hook");
    l.bind(addr).expect("bind");
    let ep = watch(&l, Events::IN);
    l.listen(16).expect("listen");
    (l, ep)
}

fn watch(s: &SrtSocket, events: Events) -> SrtEpoll {
    let ep = SrtEpoll::new().expect("epoll");
    ep.add(s.id(), events).expect("watch");
    ep
}

fn caller(stream_id: &str, passphrase: &str) -> SrtSocket {
    let c = SrtSocket::new().expect("socket");
    c.set_live().expect("live");
    c.set_nonblocking(true).expect("nonblocking");
    c.set_stream_id(stream_id).expect("stream id");
    c.set_passphrase(passphrase).expect("passphrase");
    c.set_pbkeylen(16).expect("key length");
    c.set_latency_ms(CALLER_LATENCY_MS).expect("latency");
    c.set_conn_timeout_ms(10_000).expect("connect timeout");
    c
}

/// Waits until `id` reports any of `want` or `ERR`, and returns its events.
fn wait_for(ep: &SrtEpoll, id: i32, want: Events) -> Events {
    let deadline = Instant::now() + WAIT;
    let mut ready = Vec::new();
    while Instant::now() < deadline {
        ep.wait(&mut ready, 100).expect("epoll wait");
        if let Some(&(_, ev)) = ready
            .iter()
            .find(|(s, ev)| *s == id && ev.intersects(want | Events::ERR))
        {
            return ev;
        }
    }
    panic!("@{id} reported nothing of {want:?} within {WAIT:?}");
}

/// Connects `c` to `addr` and returns the events that ended the attempt.
fn connect(c: &SrtSocket, addr: SocketAddr) -> Events {
    let ep = SrtEpoll::new().expect("epoll");
    ep.add(c.id(), Events::OUT | Events::ERR).expect("watch");
    c.connect(addr).expect("connect starts");
    wait_for(&ep, c.id(), Events::OUT)
}

/// The next caller the listener accepted (`ep` watches `l` for IN).
fn accept_one(l: &SrtSocket, ep: &SrtEpoll) -> (SrtSocket, SocketAddr) {
    // Only after IN: libsrt logs an error for each accept that finds none.
    wait_for(ep, l.id(), Events::IN);
    l.accept().expect("accept").expect("a caller is waiting")
}

fn pattern(seq: u32, at: usize) -> u8 {
    (seq as usize).wrapping_mul(131).wrapping_add(at * 7) as u8
}

fn message(seq: u32) -> Vec<u8> {
    let mut m = vec![0u8; MESSAGE_BYTES];
    m[..4].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in m[4..].iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
    m
}

/// Sends every message, waiting for room when the send buffer is full.
fn send_all(s: &SrtSocket) {
    let ep = SrtEpoll::new().expect("epoll");
    ep.add(s.id(), Events::OUT | Events::ERR).expect("watch");
    for seq in 0..MESSAGES {
        let m = message(seq);
        loop {
            match s.send(&m).expect("send") {
                Sent::Queued(n) => {
                    assert_eq!(n, MESSAGE_BYTES, "message {seq}");
                    break;
                }
                Sent::WouldBlock => {
                    let ev = wait_for(&ep, s.id(), Events::OUT);
                    assert!(!ev.contains(Events::ERR), "the sender failed: {ev:?}");
                }
            }
        }
    }
}

/// Receives until every message came, checking each one, in order.
fn receive_all(r: &SrtSocket) {
    let ep = SrtEpoll::new().expect("epoll");
    ep.add(r.id(), Events::IN | Events::ERR).expect("watch");
    let mut buf = [0u8; mcr_sys::srt::LIVE_MAX_PAYLOAD_BYTES];
    let mut next = 0u32;
    let deadline = Instant::now() + WAIT;
    while next < MESSAGES {
        assert!(
            Instant::now() < deadline,
            "only {next} of {MESSAGES} messages within {WAIT:?}"
        );
        let Some(n) = r.recv(&mut buf).expect("recv") else {
            let mut ready = Vec::new();
            ep.wait(&mut ready, 100).expect("epoll wait");
            continue;
        };
        let got = &buf[..n];
        assert_eq!(n, MESSAGE_BYTES, "message {next}");
        let seq = u32::from_be_bytes(got[..4].try_into().expect("4 bytes"));
        assert_eq!(seq, next, "messages arrive in order, none missing");
        if let Some(i) = (4..n).find(|&i| got[i] != pattern(seq, i - 4)) {
            panic!(
                "message {seq}: byte {i} is {:#x}, sent {:#x}",
                got[i],
                pattern(seq, i - 4)
            );
        }
        next += 1;
    }
}

#[test]
fn the_hook_accepts_stream_a_and_every_message_arrives_in_order() {
    in_namespace("srt-transfer", || {
        let at: SocketAddr = "127.0.0.1:9101".parse().expect("literal");
        let table = Arc::new(StreamTable::default());
        let (l, lep) = listener_at(at, table.clone());
        assert_eq!(l.state(), SrtState::Listening);

        let c = caller("a", PASSPHRASE);
        c.set_max_bw_bytes_per_s(20_000_000).expect("max bw");
        let ev = connect(&c, at);
        assert_eq!(ev, Events::OUT, "connected, no error (reason: {})", c.reject_reason());
        assert_eq!(c.state(), SrtState::Connected);

        let (r, peer) = accept_one(&l, &lep);
        assert_eq!(peer, c.local_addr().expect("caller's address"));
        assert_eq!(r.peer().expect("peer"), peer);
        assert_eq!(r.stream_id().expect("stream id"), "a");
        assert_eq!(r.state(), SrtState::Connected);
        // Asked about this caller only (libsrt answers a repeated handshake
        // of an accepted caller itself, so normally once).
        let seen = table.seen.lock().expect("not poisoned").clone();
        assert!(
            !seen.is_empty() && seen.iter().all(|s| *s == ("a".to_string(), peer)),
            "{seen:?}"
        );

        std::thread::scope(|s| {
            let receiver = s.spawn(|| receive_all(&r));
            send_all(&c);
            receiver.join().expect("receiver");
        });

        let sent = c.stats().expect("caller stats");
        let got = r.stats().expect("receiver stats");
        let all = i64::from(MESSAGES);
        // libsrt counts each packet's 44 bytes of IPv4, UDP and SRT headers.
        let bytes = u64::from(MESSAGES) * (MESSAGE_BYTES as u64 + 44);
        assert_eq!(sent.sent_unique_packets, all, "{sent:?}");
        assert!(sent.sent_packets >= all, "{sent:?}");
        assert_eq!(sent.sent_unique_bytes, bytes, "{sent:?}");
        assert_eq!(got.received_unique_packets, all, "{got:?}");
        assert!(got.received_packets >= all, "{got:?}");
        assert_eq!(got.received_unique_bytes, bytes, "{got:?}");
        assert_eq!(got.receive_dropped_packets, 0, "{got:?}");
        assert_eq!(got.undecryptable_packets, 0, "{got:?}");
        assert!(got.rtt_ms >= 0.0, "{got:?}");
        // The larger latency (the hook's) wins on both sides.
        assert_eq!(got.receive_tsbpd_delay_ms, HOOK_LATENCY_MS, "{got:?}");
        assert_eq!(sent.send_tsbpd_delay_ms, HOOK_LATENCY_MS, "{sent:?}");
    });
}

#[test]
fn the_hook_rejects_an_unknown_stream_with_1404_and_survives_a_panic() {
    in_namespace("srt-reject", || {
        let at: SocketAddr = "127.0.0.1:9102".parse().expect("literal");
        let table = Arc::new(StreamTable::default());
        let (l, lep) = listener_at(at, table.clone());

        let b = caller("b", PASSPHRASE);
        let ev = connect(&b, at);
        // libsrt raises IN and OUT together with ERR, to wake every waiter.
        assert!(ev.contains(Events::ERR), "{ev:?}");
        let reason = b.reject_reason();
        assert_eq!(reason, RejectCode::NOT_FOUND, "{reason}");
        assert_eq!(reason.hook_code(), Some(RejectCode::NOT_FOUND));
        assert_eq!(reason.to_string(), "1404 not found");
        assert_ne!(b.state(), SrtState::Connected);

        // A panicking hook rejects with 1500 and leaves the listener working.
        let p = caller("panic", PASSPHRASE);
        let ev = connect(&p, at);
        assert!(ev.contains(Events::ERR), "{ev:?}");
        assert_eq!(p.reject_reason(), RejectCode::INTERNAL_ERROR, "{}", p.reject_reason());

        let a = caller("a", PASSPHRASE);
        assert_eq!(connect(&a, at), Events::OUT, "reason: {}", a.reject_reason());
        let (accepted, _) = accept_one(&l, &lep);
        assert_eq!(accepted.stream_id().expect("stream id"), "a");
        // Only "a" got through.
        assert!(l.accept().expect("accept").is_none());
        // In order; a refused caller that repeats its handshake (when the
        // answer is slow, as a panic's backtrace is) is asked about again.
        let mut seen: Vec<String> = table
            .seen
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(s, _)| s.clone())
            .collect();
        seen.dedup();
        assert_eq!(seen, ["b", "panic", "a"]);
    });
}

/// libsrt's log lines, once the test that wants them set the sink (it is
/// process-wide; other tests' lines may land here too).
static LOG: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

fn keep_log_line(level: i32, msg: &str) {
    LOG.lock().expect("not poisoned").push((level, msg.to_string()));
}

#[test]
fn a_wrong_passphrase_never_connects() {
    in_namespace("srt-badpass", || {
        mcr_sys::srt::set_log_sink(keep_log_line);
        let at: SocketAddr = "127.0.0.1:9103".parse().expect("literal");
        let table = Arc::new(StreamTable::default());
        let (l, lep) = listener_at(at, table.clone());

        let c = caller("a", "fedcba9876543210");
        let ev = connect(&c, at);
        assert!(ev.contains(Events::ERR), "{ev:?}");
        // The hook accepted (it sets the passphrase); the key exchange after
        // it refused the caller, who learns why.
        assert!(table.calls.load(Ordering::SeqCst) >= 1);
        assert_eq!(c.reject_reason(), RejectReason::BAD_SECRET, "{}", c.reject_reason());
        assert_ne!(c.state(), SrtState::Connected);
        // Nothing ever reaches accept.
        let mut ready = Vec::new();
        lep.wait(&mut ready, 500).expect("epoll wait");
        assert!(ready.is_empty(), "{ready:?}");
        assert!(l.accept().expect("accept").is_none());
        assert!(c.send(&message(0)).is_err(), "an unconnected socket cannot send");
        // libsrt's warning about it reached the sink, as one line.
        let log = LOG.lock().expect("not poisoned").clone();
        assert!(
            log.iter().any(|(level, m)| *level == mcr_sys::srt::LEVEL_WARNING
                && m.contains("BADSECRET")
                && !m.ends_with('\n')),
            "{log:?}"
        );
    });
}

/// The descriptor's target, e.g. `socket:[1234]`, or None once closed.
fn fd_target(fd: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

#[test]
fn a_listener_on_an_acquired_udp_socket_works_and_libsrt_closes_it_later() {
    in_namespace("srt-acquire", || {
        let at: SocketAddr = "127.0.0.1:9104".parse().expect("literal");
        let udp = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).expect("udp");
        udp.bind(&at.into()).expect("bind udp");
        let fd = udp.as_raw_fd();
        let target = fd_target(fd).expect("open");

        let l = SrtSocket::new().expect("socket");
        l.set_live().expect("live");
        l.set_nonblocking(true).expect("nonblocking");
        l.set_listen_hook(Arc::new(StreamTable::default())).expect("hook");
        l.bind_acquire(OwnedFd::from(udp)).expect("bind_acquire");
        assert_eq!(l.local_addr().expect("address"), at);
        let lep = watch(&l, Events::IN);
        l.listen(4).expect("listen");

        let c = caller("a", PASSPHRASE);
        assert_eq!(connect(&c, at), Events::OUT, "reason: {}", c.reject_reason());
        let (r, _) = accept_one(&l, &lep);
        assert_eq!(c.send(&message(7)).expect("send"), Sent::Queued(MESSAGE_BYTES));
        let ep = SrtEpoll::new().expect("epoll");
        ep.add(r.id(), Events::IN).expect("watch");
        let mut buf = [0u8; 1500];
        let n = loop {
            if let Some(n) = r.recv(&mut buf).expect("recv") {
                break n;
            }
            wait_for(&ep, r.id(), Events::IN);
        };
        assert_eq!(&buf[..n], &message(7)[..]);

        // libsrt owns the descriptor: it is still open while SRT sockets
        // use it, and libsrt closes it once the last of them is gone (its
        // garbage collector keeps a closed listener about 3 s, so this
        // takes a few seconds).
        assert_eq!(fd_target(fd).as_deref(), Some(target.as_str()));
        drop((l, r, c));
        let deadline = Instant::now() + WAIT;
        while fd_target(fd).as_deref() == Some(target.as_str()) {
            assert!(
                Instant::now() < deadline,
                "libsrt did not close fd {fd} within {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    });
}

#[test]
fn bind_acquire_refuses_what_libsrt_cannot_use() {
    in_namespace("srt-acquire-bad", || {
        let tcp = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("tcp");
        let s = SrtSocket::new().expect("socket");
        let e = s.bind_acquire(OwnedFd::from(tcp)).expect_err("not UDP");
        assert!(e.to_string().contains("not a bound IPv4 or IPv6 UDP socket"), "{e}");

        let udp = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).expect("udp");
        udp.bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("literal").into())
            .expect("bind");
        udp.connect(&"127.0.0.1:9".parse::<SocketAddr>().expect("literal").into())
            .expect("connect");
        let e = s.bind_acquire(OwnedFd::from(udp)).expect_err("connected");
        assert!(e.to_string().contains("is connected"), "{e}");
        assert_eq!(s.state(), SrtState::Init);
    });
}
