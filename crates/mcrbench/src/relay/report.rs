//! Results as terminal tables, JSON lines, a Markdown report and SVG plots.

use std::fmt::Write as _;
use std::path::Path;

use super::{Idle, Outcome};
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

/// The achieved rate, and when the generator fell short of the offered
/// rate by more than 3 %, that it did (the relay may have taken time
/// from the generator's core: a figure per delivered packet then hides
/// part of the cost).
fn achieved(o: &Outcome) -> String {
    let a = s(o.achieved_pps, 0);
    match (o.achieved_pps, o.offered_pps) {
        (Some(got), Some(offered)) if got.median < 0.97 * offered => {
            format!("{a} SHORT of {offered:.0}")
        }
        _ => a,
    }
}

fn row(o: &Outcome) -> [String; 11] {
    let procs = o
        .runs
        .first()
        .map_or("-".into(), |r| format!("{} / {:.0} MB", r.relay_procs, r.relay_rss_mb));
    [
        o.relay.clone(),
        o.arrivals.name().to_string(),
        o.point.clone(),
        achieved(o),
        s(o.delivered_pct, 2),
        s(o.p99_us, 0),
        s(o.relay_core_us_per_pkt, 2),
        s(o.machine_us_per_pkt, 2),
        s(o.relay_proc_us_per_pkt, 2),
        procs,
        losses(o),
    ]
}

const HEADER: [&str; 11] = [
    "relay",
    "arrivals",
    "point",
    "achieved pps",
    "delivered %",
    "p99 µs",
    "core µs/pkt",
    "machine µs/pkt",
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
                "{:<8} {:<8} {:<22} {:>24} {:>22} {:>22} {:>20} {:>20} {:>18} {:>12}  {}",
                HEADER[0],
                HEADER[1],
                HEADER[2],
                HEADER[3],
                HEADER[4],
                HEADER[5],
                HEADER[6],
                HEADER[7],
                HEADER[8],
                HEADER[9],
                HEADER[10]
            );
        }
    }

    pub fn outcome(&mut self, o: &Outcome) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string(o)?);
        } else {
            let r = row(o);
            println!(
                "{:<8} {:<8} {:<22} {:>24} {:>22} {:>22} {:>20} {:>20} {:>18} {:>12}  {}",
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10]
            );
        }
        Ok(())
    }

    /// A relay's cost without traffic.
    pub fn idle(&mut self, i: &Idle) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string(&serde_json::json!({ "idle": i }))?);
        } else {
            println!(
                "{:<8} idle: relay CPU {:.2} % busy over {:.0} s with rules in place and no traffic ({})",
                i.relay, i.busy_pct, i.seconds, i.topology
            );
        }
        Ok(())
    }

    /// What is derived from several points: each relay against the
    /// reference, and the cost of each extra copy of a fan-out.
    pub fn summary(&mut self, all: &[Outcome], _idles: &[Idle], reference: Option<&str>) {
        let ratios = reference.map(|r| against(all, r)).unwrap_or_default();
        if !self.json && !ratios.is_empty() {
            println!(
                "\n== against `{}`: µs per delivered packet as a ratio (medians of the runs)",
                reference.unwrap_or_default()
            );
            for r in &ratios {
                println!(
                    "{:<14} {:<8} {:<22} relay core {}   whole machine {}",
                    r.relay,
                    r.arrivals,
                    r.point,
                    ratio(r.core),
                    ratio(r.machine)
                );
            }
        }
        let copies = extra_copies(all);
        if self.json || copies.is_empty() {
            return;
        }
        println!("\n== fan-out: relay core µs per extra copy (against 1 output, same input rate)");
        for c in copies {
            println!(
                "{:<8} {:<8} {:<22} {:>8.2} µs per extra copy ({:.2} µs per input packet against {:.2})",
                c.relay, c.arrivals, c.point, c.per_copy_us, c.per_input_us, c.base_per_input_us
            );
        }
    }
}

