//! Running MCR as an operator does: from a config file, reloaded while
//! streams flow, saved back, scraped by Prometheus, watched, and started
//! by systemd (readiness notifications).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use mcr_core::control::Reply;
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Receiver, send};
use mcr_testbed::{Signal, TempDir, bin, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

/// `[[rule]]` tables: (name, input, outputs).
fn rules_toml(rules: &[(String, String, Vec<String>)]) -> String {
    let mut t = String::new();
    for (name, input, outputs) in rules {
        let outs: Vec<String> = outputs.iter().map(|o| format!("\"{o}\"")).collect();
        t.push_str(&format!(
            "[[rule]]\nname = \"{name}\"\ninput = \"{input}\"\noutputs = [{}]\n\n",
            outs.join(", ")
        ));
    }
    t
}

/// Rule `s{i}`: 239.1.1.i:5000+i on veth1 to 239.10.1.i:6000+i on veth2.
fn stream_rule(i: u32) -> (String, String, Vec<String>) {
    (
        format!("s{i}"),
        format!("veth1:239.1.1.{i}:{}", 5000 + i),
        vec![format!("veth2:239.10.1.{i}:{}", 6000 + i)],
    )
}

fn list_rules(relay: &Relay) -> Vec<mcr_core::rule::Rule> {
    relay.rules().expect("list").into_iter().map(|r| r.rule).collect()
}

/// The daemon's log once it holds `needle` (its stderr is collected by a
/// thread, so a line may show up a little after the fact).
fn log_with(relay: &Relay, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = relay.log();
        if log.contains(needle) || Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const HEAD: &str = "[daemon]\nlog_level = \"info\"\n\n";

#[test]
fn a_reload_applies_only_the_difference_and_untouched_streams_lose_nothing() {
    const N: u64 = 10_000;
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("ops-reload").expect("chain");
    let dir = TempDir::new("ops-reload").expect("temp dir");
    let before: Vec<_> = (1..=10).map(stream_rule).collect();
    let path = dir
        .file("mcrd.toml", &format!("{HEAD}{}", rules_toml(&before)))
        .expect("write file");
    let path_s = path.to_str().expect("utf-8 path");
    let relay = Relay::start(&c.relay, &["--config", path_s]).expect("mcrd");
    assert_eq!(list_rules(&relay).len(), 10, "the file's rules run from the start");

    // The new file: s9 changed (a new output group), s10 removed, s11 added,
    // and s8 renamed (the same stream under a new name: its group changes
    // hands and must not be left for a moment).
    let mut after: Vec<_> = (1..=7).map(stream_rule).collect();
    let mut renamed = stream_rule(8);
    renamed.0 = "s8-renamed".into();
    after.push(renamed);
    after.push((
        "s9".into(),
        "veth1:239.1.1.9:5009".into(),
        vec!["veth2:239.10.2.9:7009".into()],
    ));
    after.push(stream_rule(11));

    let rx = Receiver::start(
        &c.sink,
        &[
            "-s",
            "239.10.1.1+11:6001+",
            "-i",
            Chain::SINK_IF,
            "--idle-timeout",
            "2s",
        ],
    )
    .expect("recv");
    // s9's new output carries stream 8 (the ninth) of the sender.
    let rx9 = Receiver::start(
        &c.sink,
        &[
            "-s",
            "239.10.2.9:7009",
            "-i",
            Chain::SINK_IF,
            "--ids",
            "8",
            "--idle-timeout",
            "2s",
        ],
    )
    .expect("recv s9");
    let gen_ns = c.generator.clone();
    let sender = std::thread::spawn(move || {
        send(
            &gen_ns,
            &[
                "-s",
                "239.1.1.1+11:5001+",
                "-i",
                Chain::GEN_IF,
                "--count",
                &N.to_string(),
                "--rate",
                "22k",
            ],
            MINUTES,
        )
        .expect("send")
    });
    // Reload once every stream flows (about 0.7 s into a 4.5 s send).
    let deadline = Instant::now() + MINUTES;
    while relay.stats().expect("stats").rules.iter().any(|r| r.packets < 1500) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&path, format!("{HEAD}{}", rules_toml(&after))).expect("new file");
    let reply = relay.ask(&["reload"]).expect("reload");
    let Reply::Reloaded {
        added,
        changed,
        removed,
        unchanged,
        applied,
        ..
    } = reply
    else {
        panic!("not reloaded: {reply:?}");
    };
    assert_eq!(
        (added, changed, removed, unchanged, applied),
        (
            vec!["s8-renamed".to_string(), "s11".to_string()],
            vec!["s9".to_string()],
            vec!["s8".to_string(), "s10".to_string()],
            7,
            true
        )
    );
    assert_eq!(sender.join().expect("sender").packets, 11 * N);
    let got = rx.finish(MINUTES).expect("recv done");
    let got9 = rx9.finish(MINUTES).expect("recv s9 done");
    let streams = &got.report.streams;
    assert_eq!(streams.len(), 11);
    // The 7 untouched streams and the renamed one: every packet, in order,
    // once.
    for (i, s) in streams.iter().enumerate().take(8) {
        assert!(s.problems(Some(N)).is_empty(), "stream {i}: {:?}", s.problems(Some(N)));
        assert_eq!(s.received, N, "stream {i}");
    }
    // s9: a clean prefix on the old output, the rest on the new one,
    // nothing lost or doubled at the switch.
    let (old9, new9) = (&streams[8], &got9.report.total);
    assert_eq!((old9.duplicated, old9.reordered), (0, 0), "{old9:?}");
    assert_eq!(old9.highest_seq, Some(old9.received - 1), "{old9:?}");
    assert_eq!((new9.duplicated, new9.reordered), (0, 0), "{new9:?}");
    assert_eq!(new9.highest_seq, Some(N - 1), "{new9:?}");
    assert_eq!(old9.received + new9.received, N, "old {old9:?}\nnew {new9:?}");
    // s10: a clean prefix, then nothing; s11: nothing, then a clean suffix.
    let (s10, s11) = (&streams[9], &streams[10]);
    assert!(s10.received > 0 && s10.received < N, "{s10:?}");
    assert_eq!(
        (s10.duplicated, s10.reordered, s10.highest_seq),
        (0, 0, Some(s10.received - 1))
    );
    assert!(s11.received > 0 && s11.received < N, "{s11:?}");
    assert_eq!((s11.duplicated, s11.reordered, s11.highest_seq), (0, 0, Some(N - 1)));
    // What did not reach the sink had no rule at the time: nothing else.
    let st = relay.stats().expect("stats");
    let no_rule: u64 = st.workers.iter().map(|w| w.drops["no_rule"]).sum();
    assert_eq!(no_rule, (N - s10.received) + (N - s11.received));
    // The untouched rules kept their counters through the reload.
    for r in st.rules.iter().filter(|r| r.name.len() == 2) {
        assert_eq!(r.packets, N, "rule {}", r.name);
    }
    let mut names: Vec<String> = list_rules(&relay).into_iter().map(|r| r.name).collect();
    names.sort();
    let mut want: Vec<String> = after.iter().map(|r| r.0.clone()).collect();
    want.sort();
    assert_eq!(names, want);
    relay.stop().expect("stopped");
}

#[test]
fn a_broken_file_on_reload_changes_nothing_and_forwarding_goes_on() {
    const N: u64 = 8000;
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("ops-broken").expect("chain");
    let dir = TempDir::new("ops-broken").expect("temp dir");
    let good = format!("{HEAD}{}", rules_toml(&[stream_rule(1), stream_rule(2)]));
    let path = dir.file("mcrd.toml", &good).expect("write file");
    let path_s = path.to_str().expect("utf-8 path");
    let mut relay = Relay::start(&c.relay, &["--config", path_s]).expect("mcrd");
    let rules_before = list_rules(&relay);
    let rx = Receiver::start(
        &c.sink,
        &[
            "-s",
            "239.10.1.1+2:6001+",
            "-i",
            Chain::SINK_IF,
            "--expect",
            &N.to_string(),
        ],
    )
    .expect("recv");
    let gen_ns = c.generator.clone();
    let sender = std::thread::spawn(move || {
        send(
            &gen_ns,
            &[
                "-s",
                "239.1.1.1+2:5001+",
                "-i",
                Chain::GEN_IF,
                "--count",
                &N.to_string(),
                "--rate",
                "4k",
            ],
            MINUTES,
        )
        .expect("send")
    });
    let softnet_before = std::fs::read_to_string("/proc/net/softnet_stat");
    std::thread::sleep(Duration::from_millis(500));
    // Each kind of mistake, by `mcrctl reload` and by SIGHUP.
    let mistakes = [
        (
            format!("{good}[[rule]]\nname = \"s3\"\ninput = \"veth1:239.1.1.3:5003\"\n"),
            ":14:1: missing field `outputs`",
        ),
        (good.replace("log_level", "loglevel"), ":2:1: unknown field `loglevel`"),
        (good.replace("239.10.1.2:6002", "239.10.1.300:6002"), ":12:"),
        (
            good.replace("name = \"s2\"", "name = \"s1\""),
            ":10:8: rule name `s1` is used twice",
        ),
        (
            good.replace("veth2:239.10.1.1:6001", "veth1:239.1.1.1:5001"),
            "outputs[0]: veth1 239.1.1.1:5001 is this rule's own input: a loop",
        ),
    ];
    for (text, want) in &mistakes {
        std::fs::write(&path, text).expect("write");
        let out = relay.ctl(&["reload"]).expect("mcrctl");
        assert_eq!(out.code, Some(1), "refused: {out:?}");
        assert!(
            out.stderr.contains(path_s) && out.stderr.contains(want),
            "want `{want}`: {}",
            out.stderr
        );
        // SIGHUP too: the refusal is logged (wait for it, as signals sent
        // while one is pending merge into one).
        let refusals = relay.log().matches("reload refused").count();
        relay.signal(Signal::Hup).expect("SIGHUP");
        let deadline = Instant::now() + Duration::from_secs(20);
        while relay.log().matches("reload refused").count() == refusals && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = relay.log();
        let last = log.lines().rfind(|l| l.contains("reload refused")).unwrap_or_default();
        assert!(last.contains(want), "SIGHUP with `{want}`: {log}");
    }
    // The daemon runs as before.
    assert_eq!(
        relay.log().matches("reload refused").count(),
        2 * mistakes.len(),
        "{}",
        relay.log()
    );
    assert_eq!(list_rules(&relay), rules_before);
    assert_eq!(sender.join().expect("sender").packets, 2 * N);
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(
        got.code,
        Some(0),
        "{:?}\nstats: {:?}\nworkers: {:?}\n{}\n{:?}\n{:?}\n{:?}",
        got.report.problems,
        relay.stats().map(|s| s.workers),
        relay.workers(),
        relay.log(),
        c.relay.ip(&["-s", "link", "show", Chain::RELAY_IN_IF]),
        c.generator.ip(&["-s", "link", "show", Chain::GEN_IF]),
        (softnet_before, std::fs::read_to_string("/proc/net/softnet_stat")),
    );
    for s in &got.report.streams {
        assert!(s.problems(Some(N)).is_empty(), "{:?}", s.problems(Some(N)));
    }
    // A daemon refuses to start on a broken file, and says where.
    std::fs::write(&path, &mistakes[1].0).expect("write");
    let out = c
        .relay
        .command(bin("mcrd").expect("mcrd"))
        .args(["--config", path_s, "--control-socket", "/tmp/ops-broken-second.sock"])
        .output()
        .expect("run mcrd");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{path_s}:2:1: unknown field `loglevel`")) && err.contains("not starting"),
        "{err}"
    );
    relay.stop().expect("stopped");
}

