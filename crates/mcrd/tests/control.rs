//! Every request the control socket refuses gets an answer that says what
//! is wrong, and the daemon keeps serving.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;

fn still_serving(relay: &Relay) {
    let out = relay.ctl(&["version"]).expect("mcrctl");
    assert_eq!(out.code, Some(0), "the daemon stopped answering: {}", out.stderr);
}

#[test]
fn each_bad_rule_is_refused_with_its_field_and_reason() {
    let c = Chain::new("control-rejects").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("good", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("a valid rule");
    let cases: [(&[&str], &str); 9] = [
        (
            &["--input", "eth/9:239.1.1.2:5001", "--output", "veth2:239.10.1.2:6001"],
            "input.interface: `eth/9` cannot be an interface name (1-15 characters, no `/`, `:` or spaces; known:",
        ),
        (
            &[
                "--input",
                "veth1:239.1.1.2:5001",
                "--output",
                "a-name-too-long-for-linux:239.10.1.2:6001",
            ],
            "outputs[0].interface: `a-name-too-long-for-linux` cannot be an interface name",
        ),
        (
            &["--input", "veth1:10.9.9.9:5001", "--output", "veth2:239.10.1.2:6001"],
            "neither a multicast group nor an address of veth1",
        ),
        (
            &["--input", "veth1:224.0.0.9:5001", "--output", "veth2:239.10.1.2:6001"],
            "is a link-local group",
        ),
        (
            &["--input", "veth1:239.1.1.2:0", "--output", "veth2:239.10.1.2:6001"],
            "port 0",
        ),
        (
            &["--input", "veth1:239.1.1.2:5001", "--output", "veth2:239.10.1.2:0"],
            "outputs[0].destination",
        ),
        (
            &["--input", "veth1:239.1.1.1:5001", "--output", "veth2:239.10.1.9:6001"],
            "rule `good` already takes veth1 239.1.1.1:5001",
        ),
        (
            &["--input", "veth1:239.1.1.3:5001", "--output", "veth1:239.1.1.1:5001"],
            "is rule `good`'s input: a loop",
        ),
        (
            &["--input", "veth1:239.1.1.3:5001", "--output", "veth1:239.1.1.3:5001"],
            "own input: a loop",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["add", "bad"];
        full.extend_from_slice(args);
        let out = relay.ctl(&full).expect("mcrctl");
        assert_eq!(out.code, Some(1), "{args:?} should be refused: {out:?}");
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        still_serving(&relay);
    }
    // Malformed rule text never reaches the daemon: mcrctl says why.
    let out = relay
        .ctl(&[
            "add",
            "bad",
            "--input",
            "veth1-239.1.1.1-5001",
            "--output",
            "veth2:239.10.1.1:6001",
        ])
        .expect("mcrctl");
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("INTERFACE:ADDRESS:PORT"), "{}", out.stderr);
    let out = relay.ctl(&["remove", "nope"]).expect("mcrctl");
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("no rule named `nope` (rules: good)"),
        "{}",
        out.stderr
    );
    // Only the good rule is in the table.
    let list = relay.ctl_ok(&["list"]).expect("list");
    assert!(list.contains("good") && !list.contains("bad"), "{list}");
}

/// Sends raw bytes on a fresh connection and reads one response line.
fn raw(relay: &Relay, bytes: &[u8]) -> (serde_json::Value, UnixStream) {
    let mut s = UnixStream::connect(relay.socket()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    // The daemon may answer and hang up before all of an oversized request
    // is written; the answer is read below either way.
    let _ = s.write_all(bytes);
    let mut line = String::new();
    BufReader::new(s.try_clone().expect("clone"))
        .read_line(&mut line)
        .expect("a response");
    (
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")),
        s,
    )
}

#[test]
fn malformed_and_oversized_requests_get_clear_errors() {
    let c = Chain::new("control-garbage").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    for (bytes, kind, needle) in [
        (&b"{\"cmd\": add\n"[..], "bad_request", "not a request"),
        (&b"hello\n"[..], "bad_request", "one JSON object per line"),
        (
            &b"{\"cmd\":\"explode\"}\n"[..],
            "bad_request",
            "unknown variant `explode`",
        ),
        (
            &b"{\"cmd\":\"list\",\"verbose\":true}\n"[..],
            "bad_request",
            "unknown field `verbose`",
        ),
        (&b"{\"cmd\":\"remove\"}\n"[..], "bad_request", "missing field `name`"),
        (&b"\xff\xfe{\"cmd\":\"list\"}\n"[..], "bad_request", "not a request"),
        (
            &b"{\"cmd\":\"version\",\"protocol\":99}\n"[..],
            "protocol",
            "speaks protocol 6",
        ),
    ] {
        let (v, mut s) = raw(&relay, bytes);
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["error"]["kind"], kind, "{v}");
        assert!(
            v["error"]["message"].as_str().is_some_and(|m| m.contains(needle)),
            "{v}"
        );
        // The same connection still takes a good request.
        s.write_all(b"{\"cmd\":\"version\"}\n").expect("write");
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).expect("answer");
        assert!(line.contains("\"ok\":true"), "{line}");
    }
    // A line past the limit: an error, then the connection is closed.
    let mut big = vec![b'x'; 2 << 20];
    big.push(b'\n');
    let (v, mut s) = raw(&relay, &big);
    assert_eq!(v["error"]["kind"], "too_large", "{v}");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    still_serving(&relay);
}

