//! Running MCR from a config file as an operator does: checked, reloaded
//! while streams flow (also with mistakes in it), and saved back.

use std::time::{Duration, Instant};

use mcr_core::control::Reply;
use mcr_testbed::config_file::{HEAD, rules_toml, stream_rule};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::{Signal, TempDir, bin, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

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
    assert_eq!(
        relay.rule_list().expect("list").len(),
        10,
        "the file's rules run from the start"
    );

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

    let rx = Mcrgen::streams("239.10.1.1+11:6001+", Chain::SINK_IF)
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&c.sink)
        .expect("recv");
    // s9's new output carries stream 8 (the ninth) of the sender.
    let rx9 = Mcrgen::streams("239.10.2.9:7009", Chain::SINK_IF)
        .ids("8")
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&c.sink)
        .expect("recv s9");
    let gen_ns = c.generator.clone();
    let sender = std::thread::spawn(move || {
        Mcrgen::streams("239.1.1.1+11:5001+", Chain::GEN_IF)
            .count(N)
            .rate("22k")
            .send(&gen_ns, MINUTES)
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
    let mut names: Vec<String> = relay.rule_list().expect("list").into_iter().map(|r| r.name).collect();
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
    let rules_before = relay.rule_list().expect("list");
    let rx = Mcrgen::streams("239.10.1.1+2:6001+", Chain::SINK_IF)
        .expect(N)
        .recv(&c.sink)
        .expect("recv");
    let gen_ns = c.generator.clone();
    let sender = std::thread::spawn(move || {
        Mcrgen::streams("239.1.1.1+2:5001+", Chain::GEN_IF)
            .count(N)
            .rate("4k")
            .send(&gen_ns, MINUTES)
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
    assert_eq!(relay.rule_list().expect("list"), rules_before);
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
    let running = relay.rule_list().expect("list");
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
    assert_eq!(again.rule_list().expect("list"), running);
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
