//! Seeing what MCR does: Prometheus metrics, the live view, and logs for
//! people, collectors and journald.

use std::io::Write;
use std::time::{Duration, Instant};

use mcr_core::control::Reply;
use mcr_testbed::metrics::{sample, scrape};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::traffic_lock;

const MINUTES: Duration = Duration::from_secs(180);

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
    Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(N)
        .rate("5k")
        .size(500)
        .send(&c.generator, MINUTES)
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
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
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

#[test]
fn logs_can_be_json_or_journal_lines() {
    let c = Chain::new("ops-logs").expect("chain");
    let relay = Relay::start(&c.relay, &["--log-format", "json"]).expect("mcrd");
    let log = relay.log_with("running");
    let line = log.lines().find(|l| l.contains("running")).expect("a start line");
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON object per line");
    assert_eq!(v["level"], "INFO", "{line}");
    assert!(
        v["fields"]["message"].as_str().is_some_and(|m| m.contains("running")),
        "{line}"
    );
    relay.stop().expect("stopped");
    let relay = Relay::start_with_env(&c.relay, &[], &[("JOURNAL_STREAM", "8:1234")]).expect("mcrd");
    let log = relay.log_with("running");
    assert!(
        log.lines().any(|l| l.starts_with("<6>") && l.contains("running")),
        "{log}"
    );
    relay.stop().expect("stopped");
}