#[test]
fn a_silent_client_blocks_no_one() {
    let c = Chain::new("control-silent").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // Half a request, and then nothing, from several clients.
    let _idle: Vec<UnixStream> = (0..20)
        .map(|_| {
            let mut s = UnixStream::connect(relay.socket()).expect("connect");
            s.write_all(b"{\"cmd\":\"li").expect("write");
            s
        })
        .collect();
    for _ in 0..5 {
        still_serving(&relay);
        relay.ctl_ok(&["list"]).expect("list");
    }
}

/// True once the daemon has closed `s` (a read returns end of file, after
/// whatever it still had to say), within `within`.
fn closed_by_daemon(s: &mut UnixStream, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    s.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let mut buf = vec![0u8; 1 << 16];
    while std::time::Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            // Reset by the daemon: closed as well.
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn hostile_clients_get_errors_or_are_disconnected_while_forwarding_goes_on() {
    const N: u64 = 40_000;
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let c = Chain::new("control-hostile").expect("chain");
    let relay = Relay::start(&c.relay, &["--control-timeout", "2"]).expect("mcrd");
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    let rx = c.expect_at_sink("239.10.1.1:6001", N, &[]).expect("recv");
    let gen_ns = c.generator.clone();
    let sender = std::thread::spawn(move || {
        mcr_testbed::traffic::Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
            .count(N)
            .rate("4k")
            .send(&gen_ns, Duration::from_secs(180))
            .expect("send")
    });

    // 200 clients at once, each holding its connection: all are answered.
    let mut many: Vec<UnixStream> = (0..200)
        .map(|_| UnixStream::connect(relay.socket()).expect("connect"))
        .collect();
    for s in &mut many {
        s.write_all(b"{\"cmd\":\"version\"}\n").expect("write");
    }
    for s in &many {
        let mut line = String::new();
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        BufReader::new(s).read_line(&mut line).expect("answer");
        assert!(line.contains("\"ok\":true"), "{line}");
    }
    // Garbage, invalid UTF-8 and a 10 MB line: each gets its error.
    for (bytes, kind) in [
        (b"\x00\x01garbage\x7f\n".to_vec(), "bad_request"),
        (b"\xc3\x28\xa0\xa1{\"cmd\":\"list\"}\n".to_vec(), "bad_request"),
        ([vec![b'{'; 10 << 20], b"\n".to_vec()].concat(), "too_large"),
    ] {
        let (v, _) = raw(&relay, &bytes);
        assert_eq!(v["error"]["kind"], kind, "{v}");
    }
    // A half line, a client that never sends, and one that sends requests
    // and never reads the answers: each is disconnected after the timeout.
    let mut half = UnixStream::connect(relay.socket()).expect("connect");
    half.write_all(b"{\"cmd\":\"lis").expect("write");
    let mut silent = UnixStream::connect(relay.socket()).expect("connect");
    let mut deaf = UnixStream::connect(relay.socket()).expect("connect");
    deaf.set_write_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut sent = 0;
    while sent < 200_000 && deaf.write_all(b"{\"cmd\":\"stats\"}\n").is_ok() {
        sent += 1;
    }
    // Meanwhile a well-formed request from another client is answered.
    still_serving(&relay);
    relay.ctl_ok(&["list"]).expect("list");
    for (what, s) in [
        ("half line", &mut half),
        ("never sends", &mut silent),
        ("never reads", &mut deaf),
    ] {
        assert!(closed_by_daemon(s, Duration::from_secs(60)), "{what}: still connected");
    }
    drop(many);

    assert_eq!(sender.join().expect("sender").packets, N);
    let got = rx.finish(Duration::from_secs(180)).expect("recv");
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!(got.report.total.received, N);
    still_serving(&relay);
}

#[test]
fn one_client_more_than_the_daemon_serves_is_told_so() {
    let c = Chain::new("control-busy").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // 256 clients hold every slot (each answered once, so each is served).
    let mut held: Vec<UnixStream> = Vec::new();
    for _ in 0..256 {
        let mut s = UnixStream::connect(relay.socket()).expect("connect");
        s.write_all(b"{\"cmd\":\"version\"}\n").expect("write");
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).expect("answer");
        held.push(s);
    }
    let (v, _) = raw(&relay, b"{\"cmd\":\"version\"}\n");
    assert_eq!(v["error"]["kind"], "busy", "{v}");
    let out = relay.ctl(&["list"]).expect("mcrctl");
    assert_eq!(out.code, Some(2), "mcrctl cannot ask: {out:?}");
    assert!(out.stderr.contains("clients are connected already"), "{}", out.stderr);
    // A slot freed is a slot served.
    held.pop();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while relay.ctl(&["version"]).expect("mcrctl").code != Some(0) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    still_serving(&relay);
}
