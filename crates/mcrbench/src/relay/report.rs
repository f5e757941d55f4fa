//! Results as terminal tables, JSON lines, a Markdown report and SVG plots.

use std::fmt::Write as _;
use std::path::Path;

use super::Outcome;
use crate::stats::Spread;

/// Prints outcomes as they come.
pub struct Printer {
    json: bool,
}

fn s(x: Option<Spread>, prec: usize) -> String {
    match x {
        Some(v) if v.median.is_finite() => format!("{:.p$} ({:.p$}-{:.p$})", v.median, v.min, v.max, p = prec),
        _ => "-".into(),
    }
}

fn losses(o: &Outcome) -> String {
    if o.status != "ok" {
        return o.status.clone();
    }
    let mut runs: Vec<&super::Run> = o.runs.iter().collect();
    runs.sort_by_key(|r| r.delivered);
    runs.get(runs.len() / 2)
        .map_or("-".into(), |r| r.losses.describe(r.lost))
}

fn row(o: &Outcome) -> [String; 9] {
    let procs = o
        .runs
        .first()
        .map_or("-".into(), |r| format!("{} / {:.0} MB", r.relay_procs, r.relay_rss_mb));
    [
        o.relay.clone(),
        o.point.clone(),
        s(o.achieved_pps, 0),
        s(o.delivered_pct, 2),
        s(o.p99_us, 0),
        s(o.relay_core_us_per_pkt, 2),
        s(o.relay_proc_us_per_pkt, 2),
        procs,
        losses(o),
    ]
}

const HEADER: [&str; 9] = [
    "relay",
    "point",
    "achieved pps",
    "delivered %",
    "p99 µs",
    "core µs/pkt",
    "process µs/pkt",
    "procs / RSS",
    "losses (median run)",
];

impl Printer {
    pub fn new(json: bool) -> Self {
        Printer { json }
    }

    pub fn scenario(&mut self, name: &str) {
        if !self.json {
            println!("\n== {name}");
            println!(
                "{:<8} {:<22} {:>24} {:>22} {:>22} {:>20} {:>18} {:>12}  {}",
                HEADER[0], HEADER[1], HEADER[2], HEADER[3], HEADER[4], HEADER[5], HEADER[6], HEADER[7], HEADER[8]
            );
        }
    }

    pub fn outcome(&mut self, o: &Outcome) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string(o)?);
        } else {
            let r = row(o);
            println!(
                "{:<8} {:<22} {:>24} {:>22} {:>22} {:>20} {:>18} {:>12}  {}",
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]
            );
        }
        Ok(())
    }
}

fn machine() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("Linux {}, {cores} × {cpu}", kernel.trim())
}

/// Writes `report.md`, `results.jsonl` and one SVG per plot into `dir`.
pub fn write(dir: &Path, all: &[Outcome], command: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut jsonl = String::new();
    for o in all {
        jsonl.push_str(&serde_json::to_string(o)?);
        jsonl.push('\n');
    }
    std::fs::write(dir.join("results.jsonl"), jsonl)?;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# mcrbench relay\n\nMachine: {}\n\nCommand: `{command}`\n",
        machine()
    );
    let mut kept: Vec<&str> = all.iter().filter(|o| !o.rewrote).map(|o| o.relay.as_str()).collect();
    kept.sort_unstable();
    kept.dedup();
    if !kept.is_empty() {
        let _ = writeln!(
            md,
            "Not like for like: {} kept each stream's group and port (the kernel's multicast forwarding \
             cannot rewrite them), so its sinks listened on the input groups. Its figures are a ceiling \
             for forwarding alone, not a relay that does the same job.\n",
            kept.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", ")
        );
    }
    let mut scenarios: Vec<&str> = all.iter().map(|o| o.scenario.as_str()).collect();
    scenarios.dedup();
    for sc in scenarios {
        let here: Vec<&Outcome> = all.iter().filter(|o| o.scenario == sc).collect();
        let _ = writeln!(md, "## {sc}\n");
        let _ = writeln!(md, "| {} |", HEADER.join(" | "));
        let _ = writeln!(md, "|{}|", HEADER.iter().map(|_| "---").collect::<Vec<_>>().join("|"));
        for o in &here {
            let _ = writeln!(md, "| {} |", row(o).join(" | "));
        }
        md.push('\n');
        for (what, file, f) in [
            (
                "delivered %",
                "delivered",
                (|o: &Outcome| o.delivered_pct.map(|s| s.median)) as fn(&Outcome) -> Option<f64>,
            ),
            ("relay core µs per delivered packet", "core", |o: &Outcome| {
                o.relay_core_us_per_pkt.map(|s| s.median)
            }),
        ] {
            let svg = chart(&format!("{sc}: {what}"), &here, f);
            let name = format!("{sc}-{file}.svg");
            std::fs::write(dir.join(&name), svg)?;
            let _ = writeln!(md, "![{sc}: {what}]({name})\n");
        }
    }
    std::fs::write(dir.join("report.md"), md)?;
    Ok(())
}

/// A line chart: points along x, one line per relay.
fn chart(title: &str, outcomes: &[&Outcome], y: fn(&Outcome) -> Option<f64>) -> String {
    let mut xs: Vec<&str> = Vec::new();
    let mut relays: Vec<&str> = Vec::new();
    for o in outcomes {
        if !xs.contains(&o.point.as_str()) {
            xs.push(&o.point);
        }
        if !relays.contains(&o.relay.as_str()) {
            relays.push(&o.relay);
        }
    }
    let values: Vec<f64> = outcomes.iter().filter_map(|o| y(o)).filter(|v| v.is_finite()).collect();
    let top = values.iter().copied().fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let (w, h, left, right, topm, bottom) = (760.0, 360.0, 70.0, 150.0, 40.0, 60.0);
    let (pw, ph) = (w - left - right, h - topm - bottom);
    let px = |i: usize| {
        left + if xs.len() > 1 {
            pw * i as f64 / (xs.len() - 1) as f64
        } else {
            pw / 2.0
        }
    };
    let py = |v: f64| topm + ph * (1.0 - v / top);
    let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#,
        w / 2.0,
        xml(title)
    );
    for k in 0..=4 {
        let v = top * k as f64 / 4.0;
        let yy = py(v);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            yy + 4.0,
            if top >= 10.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        );
    }
    for (i, x) in xs.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px(i),
            h - bottom + 18.0,
            xml(x)
        );
    }
    for (ri, r) in relays.iter().enumerate() {
        let c = colours[ri % colours.len()];
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .enumerate()
            .filter_map(|(i, x)| {
                let o = outcomes.iter().find(|o| o.relay == *r && o.point == *x)?;
                y(o).filter(|v| v.is_finite()).map(|v| (px(i), py(v)))
            })
            .collect();
        if pts.len() > 1 {
            let d: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                d.join(" ")
            );
        }
        for (a, b) in &pts {
            let _ = write!(svg, r#"<circle cx="{a:.1}" cy="{b:.1}" r="4" fill="{c}"/>"#);
        }
        let ly = topm + 18.0 * ri as f64;
        let _ = write!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{c}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            w - right + 15.0,
            ly,
            w - right + 32.0,
            ly + 10.0,
            xml(r)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
