//! Replies as tables for people.

use std::fmt::Write;

use mcr_core::control::{InputHealthStats, RedundancyStats, Reply, RuleStats, StatsReport};

fn rate(pps: f64) -> String {
    if pps >= 1e6 {
        format!("{:.2}M", pps / 1e6)
    } else if pps >= 1e3 {
        format!("{:.1}k", pps / 1e3)
    } else {
        format!("{pps:.0}")
    }
}

fn bits(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2}Gb/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1}Mb/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1}kb/s", bps / 1e3)
    } else {
        format!("{bps:.0}b/s")
    }
}

/// The etcd store's state, above the rules it gives.
fn store_status(o: &mut String, s: &mcr_core::control::StoreStatus) {
    let state = match &s.problem {
        None => format!("following for {:.0} s", s.since_s),
        Some(p) => {
            let kind = match s.problem_kind {
                Some(k) if k != mcr_core::control::StoreProblem::Unreachable => format!(" [{k}]"),
                _ => String::new(),
            };
            format!(
                "NOT REACHED{kind} for {:.0} s ({p}); its {} rule(s) keep forwarding as last given",
                s.since_s, s.rules
            )
        }
    };
    let _ = writeln!(
        o,
        "etcd {} prefix {}: {state}; revision {} ({} in every worker), {} rule(s)",
        s.endpoints.join(","),
        s.prefix,
        s.revision,
        s.workers_revision,
        s.rules
    );
    for r in &s.refused {
        let _ = writeln!(o, "  REFUSED {} (revision {}): {}", r.key, r.revision, r.error);
    }
    o.push('\n');
}

fn nmos(o: &mut String, v: &mcr_core::nmos::NmosView) {
    let text = |x: &serde_json::Value| x.as_str().unwrap_or("-").to_string();
    let _ = writeln!(
        o,
        "node {} \"{}\" at {}, version {}",
        text(&v.node["id"]),
        text(&v.node["label"]),
        text(&v.node["href"]),
        text(&v.node["version"])
    );
    if let Some(d) = v.devices.first() {
        let _ = writeln!(o, "device {}", text(&d["id"]));
    }
    if let Some(reg) = &v.registration {
        match &reg.registry {
            Some(r) => {
                let _ = writeln!(
                    o,
                    "registered with {r}: {} resource(s), {} heartbeat(s) answered",
                    reg.resources, reg.heartbeats
                );
            }
            None if reg.known.is_empty() => {
                let _ = writeln!(o, "registered nowhere: no registry known (peer-to-peer mode)");
            }
            None => {
                let _ = writeln!(o, "registered nowhere (peer-to-peer mode)");
            }
        }
        for k in &reg.known {
            let _ = writeln!(o, "  registry {k}");
        }
        if reg.failovers > 0 {
            let _ = writeln!(o, "  moved or registered again {} time(s)", reg.failovers);
        }
        if let Some(e) = &reg.last_error {
            let _ = writeln!(o, "  last error: {e}");
        }
        if reg.advertised {
            let _ = writeln!(o, "  advertised by mDNS as _nmos-node._tcp");
        }
    }
    for r in &v.connection_receivers {
        let legs = r.active["transport_params"].as_array().cloned().unwrap_or_default();
        let at: Vec<String> = legs
            .iter()
            .map(|l| {
                let to = l["multicast_ip"].as_str().or(l["interface_ip"].as_str()).unwrap_or("-");
                format!("{to}:{}", l["destination_port"])
            })
            .collect();
        let _ = writeln!(
            o,
            "  receiver {}  rule {}  {}{}",
            r.id,
            r.rule,
            at.join(" + "),
            if r.active["master_enable"] == serde_json::Value::Bool(false) {
                "  (disabled)"
            } else {
                ""
            }
        );
    }
    for s in &v.connection_senders {
        let p = &s.active["transport_params"][0];
        let _ = writeln!(
            o,
            "  sender   {}  rule {} output {}  {}:{}{}",
            s.id,
            s.rule,
            s.output + 1,
            text(&p["destination_ip"]),
            p["destination_port"],
            if s.active["master_enable"] == serde_json::Value::Bool(false) {
                "  (disabled)"
            } else {
                ""
            }
        );
    }
    for l in &v.left_out {
        let _ = writeln!(o, "  not in NMOS: {l}");
    }
}

