//! The statistics of one SRT connection that MCR shows, from
//! `srt_bistats` (libsrt's docs/API/statistics.md describes each).

use super::ffi::SRT_TRACEBSTATS;

/// One connection's statistics, totals since it was set up (this binding
/// never clears libsrt's counters). Packet counts are of SRT data packets
/// (one message each in live mode); byte counts include each packet's
/// IPv4, UDP and SRT headers (44 bytes), as libsrt counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SrtStats {
    /// Time since the socket was created (`msTimeStamp`).
    pub elapsed_ms: i64,
    /// Smoothed round-trip time (`msRTT`).
    pub rtt_ms: f64,
    /// Sending rate (`mbpsSendRate`, Mb/s).
    pub send_rate_mbps: f64,
    /// Receiving rate (`mbpsRecvRate`, Mb/s).
    pub recv_rate_mbps: f64,
    /// Data packets sent, retransmissions included (`pktSentTotal`).
    pub sent_packets: i64,
    /// Data packets received, retransmissions included (`pktRecvTotal`).
    pub received_packets: i64,
    /// Packets the application sent, each counted once
    /// (`pktSentUniqueTotal`).
    pub sent_unique_packets: i64,
    /// Packets received for the application, each counted once
    /// (`pktRecvUniqueTotal`).
    pub received_unique_packets: i64,
    /// Packets the sender retransmitted (`pktRetransTotal`).
    pub retransmitted_packets: i64,
    /// Retransmitted packets the receiver got (`pktRcvRetrans`; libsrt 1.5
    /// keeps no separate total, and this binding never clears the interval
    /// counter, so it counts since the start).
    pub received_retransmitted_packets: i64,
    /// Packets the sender learned were lost (NAKs; `pktSndLossTotal`).
    pub send_lost_packets: i64,
    /// Gaps the receiver detected (`pktRcvLossTotal`).
    pub receive_lost_packets: i64,
    /// Packets the sender dropped as too late to send (`pktSndDropTotal`).
    pub send_dropped_packets: i64,
    /// Packets the receiver gave up on as too late to play
    /// (`pktRcvDropTotal`).
    pub receive_dropped_packets: i64,
    /// Packets that could not be decrypted (`pktRcvUndecryptTotal`).
    pub undecryptable_packets: i64,
    /// Bytes sent, retransmissions included (`byteSentTotal`).
    pub sent_bytes: u64,
    /// Bytes received, retransmissions included (`byteRecvTotal`).
    pub received_bytes: u64,
    /// Bytes the application sent, counted once (`byteSentUniqueTotal`).
    pub sent_unique_bytes: u64,
    /// Bytes received for the application, counted once
    /// (`byteRecvUniqueTotal`).
    pub received_unique_bytes: u64,
    /// Time span of unacknowledged data in the send buffer (`msSndBuf`).
    pub send_buffer_ms: i32,
    /// Time span of data waiting in the receive buffer (`msRcvBuf`).
    pub receive_buffer_ms: i32,
    /// Unacknowledged packets in the send buffer (`pktSndBuf`).
    pub send_buffer_packets: i32,
    /// Packets waiting in the receive buffer (`pktRcvBuf`).
    pub receive_buffer_packets: i32,
    /// The latency negotiated for what this side sends
    /// (`msSndTsbPdDelay`).
    pub send_tsbpd_delay_ms: i32,
    /// The latency negotiated for what this side receives
    /// (`msRcvTsbPdDelay`).
    pub receive_tsbpd_delay_ms: i32,
}

impl SrtStats {
    pub(crate) fn from_raw(s: &SRT_TRACEBSTATS) -> SrtStats {
        SrtStats {
            elapsed_ms: s.msTimeStamp,
            rtt_ms: s.msRTT,
            send_rate_mbps: s.mbpsSendRate,
            recv_rate_mbps: s.mbpsRecvRate,
            sent_packets: s.pktSentTotal,
            received_packets: s.pktRecvTotal,
            sent_unique_packets: s.pktSentUniqueTotal,
            received_unique_packets: s.pktRecvUniqueTotal,
            retransmitted_packets: i64::from(s.pktRetransTotal),
            received_retransmitted_packets: i64::from(s.pktRcvRetrans),
            send_lost_packets: i64::from(s.pktSndLossTotal),
            receive_lost_packets: i64::from(s.pktRcvLossTotal),
            send_dropped_packets: i64::from(s.pktSndDropTotal),
            receive_dropped_packets: i64::from(s.pktRcvDropTotal),
            undecryptable_packets: i64::from(s.pktRcvUndecryptTotal),
            sent_bytes: s.byteSentTotal,
            received_bytes: s.byteRecvTotal,
            sent_unique_bytes: s.byteSentUniqueTotal,
            received_unique_bytes: s.byteRecvUniqueTotal,
            send_buffer_ms: s.msSndBuf,
            receive_buffer_ms: s.msRcvBuf,
            send_buffer_packets: s.pktSndBuf,
            receive_buffer_packets: s.pktRcvBuf,
            send_tsbpd_delay_ms: s.msSndTsbPdDelay,
            receive_tsbpd_delay_ms: s.msRcvTsbPdDelay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_each_field_from_its_own_counter() {
        let raw = SRT_TRACEBSTATS {
            msRTT: 1.5,
            pktSentUniqueTotal: 7,
            pktRecvUniqueTotal: 8,
            pktRetransTotal: 9,
            pktRcvRetrans: 10,
            pktSndDropTotal: 11,
            pktRcvDropTotal: 12,
            byteSentUniqueTotal: 13,
            msRcvTsbPdDelay: 400,
            msSndTsbPdDelay: 120,
            ..Default::default()
        };
        let s = SrtStats::from_raw(&raw);
        assert_eq!(s.rtt_ms, 1.5);
        assert_eq!((s.sent_unique_packets, s.received_unique_packets), (7, 8));
        assert_eq!((s.retransmitted_packets, s.received_retransmitted_packets), (9, 10));
        assert_eq!((s.send_dropped_packets, s.receive_dropped_packets), (11, 12));
        assert_eq!(s.sent_unique_bytes, 13);
        assert_eq!((s.receive_tsbpd_delay_ms, s.send_tsbpd_delay_ms), (400, 120));
    }
}
