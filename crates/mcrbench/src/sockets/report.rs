//! What `mcrbench sockets` reports: the machine, every point's runs with
//! their median and spread, as a table, JSON, CSV and SVG plots; and the
//! comparison of two JSON files.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::matrix::Point;
use super::run::RunResult;

/// The machine a run was made on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    pub rmem_max: u64,
    pub wmem_max: u64,
}

impl Machine {
    /// Reads it off this machine.
    pub fn read() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        Machine {
            kernel: read("/proc/sys/kernel/osrelease"),
            cpu,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            rmem_max: read("/proc/sys/net/core/rmem_max").parse().unwrap_or(0),
            wmem_max: read("/proc/sys/net/core/wmem_max").parse().unwrap_or(0),
        }
    }

    /// One line.
    pub fn summary(&self) -> String {
        format!(
            "Linux {}, {} × {}, rmem_max {}, wmem_max {}",
            self.kernel, self.cpus, self.cpu, self.rmem_max, self.wmem_max
        )
    }
}

/// A median and the spread around it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Spread {
            median: if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            },
            min: v[0],
            max: v[v.len() - 1],
        }
    }
}

/// A point's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    pub label: String,
    pub point: Point,
    pub runs: Vec<RunResult>,
    pub tx_pps: Spread,
    pub rx_pps: Spread,
    pub rx_mbps: Spread,
    pub tx_cpu_ns: Spread,
    pub rx_cpu_ns: Spread,
    /// Loss not injected, as a share, over all runs.
    pub loss: f64,
    /// Why it could not run, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl PointResult {
    pub fn new(p: &Point, r: Result<Vec<RunResult>, String>) -> PointResult {
        let (runs, error) = match r {
            Ok(runs) => (runs, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let s = |f: fn(&RunResult) -> f64| Spread::of(runs.iter().map(f).collect());
        let sent: u64 = runs.iter().map(|r| r.sent).sum();
        let real: u64 = runs.iter().map(|r| r.missing.saturating_sub(r.injected)).sum();
        PointResult {
            label: p.label(),
            point: p.clone(),
            tx_pps: s(|r| r.tx_pps),
            rx_pps: s(|r| r.rx_pps),
            rx_mbps: s(|r| r.rx_mbps),
            tx_cpu_ns: s(|r| r.tx_cpu_ns),
            rx_cpu_ns: s(|r| r.rx_cpu_ns),
            loss: if sent == 0 { 0.0 } else { real as f64 / sent as f64 },
            runs,
            error,
        }
    }
}

/// A whole run of `mcrbench sockets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub machine: Machine,
    pub options: String,
    pub points: Vec<PointResult>,
}

fn k(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// One point in one line, for progress.
pub fn one_line(p: &Point, r: &Result<Vec<RunResult>, String>) -> String {
    match r {
        Err(e) => format!("{}: could not run: {e}", p.label()),
        Ok(runs) => {
            let pr = PointResult::new(p, Ok(runs.clone()));
            format!(
                "{}: rx {} pps, tx cpu {:.0} ns/pkt, rx cpu {:.0} ns/pkt, loss {:.3}%",
                p.label(),
                k(pr.rx_pps.median),
                pr.tx_cpu_ns.median,
                pr.rx_cpu_ns.median,
                pr.loss * 100.0
            )
        }
    }
}

/// The table people read.
pub fn table(r: &Results) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}\n{}\n", r.machine.summary(), r.options);
    let _ = writeln!(
        o,
        "{:<56} {:>18} {:>18} {:>9} {:>13} {:>13} {:>8} {:>6} {:>6} {:>8} {:>9}",
        "point",
        "tx pps (min-max)",
        "rx pps (min-max)",
        "rx Mb/s",
        "tx µs/Mpkt",
        "rx µs/Mpkt",
        "loss %",
        "reord",
        "dup",
        "ENOBUFS",
        "rcvbuf"
    );
    for p in &r.points {
        if let Some(e) = &p.error {
            let _ = writeln!(o, "{:<56} could not run: {e}", p.label);
            continue;
        }
        let sum = |f: fn(&RunResult) -> u64| p.runs.iter().map(f).sum::<u64>();
        let _ = writeln!(
            o,
            "{:<56} {:>18} {:>18} {:>9.0} {:>13.0} {:>13.0} {:>8.3} {:>6} {:>6} {:>8} {:>9}",
            p.label,
            format!("{} ({}-{})", k(p.tx_pps.median), k(p.tx_pps.min), k(p.tx_pps.max)),
            format!("{} ({}-{})", k(p.rx_pps.median), k(p.rx_pps.min), k(p.rx_pps.max)),
            p.rx_mbps.median,
            p.tx_cpu_ns.median,
            p.rx_cpu_ns.median,
            p.loss * 100.0,
            sum(|r| r.reordered),
            sum(|r| r.duplicated),
            sum(|r| r.enobufs),
            p.runs.iter().map(|r| r.rcvbuf).max().unwrap_or(0),
        );
        if let Some(l) = p.runs.iter().find_map(|r| r.latency) {
            let _ = writeln!(
                o,
                "{:<56} latency p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
                "",
                l.p50_ns as f64 / 1e3,
                l.p99_ns as f64 / 1e3,
                l.p999_ns as f64 / 1e3,
                l.max_ns as f64 / 1e3
            );
        }
    }
    o.push_str("\nCPU is per datagram in ns (= µs per million datagrams), the threads' own clocks; loss excludes what was left out on purpose.\n");
    o
}