/// Renders a successful reply.
pub fn render(r: &Reply) -> String {
    let mut o = String::new();
    match r {
        Reply::Version { daemon, protocol } => {
            let _ = writeln!(o, "mcrd {daemon}, protocol {protocol}");
        }
        Reply::Added {
            rule,
            replaced,
            applied,
            joins,
            problems,
        } => {
            let _ = writeln!(o, "{} rule {rule}", if *replaced { "replaced" } else { "added" });
            if !*applied {
                let _ = writeln!(
                    o,
                    "  NOT yet applied by every worker: it may not forward yet (see `mcrctl workers`)"
                );
            }
            for p in problems {
                let _ = writeln!(o, "  problem: {p}");
            }
            for j in joins {
                let from = j.source.map(|s| format!(" from {s}")).unwrap_or_default();
                match &j.error {
                    None => {
                        let _ = writeln!(o, "  joined {}{from} on {}", j.group, j.interface);
                    }
                    Some(e) => {
                        let _ = writeln!(o, "  NOT joined {}{from} on {}: {e}", j.group, j.interface);
                    }
                }
            }
        }
        Reply::Removed { rule, applied } => {
            let _ = writeln!(o, "removed rule {rule}");
            if !*applied {
                let _ = writeln!(
                    o,
                    "  NOT yet applied by every worker: it may still forward (see `mcrctl workers`)"
                );
            }
        }
        Reply::Switched { rule, input, applied } => {
            let _ = match input {
                Some((n, text)) => writeln!(
                    o,
                    "rule {rule}: held to input {n} ({text}) until `mcrctl switch {rule} auto`"
                ),
                None => writeln!(o, "rule {rule}: chooses its input again"),
            };
            if !*applied {
                let _ = writeln!(o, "  NOT yet applied by every worker (see `mcrctl workers`)");
            }
        }
        Reply::Rules { rules, store } => rule_list(&mut o, rules, store.as_ref(), None),
        Reply::Stats(s) => stats(&mut o, s),
        Reply::Workers { workers } => {
            let _ = writeln!(
                o,
                "{:<6} {:>8} {:>4} {:<11} {:>8} {:>7}  last exit",
                "worker", "pid", "cpu", "state", "restarts", "table"
            );
            for w in workers {
                let _ = writeln!(
                    o,
                    "{:<6} {:>8} {:>4} {:<11} {:>8} {:>7}  {}",
                    w.index,
                    w.pid.map_or("-".into(), |p| p.to_string()),
                    w.cpu,
                    w.state,
                    w.restarts,
                    w.table_version,
                    w.last_exit.as_deref().unwrap_or("-")
                );
                for p in &w.problems {
                    let _ = writeln!(o, "       problem: {p}");
                }
            }
        }
        Reply::Events { events } => {
            for e in events {
                let _ = writeln!(o, "{}  {:<5}  {}", utc(e.at_ms), e.level, e.message);
            }
        }
        Reply::Store(s) => store_status(&mut o, s),
        Reply::Nmos(v) => nmos(&mut o, v),
        Reply::NmosGlance(g) => {
            let _ = writeln!(
                o,
                "node {}: {} sender(s), {} receiver(s), registered {}",
                g.node_id,
                g.senders,
                g.receivers,
                g.registration.registry.as_deref().unwrap_or("nowhere")
            );
        }
        Reply::NmosStaged { status, body } => {
            let _ = writeln!(o, "{status} {body}");
        }
        Reply::Restarting { binary, version, pid } => {
            let _ = writeln!(o, "mcrd (pid {pid}) hands over to {} ({version})", binary.display());
        }
        Reply::Role(r) => {
            let _ = writeln!(
                o,
                "{}{} for {:.1}s (set by {}; {} change(s) since start)",
                r.role,
                if r.changed { " now" } else { "" },
                r.for_s,
                r.set_by,
                r.changes
            );
            if r.role == mcr_core::config::Role::Standby {
                let _ = writeln!(o, "  sending nothing; {} packet(s) held so far", r.held);
            }
        }
        Reply::History(h) => {
            let _ = writeln!(o, "{:<20} {:>10} {:>12}  samples", "rule", "pps", "bit/s");
            for (name, r) in &h.rules {
                let _ = writeln!(
                    o,
                    "{:<20} {:>10.0} {:>12.0}  {}",
                    name,
                    r.pps.last().copied().unwrap_or(0.0),
                    r.bps.last().copied().unwrap_or(0.0),
                    r.pps.len()
                );
            }
        }
        Reply::Reloaded {
            path,
            added,
            changed,
            removed,
            unchanged,
            applied,
            restart_needed,
            problems,
        } => {
            let list = |v: &[String]| if v.is_empty() { "-".to_string() } else { v.join(", ") };
            let _ = writeln!(o, "reloaded {}", path.display());
            let _ = writeln!(o, "  added:     {}", list(added));
            let _ = writeln!(o, "  changed:   {}", list(changed));
            let _ = writeln!(o, "  removed:   {}", list(removed));
            let _ = writeln!(o, "  unchanged: {unchanged} (not touched)");
            if !*applied {
                let _ = writeln!(o, "  NOT yet applied by every worker: see `mcrctl workers`");
            }
            for k in restart_needed {
                let _ = writeln!(o, "  `{k}` changed: it takes effect when mcrd restarts");
            }
            for p in problems {
                let _ = writeln!(o, "  problem: {p}");
            }
        }
        Reply::Config { text, .. } => o.push_str(text),
        Reply::Saved { path, rules } => {
            let _ = writeln!(o, "saved {rules} rule(s) to {}", path.display());
        }
        Reply::Error { error } => {
            let _ = writeln!(o, "error: {}", error.message);
        }
    }
    o
}

