//! mcrd's live page, in a headless Chromium, against a stand-in for mcrd:
//! a small HTTP server in a test-bed namespace that serves the page's
//! assets as mcrd does (with its Content-Security-Policy) and a fixture as
//! `/api/overview`, which the test changes while the page runs. It checks
//! the browser harness and the page together, and leaves screenshots of
//! the page in target/screenshots/.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use mcr_core::control::{EventRecord, RateHistory, RuleStatus, StatsReport, WorkerStatus};
use mcr_testbed::browser::Browser;
use mcr_testbed::{Ns, Testbed, traffic_lock};
use serde_json::{Value, json};

/// Long enough for chromium on a busy two-core machine.
const PATIENCE: Duration = Duration::from_secs(60);
/// What mcrd sends with its page.
const CSP: &str =
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'";

fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../mcrd/assets")
}

fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots")
}

/// How the stand-in answers `/api/overview`.
#[derive(Clone)]
enum Answer {
    /// This overview.
    Overview(Value),
    /// 503, as a daemon that cannot answer.
    Down,
    /// 401 unless the request carries `Authorization: Bearer TOKEN`; then
    /// this overview.
    Token(String, Value),
}

/// The stand-in for mcrd: a one-thread HTTP server inside a namespace.
struct Site {
    port: u16,
    answer: Arc<Mutex<Answer>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Site {
    fn start(ns: &Ns, answer: Answer) -> Site {
        let answer = Arc::new(Mutex::new(answer));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let name = ns.name().to_string();
        let thread = std::thread::spawn({
            let (answer, stop) = (Arc::clone(&answer), Arc::clone(&stop));
            move || {
                mcr_sys::netns::enter(&name).expect("enter the namespace");
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
                listener.set_nonblocking(true).expect("nonblocking");
                tx.send(listener.local_addr().expect("address").port()).expect("port");
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => serve(conn, &answer),
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }
        });
        let port = rx.recv_timeout(PATIENCE).expect("the server's port");
        Site {
            port,
            answer,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    fn set(&self, a: Answer) {
        *self.answer.lock().expect("answer") = a;
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request and closes the connection.
fn serve(mut conn: TcpStream, answer: &Mutex<Answer>) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let req = String::from_utf8_lossy(&req).to_string();
    let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
    let auth = req.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("authorization").then(|| v.trim().to_string())
    });
    let file = |name: &str| std::fs::read(assets().join(name)).expect("asset");
    let (status, kind, body) = match path.as_str() {
        "/" => ("200 OK", "text/html; charset=utf-8", file("index.html")),
        "/assets/app.css" => ("200 OK", "text/css; charset=utf-8", file("app.css")),
        "/assets/app.js" => ("200 OK", "text/javascript; charset=utf-8", file("app.js")),
        "/api/overview" => {
            let json = |v: &Value| v.to_string().into_bytes();
            match &*answer.lock().expect("answer") {
                Answer::Overview(v) => ("200 OK", "application/json", json(v)),
                Answer::Down => ("503 Service Unavailable", "text/plain", b"stand-in is down".to_vec()),
                Answer::Token(t, v) if auth.as_deref() == Some(&format!("Bearer {t}")) => {
                    ("200 OK", "application/json", json(v))
                }
                Answer::Token(..) => ("401 Unauthorized", "text/plain", b"a bearer token is needed".to_vec()),
            }
        }
        _ => ("404 Not Found", "text/plain", b"not found".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nContent-Security-Policy: {CSP}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(&body));
}

/// The fixture, checked to be what mcrd sends: its rules, statistics,
/// workers, history and events are the control protocol's types, field for
/// field.
fn fixture() -> Value {
    let text = std::fs::read_to_string(assets().join("fixture-overview.json")).expect("fixture");
    let v: Value = serde_json::from_str(&text).expect("the fixture is JSON");
    let rules: Vec<RuleStatus> = serde_json::from_value(v["rules"].clone()).expect("rules as RuleStatus");
    assert_eq!(
        serde_json::to_value(&rules).expect("back"),
        v["rules"],
        "rules, field for field"
    );
    let stats: StatsReport = serde_json::from_value(v["stats"].clone()).expect("stats as StatsReport");
    assert_eq!(
        serde_json::to_value(&stats).expect("back"),
        v["stats"],
        "stats, field for field"
    );
    let workers: Vec<WorkerStatus> = serde_json::from_value(v["workers"].clone()).expect("workers as WorkerStatus");
    assert_eq!(
        serde_json::to_value(&workers).expect("back"),
        v["workers"],
        "workers, field for field"
    );
    let history: RateHistory = serde_json::from_value(v["history"].clone()).expect("history as RateHistory");
    assert_eq!(
        serde_json::to_value(&history).expect("back"),
        v["history"],
        "history, field for field"
    );
    let events: Vec<EventRecord> = serde_json::from_value(v["events"].clone()).expect("events as EventRecord");
    assert_eq!(
        serde_json::to_value(&events).expect("back"),
        v["events"],
        "events, field for field"
    );
    v
}

/// `o` with one more rule, a copy of its rule `i` named `name`.
fn with_copy(mut o: Value, i: usize, name: &str) -> Value {
    let mut status = o["rules"][i].clone();
    status["rule"]["name"] = json!(name);
    let mut stats = o["stats"]["rules"][i].clone();
    stats["name"] = json!(name);
    let history = o["history"]["rules"][o["rules"][i]["rule"]["name"].as_str().expect("name")].clone();
    o["rules"].as_array_mut().expect("rules").push(status);
    o["stats"]["rules"].as_array_mut().expect("stats").push(stats);
    o["history"]["rules"][name] = history;
    o
}

/// `o` without the rule `name`.
fn without(mut o: Value, name: &str) -> Value {
    o["rules"]
        .as_array_mut()
        .expect("rules")
        .retain(|r| r["rule"]["name"] != name);
    o["stats"]["rules"]
        .as_array_mut()
        .expect("stats")
        .retain(|r| r["name"] != name);
    o["history"]["rules"].as_object_mut().expect("history").remove(name);
    o
}

/// The width and height of a PNG file, checking its signature.
fn png_size(path: &Path) -> (u32, u32) {
    let png = std::fs::read(path).expect("screenshot");
    assert!(png.len() > 1000, "{} holds only {} bytes", path.display(), png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    (be(16), be(20))
}

fn updates(b: &mut Browser) -> u64 {
    b.eval("Number(document.getElementById('updated').dataset.updates)")
        .expect("updates")
        .as_u64()
        .expect("a count")
}

#[test]
fn the_page_shows_every_rule_and_follows_the_daemon() {
    // Chromium takes both cores while it starts and draws: a test that
    // measures traffic should not run beside it.
    let _lock = traffic_lock().expect("traffic lock");
    let mut tb = Testbed::new("browser-page").expect("test bed");
    let ns = tb.ns("web").expect("namespace");

    const MARKUP: &str = "feed<b>x</b>";
    let first = with_copy(fixture(), 0, MARKUP);
    let second = without(first.clone(), "radio-mix");
    let site = Site::start(&ns, Answer::Overview(first.clone()));
    let mut b = Browser::open(&ns, &site.url()).expect("open the page");
    b.wait_for(
        "Number(document.getElementById('updated').dataset.updates) >= 2",
        PATIENCE,
    )
    .expect("two updates");
    assert!(
        b.page_errors().is_empty(),
        "the page reported errors: {:?}",
        b.page_errors()
    );

    // Every rule, in order, by its name, with its rate.
    let shown = b
        .eval(
            "[...document.querySelectorAll('#rules [data-rule]')].map(r => ({
                key: r.dataset.rule,
                name: r.querySelector('.rule-name').textContent,
                pps: Number(r.querySelector('[data-pps]').dataset.pps),
            }))",
        )
        .expect("rules shown");
    let shown = shown.as_array().expect("a list");
    let want = first["stats"]["rules"].as_array().expect("rules");
    let names = |l: &[Value], key: &str| l.iter().map(|r| r[key].clone()).collect::<Vec<_>>();
    assert_eq!(names(shown, "key"), names(want, "name"), "rules shown, in order");
    assert_eq!(names(shown, "name"), names(want, "name"), "their names as text");
    for (s, w) in shown.iter().zip(want) {
        assert_eq!(s["pps"].as_f64(), w["pps"].as_f64(), "the rate of {}", w["name"]);
        if w["name"] != "promo-loop" {
            assert!(s["pps"].as_f64() > Some(0.0), "{s}");
        }
    }
    // A rule name is text, never markup.
    assert_eq!(
        b.eval("document.querySelectorAll('#rules b').length").expect("markup"),
        json!(0)
    );

    // The broken rule says why, and is marked as a problem.
    let broken = b
        .eval("document.querySelector('[data-rule=\"promo-loop\"]').innerText")
        .expect("broken rule");
    let broken = broken.as_str().expect("text");
    for says in [
        "problem",
        "not joined to 239.1.1.9 on veth5: interface veth5 does not exist",
        "input interface veth5 does not exist",
    ] {
        assert!(broken.contains(says), "{says:?} not in {broken:?}");
    }
    // An SRT output shows its listener and each connection, a RIST one
    // its call and peer.
    let news = b
        .eval("document.querySelector('[data-rule=\"news-hd\"]').innerText")
        .expect("news-hd");
    let news = news.as_str().expect("text");
    for says in [
        "srt://0.0.0.0:9000,mode=listener,latency=400,streamid=news-hd",
        "SRT listening",
        "1 connection",
        "refused not found 3",
        "203.0.113.5:51234 news-hd",
        "rtt 81.2 ms",
        "retransmitted 8,611",
        "latency 400 ms",
        // And a RIST output its peer.
        "rist://198.51.100.7:8200,mode=caller,buffer=400",
        "RIST connected",
        "198.51.100.7:8200 playout-b",
        "rtt 42.0 ms",
        "retransmitted 5,102",
    ] {
        assert!(news.contains(says), "{says:?} not in {news:?}");
    }
    // An arbitrated feed: each line's own figures and its place in the
    // race.
    let itch = b
        .eval("document.querySelector('[data-rule=\"itch-ab\"]').innerText")
        .expect("itch-ab");
    let itch = itch.as_str().expect("text");
    for says in [
        "arbitrate,framing=moldudp64",
        "lost 3",
        "copies 900,020",
        "2,703,699 messages",
        "gaps 2,511",
        "malformed 2",
        "behind the first: median 1.54",
        "never behind the first lately",
    ] {
        assert!(itch.contains(says), "{says:?} not in {itch:?}");
    }
    let state = b
        .eval("document.querySelector('[data-rule=\"radio-mix\"]').dataset.state")
        .expect("state");
    assert_eq!(state, json!("degraded"), "a failover on its backup");

    // Workers, newest event first, the header.
    assert_eq!(
        b.eval("document.querySelectorAll('#workers tbody tr').length")
            .expect("workers"),
        json!(2)
    );
    let events = b
        .eval("[...document.querySelectorAll('#events li .message')].map(e => e.textContent)")
        .expect("events");
    let mut messages: Vec<Value> = first["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["message"].clone())
        .collect();
    messages.reverse();
    assert_eq!(events, json!(messages));
    assert_eq!(
        b.eval("document.getElementById('version').textContent")
            .expect("version"),
        json!("v0.1.0")
    );

    let dir = screenshots();
    b.screenshot(&dir.join("fixture-page.png")).expect("screenshot");
    assert_eq!(png_size(&dir.join("fixture-page.png")).0, 1280);
    b.prefer_color_scheme("dark").expect("dark");
    b.screenshot(&dir.join("fixture-page-dark.png"))
        .expect("dark screenshot");
    png_size(&dir.join("fixture-page-dark.png"));
    b.prefer_color_scheme("light").expect("light");

    // A phone: one card per rule, no table head, nothing wider than it.
    b.set_viewport(390, 844, true).expect("phone");
    let layout = b
        .eval(
            "({head: getComputedStyle(document.querySelector('#rules thead')).display,
               row: getComputedStyle(document.querySelector('#rules [data-rule]')).display,
               width: document.documentElement.scrollWidth})",
        )
        .expect("phone layout");
    assert_eq!(layout, json!({"head": "none", "row": "grid", "width": 390}));
    b.screenshot(&dir.join("fixture-page-phone.png"))
        .expect("phone screenshot");
    assert_eq!(png_size(&dir.join("fixture-page-phone.png")).0, 390);
    b.set_viewport(1280, 900, false).expect("desktop");