/// One relay's cost at one point as a ratio to the reference relay's.
pub struct Against {
    pub relay: String,
    pub arrivals: &'static str,
    pub point: String,
    /// Relay core and whole machine µs per delivered packet, ÷ the
    /// reference's (medians).
    pub core: Option<f64>,
    pub machine: Option<f64>,
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// Every relay but `reference` against it, at each point both ran.
pub fn against(all: &[Outcome], reference: &str) -> Vec<Against> {
    let div = |a: Option<crate::stats::Spread>, b: Option<crate::stats::Spread>| {
        let (a, b) = (a?.median, b?.median);
        (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b)
    };
    all.iter()
        .filter(|o| o.relay != reference && o.status == "ok")
        .filter_map(|o| {
            let r = all.iter().find(|r| {
                r.relay == reference
                    && r.status == "ok"
                    && r.scenario == o.scenario
                    && r.point == o.point
                    && r.arrivals == o.arrivals
            })?;
            Some(Against {
                relay: o.relay.clone(),
                arrivals: o.arrivals.name(),
                point: o.point.clone(),
                core: div(o.relay_core_us_per_pkt, r.relay_core_us_per_pkt),
                machine: div(o.machine_us_per_pkt, r.machine_us_per_pkt),
            })
        })
        .collect()
}

/// The cost of one more copy of a fan-out.
pub struct ExtraCopy {
    pub relay: String,
    pub arrivals: &'static str,
    pub point: String,
    /// Relay core µs per input packet with K outputs, and with one.
    pub per_input_us: f64,
    pub base_per_input_us: f64,
    /// (K - 1) more copies: the difference divided by K - 1.
    pub per_copy_us: f64,
}

/// The relay core time per input packet of a run: busy time over the
/// packets sent.
fn per_input_us(o: &Outcome) -> Option<f64> {
    let mut v: Vec<f64> = o
        .runs
        .iter()
        .filter(|r| r.sent > 0)
        .map(|r| r.relay_core_busy_s * 1e6 / r.sent as f64)
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// For every fan-out point of K > 1 outputs whose relay also ran 1 output
/// at the same input rate and arrivals: what each extra copy cost.
pub fn extra_copies(all: &[Outcome]) -> Vec<ExtraCopy> {
    let outputs_and_rate = |p: &str| -> Option<(usize, String)> {
        let rest = p.strip_prefix("1 to ")?;
        let (k, rate) = rest.split_once(" at ")?;
        Some((k.parse().ok()?, rate.to_string()))
    };
    let mut out = Vec::new();
    for o in all.iter().filter(|o| o.scenario == "fanout" && o.status == "ok") {
        let Some((k, rate)) = outputs_and_rate(&o.point) else {
            continue;
        };
        if k < 2 {
            continue;
        }
        let base = all.iter().find(|b| {
            b.scenario == "fanout"
                && b.status == "ok"
                && b.relay == o.relay
                && b.arrivals == o.arrivals
                && outputs_and_rate(&b.point) == Some((1, rate.clone()))
        });
        if let (Some(b), Some(per)) = (base.and_then(per_input_us), per_input_us(o)) {
            out.push(ExtraCopy {
                relay: o.relay.clone(),
                arrivals: o.arrivals.name(),
                point: o.point.clone(),
                per_input_us: per,
                base_per_input_us: b,
                per_copy_us: (per - b) / (k - 1) as f64,
            });
        }
    }
    out
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
pub fn write(
    dir: &Path,
    all: &[Outcome],
    idles: &[Idle],
    reference: Option<&str>,
    command: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut jsonl = String::new();
    for o in all {
        jsonl.push_str(&serde_json::to_string(o)?);
        jsonl.push('\n');
    }
    for i in idles {
        jsonl.push_str(&serde_json::to_string(&serde_json::json!({ "idle": i }))?);
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
            ("whole machine µs per delivered packet", "machine", |o: &Outcome| {
                o.machine_us_per_pkt.map(|s| s.median)
            }),
        ] {
            let svg = chart(&format!("{sc}: {what}"), &here, f);
            let name = format!("{sc}-{file}.svg");
            std::fs::write(dir.join(&name), svg)?;
            let _ = writeln!(md, "![{sc}: {what}]({name})\n");
        }
    }
    if !idles.is_empty() {
        let _ = writeln!(md, "## Without traffic\n");
        let _ = writeln!(
            md,
            "Busy share of the relay CPU with the scenario's rules in place and no traffic.\n"
        );
        let _ = writeln!(md, "| relay | scenario | topology | seconds | relay CPU busy % |");
        let _ = writeln!(md, "|---|---|---|---|---|");
        for i in idles {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.0} | {:.2} |",
                i.relay, i.scenario, i.topology, i.seconds, i.busy_pct
            );
        }
        md.push('\n');
    }
    let ratios = reference.map(|r| against(all, r)).unwrap_or_default();
    if let (Some(r), false) = (reference, ratios.is_empty()) {
        let _ = writeln!(md, "## Against `{r}`\n");
        let _ = writeln!(
            md,
            "Relay core and whole machine µs per delivered packet, each as a ratio to `{r}`'s at the same \
             point and arrivals (medians of the runs).\n"
        );
        let _ = writeln!(md, "| relay | arrivals | point | relay core | whole machine |");
        let _ = writeln!(md, "|---|---|---|---|---|");
        for x in &ratios {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                x.relay,
                x.arrivals,
                x.point,
                ratio(x.core),
                ratio(x.machine)
            );
        }
        md.push('\n');
    }
    let copies = extra_copies(all);
    if !copies.is_empty() {
        let _ = writeln!(md, "## Fan-out: the cost of each extra copy\n");
        let _ = writeln!(
            md,
            "Relay core µs per input packet with K outputs, against one output at the same input rate \
             and arrivals; the difference divided by K − 1 (medians of the runs).\n"
        );
        let _ = writeln!(
            md,
            "| relay | arrivals | point | µs per input packet | with 1 output | µs per extra copy |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for c in copies {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                c.relay, c.arrivals, c.point, c.per_input_us, c.base_per_input_us, c.per_copy_us
            );
        }
        md.push('\n');
    }
    std::fs::write(dir.join("report.md"), md)?;
    Ok(())
}

/// A line chart: points along x, one line per relay.
fn chart(title: &str, outcomes: &[&Outcome], y: fn(&Outcome) -> Option<f64>) -> String {
    let mut xs: Vec<&str> = Vec::new();
    let mut relays: Vec<String> = Vec::new();
    let series = |o: &Outcome| format!("{} {}", o.relay, o.arrivals.name());
    for o in outcomes {
        if !xs.contains(&o.point.as_str()) {
            xs.push(&o.point);
        }
        if !relays.contains(&series(o)) {
            relays.push(series(o));
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
                let o = outcomes.iter().find(|o| series(o) == *r && o.point == *x)?;
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
