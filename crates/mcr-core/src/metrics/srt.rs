//! The SRT and RIST endpoints' families (`mcr_srt_*`, `mcr_rist_*`):
//! each input's and output's connections and refusals, and each
//! connection's statistics from libsrt or librist (labelled by peer; a
//! listener's max-callers or max-peers bounds how many). Every sample is
//! labelled by its rule, `side` (`input` or `output`) and `endpoint` (its
//! text form).

use super::{family, float};
use crate::control::{SrtConnection, SrtStatus, StatsReport};

/// The names of one protocol's families.
struct Names {
    protocol: &'static str,
    up: &'static str,
    peers: &'static str,
    refused: &'static str,
    per_conn: [&'static str; 9],
}

const SRT: Names = Names {
    protocol: "SRT",
    up: "mcr_srt_up",
    peers: "mcr_srt_callers",
    refused: "mcr_srt_refused_total",
    per_conn: [
        "mcr_srt_connection_rtt_ms",
        "mcr_srt_connection_send_mbps",
        "mcr_srt_connection_packets_total",
        "mcr_srt_connection_retransmitted_total",
        "mcr_srt_connection_reported_missing_total",
        "mcr_srt_connection_lost_total",
        "mcr_srt_connection_dropped_too_late_total",
        "mcr_srt_connection_queue_full_total",
        "mcr_srt_connection_buffer_ms",
    ],
};

const RIST: Names = Names {
    protocol: "RIST",
    up: "mcr_rist_up",
    peers: "mcr_rist_peers",
    refused: "mcr_rist_refused_total",
    per_conn: [
        "mcr_rist_connection_rtt_ms",
        "mcr_rist_connection_send_mbps",
        "mcr_rist_connection_packets_total",
        "mcr_rist_connection_retransmitted_total",
        "mcr_rist_connection_reported_missing_total",
        "mcr_rist_connection_lost_total",
        "mcr_rist_connection_dropped_too_late_total",
        "mcr_rist_connection_queue_full_total",
        "mcr_rist_connection_buffer_ms",
    ],
};

/// Writes the SRT families, if any endpoint is SRT, and the RIST ones, if
/// any is RIST.
pub(super) fn render(out: &mut String, stats: &StatsReport) {
    let srt: Vec<(&str, &str, &str, &SrtStatus)> = stats
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
    render_links(out, &SRT, &srt);
    let rist: Vec<(&str, &str, &str, &SrtStatus)> = stats
        .rules
        .iter()
        .flat_map(|r| {
            let inputs = r
                .rist_inputs
                .iter()
                .map(move |i| (r.name.as_str(), "input", i.input.as_str(), &i.rist));
            let outputs = r
                .outputs
                .iter()
                .filter_map(move |o| Some((r.name.as_str(), "output", o.output.as_str(), o.rist.as_ref()?)));
            inputs.chain(outputs)
        })
        .collect();
    render_links(out, &RIST, &rist);
}

/// One protocol's families, for `ends` (rule, side, endpoint, status).
fn render_links(out: &mut String, names: &Names, ends: &[(&str, &str, &str, &SrtStatus)]) {
    let srt = || ends.iter().copied();
    if srt().next().is_none() {
        return;
    }
    let p = names.protocol;
    let mut f = family(
        out,
        names.up,
        "gauge",
        &format!(
            "1 when the {p} endpoint works (its listener listens, or its call is made or being made), 0 when it failed (see mcrctl stats)."
        ),
    );
    for (rule, side, end, s) in srt() {
        f.sample(
            &[("rule", rule), ("side", side), ("endpoint", end)],
            u8::from(s.error.is_none()),
        );
    }
    let mut f = family(out, names.peers, "gauge", &format!("Connections of the {p} endpoint."));
    for (rule, side, end, s) in srt() {
        f.sample(
            &[("rule", rule), ("side", side), ("endpoint", end)],
            s.connections.len(),
        );
    }
    let mut f = family(
        out,
        names.refused,
        "counter",
        &format!(
            "Peers the {p} endpoint's listener refused since its worker started, by reason (SRT: not_found, overload, handshake; RIST: full); each refusal counted once (SRT's not_found under the port's first endpoint)."
        ),
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
    let per_conn: [(&str, &str, Get); 9] = [
        ("gauge", "The connection's smoothed round-trip time, in ms.", |c| {
            float(c.rtt_ms)
        }),
        (
            "gauge",
            "What the connection sends, in Mbit/s (an input's: its acknowledgements).",
            |c| float(c.send_mbps),
        ),
        (
            "counter",
            "Packets the connection sent (an output) or received (an input), retransmissions aside.",
            |c| c.packets.to_string(),
        ),
        (
            "counter",
            "Packets the connection retransmitted (an output) or received again (an input).",
            |c| c.retransmitted.to_string(),
        ),
        (
            "counter",
            "Packets reported missing, and so retransmitted unless too late (an output: the peer's loss reports, a packet reported twice counted twice; an input: the gaps it found); RIST: 0.",
            |c| c.reported_missing.to_string(),
        ),
        (
            "counter",
            "Packets lost for good (SRT: those given up as too late; RIST: librist's lost).",
            |c| c.lost.to_string(),
        ),
        ("counter", "Packets dropped as too late to be of use.", |c| {
            c.dropped_too_late.to_string()
        }),
        (
            "counter",
            "Packets MCR could not hand to the connection: its send buffer was full.",
            |c| c.queue_full.to_string(),
        ),
        (
            "gauge",
            "What waits in the connection's send buffer (an output) or latency buffer (an input), in ms.",
            |c| c.buffer_ms.to_string(),
        ),
    ];
    for (&name, (kind, help, get)) in names.per_conn.iter().zip(per_conn) {
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