#[test]
fn check_config_says_valid_or_where_the_mistake_is() {
    let dir = TempDir::new("ops-check").expect("temp dir");
    let mcrd = bin("mcrd").expect("mcrd");
    let good = dir.file("good.toml", "[daemon]\nworkers = 1\n").expect("write file");
    let out = std::process::Command::new(&mcrd)
        .arg("--check-config")
        .arg(&good)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid, 0 rule(s)"));
    let bad = dir
        .file("bad.toml", "[daemon]\nworkers = 1\nmetrics_listen = \"nowhere\"\n")
        .expect("write file");
    let out = std::process::Command::new(&mcrd)
        .arg("--check-config")
        .arg(&bad)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}:3:18: `nowhere` is not an address and port", bad.display())),
        "{err}"
    );
    let missing = dir.path().join("missing.toml");
    let out = std::process::Command::new(&mcrd)
        .arg("--check-config")
        .arg(&missing)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn saving_and_loading_gives_back_exactly_the_running_rules() {
    let c = Chain::new("ops-save").expect("chain");
    let dir = TempDir::new("ops-save").expect("temp dir");
    let head = "[daemon]\nworkers = 1\nlog_level = \"debug\"\nring_mb = 16\n";
    let path = dir.file("mcrd.toml", head).expect("write file");
    let path_s = path.to_str().expect("utf-8 path");
    let relay = Relay::start(&c.relay, &["--config", path_s]).expect("mcrd");
    for args in [
        vec![
            "add",
            "plain",
            "--input",
            "veth1:239.1.1.1:5001",
            "--output",
            "veth2:239.10.1.1:6001",
        ],
        vec![
            "add",
            "ssm-fan",
            "--input",
            "veth1:239.1.1.2:5002,source=10.0.0.9",
            "--output",
            "veth2:239.10.1.2:6002,ttl=8,source=keep",
            "--output",
            "veth2:239.10.1.3:6003,source=10.9.9.9",
            "--output",
            "veth2:10.0.1.2:7000",
        ],
        vec![
            "add",
            "third",
            "--input",
            "veth1:239.1.1.3:5003",
            "--output",
            "veth2:239.10.1.9:6009,ttl=1",
        ],
    ] {
        relay.ctl_ok(&args).expect("add");
    }
    let running = list_rules(&relay);
    // To the config file itself, and elsewhere with --to (a relative path
    // is made absolute by mcrctl).
    let saved = relay.ask(&["save"]).expect("save");
    assert_eq!(
        saved,
        Reply::Saved {
            path: path.clone(),
            rules: 3
        }
    );
    let other = dir.path().join("copy.toml");
    let out = relay
        .ctl(&["save", "--to", other.to_str().expect("utf-8")])
        .expect("save --to");
    assert_eq!(out.code, Some(0), "{out:?}");
    let text = std::fs::read_to_string(&path).expect("saved file");
    assert_eq!(std::fs::read_to_string(&other).expect("copy"), text);
    for kept in ["workers = 1", "log_level = \"debug\"", "ring_mb = 16"] {
        assert!(text.contains(kept), "the [daemon] settings are kept: {text}");
    }
    let parsed = mcr_core::config::Config::parse(&text).expect("the saved file parses");
    assert_eq!(parsed.rules, running);
    let check = c
        .relay
        .command(bin("mcrd").expect("mcrd"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .expect("check");
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    relay.stop().expect("stopped");
    // A new daemon from the saved file runs exactly those rules.
    let again = Relay::start(&c.relay, &["--config", path_s]).expect("mcrd again");
    assert_eq!(list_rules(&again), running);
    // Reloading the file it was started from changes nothing.
    let reply = again.ask(&["reload"]).expect("reload");
    assert!(
        matches!(&reply, Reply::Reloaded { added, changed, removed, unchanged: 3, .. }
            if added.is_empty() && changed.is_empty() && removed.is_empty()),
        "{reply:?}"
    );
    again.stop().expect("stopped");
    // Without a config file there is nowhere mcrd may save; it prints.
    let bare = Relay::start(&c.relay, &[]).expect("mcrd without config");
    let out = bare.ctl(&["save"]).expect("save");
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("save --print"), "{}", out.stderr);
    let out = bare
        .ctl(&["save", "--to", other.to_str().expect("utf-8")])
        .expect("save --to");
    assert_eq!(out.code, Some(1), "{out:?}");
    bare.add_rule("only", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    let out = bare.ctl(&["save", "--print"]).expect("save --print");
    assert_eq!(out.code, Some(0), "{out:?}");
    let printed = mcr_core::config::Config::parse(&out.stdout).expect("the printed file parses");
    assert_eq!(
        printed.rules,
        bare.rules()
            .expect("list")
            .into_iter()
            .map(|r| r.rule)
            .collect::<Vec<_>>()
    );
    let out = bare.ctl(&["reload"]).expect("reload");
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("without a config file"), "{}", out.stderr);
    bare.stop().expect("stopped");
}

#[test]
fn saving_writes_only_in_the_config_files_directory_and_never_through_a_link() {
    let c = Chain::new("ops-confine").expect("chain");
    let dir = TempDir::new("ops-confine").expect("temp dir");
    let elsewhere = TempDir::new("ops-confine-else").expect("temp dir");
    let path = dir.file("mcrd.toml", "[daemon]\nworkers = 1\n").expect("write file");
    let victim = elsewhere.file("victim", "keep\n").expect("victim");
    let relay = Relay::start(&c.relay, &["--config", path.to_str().expect("utf-8")]).expect("mcrd");
    relay
        .add_rule("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    let before = std::fs::read_to_string(&path).expect("config");
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link")).expect("dir link");
    let outside = [
        elsewhere.path().join("copy.toml"),
        dir.path()
            .join("..")
            .join(elsewhere.path().file_name().expect("name"))
            .join("copy.toml"),
        dir.path().join("link").join("copy.toml"),
        victim.clone(),
        std::path::PathBuf::from("/etc/mcr-test-never-written.toml"),
    ];
    for to in &outside {
        let out = relay
            .ctl(&["save", "--to", to.to_str().expect("utf-8")])
            .expect("save --to");
        assert_eq!(out.code, Some(1), "{} must be refused: {out:?}", to.display());
        assert!(out.stderr.contains("saves only in"), "{}", out.stderr);
        assert!(
            out.stderr.contains("save --print"),
            "the message says what to do: {}",
            out.stderr
        );
    }
    assert!(!elsewhere.path().join("copy.toml").exists(), "nothing written outside");
    assert!(!std::path::Path::new("/etc/mcr-test-never-written.toml").exists());
    // A link planted where the temporary file goes is neither followed nor
    // replaced: the save is refused and says why.
    let tmp = dir.path().join(format!(".mcrd.toml.{}.tmp", relay.pid()));
    std::os::unix::fs::symlink(&victim, &tmp).expect("planted link");
    let out = relay.ctl(&["save"]).expect("save");
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("in the way"), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "keep\n",
        "the link's target is untouched"
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("config"),
        before,
        "the config file is untouched"
    );
    assert!(std::fs::symlink_metadata(&tmp).expect("link").file_type().is_symlink());
    // With the link gone, the same save works, and a copy beside the file.
    std::fs::remove_file(&tmp).expect("remove link");
    relay.ctl_ok(&["save"]).expect("save");
    relay
        .ctl_ok(&["save", "--to", dir.path().join("copy.toml").to_str().expect("utf-8")])
        .expect("save --to beside");
    let saved = std::fs::read_to_string(&path).expect("config");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("copy.toml")).expect("copy"),
        saved
    );
    assert_eq!(mcr_core::config::Config::parse(&saved).expect("parses").rules.len(), 1);
    relay.stop().expect("stopped");
}