/// A rule at a glance: what keeps it from forwarding, or whether packets
/// came in over the last interval.
fn state(r: &RuleStats) -> String {
    let by = match (r.datapath.as_str(), &r.datapath_reason, r.worker) {
        ("ebpf", _, _) => " (ebpf)".to_string(),
        (_, Some(why), Some(w)) => format!(" (worker {w}: {why})"),
        (_, Some(why), None) => format!(" (workers: {why})"),
        (_, None, Some(w)) => format!(" (worker {w})"),
        _ => String::new(),
    };
    match r.problems.first() {
        _ if r.disabled => "turned off (enabled = false)".to_string(),
        Some(p) => format!("PROBLEM: {p}"),
        None if r.pps > 0.0 => format!("forwarding{by}"),
        None => format!("idle (no packets){by}"),
    }
}

/// The `watch` screen: a heading and the `stats` table.
pub fn watch_screen(s: &StatsReport, socket: &str) -> String {
    let drops: u64 = s
        .rules
        .iter()
        .flat_map(|r| &r.outputs)
        .map(|o| o.drops.values().sum::<u64>())
        .sum();
    let mut o = format!(
        "mcrctl watch  {socket}  up {:.0} s  {} rule(s)  {} output drop(s)  (Ctrl-C to leave)\n\n",
        s.uptime_s,
        s.rules.len(),
        drops
    );
    stats(&mut o, s);
    o
}