    // A rule removed at the daemon leaves the page at the next update,
    // without a reload.
    b.eval("window.sameDocument = true").expect("mark the document");
    let before = updates(&mut b);
    site.set(Answer::Overview(second.clone()));
    b.wait_for(
        &format!(
            "!document.querySelector('[data-rule=\"radio-mix\"]') &&
             Number(document.getElementById('updated').dataset.updates) > {before}"
        ),
        PATIENCE,
    )
    .expect("the removed rule goes");
    assert_eq!(
        b.eval("window.sameDocument === true").expect("same document"),
        json!(true)
    );
    let count = b
        .eval("document.querySelectorAll('#rules [data-rule]').length")
        .expect("rows");
    assert_eq!(count, json!(second["rules"].as_array().expect("rules").len()));

    // A daemon that does not answer is said so, and the page keeps asking.
    site.set(Answer::Down);
    let banner = b
        .wait_for(
            "!document.getElementById('banner').hidden && document.getElementById('banner').textContent",
            PATIENCE,
        )
        .expect("the banner");
    assert!(
        banner
            .as_str()
            .expect("text")
            .starts_with("mcrd not answering: HTTP 503"),
        "{banner}"
    );

    // A daemon that wants a token: the page asks for it and sends it.
    site.set(Answer::Token("s3cret".into(), first.clone()));
    b.wait_for("!document.getElementById('auth').hidden", PATIENCE)
        .expect("the token field");
    let before = updates(&mut b);
    b.eval(
        "document.getElementById('token').value = 's3cret';
         document.getElementById('auth').requestSubmit()",
    )
    .expect("submit the token");
    b.wait_for(
        &format!(
            "document.getElementById('banner').hidden &&
             Number(document.getElementById('updated').dataset.updates) > {before}"
        ),
        PATIENCE,
    )
    .expect("updates with the token");
    assert_eq!(
        b.eval("sessionStorage.getItem('mcr-token')").expect("stored"),
        json!("s3cret")
    );
    b.wait_for("document.querySelector('[data-rule=\"radio-mix\"]') !== null", PATIENCE)
        .expect("the rule is back");
}