/// `GET /metrics` from inside `ns` (the daemon listens on its loopback).
fn scrape(ns: &str, addr: &str) -> String {
    let (ns, addr) = (ns.to_string(), addr.to_string());
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&ns).expect("enter the namespace");
        let mut s = std::net::TcpStream::connect(&addr).expect("connect to /metrics");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            .expect("request");
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("response");
        answer
    })
    .join()
    .expect("scrape thread")
}

/// The value of the sample `name{labels}` in a scrape.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no `{series}` in\n{text}"))
        .parse()
        .expect("a number")
}

#[test]
fn metrics_pass_promtool_and_match_stats_and_what_was_received() {
    const N: u64 = 5000;
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("ops-metrics").expect("chain");
    let relay = Relay::start(&c.relay, &["--metrics-listen", "127.0.0.1:9808"]).expect("mcrd");
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    let rx = c.expect_at_sink("239.10.1.1:6001", N, &[]).expect("recv");
    send(
        &c.generator,
        &[
            "-s",
            "239.1.1.1:5001",
            "-i",
            Chain::GEN_IF,
            "--count",
            &N.to_string(),
            "--rate",
            "5k",
            "--size",
            "500",
        ],
        MINUTES,
    )
    .expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(got.report.total.received, N);

    // The worker's CPU time is sampled once a second: wait for a sample.
    let deadline = Instant::now() + MINUTES;
    while relay.stats().expect("stats").workers[0].cpu_s == 0.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let answer = scrape(c.relay.name(), "127.0.0.1:9808");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    // Prometheus' own linter.
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/deps installs it)");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("feed promtool");
    let checked = promtool.wait_with_output().expect("promtool ran");
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool: {}{}\n{body}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    // The same numbers as `mcrctl stats` and as the sink received.
    let st = relay.stats().expect("stats");
    let out = &st.rules[0].outputs[0];
    let series = "{rule=\"feed\",output=\"veth2:239.10.1.1:6001\"}";
    assert_eq!(sample(body, &format!("mcr_output_packets_total{series}")), N as f64);
    assert_eq!(out.packets, N);
    assert_eq!(
        sample(body, &format!("mcr_output_bytes_total{series}")),
        (N * 500) as f64
    );
    assert_eq!(out.bytes, N * 500);
    assert_eq!(got.report.total.bytes, N * 500);
    let rule = "{rule=\"feed\",input=\"veth1:239.1.1.1:5001\"}";
    assert_eq!(
        sample(body, &format!("mcr_rule_packets_total{rule}")),
        st.rules[0].packets as f64
    );
    assert_eq!(
        sample(
            body,
            "mcr_membership_joined{rule=\"feed\",interface=\"veth1\",group=\"239.1.1.1\",source=\"\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(body, "mcr_worker_rx_frames_total{worker=\"0\"}"),
        st.workers[0].rx_frames as f64
    );
    assert!(st.workers[0].cpu_s > 0.0, "the worker's CPU time is sampled");
    assert!(sample(body, "mcr_worker_cpu_seconds_total{worker=\"0\"}") > 0.0);
    assert_eq!(sample(body, "mcr_rules"), 1.0);
    assert_eq!(sample(body, "mcr_worker_up{worker=\"0\"}"), 1.0);
    relay.stop().expect("stopped");
}