/// The inputs of a rule with several: each with what it brought and what
/// became of it.
fn redundancy(o: &mut String, red: &RedundancyStats, health: &[InputHealthStats]) {
    let head = match red.active {
        Some(a) => format!(
            "{}: input {a} active{}, {} switch(es)",
            red.mode,
            match red.forced {
                Some(f) => format!(" (held to input {f} by mcrctl switch)"),
                None => String::new(),
            },
            red.switches
        ),
        None if red.mode.starts_with("failover") => format!("{}: no input yet", red.mode),
        None if red.mode.starts_with("arbitrate") => {
            format!("{}: {} lost (sequence numbers no line brought)", red.mode, red.lost)
        }
        None => format!("{}: {} lost (no input brought them in time)", red.mode, red.lost),
    };
    let _ = writeln!(o, "  {head}");
    let all_first: u64 = red.inputs.iter().map(|i| i.forwarded).sum();
    for (k, i) in red.inputs.iter().enumerate() {
        let mut what = vec![format!("forwarded {}", i.forwarded)];
        for (name, v) in [
            ("duplicates", i.duplicates),
            ("filled", i.filled),
            ("too late", i.too_late),
            ("strays", i.strays),
            ("not RTP", i.not_rtp),
        ] {
            if v > 0 {
                what.push(format!("{name} {v}"));
            }
        }
        // The input's health says whether it has signal where it is
        // followed; else whether it brought packets over the interval.
        let has_signal = health.get(k).map_or(i.pps > 0.0, |h| h.signal);
        let signal = if has_signal { "" } else { "  NO SIGNAL" };
        let active = if red.active == Some(k + 1) { "  ACTIVE" } else { "" };
        let _ = writeln!(
            o,
            "  <- {:<52} {:>12} {:>8} {:>11}  {}{active}{signal}",
            i.input,
            i.packets,
            rate(i.pps),
            bits(i.bps),
            what.join(", ")
        );
        if let Some(l) = &i.line {
            let _ = writeln!(o, "     {}", line_text(l, i.forwarded, all_first));
        }
    }
}

/// An arbitrated line's own sequence and its place in the race.
fn line_text(l: &mcr_core::control::LineStats, first: u64, all_first: u64) -> String {
    let mut parts = vec![format!("messages {}", l.messages), format!("gaps {}", l.gaps)];
    for (name, v) in [
        ("duplicates", l.duplicates),
        ("heartbeats", l.heartbeats),
        ("wrong session", l.wrong_session),
        ("malformed", l.malformed),
        ("resets", l.resets),
    ] {
        if v > 0 {
            parts.push(format!("{name} {v}"));
        }
    }
    let share = if all_first > 0 {
        format!("first for {:.1} %", first as f64 * 100.0 / all_first as f64)
    } else {
        "first for none yet".into()
    };
    let lag = if l.lag_samples > 0 {
        format!(
            "behind the first copy: median {}, p99 {}",
            micros(l.lag_p50_us),
            micros(l.lag_p99_us)
        )
    } else {
        "never behind the first copy lately".into()
    };
    format!("line: {}; {share}; {lag}", parts.join(", "))
}