#[test]
fn a_script_error_and_a_timeout_say_what_happened() {
    let _lock = traffic_lock().expect("traffic lock");
    let mut tb = Testbed::new("browser-errors").expect("test bed");
    let ns = tb.ns("web").expect("namespace");
    let site = Site::start(&ns, Answer::Down);
    let mut b = Browser::open(&ns, &site.url()).expect("open the page");
    let e = b.eval("null.x").expect_err("a TypeError");
    assert!(e.to_string().contains("TypeError"), "{e}");
    assert_eq!(b.eval("Promise.resolve(6 * 7)").expect("awaited"), json!(42));
    let e = b
        .wait_for("document.title === 'never'", Duration::from_millis(300))
        .expect_err("never true");
    assert!(e.to_string().contains("was last false"), "{e}");
    // What the Content-Security-Policy refuses is refused, and counted as an
    // error of the page (so a page without errors broke no rule of it).
    b.eval("document.head.append(Object.assign(document.createElement('script'), {textContent: 'window.inline = 1'}))")
        .expect("an inline script");
    let start = std::time::Instant::now();
    while !b.page_errors().iter().any(|e| e.contains("Content Security Policy")) {
        assert!(
            start.elapsed() < PATIENCE,
            "no violation reported: {:?}",
            b.page_errors()
        );
        std::thread::sleep(Duration::from_millis(100));
        b.eval("0").expect("poll");
    }
    assert_eq!(b.eval("window.inline === undefined").expect("refused"), json!(true));
    // The page said that mcrd failed to answer (and the browser logged the 503).
    b.wait_for("!document.getElementById('banner').hidden", PATIENCE)
        .expect("the banner");
    assert!(
        b.page_errors().iter().any(|e| e.contains("503")),
        "{:?}",
        b.page_errors()
    );

    // Dropped, it leaves nothing of chromium running (its helpers too),
    // while the namespace is still there.
    let group = b.pid();
    assert!(running_in_group(group).len() > 1, "chromium and its helpers");
    drop(b);
    let start = std::time::Instant::now();
    while !running_in_group(group).is_empty() {
        assert!(
            start.elapsed() < PATIENCE,
            "left running: {:?}",
            running_in_group(group)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes of group `pgid` that still run (zombies do not count).
fn running_in_group(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // After the command name: state, ppid, pgrp.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.first() != Some(&"Z") && f.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid)
        })
        .collect()
}

#[test]
fn a_thousand_rules_are_shown_and_filtered() {
    let _lock = traffic_lock().expect("traffic lock");
    let mut tb = Testbed::new("browser-many").expect("test bed");
    let ns = tb.ns("web").expect("namespace");
    let base = fixture();
    let kinds = base["rules"].as_array().expect("rules").len();
    let many = copies(&base, 1000);
    let site = Site::start(&ns, Answer::Overview(many.clone()));
    let mut b = Browser::open(&ns, &site.url()).expect("open the page");
    b.wait_for(
        "Number(document.getElementById('updated').dataset.updates) >= 3",
        PATIENCE,
    )
    .expect("three updates");
    assert_eq!(
        b.eval("document.querySelectorAll('#rules [data-rule]').length")
            .expect("rows"),
        json!(1000)
    );
    // How long an update of a thousand rules takes to show, for the record
    // (not a pass mark).
    let ms = b
        .eval("document.getElementById('updated').dataset.renderMs")
        .expect("time");
    eprintln!("an update of 1000 rules took {} ms to show", ms.as_str().unwrap_or("?"));

    let visible = |b: &mut Browser, filter: &str| {
        b.eval(&format!(
            "(() => {{
                const f = document.getElementById('filter');
                f.value = {filter:?};
                f.dispatchEvent(new Event('input'));
                return [...document.querySelectorAll('#rules [data-rule]')]
                    .filter(r => !r.hidden)
                    .map(r => r.dataset.rule);
            }})()"
        ))
        .expect("filter")
    };
    assert_eq!(visible(&mut b, "feed-0042"), json!(["feed-0042"]));
    // Every copy of the broken rule (the fifth) by its problem's text.
    let broken: Vec<String> = (0..1000)
        .filter(|i| i % kinds == 4)
        .map(|i| format!("feed-{i:04}"))
        .collect();
    assert_eq!(visible(&mut b, "VETH5 does not"), json!(broken));
    assert_eq!(visible(&mut b, "").as_array().expect("all").len(), 1000);
    assert!(b.page_errors().is_empty(), "{:?}", b.page_errors());
}

/// `base` with its rules replaced by `n` copies of them in turn, named
/// feed-0000 on.
fn copies(base: &Value, n: usize) -> Value {
    let rules = base["rules"].as_array().expect("rules");
    let stats = base["stats"]["rules"].as_array().expect("stats");
    let (mut r_out, mut s_out, mut h_out) = (Vec::new(), Vec::new(), serde_json::Map::new());
    for i in 0..n {
        let (k, name) = (i % rules.len(), format!("feed-{i:04}"));
        let mut r = rules[k].clone();
        r["rule"]["name"] = json!(name);
        let mut st = stats[k].clone();
        st["name"] = json!(name);
        let history = &base["history"]["rules"][rules[k]["rule"]["name"].as_str().expect("name")];
        h_out.insert(name, history.clone());
        r_out.push(r);
        s_out.push(st);
    }
    let mut o = base.clone();
    o["rules"] = Value::Array(r_out);
    o["stats"]["rules"] = Value::Array(s_out);
    o["history"]["rules"] = Value::Object(h_out);
    o
}