/// One CSV row per run.
pub fn csv(r: &Results) -> String {
    let mut o = String::from(
        "label,backend,conn,family,size,threads,batch,reuse,path,run,tx_pps,rx_pps,tx_mbps,rx_mbps,tx_cpu_ns,rx_cpu_ns,sent,injected,missing,duplicated,reordered,truncated,damaged,enobufs,eagain,other_errors,rcvbuf,p50_ns,p99_ns,p999_ns,max_ns\n",
    );
    for p in &r.points {
        let q = &p.point;
        for (i, x) in p.runs.iter().enumerate() {
            let l = x.latency;
            let _ = writeln!(
                o,
                "{},{},{},{},{},{},{},{},{},{i},{:.0},{:.0},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                p.label,
                q.backend,
                q.conn.word(),
                q.family.word(),
                q.size,
                q.threads,
                q.batch,
                q.reuse.word(),
                q.path.word(),
                x.tx_pps,
                x.rx_pps,
                x.tx_mbps,
                x.rx_mbps,
                x.tx_cpu_ns,
                x.rx_cpu_ns,
                x.sent,
                x.injected,
                x.missing,
                x.duplicated,
                x.reordered,
                x.truncated,
                x.damaged,
                x.enobufs,
                x.eagain,
                x.other_errors,
                x.rcvbuf,
                l.map_or(0, |l| l.p50_ns),
                l.map_or(0, |l| l.p99_ns),
                l.map_or(0, |l| l.p999_ns),
                l.map_or(0, |l| l.max_ns),
            );
        }
    }
    o
}

/// Horizontal bar charts: received datagrams a second, and CPU per
/// datagram on each side, one bar per point (median, with the spread as a
/// line).
pub fn plots(r: &Results) -> Vec<(String, String)> {
    let ok: Vec<&PointResult> = r.points.iter().filter(|p| p.error.is_none()).collect();
    vec![
        (
            "rx-pps.svg".into(),
            bars("received datagrams per second (median, min-max)", &ok, |p| p.rx_pps),
        ),
        (
            "tx-cpu.svg".into(),
            bars("sender CPU ns per datagram (median, min-max)", &ok, |p| p.tx_cpu_ns),
        ),
        (
            "rx-cpu.svg".into(),
            bars("receiver CPU ns per datagram (median, min-max)", &ok, |p| p.rx_cpu_ns),
        ),
    ]
}

