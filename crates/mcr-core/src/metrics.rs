//! The Prometheus text exposition format (version 0.0.4) of what `mcrctl
//! stats`, `list` and `workers` report: the same numbers, so a scrape and
//! `mcrctl stats` always agree.
//!
//! Every metric is `mcr_`-prefixed; counters end in `_total`; units are
//! base units (bytes, seconds); every family has `# HELP` and `# TYPE`.

use std::fmt::Write;

mod srt;

use crate::control::{RuleStatus, StatsReport, WorkerStatus};

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family being written: its samples follow its header.
struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl Family<'_> {
    fn sample(&mut self, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

fn family<'a>(out: &'a mut String, name: &'static str, kind: &str, help: &str) -> Family<'a> {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    Family { out, name }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A float as Prometheus reads it (no exponent surprises for our ranges).
fn float(v: f64) -> String {
    if v.is_finite() { format!("{v}") } else { "0".into() }
}

/// The relay's role: one sample per role, 1 for the one it has (two relays
/// of a pair that both show `active` are in split brain).
fn role(out: &mut String, role: &crate::control::RoleStatus) {
    let mut f = family(
        out,
        "mcr_role",
        "gauge",
        "1 for the relay's role (active: it sends; standby: it holds everything ready and sends nothing), 0 for the other.",
    );
    for (r, name) in <crate::config::Role as crate::named::Named>::ALL {
        f.sample(&[("role", name)], u8::from(*r == role.role));
    }
    family(
        out,
        "mcr_role_changes_total",
        "counter",
        "How often the role changed since mcrd started.",
    )
    .sample(&[], role.changes);
    family(
        out,
        "mcr_role_seconds",
        "gauge",
        "Seconds since the relay took its role.",
    )
    .sample(&[], float(role.for_s));
}

/// The etcd store the rules come from: whether mcrd follows it, how far,
/// and what it refused.
fn store(out: &mut String, s: &crate::control::StoreStatus) {
    let families: [(&'static str, &str, &str, f64); 6] = [
        (
            "mcr_etcd_connected",
            "gauge",
            "1 while mcrd follows the etcd store; 0 while it cannot reach it (its rules stay as they were).",
            f64::from(u8::from(s.connected)),
        ),
        (
            "mcr_etcd_revision",
            "gauge",
            "The etcd revision of the last update applied.",
            s.revision as f64,
        ),
        (
            "mcr_etcd_workers_revision",
            "gauge",
            "The newest etcd revision whose rules every live worker runs.",
            s.workers_revision as f64,
        ),
        ("mcr_etcd_rules", "gauge", "Rules the etcd store gives.", s.rules as f64),
        (
            "mcr_etcd_refused_keys",
            "gauge",
            "Keys of the store whose rule was refused (see mcrctl list).",
            s.refused.len() as f64,
        ),
        (
            "mcr_etcd_updates_total",
            "counter",
            "Updates from the store applied since mcrd started.",
            s.updates as f64,
        ),
    ];
    for (name, kind, help, v) in families {
        family(out, name, kind, help).sample(&[], float(v));
    }
    family(
        out,
        "mcr_etcd_state_seconds",
        "gauge",
        "Seconds since mcrd last reached or lost the etcd store.",
    )
    .sample(&[], float(s.since_s));
    let mut f = family(
        out,
        "mcr_etcd_problem",
        "gauge",
        "1 for why the etcd store is not reached (unreachable, certificate, authentication, permission), 0 for the others; all 0 while mcrd follows it.",
    );
    for (kind, name) in <crate::control::StoreProblem as crate::named::Named>::ALL {
        f.sample(&[("kind", name)], u8::from(s.problem_kind == Some(*kind)));
    }
}

/// The interfaces the rules use: whether each link is up, and how often
/// it went down or came up.
fn interfaces(out: &mut String, stats: &StatsReport) {
    let mut f = family(
        out,
        "mcr_interface_up",
        "gauge",
        "1 while the interface exists, is set up and has a carrier; 0 otherwise (rules read from or send on it).",
    );
    for i in &stats.interfaces {
        f.sample(&[("interface", &i.name)], u8::from(i.link.is_some_and(|l| l.is_up())));
    }
    let mut f = family(
        out,
        "mcr_interface_link_changes_total",
        "counter",
        "Times the interface's link went down or came up since mcrd started.",
    );
    for i in &stats.interfaces {
        f.sample(&[("interface", &i.name)], i.link_changes);
    }
}

/// The families of rules with several inputs: each input's counts and
/// signal, each rule's losses, switches and active input.
fn redundancy(out: &mut String, stats: &StatsReport) {
    let several = || stats.rules.iter().filter_map(|r| r.redundancy.as_ref().map(|x| (r, x)));
    type InputCount = fn(&crate::control::InputStats) -> u64;
    let per_input: [(&'static str, &str, InputCount); 4] = [
        (
            "mcr_input_packets_total",
            "Packets that arrived on an input of a rule with several inputs.",
            |i| i.packets,
        ),
        ("mcr_input_bytes_total", "UDP payload bytes of those packets.", |i| {
            i.bytes
        }),
        (
            "mcr_input_forwarded_total",
            "Packets forwarded from the input (merge: it brought them first; failover: it was active).",
            |i| i.forwarded,
        ),
        (
            "mcr_input_filled_total",
            "Merge: packets the input missed that another input brought.",
            |i| i.filled,
        ),
    ];
    for (name, help, get) in per_input {
        let mut f = family(out, name, "counter", help);
        for (r, x) in several() {
            for i in &x.inputs {
                f.sample(&[("rule", &r.name), ("input", &i.input)], get(i));
            }
        }
    }
    let mut f = family(
        out,
        "mcr_input_discarded_total",
        "counter",
        "Packets of the input not forwarded, by reason (merge: duplicate, too_late, stray, not_rtp; arbitrate: duplicate, too_late, stray, wrong_session, malformed).",
    );
    for (r, x) in several() {
        for i in &x.inputs {
            for (reason, n) in [
                ("duplicate", i.duplicates),
                ("too_late", i.too_late),
                ("stray", i.strays),
                ("not_rtp", i.not_rtp),
            ] {
                f.sample(&[("rule", &r.name), ("input", &i.input), ("reason", reason)], n);
            }
            if let Some(l) = &i.line {
                for (reason, n) in [("wrong_session", l.wrong_session), ("malformed", l.malformed)] {
                    f.sample(&[("rule", &r.name), ("input", &i.input), ("reason", reason)], n);
                }
            }
        }
    }
    lines(out, stats);
    let mut f = family(
        out,
        "mcr_input_signal",
        "gauge",
        "1 while packets arrive on the input, 0 when none came for a second (a failover's inputs: its loss-of-signal time, at least 200 ms).",
    );
    for r in &stats.rules {
        for i in &r.health {
            f.sample(&[("rule", &r.name), ("input", &i.input)], u8::from(i.signal));
        }
        // Where health is not followed, a rule with several inputs still
        // knows whether each brought packets over the last interval.
        if let (true, Some(x)) = (r.health.is_empty(), &r.redundancy) {
            for i in &x.inputs {
                f.sample(&[("rule", &r.name), ("input", &i.input)], u8::from(i.pps > 0.0));
            }
        }
    }
    let mut f = family(
        out,
        "mcr_rule_lost_total",
        "counter",
        "Merge: sequence numbers no input brought within the path differential. Arbitrate: sequence numbers no line brought.",
    );
    for (r, x) in several() {
        f.sample(&[("rule", &r.name), ("mode", mode_name(&x.mode))], x.lost);
    }
    let mut f = family(
        out,
        "mcr_rule_switches_total",
        "counter",
        "Failover: how often the input forwarded from changed.",
    );
    for (r, x) in several() {
        f.sample(&[("rule", &r.name), ("mode", mode_name(&x.mode))], x.switches);
    }
    let mut f = family(
        out,
        "mcr_rule_active_input",
        "gauge",
        "Failover: the input forwarded from, 1 for the first (the primary); 0 before any packet.",
    );
    for (r, x) in several() {
        f.sample(&[("rule", &r.name)], x.active.unwrap_or(0));
    }
    let mut f = family(
        out,
        "mcr_rule_forced_input",
        "gauge",
        "Failover: the input `mcrctl switch` holds the rule to, 1 for the first; 0 when the rule chooses.",
    );
    for (r, x) in several() {
        f.sample(&[("rule", &r.name)], x.forced.unwrap_or(0));
    }
}

/// The families of arbitrated lines: each line's own sequence, and by how
/// much its copies came after the first.
fn lines(out: &mut String, stats: &StatsReport) {
    let lines = || {
        stats.rules.iter().flat_map(|r| {
            r.redundancy
                .iter()
                .flat_map(|x| &x.inputs)
                .filter_map(move |i| Some((r.name.as_str(), i.input.as_str(), i.line.as_ref()?)))
        })
    };
    type LineCount = fn(&crate::control::LineStats) -> u64;
    let counts: [(&'static str, &str, LineCount); 5] = [
        (
            "mcr_line_messages_total",
            "Arbitrate: messages (sequence numbers) the line's data packets carried.",
            |l| l.messages,
        ),
        (
            "mcr_line_gaps_total",
            "Arbitrate: sequence numbers the line skipped (it lost them; the other line may have brought them).",
            |l| l.gaps,
        ),
        (
            "mcr_line_duplicates_total",
            "Arbitrate: packets at or behind what the line had brought already (duplicates within the line).",
            |l| l.duplicates,
        ),
        (
            "mcr_line_heartbeats_total",
            "Arbitrate: heartbeats (and ends of session) the line brought.",
            |l| l.heartbeats,
        ),
        (
            "mcr_line_resets_total",
            "Arbitrate: sequence resets and session changes the line made.",
            |l| l.resets,
        ),
    ];
    for (name, help, get) in counts {
        let mut f = family(out, name, "counter", help);
        for (rule, input, l) in lines() {
            f.sample(&[("rule", rule), ("input", input)], get(l));
        }
    }
    for (name, help, q) in [
        (
            "mcr_line_lag_p50_seconds",
            "Arbitrate: half of the line's copies came at most this long after the first copy of their sequence number, over the last 5 to 10 s (0 when it was always first).",
            0,
        ),
        (
            "mcr_line_lag_p99_seconds",
            "Arbitrate: 99 % of the line's copies came at most this long after the first copy, over the last 5 to 10 s.",
            1,
        ),
    ] {
        let mut f = family(out, name, "gauge", help);
        for (rule, input, l) in lines() {
            let us = if q == 0 { l.lag_p50_us } else { l.lag_p99_us };
            f.sample(&[("rule", rule), ("input", input)], us / 1e6);
        }
    }
}

/// `merge` or `failover`, without its settings (a label that stays the
/// same when a setting changes).
fn mode_name(mode: &str) -> &str {
    mode.split(',').next().unwrap_or(mode)
}

/// The families of input health: what each input carries, how long since
/// its last packet, its RTP sequence and jitter, its MPEG-TS errors.
fn health(out: &mut String, stats: &StatsReport) {
    let followed = || {
        stats
            .rules
            .iter()
            .flat_map(|r| r.health.iter().map(move |i| (r.name.as_str(), i)))
    };
    let mut f = family(
        out,
        "mcr_input_carries",
        "gauge",
        "1 for what the input carries: none (nothing yet), other, rtp, ts (MPEG-TS in UDP) or rtp-ts.",
    );
    for (rule, i) in followed() {
        f.sample(&[("rule", rule), ("input", &i.input), ("carries", &i.carries)], 1);
    }
    let mut f = family(
        out,
        "mcr_input_last_packet_age_seconds",
        "gauge",
        "Seconds since the input's last packet (absent before the first).",
    );
    for (rule, i) in followed() {
        if let Some(ms) = i.since_last_ms {
            f.sample(&[("rule", rule), ("input", &i.input)], float(ms as f64 / 1000.0));
        }
    }
    let mut f = family(
        out,
        "mcr_input_rtp_lost",
        "gauge",
        "RTP sequence numbers the input is still missing (falls when a late packet fills a gap).",
    );
    for (rule, i) in followed() {
        if let Some(r) = &i.rtp {
            f.sample(&[("rule", rule), ("input", &i.input)], r.lost);
        }
    }
    type Rtp = fn(&crate::control::RtpHealthStats) -> u64;
    let rtp_counts: [(&str, &str, Rtp); 3] = [
        (
            "mcr_input_rtp_late_total",
            "RTP packets that came after a later one (reordered).",
            |r| r.late,
        ),
        (
            "mcr_input_rtp_duplicates_total",
            "RTP packets that repeated a sequence number.",
            |r| r.duplicates,
        ),
        (
            "mcr_input_rtp_restarts_total",
            "Times the RTP sender started again (new SSRC or a jump).",
            |r| r.restarts,
        ),
    ];
    for (name, help, get) in rtp_counts {
        let mut f = family(out, name, "counter", help);
        for (rule, i) in followed() {
            if let Some(r) = &i.rtp {
                f.sample(&[("rule", rule), ("input", &i.input)], get(r));
            }
        }
    }
    let mut f = family(
        out,
        "mcr_input_rtp_jitter_seconds",
        "gauge",
        "RFC 3550 interarrival jitter of the input's RTP stream.",
    );
    for (rule, i) in followed() {
        if let Some(r) = &i.rtp {
            f.sample(&[("rule", rule), ("input", &i.input)], float(r.jitter_us / 1e6));
        }
    }
    let mut f = family(
        out,
        "mcr_input_ts_packets_total",
        "counter",
        "MPEG-TS packets of the input looked at.",
    );
    for (rule, i) in followed() {
        if let Some(t) = &i.ts {
            f.sample(&[("rule", rule), ("input", &i.input)], t.packets);
        }
    }
    let mut f = family(
        out,
        "mcr_input_ts_errors_total",
        "counter",
        "ETSI TR 101 290 first-priority errors of the input's transport stream, by error.",
    );
    for (rule, i) in followed() {
        if let Some(t) = &i.ts {
            for (error, n) in [
                ("sync_loss", t.sync_losses),
                ("sync_byte", t.sync_byte_errors),
                ("pat", t.pat_errors),
                ("continuity_count", t.continuity_errors),
            ] {
                f.sample(&[("rule", rule), ("input", &i.input), ("error", error)], n);
            }
        }
    }
}

/// Everything in the text format. `rules` and `workers` are the answers to
/// `list` and `workers`, `stats` the answer to `stats`.
pub fn render(version: &str, stats: &StatsReport, rules: &[RuleStatus], workers: &[WorkerStatus]) -> String {
    let mut out = String::with_capacity(4096 + 512 * stats.rules.len());
    family(
        &mut out,
        "mcr_build_info",
        "gauge",
        "The version of mcrd that serves; always 1.",
    )
    .sample(&[("version", version)], 1);
    family(&mut out, "mcr_uptime_seconds", "gauge", "Seconds since mcrd started.").sample(&[], float(stats.uptime_s));
    family(&mut out, "mcr_rules", "gauge", "Rules in the table.").sample(&[], stats.rules.len());

    let mut f = family(
        &mut out,
        "mcr_rule_packets_total",
        "counter",
        "Packets matched by the rule's input.",
    );
    for r in &stats.rules {
        f.sample(&[("rule", &r.name), ("input", &r.input)], r.packets);
    }
    let mut f = family(
        &mut out,
        "mcr_rule_bytes_total",
        "counter",
        "UDP payload bytes matched by the rule's input.",
    );
    for r in &stats.rules {
        f.sample(&[("rule", &r.name), ("input", &r.input)], r.bytes);
    }
    let mut f = family(
        &mut out,
        "mcr_rule_up",
        "gauge",
        "1 when nothing keeps the rule from forwarding, 0 when something does (see mcrctl list).",
    );
    for r in &stats.rules {
        f.sample(&[("rule", &r.name)], u8::from(r.problems.is_empty()));
    }
    let mut f = family(
        &mut out,
        "mcr_rule_enabled",
        "gauge",
        "1 when the rule is turned on, 0 when it is turned off (enabled = false, or an NMOS receiver disabled).",
    );
    for r in &stats.rules {
        f.sample(&[("rule", &r.name)], u8::from(!r.disabled));
    }
    let mut f = family(
        &mut out,
        "mcr_output_enabled",
        "gauge",
        "1 when the output is turned on, 0 when it is turned off (enabled=false, or an NMOS sender disabled).",
    );
    for r in &stats.rules {
        for o in &r.outputs {
            f.sample(&[("rule", &r.name), ("output", &o.output)], u8::from(!o.disabled));
        }
    }
    let mut f = family(
        &mut out,
        "mcr_output_packets_total",
        "counter",
        "Packets sent to the output.",
    );
    for r in &stats.rules {
        for o in &r.outputs {
            f.sample(&[("rule", &r.name), ("output", &o.output)], o.packets);
        }
    }
    let mut f = family(
        &mut out,
        "mcr_output_bytes_total",
        "counter",
        "UDP payload bytes sent to the output.",
    );
    for r in &stats.rules {
        for o in &r.outputs {
            f.sample(&[("rule", &r.name), ("output", &o.output)], o.bytes);
        }
    }
    let mut f = family(
        &mut out,
        "mcr_output_drops_total",
        "counter",
        "Packets not sent to the output, by reason.",
    );
    for r in &stats.rules {
        for o in &r.outputs {
            for (reason, n) in &o.drops {
                f.sample(&[("rule", &r.name), ("output", &o.output), ("reason", reason)], n);
            }
        }
    }
    let mut f = family(
        &mut out,
        "mcr_output_held_total",
        "counter",
        "Packets not sent to the output because the relay was standby: what it would have sent.",
    );
    for r in &stats.rules {
        for o in &r.outputs {
            f.sample(&[("rule", &r.name), ("output", &o.output)], o.held);
        }
    }
    srt::render(&mut out, stats);
    if let Some(role) = &stats.role {
        self::role(&mut out, role);
    }
    if let Some(store) = &stats.store {
        self::store(&mut out, store);
    }
    interfaces(&mut out, stats);
    let mut f = family(
        &mut out,
        "mcr_rule_datapath_ebpf",
        "gauge",
        "1 when MCR's eBPF program in the kernel forwards the rule, 0 when the workers do.",
    );
    for r in &stats.rules {
        f.sample(&[("rule", &r.name)], u8::from(r.datapath == "ebpf"));
    }
    redundancy(&mut out, stats);
    health(&mut out, stats);
    let mut f = family(
        &mut out,
        "mcr_membership_joined",
        "gauge",
        "1 when the kernel holds the group membership a rule needs, 0 when it could not be taken.",
    );
    for r in rules {
        for j in &r.joins {
            let source = j.source.map(|s| s.to_string()).unwrap_or_default();
            let group = j.group.to_string();
            f.sample(
                &[
                    ("rule", &r.rule.name),
                    ("interface", &j.interface),
                    ("group", &group),
                    ("source", &source),
                ],
                u8::from(j.joined),
            );
        }
    }

    family(
        &mut out,
        "mcr_datapath_ebpf_up",
        "gauge",
        "1 while MCR's eBPF data path is loaded.",
    )
    .sample(&[], u8::from(stats.datapath.is_some()));
    if let Some(d) = &stats.datapath {
        type DpCounter = fn(&crate::control::DatapathStats) -> u64;
        let counters: [(&'static str, &str, DpCounter); 4] = [
            (
                "mcr_datapath_rx_frames_total",
                "Frames MCR's eBPF program took and forwarded.",
                |d| d.rx_frames,
            ),
            ("mcr_datapath_rx_bytes_total", "Bytes of those frames.", |d| d.rx_bytes),
            (
                "mcr_datapath_tx_packets_total",
                "Copies MCR's eBPF program sent, all outputs together.",
                |d| d.tx_packets,
            ),
            (
                "mcr_datapath_health_missed_total",
                "Datagrams whose input health MCR's eBPF program could not hand on (its health ring was full).",
                |d| d.health_missed,
            ),
        ];
        for (name, help, get) in counters {
            family(&mut out, name, "counter", help).sample(&[], get(d));
        }
        let mut f = family(
            &mut out,
            "mcr_datapath_interface_attached",
            "gauge",
            "1 for each input interface MCR's eBPF program is attached to.",
        );
        for i in &d.interfaces {
            f.sample(&[("interface", i)], 1);
        }
    }

    type Counter = fn(&crate::control::WorkerStats) -> u64;
    let worker_counters: [(&'static str, &str, Counter); 5] = [
        (
            "mcr_worker_rx_frames_total",
            "Frames the worker took from its receive rings.",
            |w| w.rx_frames,
        ),
        ("mcr_worker_rx_bytes_total", "Bytes of those frames.", |w| w.rx_bytes),
        ("mcr_worker_tx_packets_total", "Packets the worker sent.", |w| {
            w.tx_packets
        }),
        (
            "mcr_worker_ring_drops_total",
            "Frames the kernel dropped because the worker's receive ring was full.",
            |w| w.ring_drops,
        ),
        (
            "mcr_worker_ring_errors_total",
            "Errors the worker's receive sockets reported (an input interface went down).",
            |w| w.ring_errors,
        ),
    ];
    for (name, help, get) in worker_counters {
        let mut f = family(&mut out, name, "counter", help);
        for w in &stats.workers {
            f.sample(&[("worker", &w.index.to_string())], get(w));
        }
    }
    let mut f = family(
        &mut out,
        "mcr_worker_drops_total",
        "counter",
        "Frames the worker dropped, by reason.",
    );
    for w in &stats.workers {
        let index = w.index.to_string();
        for (reason, n) in &w.drops {
            f.sample(&[("worker", &index), ("reason", reason)], n);
        }
    }
    let mut f = family(
        &mut out,
        "mcr_worker_cpu_seconds_total",
        "counter",
        "CPU time (user and system) of the worker's processes, over every restart.",
    );
    for w in &stats.workers {
        f.sample(&[("worker", &w.index.to_string())], float(w.cpu_s));
    }
    let mut f = family(
        &mut out,
        "mcr_worker_busy_ratio",
        "gauge",
        "Share of one CPU the worker used over the last second (its load).",
    );
    for w in &stats.workers {
        f.sample(&[("worker", &w.index.to_string())], float(w.busy));
    }
    let mut f = family(&mut out, "mcr_worker_up", "gauge", "1 while the worker process runs.");
    for w in workers {
        f.sample(&[("worker", &w.index.to_string())], u8::from(w.state == "running"));
    }
    let mut f = family(
        &mut out,
        "mcr_worker_restarts_total",
        "counter",
        "Times the worker was restarted.",
    );
    for w in workers {
        f.sample(&[("worker", &w.index.to_string())], w.restarts);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::control::{JoinState, OutputStats, RuleStats, WorkerStats};

    fn report() -> (StatsReport, Vec<RuleStatus>, Vec<WorkerStatus>) {
        let rule: crate::rule::Rule = serde_json::from_str(
            r#"{"name":"feed-a","input":{"interface":"eth0","destination":"239.1.1.1:5001"},
                "outputs":[{"interface":"eth1","destination":"239.10.1.1:6001"}]}"#,
        )
        .expect("rule");
        let drops: BTreeMap<String, u64> = [("queue_full".to_string(), 3), ("ttl_expired".to_string(), 0)].into();
        let mut stats = StatsReport {
            uptime_s: 12.5,
            interval_s: 1.0,
            rules: vec![
                RuleStats {
                    name: "feed-a".into(),
                    disabled: false,
                    input: "eth0:239.1.1.1:5001".into(),
                    packets: 100,
                    bytes: 102_400,
                    pps: 10.0,
                    bps: 81_920.0,
                    outputs: vec![OutputStats {
                        output: "eth1:239.10.1.1:6001".into(),
                        disabled: false,
                        packets: 97,
                        bytes: 99_328,
                        pps: 10.0,
                        bps: 81_920.0,
                        drops: drops.clone(),
                        held: 5,
                        srt: None,
                        rist: None,
                    }],
                    problems: Vec::new(),
                    datapath: "ebpf".into(),
                    datapath_reason: None,
                    worker: None,
                    redundancy: None,
                    health: vec![crate::control::InputHealthStats {
                        input: "eth0:239.1.1.1:5001".into(),
                        carries: "rtp-ts".into(),
                        signal: true,
                        since_last_ms: Some(20),
                        rtp: Some(crate::control::RtpHealthStats {
                            lost: 2,
                            late: 1,
                            duplicates: 0,
                            restarts: 0,
                            jitter_us: 150.0,
                        }),
                        ts: Some(crate::control::TsHealthStats {
                            packets: 700,
                            sync_losses: 0,
                            sync_byte_errors: 0,
                            pat_errors: 0,
                            continuity_errors: 4,
                        }),
                    }],
                    health_not_followed: None,
                    srt_inputs: Vec::new(),
                    rist_inputs: Vec::new(),
                },
                RuleStats {
                    name: "news".into(),
                    disabled: true,
                    input: "eth0:239.1.1.2:5001".into(),
                    packets: 50,
                    bytes: 50_000,
                    pps: 5.0,
                    bps: 40_000.0,
                    outputs: Vec::new(),
                    problems: Vec::new(),
                    datapath: "packet".into(),
                    datapath_reason: Some("several inputs".into()),
                    worker: None,
                    redundancy: Some(crate::control::RedundancyStats {
                        mode: "failover,hold=10000ms".into(),
                        lost: 0,
                        switches: 1,
                        active: Some(2),
                        forced: None,
                        inputs: ["eth0:239.1.1.2:5001", "eth2:239.2.1.2:5001"]
                            .into_iter()
                            .map(|i| crate::control::InputStats {
                                input: i.into(),
                                packets: 30,
                                bytes: 30_000,
                                pps: if i.starts_with("eth2") { 5.0 } else { 0.0 },
                                bps: 0.0,
                                forwarded: 25,
                                duplicates: 1,
                                filled: 2,
                                too_late: 0,
                                strays: 0,
                                not_rtp: 0,
                                line: None,
                            })
                            .collect(),
                    }),
                    health: Vec::new(),
                    health_not_followed: None,
                    srt_inputs: Vec::new(),
                    rist_inputs: Vec::new(),
                },
            ],
            workers: vec![WorkerStats {
                index: 0,
                rx_frames: 120,
                rx_bytes: 130_000,
                tx_packets: 97,
                ring_drops: 0,
                ring_errors: 0,
                drops,
                rx_pps: 10.0,
                cpu_s: 1.25,
                busy: 0.5,
            }],
            datapath: Some(crate::control::DatapathStats {
                interfaces: vec!["eth0".into()],
                rx_frames: 100,
                rx_bytes: 106_000,
                tx_packets: 97,
                rx_pps: 10.0,
                health_missed: 3,
            }),
            datapath_missing: None,
            role: Some(crate::control::RoleStatus {
                role: crate::config::Role::Standby,
                for_s: 2.5,
                changes: 1,
                set_by: "request".into(),
                held: 5,
                changed: false,
            }),
            store: Some(crate::control::StoreStatus {
                endpoints: vec!["http://127.0.0.1:2379".into()],
                prefix: "/mcr/".into(),
                connected: false,
                problem: Some("connection refused".into()),
                problem_kind: Some(crate::control::StoreProblem::Certificate),
                since_s: 3.0,
                revision: 41,
                workers_revision: 40,
                rules: 7,
                updates: 9,
                refused: Vec::new(),
            }),
            interfaces: vec![
                crate::control::InterfaceStatus {
                    name: "eth0".into(),
                    link: Some(crate::interfaces::Link::Up),
                    inputs: vec!["feed-a".into(), "news".into()],
                    outputs: Vec::new(),
                    link_changes: 0,
                },
                crate::control::InterfaceStatus {
                    name: "eth1".into(),
                    link: Some(crate::interfaces::Link::NoCarrier),
                    inputs: Vec::new(),
                    outputs: vec!["feed-a".into()],
                    link_changes: 2,
                },
                crate::control::InterfaceStatus {
                    name: "eth2".into(),
                    link: None,
                    inputs: vec!["news".into()],
                    outputs: Vec::new(),
                    link_changes: 0,
                },
            ],
        };
        // An arbitrated market-data rule: news's shape, its lines' figures.
        let mut itch = stats.rules[1].clone();
        itch.name = "itch".into();
        if let Some(red) = &mut itch.redundancy {
            red.mode = "arbitrate,framing=moldudp64".into();
            red.lost = 6;
            for (k, i) in red.inputs.iter_mut().enumerate() {
                i.line = Some(crate::control::LineStats {
                    messages: 90,
                    gaps: 3 + k as u64,
                    duplicates: 0,
                    heartbeats: 2,
                    wrong_session: 0,
                    malformed: k as u64,
                    resets: 0,
                    lag_samples: 20 * k as u64,
                    lag_p50_us: 1500.0 * k as f64,
                    lag_p99_us: 2500.0 * k as f64,
                });
            }
        }
        stats.rules.push(itch);
        let rules = vec![RuleStatus {
            rule,
            joins: vec![JoinState {
                interface: "eth0".into(),
                group: "239.1.1.1".parse().expect("ip"),
                source: None,
                joined: true,
                error: None,
            }],
            problems: Vec::new(),
            origin: crate::control::Origin::File,
        }];
        let workers = vec![WorkerStatus {
            index: 0,
            pid: Some(42),
            cpu: 1,
            state: "running".into(),
            restarts: 2,
            table_version: 3,
            last_exit: None,
            problems: Vec::new(),
        }];
        (stats, rules, workers)
    }

    #[test]
    fn every_family_has_help_and_type_and_counters_end_in_total() {
        let (s, r, w) = report();
        let text = render("0.1.0", &s, &r, &w);
        let mut families = 0;
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            families += 1;
            let mut parts = line.split_whitespace().skip(2);
            let (name, kind) = (parts.next().expect("name"), parts.next().expect("kind"));
            assert!(text.contains(&format!("# HELP {name} ")), "{name} has help");
            assert_eq!(name.ends_with("_total"), kind == "counter", "{line}");
            assert!(
                text.lines().any(|l| l.starts_with(name) && !l.starts_with('#')),
                "{name} has samples"
            );
        }
        assert!(families >= 18, "{families}");
    }

    #[test]
    fn the_numbers_are_those_of_the_reports() {
        let (s, r, w) = report();
        let text = render("0.1.0", &s, &r, &w);
        for want in [
            "mcr_build_info{version=\"0.1.0\"} 1",
            "mcr_rules 3",
            "mcr_input_packets_total{rule=\"news\",input=\"eth2:239.2.1.2:5001\"} 30",
            "mcr_input_discarded_total{rule=\"news\",input=\"eth0:239.1.1.2:5001\",reason=\"duplicate\"} 1",
            "mcr_input_signal{rule=\"news\",input=\"eth0:239.1.1.2:5001\"} 0",
            "mcr_input_signal{rule=\"news\",input=\"eth2:239.2.1.2:5001\"} 1",
            "mcr_rule_switches_total{rule=\"news\",mode=\"failover\"} 1",
            "mcr_input_signal{rule=\"feed-a\",input=\"eth0:239.1.1.1:5001\"} 1",
            "mcr_input_carries{rule=\"feed-a\",input=\"eth0:239.1.1.1:5001\",carries=\"rtp-ts\"} 1",
            "mcr_input_last_packet_age_seconds{rule=\"feed-a\",input=\"eth0:239.1.1.1:5001\"} 0.02",
            "mcr_input_rtp_lost{rule=\"feed-a\",input=\"eth0:239.1.1.1:5001\"} 2",
            "mcr_input_rtp_late_total{rule=\"feed-a\",input=\"eth0:239.1.1.1:5001\"} 1",
            "mcr_input_rtp_jitter_seconds{rule=\"feed-a\",input=\"eth0:239.1.1.1:5001\"} 0.00015",
            "mcr_input_ts_errors_total{rule=\"feed-a\",input=\"eth0:239.1.1.1:5001\",error=\"continuity_count\"} 4",
            "mcr_line_gaps_total{rule=\"itch\",input=\"eth2:239.2.1.2:5001\"} 4",
            "mcr_line_lag_p99_seconds{rule=\"itch\",input=\"eth2:239.2.1.2:5001\"} 0.0025",
            "mcr_input_discarded_total{rule=\"itch\",input=\"eth2:239.2.1.2:5001\",reason=\"malformed\"} 1",
            "mcr_rule_lost_total{rule=\"itch\",mode=\"arbitrate\"} 6",
            "mcr_rule_active_input{rule=\"news\"} 2",
            "mcr_rule_forced_input{rule=\"news\"} 0",
            "mcr_rule_enabled{rule=\"news\"} 0",
            "mcr_rule_enabled{rule=\"feed-a\"} 1",
            "mcr_output_enabled{rule=\"feed-a\",output=\"eth1:239.10.1.1:6001\"} 1",
            "mcr_rule_packets_total{rule=\"feed-a\",input=\"eth0:239.1.1.1:5001\"} 100",
            "mcr_output_packets_total{rule=\"feed-a\",output=\"eth1:239.10.1.1:6001\"} 97",
            "mcr_output_bytes_total{rule=\"feed-a\",output=\"eth1:239.10.1.1:6001\"} 99328",
            "mcr_output_drops_total{rule=\"feed-a\",output=\"eth1:239.10.1.1:6001\",reason=\"queue_full\"} 3",
            "mcr_membership_joined{rule=\"feed-a\",interface=\"eth0\",group=\"239.1.1.1\",source=\"\"} 1",
            "mcr_worker_rx_frames_total{worker=\"0\"} 120",
            "mcr_worker_drops_total{worker=\"0\",reason=\"queue_full\"} 3",
            "mcr_worker_cpu_seconds_total{worker=\"0\"} 1.25",
            "mcr_worker_busy_ratio{worker=\"0\"} 0.5",
            "mcr_worker_up{worker=\"0\"} 1",
            "mcr_worker_restarts_total{worker=\"0\"} 2",
            "mcr_rule_up{rule=\"feed-a\"} 1",
            "mcr_rule_datapath_ebpf{rule=\"feed-a\"} 1",
            "mcr_datapath_ebpf_up 1",
            "mcr_datapath_rx_frames_total 100",
            "mcr_datapath_tx_packets_total 97",
            "mcr_datapath_health_missed_total 3",
            "mcr_datapath_interface_attached{interface=\"eth0\"} 1",
            "mcr_output_held_total{rule=\"feed-a\",output=\"eth1:239.10.1.1:6001\"} 5",
            "mcr_role{role=\"active\"} 0",
            "mcr_role{role=\"standby\"} 1",
            "mcr_role_changes_total 1",
            "mcr_role_seconds 2.5",
            "mcr_etcd_connected 0",
            "mcr_etcd_revision 41",
            "mcr_etcd_workers_revision 40",
            "mcr_etcd_rules 7",
            "mcr_etcd_updates_total 9",
            "mcr_etcd_problem{kind=\"unreachable\"} 0",
            "mcr_etcd_problem{kind=\"certificate\"} 1",
            "mcr_interface_up{interface=\"eth0\"} 1",
            "mcr_interface_up{interface=\"eth1\"} 0",
            "mcr_interface_up{interface=\"eth2\"} 0",
            "mcr_interface_link_changes_total{interface=\"eth1\"} 2",
        ] {
            assert!(text.lines().any(|l| l == want), "missing `{want}` in\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
