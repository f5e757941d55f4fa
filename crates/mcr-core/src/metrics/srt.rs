//! The SRT endpoints' families: each input's and output's connections and
//! refusals, and each connection's libsrt statistics (labelled by peer; a
//! listener's max-callers bounds how many). Every sample is labelled by
//! its rule, `side` (`input` or `output`) and `endpoint` (its text form).

use super::{family, float};
use crate::control::{SrtConnection, SrtStatus, StatsReport};

/// Writes the SRT families, if any output is SRT.
pub(super) fn render(out: &mut String, stats: &StatsReport) {
    let ends: Vec<(&str, &str, &str, &SrtStatus)> = stats
        .rules
        .iter()
        .flat_map(|r| {
            let inputs = r
                .srt_inputs
                .iter()
                .map(move |i| (r.name.as_str(), "input", i.input.as_str(), &i.srt));
            let outputs = r
                .outputs
                .iter()
                .filter_map(move |o| Some((r.name.as_str(), "output", o.output.as_str(), o.srt.as_ref()?)));
            inputs.chain(outputs)
        })
        .collect();
    let srt = || ends.iter().copied();
    if srt().next().is_none() {
        return;
    }
    let mut f = family(
        out,
        "mcr_srt_up",
        "gauge",
        "1 when the SRT endpoint works (its listener listens, or its call is made or being made), 0 when it failed (see mcrctl stats).",
    );
    for (rule, side, end, s) in srt() {
        f.sample(
            &[("rule", rule), ("side", side), ("endpoint", end)],
            u8::from(s.error.is_none()),
        );
    }
    let mut f = family(out, "mcr_srt_callers", "gauge", "Connections of the SRT endpoint.");
    for (rule, side, end, s) in srt() {
        f.sample(
            &[("rule", rule), ("side", side), ("endpoint", end)],
            s.connections.len(),
        );
    }
    let mut f = family(
        out,
        "mcr_srt_refused_total",
        "counter",
        "Callers the SRT endpoint's listener port refused since its worker started, by reason (not_found, overload, handshake).",
    );
    for (rule, side, end, s) in srt() {
        for (reason, n) in &s.refused {
            f.sample(
                &[("rule", rule), ("side", side), ("endpoint", end), ("reason", reason)],
                n,
            );
        }
    }
    type Get = fn(&SrtConnection) -> String;
    let per_conn: [(&'static str, &str, &str, Get); 8] = [
        (
            "mcr_srt_connection_rtt_ms",
            "gauge",
            "The connection's smoothed round-trip time, in ms.",
            |c| float(c.rtt_ms),
        ),
        (
            "mcr_srt_connection_send_mbps",
            "gauge",
            "What the connection sends, in Mbit/s (an input's: its acknowledgements).",
            |c| float(c.send_mbps),
        ),
        (
            "mcr_srt_connection_packets_total",
            "counter",
            "Packets the connection sent (an output) or received (an input), retransmissions aside.",
            |c| c.packets.to_string(),
        ),
        (
            "mcr_srt_connection_retransmitted_total",
            "counter",
            "Packets the connection retransmitted (an output) or received again (an input).",
            |c| c.retransmitted.to_string(),
        ),
        (
            "mcr_srt_connection_lost_total",
            "counter",
            "Packets lost on the way (a retransmission may recover each).",
            |c| c.lost.to_string(),
        ),
        (
            "mcr_srt_connection_dropped_too_late_total",
            "counter",
            "Packets dropped as too late to be of use.",
            |c| c.dropped_too_late.to_string(),
        ),
        (
            "mcr_srt_connection_queue_full_total",
            "counter",
            "Packets MCR could not hand to the connection: its send buffer was full.",
            |c| c.queue_full.to_string(),
        ),
        (
            "mcr_srt_connection_buffer_ms",
            "gauge",
            "What waits in the connection's send buffer (an output) or latency buffer (an input), in ms.",
            |c| c.buffer_ms.to_string(),
        ),
    ];
    for (name, kind, help, get) in per_conn {
        let mut f = family(out, name, kind, help);
        for (rule, side, end, s) in srt() {
            for c in &s.connections {
                f.sample(
                    &[
                        ("rule", rule),
                        ("side", side),
                        ("endpoint", end),
                        ("peer", &c.peer),
                        ("stream_id", &c.stream_id),
                    ],
                    get(c),
                );
            }
        }
    }
}