fn bars(title: &str, points: &[&PointResult], f: fn(&PointResult) -> Spread) -> String {
    let (left, width, row) = (340.0, 420.0, 18.0);
    let h = 50.0 + row * points.len() as f64;
    let top = points.iter().map(|p| f(p).max).fold(0.0, f64::max).max(1.0);
    let x = |v: f64| left + v / top * width;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{h}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-size="13">{}</text>"#,
        left + width + 90.0,
        title
    );
    for (i, p) in points.iter().enumerate() {
        let y = 35.0 + row * i as f64;
        let v = f(p);
        let _ = write!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{}</text><rect x="{left}" y="{}" width="{:.1}" height="{}" fill="#4a7bb7"/><line x1="{:.1}" x2="{:.1}" y1="{}" y2="{}" stroke="black"/><text x="{:.1}" y="{}">{}</text>"##,
            left - 6.0,
            y + 12.0,
            p.label,
            y + 3.0,
            x(v.median) - left,
            row - 6.0,
            x(v.min),
            x(v.max),
            y + row / 2.0,
            y + row / 2.0,
            x(v.max) + 4.0,
            y + 12.0,
            k(v.median)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The difference between two runs, point by point (points in both).
pub fn compare(a: &Results, b: &Results) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A: {}\nB: {}\n", a.machine.summary(), b.machine.summary());
    let _ = writeln!(
        o,
        "{:<56} {:>12} {:>12} {:>8} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8}",
        "point", "rx pps A", "rx pps B", "B/A", "tx ns A", "tx ns B", "B/A", "rx ns A", "rx ns B", "B/A"
    );
    let ratio = |x: f64, y: f64| if x > 0.0 { format!("{:.2}", y / x) } else { "-".into() };
    let mut shared = 0;
    for pa in &a.points {
        let Some(pb) = b.points.iter().find(|p| p.label == pa.label) else {
            continue;
        };
        if pa.error.is_some() || pb.error.is_some() {
            continue;
        }
        shared += 1;
        let _ = writeln!(
            o,
            "{:<56} {:>12} {:>12} {:>8} {:>10.0} {:>10.0} {:>8} {:>10.0} {:>10.0} {:>8}",
            pa.label,
            k(pa.rx_pps.median),
            k(pb.rx_pps.median),
            ratio(pa.rx_pps.median, pb.rx_pps.median),
            pa.tx_cpu_ns.median,
            pb.tx_cpu_ns.median,
            ratio(pa.tx_cpu_ns.median, pb.tx_cpu_ns.median),
            pa.rx_cpu_ns.median,
            pb.rx_cpu_ns.median,
            ratio(pa.rx_cpu_ns.median, pb.rx_cpu_ns.median),
        );
    }
    let only = |x: &Results, y: &Results| {
        x.points
            .iter()
            .filter(|p| !y.points.iter().any(|q| q.label == p.label))
            .count()
    };
    let _ = writeln!(
        o,
        "\n{shared} points in both; {} only in A, {} only in B.",
        only(a, b),
        only(b, a)
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sockets::matrix::{Conn, Family, PathKind, Reuse};

    fn point(backend: &str) -> Point {
        Point {
            backend: backend.into(),
            conn: Conn::Unconnected,
            family: Family::V4,
            size: 64,
            threads: 1,
            batch: 1,
            reuse: Reuse::None,
            path: PathKind::Lo,
        }
    }

    fn run(rx: f64, sent: u64, missing: u64, injected: u64) -> RunResult {
        RunResult {
            rx_pps: rx,
            tx_pps: rx,
            sent,
            missing,
            injected,
            tx_cpu_ns: 1000.0,
            rx_cpu_ns: 500.0,
            ..Default::default()
        }
    }

    #[test]
    fn medians_spreads_loss_and_the_comparison() {
        let p = PointResult::new(
            &point("std"),
            Ok(vec![
                run(100.0, 1000, 12, 10),
                run(300.0, 1000, 10, 10),
                run(200.0, 1000, 10, 10),
            ]),
        );
        assert_eq!(
            p.rx_pps,
            Spread {
                median: 200.0,
                min: 100.0,
                max: 300.0
            }
        );
        assert!((p.loss - 2.0 / 3000.0).abs() < 1e-12);
        let a = Results {
            machine: Machine::default(),
            options: String::new(),
            points: vec![p.clone(), PointResult::new(&point("mmsg"), Err("no".into()))],
        };
        let mut b = a.clone();
        b.points[0] = PointResult::new(&point("std"), Ok(vec![run(400.0, 1, 0, 0)]));
        let c = compare(&a, &b);
        assert!(
            c.contains("std/unconnected/v4/64B/t1/b1/none/lo") && c.contains("2.00"),
            "{c}"
        );
        assert!(c.contains("1 points in both"), "{c}");
        let back: Results = serde_json::from_str(&serde_json::to_string(&a).expect("json")).expect("parses");
        assert_eq!(back, a);
        assert!(csv(&a).lines().count() == 4, "{}", csv(&a));
        assert!(table(&a).contains("could not run: no"));
        assert!(
            plots(&a)
                .iter()
                .all(|(_, s)| s.starts_with("<svg") && s.contains("std/"))
        );
    }
}
