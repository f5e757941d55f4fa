//! `mcrbench sockets --quick`: every backend sends and receives over
//! loopback and across a veth pair, for both families; nothing truncated,
//! damaged or duplicated; and the loss injected at the senders is found
//! missing at the receivers, exactly. Never a timing.

use std::collections::BTreeSet;
use std::time::Duration;

fn quick(extra: &[&str]) -> (serde_json::Value, String) {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let file = std::env::temp_dir().join(format!("mcrbench-sockets-{}-{}.json", std::process::id(), extra.len()));
    let mut cmd = std::process::Command::new(mcr_testbed::bin("mcrbench").expect("mcrbench"));
    cmd.args(["sockets", "--quick", "--json"]).arg(&file).args(extra);
    let f = mcr_testbed::Proc::spawn(cmd)
        .expect("spawn")
        .finish(Duration::from_secs(900))
        .expect("finished");
    assert!(f.status.success(), "mcrbench failed: {}\n{}", f.stdout, f.stderr);
    let text = std::fs::read_to_string(&file).expect("JSON written");
    // The file compares with itself: every point in both, ratios of 1.
    let cmp = std::process::Command::new(mcr_testbed::bin("mcrbench").expect("mcrbench"))
        .args(["sockets", "compare"])
        .arg(&file)
        .arg(&file)
        .output()
        .expect("compare");
    let _ = std::fs::remove_file(&file);
    let cmp = String::from_utf8_lossy(&cmp.stdout).to_string();
    let r: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let n = r["points"].as_array().map_or(0, Vec::len);
    assert!(
        cmp.contains(&format!("{n} points in both; 0 only in A, 0 only in B")),
        "{cmp}"
    );
    (r, f.stdout)
}

#[test]
fn every_backend_delivers_whole_datagrams_and_injected_loss_is_found_exactly() {
    let (r, table) = quick(&[]);
    assert!(
        r["machine"]["kernel"].as_str().is_some_and(|k| !k.is_empty()),
        "{}",
        r["machine"]
    );
    assert!(r["machine"]["rmem_max"].as_u64().is_some_and(|v| v > 0));
    let points = r["points"].as_array().expect("points");
    let mut backends = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for p in points {
        let label = p["label"].as_str().expect("label");
        assert!(p.get("error").is_none(), "{label}: {}", p["error"]);
        let pt = &p["point"];
        backends.insert(pt["backend"].as_str().expect("backend").to_string());
        kinds.insert((
            pt["family"].as_str().expect("family").to_string(),
            pt["path"].as_str().expect("path").to_string(),
        ));
        let runs = p["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 1, "{label}");
        for run in runs {
            let n = |k: &str| run[k].as_u64().unwrap_or(u64::MAX);
            // 2,000 sequence numbers per sender, some left out on purpose.
            assert!(n("injected") > 0, "{label}: {run}");
            assert_eq!(n("sent") + n("injected"), 2000, "{label}: {run}");
            assert_eq!(
                n("missing"),
                n("injected"),
                "{label}: every injected loss found, no other: {run}"
            );
            assert_eq!(
                (n("truncated"), n("damaged"), n("duplicated")),
                (0, 0, 0),
                "{label}: {run}"
            );
            assert!(n("rcvbuf") > 0, "{label}: the granted receive buffer is read back");
            assert!(
                run["latency"]["p50_ns"].as_u64().is_some(),
                "{label}: paced runs measure latency"
            );
        }
    }
    let want: BTreeSet<String> = [
        "std",
        "socket2",
        "rustix",
        "mmsg",
        "gso",
        "tokio",
        "tokio-ready",
        "uring",
        "uring-multi",
        "packet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(backends, want);
    assert_eq!(kinds.len(), 4, "v4 and v6, loopback and veth multicast: {kinds:?}");
    assert!(table.contains("rx pps"), "{table}");
}

#[test]
fn a_point_that_cannot_run_says_why_and_the_matrix_lists_what_it_leaves_out() {
    let bin = mcr_testbed::bin("mcrbench").expect("mcrbench");
    let out = std::process::Command::new(&bin)
        .args([
            "sockets",
            "--list",
            "--backends",
            "std,gso",
            "--sizes",
            "1400",
            "--batch",
            "1,64",
        ])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("std/unconnected/v4/1400B/t1/b1/none/lo"), "{text}");
    assert!(
        text.contains("std/unconnected/v4/1400B/t1/b64/none/lo  (left out: std sends at most 1 per call)"),
        "{text}"
    );
    assert!(
        text.contains("gso/unconnected/v4/1400B/t1/b64/none/lo  (left out: a GSO train is at most 64 KB)"),
        "{text}"
    );
    let out = std::process::Command::new(&bin)
        .args(["sockets", "--backends", "smoke-signals"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown backend `smoke-signals`"));
}

#[test]
fn two_senders_and_two_receivers_are_accounted_across_sockets() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let file = std::env::temp_dir().join(format!("mcrbench-sockets-threads-{}.json", std::process::id()));
    let mut cmd = std::process::Command::new(mcr_testbed::bin("mcrbench").expect("mcrbench"));
    cmd.args([
        "sockets",
        "--backends",
        "std,mmsg,uring-multi",
        "--conn",
        "unconnected",
        "--sizes",
        "200",
        "--batch",
        "1",
        "--threads",
        "2",
        "--reuse",
        "none,port",
        "--path",
        "lo,veth",
        "--count",
        "3000",
        "--pace",
        "10000",
        "--inject-loss",
        "0.03",
        "--runs",
        "1",
        "--json",
    ])
    .arg(&file);
    let f = mcr_testbed::Proc::spawn(cmd)
        .expect("spawn")
        .finish(Duration::from_secs(900))
        .expect("finished");
    assert!(f.status.success(), "mcrbench failed: {}\n{}", f.stdout, f.stderr);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("JSON")).expect("JSON");
    let _ = std::fs::remove_file(&file);
    let points = r["points"].as_array().expect("points");
    assert_eq!(points.len(), 3 * 2 * 2, "{}", f.stdout);
    for p in points {
        let label = p["label"].as_str().expect("label");
        let run = &p["runs"][0];
        let n = |k: &str| run[k].as_u64().unwrap_or(u64::MAX);
        // Two senders, 3,000 sequence numbers each; what one receiver
        // socket saw and what the other saw are merged per sender.
        assert_eq!(n("sent") + n("injected"), 6000, "{label}: {run}");
        assert!(n("injected") > 0, "{label}: {run}");
        assert_eq!(n("missing"), n("injected"), "{label}: {run}");
        assert_eq!(
            (n("duplicated"), n("truncated"), n("damaged")),
            (0, 0, 0),
            "{label}: {run}"
        );
    }
}