/// A time in µs, as µs or ms.
fn micros(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// One input's health on a line: what it carries, its signal, RTP and
/// MPEG-TS counts (each named, zeros too: a clean stream shows them).
/// With `named`, the input's text first (rules with several inputs).
fn input_health(h: &InputHealthStats, named: bool) -> String {
    let mut parts = Vec::new();
    if named {
        parts.push(format!("<- {}", h.input));
    }
    parts.push(h.carries.clone());
    match (h.signal, h.since_last_ms) {
        (true, _) => {}
        (false, Some(ms)) => parts.push(format!("NO SIGNAL for {:.1} s", ms as f64 / 1000.0)),
        (false, None) => parts.push("NO SIGNAL yet".into()),
    }
    if let Some(r) = &h.rtp {
        parts.push(format!(
            "rtp: lost {}, late {}, duplicates {}, restarts {}, jitter {:.0} µs",
            r.lost, r.late, r.duplicates, r.restarts, r.jitter_us
        ));
    }
    if let Some(t) = &h.ts {
        parts.push(format!(
            "ts: continuity {}, sync byte {}, sync loss {}, PAT {} ({} packets)",
            t.continuity_errors, t.sync_byte_errors, t.sync_losses, t.pat_errors, t.packets
        ));
    }
    parts.join("  ")
}

fn stats(o: &mut String, s: &StatsReport) {
    if let Some(r) = s.role.as_ref().filter(|r| r.role == mcr_core::config::Role::Standby) {
        let _ = writeln!(
            o,
            "STANDBY for {:.0} s: nothing is sent; `held` is what would have been (mcrctl role active sends)\n",
            r.for_s
        );
    }
    let _ = writeln!(
        o,
        "{:<20} {:<36} {:>12} {:>8} {:>11} {:>10}  state",
        "rule / output", "input", "packets", "pps", "bit rate", "dropped"
    );
    for r in &s.rules {
        let _ = writeln!(
            o,
            "{:<20} {:<36} {:>12} {:>8} {:>11} {:>10}  {}",
            r.name,
            r.input,
            r.packets,
            rate(r.pps),
            bits(r.bps),
            "",
            state(r)
        );
        for p in r.problems.iter().skip(1) {
            let _ = writeln!(o, "{:<103}  {p}", "");
        }
        if let Some(red) = &r.redundancy {
            redundancy(o, red, &r.health);
        }
        for h in &r.health {
            let _ = writeln!(o, "  health {}", input_health(h, r.health.len() > 1));
        }
        if let Some(why) = &r.health_not_followed {
            let _ = writeln!(o, "  health: {why}");
        }
        for i in &r.srt_inputs {
            let _ = writeln!(o, "  <- {}", i.input);
            srt_lines(o, "srt", &i.srt);
        }
        for i in &r.rist_inputs {
            let _ = writeln!(o, "  <- {}", i.input);
            srt_lines(o, "rist", &i.rist);
        }
        for out in &r.outputs {
            let dropped: u64 = out.drops.values().sum();
            let why = mcr_core::control::nonzero_drops(&out.drops);
            let _ = writeln!(
                o,
                "  -> {:<52} {:>12} {:>8} {:>11} {:>10}{}",
                out.output,
                out.packets,
                rate(out.pps),
                bits(out.bps),
                dropped,
                why.map_or_else(String::new, |w| format!("  ({w})"))
            );
            if out.held > 0 {
                let _ = writeln!(o, "     held while standby: {}", out.held);
            }
            if out.disabled {
                let _ = writeln!(o, "     turned off (enabled=false): sends nothing");
            }
            if let Some(srt) = &out.srt {
                srt_lines(o, "srt", srt);
            }
            if let Some(rist) = &out.rist {
                srt_lines(o, "rist", rist);
            }
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{:<6} {:>12} {:>8} {:>12} {:>10} {:>11} {:>6} {:>9}  dropped",
        "worker", "rx frames", "rx pps", "tx packets", "ring drops", "ring errors", "busy", "cpu s"
    );
    for w in &s.workers {
        let why = mcr_core::control::nonzero_drops(&w.drops);
        let _ = writeln!(
            o,
            "{:<6} {:>12} {:>8} {:>12} {:>10} {:>11} {:>5.0}% {:>9.1}  {}",
            w.index,
            w.rx_frames,
            rate(w.rx_pps),
            w.tx_packets,
            w.ring_drops,
            w.ring_errors,
            w.busy * 100.0,
            w.cpu_s,
            why.unwrap_or_else(|| "-".into())
        );
    }
    match (&s.datapath, &s.datapath_missing) {
        (Some(d), _) => {
            let on = if d.interfaces.is_empty() {
                "no interface yet".to_string()
            } else {
                d.interfaces.join(", ")
            };
            let _ = writeln!(
                o,
                "ebpf   {:>12} {:>8} {:>12}  (the kernel data path, on {on})",
                d.rx_frames,
                rate(d.rx_pps),
                d.tx_packets
            );
            if d.health_missed > 0 {
                let _ = writeln!(
                    o,
                    "       {} datagrams' health not followed: the health ring was full (worker 0 fell behind)",
                    d.health_missed
                );
            }
        }
        (None, Some(why)) => {
            let _ = writeln!(o, "ebpf   not loaded: {why}; the workers forward every rule");
        }
        (None, None) => {}
    }
    interfaces(o, &s.interfaces);
    let _ = writeln!(o, "(rates over the last {:.1} s; up {:.0} s)", s.interval_s, s.uptime_s);
}

/// The interfaces the rules use, with their links.
fn interfaces(o: &mut String, list: &[mcr_core::control::InterfaceStatus]) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "{:<16} {:<18} {:>8}  carries", "interface", "link", "changes");
    for i in list {
        let link = i.link.map_or_else(
            || "MISSING".to_string(),
            |l| {
                if l.is_up() {
                    l.to_string()
                } else {
                    l.to_string().to_uppercase()
                }
            },
        );
        let mut carries = Vec::new();
        if !i.inputs.is_empty() {
            carries.push(format!("inputs of {}", i.inputs.join(", ")));
        }
        if !i.outputs.is_empty() {
            carries.push(format!("outputs of {}", i.outputs.join(", ")));
        }
        let _ = writeln!(
            o,
            "{:<16} {:<18} {:>8}  {}",
            i.name,
            link,
            i.link_changes,
            carries.join("; ")
        );
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm` (UTC) of a time in ms since the Unix epoch.
fn utc(at_ms: u64) -> String {
    let (days, ms) = (at_ms / 86_400_000, at_ms % 86_400_000);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// `mcrctl list`: every rule with its inputs and outputs; given a `stats`
/// reply, each SRT and RIST endpoint's connections on a line under it.
fn rule_list(
    o: &mut String,
    rules: &[mcr_core::control::RuleStatus],
    store: Option<&mcr_core::control::StoreStatus>,
    stats: Option<&StatsReport>,
) {
    if let Some(st) = store {
        store_status(o, st);
    }
    if rules.is_empty() {
        o.push_str("no rules\n");
    }
    for s in rules {
        let join = match s.joins.iter().find(|j| !j.joined) {
            None if !s.rule.enabled => "no join (turned off: enabled = false)".to_string(),
            None if s.joins.is_empty() && s.rule.input.as_srt().is_some() => "no join (SRT input)".to_string(),
            None if s.joins.is_empty() && s.rule.input.as_rist().is_some() => "no join (RIST input)".to_string(),
            None if s.joins.is_empty() && s.rule.input.as_udp().is_some_and(|i| i.vlan.is_some()) => {
                "no join (a VLAN of a trunk)".to_string()
            }
            None if s.joins.is_empty()
                && s.rule
                    .input
                    .as_udp()
                    .is_some_and(|i| !i.destination.ip().is_multicast()) =>
            {
                "no join (unicast input)".to_string()
            }
            None if s.joins.is_empty() => "not joined yet".to_string(),
            None => "joined".to_string(),
            Some(j) => format!(
                "NOT joined{}: {}",
                j.source.map(|s| format!(" from {s}")).unwrap_or_default(),
                j.error.as_deref().unwrap_or("?")
            ),
        };
        let _ = writeln!(o, "{:<20} {:<40} {join}", s.rule.name, s.rule.input.to_string());
        if !s.rule.health {
            let _ = writeln!(o, "{:<20}   health not followed (health = false)", "");
        }
        if let Some(red) = &s.rule.redundancy {
            for i in &red.inputs {
                let _ = writeln!(o, "{:<20} {i}", "");
            }
            let _ = writeln!(o, "{:<20}   {} of {} inputs", "", red.mode, s.rule.input_count());
        }
        let rs = stats.and_then(|st| st.rules.iter().find(|r| r.name == s.rule.name));
        if let Some(rs) = rs {
            for i in &rs.srt_inputs {
                connections_line(o, "<-", "srt", i.index, &i.srt);
            }
            for i in &rs.rist_inputs {
                connections_line(o, "<-", "rist", i.index, &i.rist);
            }
        }
        for (k, out) in s.rule.outputs.iter().enumerate() {
            let _ = writeln!(o, "{:<20}   -> {out}", "");
            if let Some(os) = rs.and_then(|r| r.outputs.get(k)) {
                if let Some(srt) = &os.srt {
                    connections_line(o, "  ", "srt", k, srt);
                }
                if let Some(rist) = &os.rist {
                    connections_line(o, "  ", "rist", k, rist);
                }
            }
        }
        let _ = writeln!(o, "{:<20}   from {}", "", s.origin);
        for p in &s.problems {
            let _ = writeln!(o, "{:<20}   problem: {p}", "");
        }
    }
}

/// How many peers a `list` line names before "and N more".
const LIST_PEERS: usize = 8;

/// One line for `mcrctl list`: an SRT or RIST endpoint's state and whom
/// it is connected to (its counters are `mcrctl stats`'s).
fn connections_line(o: &mut String, arrow: &str, protocol: &str, index: usize, s: &mcr_core::control::SrtStatus) {
    let which = if arrow == "<-" {
        format!("input {}: ", index + 1)
    } else {
        String::new()
    };
    let peers: Vec<String> = s
        .connections
        .iter()
        .take(LIST_PEERS)
        .map(|c| {
            if c.stream_id.is_empty() {
                c.peer.clone()
            } else {
                format!("{} `{}`", c.peer, c.stream_id)
            }
        })
        .collect();
    let more = s.connections.len().saturating_sub(LIST_PEERS);
    let _ = writeln!(
        o,
        "{:<20}   {arrow}   {which}{protocol} {}, {} connection(s){}{}{}",
        "",
        s.state,
        s.connections.len(),
        s.error.as_deref().map_or_else(String::new, |e| format!(" ({e})")),
        if peers.is_empty() {
            String::new()
        } else {
            format!(": {}", peers.join(", "))
        },
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
}

/// Renders a reply to `mcrctl list`, with the connections of each SRT and
/// RIST endpoint from `stats` (a `stats` reply asked for beside it).
pub fn render_list(r: &Reply, stats: Option<&StatsReport>) -> String {
    match r {
        Reply::Rules { rules, store } => {
            let mut o = String::new();
            rule_list(&mut o, rules, store.as_ref(), stats);
            o
        }
        other => render(other),
    }
}

/// An SRT or RIST (`protocol`) endpoint and its connections, under its
/// counters.
fn srt_lines(o: &mut String, protocol: &str, s: &mcr_core::control::SrtStatus) {
    let refused = mcr_core::control::nonzero_drops(&s.refused);
    let _ = writeln!(
        o,
        "     {protocol} {} on worker {}, {} {}{}{}",
        s.state,
        s.worker,
        s.connections.len(),
        if protocol == "srt" { "caller(s)" } else { "peer(s)" },
        s.error.as_deref().map_or_else(String::new, |e| format!(": {e}")),
        refused.map_or_else(String::new, |r| format!("; refused {r}"))
    );
    if let Some(r) = &s.last_refusal {
        let _ = writeln!(o, "     last refused: {r}");
    }
    for c in &s.connections {
        let id = if c.stream_id.is_empty() {
            String::new()
        } else {
            format!(" `{}`", c.stream_id)
        };
        let _ = writeln!(
            o,
            "     {} {}{id} {} {} s: rtt {:.1} ms, {:.2} Mb/s, sent {}, retransmitted {}, reported missing {}, lost {}, too late {}, queue full {}, buffer {} ms, latency {} ms",
            if protocol == "srt" { "caller" } else { "peer" },
            c.peer,
            c.state,
            c.connected_s,
            c.rtt_ms,
            c.send_mbps,
            c.packets,
            c.retransmitted,
            c.reported_missing,
            c.lost,
            c.dropped_too_late,
            c.queue_full,
            c.buffer_ms,
            c.latency_ms
        );
    }
}

#[cfg(test)]
mod utc_tests {
    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00.000");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00:00.000");
        assert_eq!(super::utc(1_795_689_045_123), "2026-11-26 10:30:45.123");
    }
}
