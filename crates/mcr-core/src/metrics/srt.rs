//! The SRT outputs' families: each output's callers and refusals, and
//! each connection's libsrt statistics (labelled by peer; a listener's
//! max-callers bounds how many).

use super::{family, float};
use crate::control::{SrtConnection, StatsReport};

/// Writes the SRT families, if any output is SRT.
pub(super) fn render(out: &mut String, stats: &StatsReport) {
    let srt = || {
        stats
            .rules
            .iter()
            .flat_map(|r| r.outputs.iter().filter_map(move |o| Some((r, o, o.srt.as_ref()?))))
    };
    if srt().next().is_none() {
        return;
    }
    let mut f = family(
        out,
        "mcr_srt_up",
        "gauge",
        "1 when the SRT output's listener serves callers, 0 when it failed (see mcrctl stats).",
    );
    for (r, o, s) in srt() {
        f.sample(&[("rule", &r.name), ("output", &o.output)], u8::from(s.error.is_none()));
    }
    let mut f = family(out, "mcr_srt_callers", "gauge", "Connections of the SRT output.");
    for (r, o, s) in srt() {
        f.sample(&[("rule", &r.name), ("output", &o.output)], s.connections.len());
    }
    let mut f = family(
        out,
        "mcr_srt_refused_total",
        "counter",
        "Callers the SRT output's listener port refused since its worker started, by reason (not_found, overload, handshake).",
    );
    for (r, o, s) in srt() {
        for (reason, n) in &s.refused {
            f.sample(&[("rule", &r.name), ("output", &o.output), ("reason", reason)], n);
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
            "What the connection sends, in Mbit/s.",
            |c| float(c.send_mbps),
        ),
        (
            "mcr_srt_connection_packets_total",
            "counter",
            "Packets the connection sent, retransmissions aside.",
            |c| c.packets.to_string(),
        ),
        (
            "mcr_srt_connection_retransmitted_total",
            "counter",
            "Packets the connection retransmitted.",
            |c| c.retransmitted.to_string(),
        ),
        (
            "mcr_srt_connection_lost_total",
            "counter",
            "Packets the peer reported lost (a retransmission may recover each).",
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
            "What waits in the connection's send buffer, in ms.",
            |c| c.buffer_ms.to_string(),
        ),
    ];
    for (name, kind, help, get) in per_conn {
        let mut f = family(out, name, kind, help);
        for (r, o, s) in srt() {
            for c in &s.connections {
                f.sample(
                    &[
                        ("rule", &r.name),
                        ("output", &o.output),
                        ("peer", &c.peer),
                        ("stream_id", &c.stream_id),
                    ],
                    get(c),
                );
            }
        }
    }
}
