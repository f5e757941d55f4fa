//! `mcrbench relay --quick`: every scenario at a small scale against MCR,
//! socat and the kernel. Checks functional facts only (never a timing):
//! every relay that can run a point delivers, and the report is complete.

use std::collections::HashSet;
use std::time::Duration;

/// Runs `mcrbench ARGS` to its end (at most `limit`).
fn mcrbench(args: &[&str], limit: Duration) -> mcr_testbed::Finished {
    let mut cmd = std::process::Command::new(mcr_testbed::bin("mcrbench").expect("mcrbench"));
    cmd.args(args);
    mcr_testbed::Proc::spawn(cmd)
        .expect("spawn")
        .finish(limit)
        .expect("finished")
}

#[test]
fn every_scenario_runs_against_every_relay_and_the_report_is_complete() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let dir = std::env::temp_dir().join(format!("mcrbench-quick-{}", std::process::id()));
    let report = dir.to_string_lossy().to_string();
    let f = mcrbench(
        &["relay", "--quick", "--json", "--report", &report],
        Duration::from_secs(1200),
    );
    assert!(f.status.success(), "mcrbench failed: {}\n{}", f.stdout, f.stderr);
    let lines: Vec<serde_json::Value> = f
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let (idles, outcomes): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) =
        lines.iter().partition(|l| l.get("idle").is_some());
    let mut seen = HashSet::new();
    for o in &outcomes {
        let (sc, relay, status, arrivals) = (
            o["scenario"].as_str().unwrap_or(""),
            o["relay"].as_str().unwrap_or(""),
            o["status"].as_str().unwrap_or(""),
            o["arrivals"].as_str().unwrap_or(""),
        );
        seen.insert((sc.to_string(), relay.to_string(), arrivals.to_string()));
        assert_eq!(status, "ok", "{sc} {relay}: {status}");
        let runs = o["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 1);
        for r in runs {
            assert!(
                r["delivered"].as_u64().unwrap_or(0) > 0,
                "{sc} {relay} delivered nothing: {r}"
            );
            assert_eq!(r["duplicated"].as_u64(), Some(0), "{sc} {relay}: {r}");
            // Both cores' time includes the relay core's.
            let (core, machine) = (
                r["relay_core_busy_s"].as_f64().expect("relay core"),
                r["load_core_busy_s"].as_f64().expect("load core"),
            );
            assert!(core >= 0.0 && machine >= 0.0, "{r}");
            assert!(
                r["machine_us_per_pkt"].as_f64() >= r["relay_core_us_per_pkt"].as_f64(),
                "{r}"
            );
        }
        // The kernel cannot rewrite; the report says so.
        assert_eq!(o["rewrote"].as_bool(), Some(relay != "kernel"));
    }
    for sc in [
        "chain-rate",
        "dual-bridge",
        "streams",
        "high-density",
        "fanout",
        "pipeline",
    ] {
        for relay in ["mcr", "socat", "kernel"] {
            for arrivals in ["spaced", "burst"] {
                assert!(
                    seen.contains(&(sc.to_string(), relay.to_string(), arrivals.to_string())),
                    "no result for {sc} / {relay} / {arrivals}"
                );
            }
            // Each relay's cost without traffic, once per scenario.
            let idle = idles
                .iter()
                .find(|i| i["idle"]["scenario"] == sc && i["idle"]["relay"] == relay)
                .unwrap_or_else(|| panic!("no idle measurement for {sc} / {relay}"));
            let pct = idle["idle"]["busy_pct"].as_f64().expect("busy_pct");
            assert!((0.0..=100.0).contains(&pct), "{idle}");
        }
    }
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    for sc in [
        "## chain-rate",
        "## streams",
        "## pipeline",
        "## Without traffic",
        "## Fan-out: the cost of each extra copy",
        // Every relay against the kernel at its best, by default.
        "## Against `kernel`",
        "| mcr | spaced | ",
    ] {
        assert!(report.contains(sc), "{report}");
    }
    assert!(
        report.contains("Not like for like: `kernel` kept each stream's group and port"),
        "{report}"
    );
    assert!(dir.join("chain-rate-delivered.svg").exists());
    assert!(dir.join("chain-rate-machine.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_short_soak_with_rule_churn_loses_nothing_and_does_not_grow() {
    let _lock = mcr_testbed::traffic_lock().expect("lock");
    let f = mcrbench(
        &[
            "soak",
            "--duration",
            "20s",
            "--streams",
            "100",
            "--rate",
            "10k",
            "--json",
        ],
        Duration::from_secs(600),
    );
    let line = f.stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}\n{}", f.stdout, f.stderr));
    assert!(f.status.success(), "soak failed: {v}\n{}", f.stderr);
    assert_eq!(v["problems"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(
        (v["lost"].as_u64(), v["duplicated"].as_u64(), v["reordered"].as_u64()),
        (Some(0), Some(0), Some(0))
    );
    assert_eq!(v["received"], v["sent"], "{v}");
    assert_eq!(v["sent"].as_u64(), Some(200_000), "{v}");
    assert!(
        v["churned"].as_u64().unwrap_or(0) >= 10,
        "rules churned while the streams flowed: {v}"
    );
    assert!(v["end"]["fds"].as_u64() <= v["start"]["fds"].as_u64(), "{v}");
    assert_eq!(v["end"]["processes"].as_u64(), Some(2), "{v}");
}

/// `mcrbench program`: every framing's frames go through the program as a
/// plain rule, an arbitrated one and a translating one, each forwarded or dropped as it
/// should be (mcrbench checks each frame against the output counter and
/// fails otherwise), and every row of times is there. No timing is judged.
#[test]
fn the_program_benchmark_times_every_kind_of_frame_of_every_framing() {
    for framing in ["moldudp64", "mdp3", "pitch", "mitch"] {
        let f = mcrbench(
            &[
                "program",
                "--json",
                "--frames",
                "500",
                "--runs",
                "1",
                "--framing",
                framing,
            ],
            Duration::from_secs(120),
        );
        assert!(f.status.success(), "{framing}: {}\n{}", f.stdout, f.stderr);
        let rows: Vec<serde_json::Value> = f
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect();
        let frames: Vec<(String, u64)> = rows
            .iter()
            .map(|r| {
                assert!(r["p99_ns"]["median"].as_f64().is_some_and(|x| x > 0.0), "{r}");
                (
                    r["what"].as_str().unwrap_or("").to_string(),
                    r["frames_per_run"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        let counts: Vec<u64> = frames.iter().map(|f| f.1).collect();
        assert_eq!(counts, [500, 500, 500, 500, 1000, 500], "{framing}: {frames:?}");
    }
    // A framing it does not know is refused with what to give.
    let f = mcrbench(&["program", "--framing", "itch"], Duration::from_secs(60));
    assert!(!f.status.success());
    assert!(f.stderr.contains("moldudp64, mdp3, pitch or mitch"), "{}", f.stderr);
}