#[test]
fn watch_shows_every_rule_with_its_state_and_stats_json_is_one_object() {
    let c = Chain::new("ops-watch").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    let out = relay
        .ctl_ok(&["watch", "--count", "2", "--interval", "0.2"])
        .expect("watch");
    assert_eq!(out.matches("mcrctl watch").count(), 2, "two screens: {out}");
    assert!(
        out.contains("feed") && out.contains("-> veth2:239.10.1.1:6001"),
        "{out}"
    );
    assert!(out.contains("idle (no packets)"), "{out}");
    let lines = relay
        .ctl_ok(&["--json", "watch", "--count", "3", "--interval", "0.1"])
        .expect("watch --json");
    assert_eq!(lines.lines().count(), 3, "{lines}");
    for l in lines.lines() {
        let r: mcr_core::control::Response = serde_json::from_str(l).expect("a response per line");
        assert!(matches!(r.reply, Reply::Stats(_)));
    }
    let once = relay.ctl_ok(&["stats", "--json"]).expect("stats --json");
    let r: mcr_core::control::Response = serde_json::from_str(once.trim()).expect("one JSON object");
    let Reply::Stats(s) = r.reply else { panic!("not stats") };
    assert_eq!(s.rules[0].name, "feed");
    let bad = relay.ctl(&["watch", "--interval", "0.01"]).expect("watch");
    assert_eq!(bad.code, Some(2), "{bad:?}");
    relay.stop().expect("stopped");
}

