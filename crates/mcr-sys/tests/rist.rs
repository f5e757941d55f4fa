//! RIST through the system librist, each test inside a network namespace
//! of its own (127.0.0.1 on its loopback), both ends ours: every message
//! of a transfer checked byte for byte and in order, in the main profile
//! (a listening sender, AES) and the simple profile (a listening
//! receiver); peers and statistics as the callbacks report them; a
//! listener that is full refuses the next peer and counts it.
//!
//! Namespaces: librist opens its UDP sockets in the namespace of the
//! thread that makes the context, so each test makes them on a thread
//! that entered its namespace first.

use std::time::{Duration, Instant};

use mcr_sys::rist::{Profile, Rist, Role};

const MESSAGES: u32 = 2000;
const MESSAGE_BYTES: usize = 1316;
/// Generous: the machine may be busy.
const WAIT: Duration = Duration::from_secs(20);

/// Runs `f` on a thread inside a fresh namespace of its own.
fn in_namespace<T: Send + 'static>(tag: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    mcr_testbed::on_thread_in_namespace(tag, f)
}

/// Message `i`: its number, then a pattern that depends on it.
fn message(i: u32) -> Vec<u8> {
    let mut m = vec![0u8; MESSAGE_BYTES];
    m[..4].copy_from_slice(&i.to_be_bytes());
    for (k, b) in m.iter_mut().enumerate().skip(4) {
        *b = (k as u32).wrapping_mul(31).wrapping_add(i) as u8;
    }
    m
}

/// Waits until `ok`, or panics naming `what`.
fn wait(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < WAIT, "no {what} within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends every message at 1 per 100 µs and checks that `rx` gets each
/// once, in order, intact. First the flow is set up: librist's receiver
/// keeps no packet that comes before its flow exists (the first of a
/// simple-profile sender's, which creates it), so warm-up messages go
/// until one arrives.
fn transfer(tx: &Rist, rx: &Rist) {
    let mut buf = vec![0u8; 2048];
    let warm_up = message(u32::MAX);
    wait("a warm-up message", || {
        tx.send(&warm_up).expect("send");
        std::thread::sleep(Duration::from_millis(10));
        let mut got = false;
        while let Some(n) = rx.recv(&mut buf).expect("recv") {
            assert_eq!(&buf[..n], &warm_up[..], "a warm-up message");
            got = true;
        }
        got
    });
    // Warm-up messages still in flight.
    std::thread::sleep(Duration::from_millis(500));
    while let Some(n) = rx.recv(&mut buf).expect("recv") {
        assert_eq!(&buf[..n], &warm_up[..], "a warm-up message");
    }
    let mut next = 0u32;
    let start = Instant::now();
    for i in 0..MESSAGES {
        tx.send(&message(i)).expect("send");
        std::thread::sleep(Duration::from_micros(100));
        while let Some(n) = rx.recv(&mut buf).expect("recv") {
            assert_eq!(&buf[..n], &message(next)[..], "message {next}");
            next += 1;
        }
    }
    while next < MESSAGES {
        assert!(start.elapsed() < WAIT, "{next} of {MESSAGES} messages arrived");
        match rx.recv(&mut buf).expect("recv") {
            Some(n) => {
                assert_eq!(&buf[..n], &message(next)[..], "message {next}");
                next += 1;
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

#[test]
fn main_profile_listening_sender_carries_every_message_encrypted_and_counts_it() {
    in_namespace("rist-main", || {
        let secret = "buffer=300&secret=0123456789abcdef&aes-type=128";
        let tx = Rist::new(
            Role::Sender,
            Profile::Main,
            &format!("rist://@127.0.0.1:8300?{secret}"),
            4,
        )
        .expect("sender");
        let rx = Rist::new(
            Role::Receiver,
            Profile::Main,
            &format!("rist://127.0.0.1:8300?{secret}"),
            0,
        )
        .expect("receiver");
        wait("peer at the sender", || !tx.peers().is_empty());
        wait("connection at the receiver", || !rx.peers().is_empty());
        let p = &tx.peers()[0];
        assert_eq!(p.address.ip().to_string(), "127.0.0.1", "{p:?}");
        transfer(&tx, &rx);
        // librist's counts (reported each second, summed here) reach every
        // message: the sender's count its RTCP packets too, so they pass
        // the messages sent.
        wait("the sender's count", || {
            tx.stats(3000).iter().map(|s| s.packets).sum::<u64>() >= u64::from(MESSAGES)
        });
        wait("the receiver's count", || {
            rx.stats(3000).iter().map(|s| s.packets).sum::<u64>() >= u64::from(MESSAGES)
        });
        let r = rx.stats(3000);
        assert_eq!(r.len(), 1, "one flow: {r:?}");
        assert_eq!((r[0].lost, r[0].peers), (0, 1), "{r:?}");
        assert!(r[0].rtt_ms > 0, "{r:?}");
        assert_eq!(tx.refused(), 0);
    });
}

#[test]
fn simple_profile_listening_receiver_takes_every_message() {
    in_namespace("rist-simple", || {
        let rx = Rist::new(Role::Receiver, Profile::Simple, "rist://@127.0.0.1:8310?buffer=300", 0).expect("receiver");
        let tx = Rist::new(Role::Sender, Profile::Simple, "rist://127.0.0.1:8310?buffer=300", 0).expect("sender");
        wait("connection at the sender", || !tx.peers().is_empty());
        wait("connection at the receiver", || !rx.peers().is_empty());
        transfer(&tx, &rx);
        let r = rx.stats(3000);
        assert_eq!(r.iter().map(|s| s.lost).sum::<u64>(), 0, "{r:?}");
    });
}

#[test]
fn a_full_listener_refuses_the_next_peer_and_counts_it() {
    in_namespace("rist-full", || {
        let tx = Rist::new(Role::Sender, Profile::Main, "rist://@127.0.0.1:8320?buffer=300", 1).expect("sender");
        let first = Rist::new(Role::Receiver, Profile::Main, "rist://127.0.0.1:8320?buffer=300", 0).expect("first");
        wait("the first peer", || tx.peers().len() == 1);
        let second = Rist::new(Role::Receiver, Profile::Main, "rist://127.0.0.1:8320?buffer=300", 0).expect("second");
        wait("the refusal", || tx.refused() >= 1);
        assert_eq!(tx.peers().len(), 1, "{:?}", tx.peers());
        // The first still gets every message.
        transfer(&tx, &first);
        drop(second);
    });
}

#[test]
fn a_url_librist_does_not_take_is_an_error() {
    let e = Rist::new(Role::Sender, Profile::Main, "srt://127.0.0.1:8330", 0).expect_err("refused");
    assert!(e.to_string().contains("a rist:// URL"), "{e}");
}