/// Reads the readiness messages mcrd sends to `NOTIFY_SOCKET`.
fn notifications(sock: &std::os::unix::net::UnixDatagram, until: &str) -> Vec<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            let done = m.contains(until);
            got.push(m);
            if done {
                break;
            }
        }
    }
    got
}

#[test]
fn systemd_is_told_ready_reloading_and_stopping() {
    let c = Chain::new("ops-notify").expect("chain");
    let dir = TempDir::new("ops-notify").expect("temp dir");
    let path = dir
        .file("mcrd.toml", &format!("{HEAD}{}", rules_toml(&[stream_rule(1)])))
        .expect("write file");
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("notify socket");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut relay = Relay::start_with_env(
        &c.relay,
        &["--config", path.to_str().expect("utf-8")],
        &[("NOTIFY_SOCKET", sock_path.to_str().expect("utf-8"))],
    )
    .expect("mcrd");
    let ready = notifications(&sock, "READY=1");
    assert!(
        ready
            .last()
            .is_some_and(|m| m.contains("READY=1") && m.contains("1 rule(s)")),
        "{ready:?}"
    );
    assert!(
        ready.iter().any(|m| m.contains(&format!("MAINPID={}", relay.pid()))),
        "{ready:?}"
    );
    std::fs::write(
        &path,
        format!("{HEAD}{}", rules_toml(&[stream_rule(1), stream_rule(2)])),
    )
    .expect("write");
    relay.signal(Signal::Hup).expect("SIGHUP");
    let reload = notifications(&sock, "READY=1");
    assert!(
        reload
            .first()
            .is_some_and(|m| m.contains("RELOADING=1") && m.contains("MONOTONIC_USEC=")),
        "{reload:?}"
    );
    assert!(reload.last().is_some_and(|m| m.contains("READY=1")), "{reload:?}");
    assert_eq!(list_rules(&relay).len(), 2, "SIGHUP reloaded the file");
    let log = log_with(&relay, "reloaded");
    assert!(log.contains("reloaded"), "{log}");
    relay.stop().expect("stopped");
    let stopping = notifications(&sock, "STOPPING=1");
    assert!(stopping.iter().any(|m| m.contains("STOPPING=1")), "{stopping:?}");
}

#[test]
fn logs_can_be_json_or_journal_lines() {
    let c = Chain::new("ops-logs").expect("chain");
    let relay = Relay::start(&c.relay, &["--log-format", "json"]).expect("mcrd");
    let log = log_with(&relay, "running");
    let line = log.lines().find(|l| l.contains("running")).expect("a start line");
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON object per line");
    assert_eq!(v["level"], "INFO", "{line}");
    assert!(
        v["fields"]["message"].as_str().is_some_and(|m| m.contains("running")),
        "{line}"
    );
    relay.stop().expect("stopped");
    let relay = Relay::start_with_env(&c.relay, &[], &[("JOURNAL_STREAM", "8:1234")]).expect("mcrd");
    let log = log_with(&relay, "running");
    assert!(
        log.lines().any(|l| l.starts_with("<6>") && l.contains("running")),
        "{log}"
    );
    relay.stop().expect("stopped");
}

#[test]
fn completions_and_manual_pages_come_from_the_command_line_definitions() {
    let dir = TempDir::new("ops-man").expect("temp dir");
    let mcrctl = bin("mcrctl").expect("mcrctl");
    for shell in ["bash", "zsh", "fish"] {
        let out = std::process::Command::new(&mcrctl)
            .args(["completions", shell])
            .output()
            .expect("run");
        assert!(out.status.success());
        let script = String::from_utf8_lossy(&out.stdout);
        for cmd in ["reload", "save", "watch", "stats", "add"] {
            assert!(script.contains(cmd), "{shell} completion lacks {cmd}");
        }
        if shell == "bash" {
            let f = dir.file("mcrctl.bash", &script).expect("write file");
            let syntax = std::process::Command::new("bash")
                .arg("-n")
                .arg(&f)
                .status()
                .expect("bash -n");
            assert!(syntax.success(), "the bash completion parses");
        }
    }
    let out = std::process::Command::new(&mcrctl)
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("man");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(dir.path().join("mcrctl.1")).expect("mcrctl.1");
    for cmd in ["reload", "save", "watch"] {
        assert!(page.contains(cmd), "mcrctl.1 names {cmd}");
        assert!(dir.path().join(format!("mcrctl-{cmd}.1")).exists(), "mcrctl-{cmd}.1");
    }
    let out = std::process::Command::new(bin("mcrd").expect("mcrd"))
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("mcrd man");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(dir.path().join("mcrd.8")).expect("mcrd.8");
    for flag in ["config", "check\\-config", "metrics\\-listen", "log\\-format"] {
        assert!(page.contains(flag), "mcrd.8 documents --{flag}");
    }
}
