//! AF_PACKET send, as MCR's egress does: each datagram built into a whole
//! Ethernet frame (headers and checksums written here) and a batch handed
//! to the interface with one `sendmmsg`; received with `recvmmsg`.

use std::io;
use std::net::SocketAddr;

use mcr_core::wire::{
    UDP_V4_HEADERS, UDP_V6_HEADERS, UdpFrameSpec, UdpFrameSpecV6, write_udp_v4_frame, write_udp_v6_frame,
};
use mcr_sys::mmsg::MAX_BATCH;
use mcr_sys::packet::PacketTx;
use socket2::Socket;

use super::mmsg::MmsgRx;
use super::{Backend, Ends, Rx, Tx};

pub struct Packet;

struct PacketSend {
    tx: PacketTx,
    /// Kept open: it holds the source port the frames claim.
    _port: Socket,
    frames: Vec<Vec<u8>>,
    e: Ends,
}

impl Backend for Packet {
    fn name(&self) -> &'static str {
        "packet"
    }
    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
    fn connects(&self) -> bool {
        false
    }
    fn describe(&self) -> &'static str {
        "AF_PACKET frames built here, a batch per sendmmsg (MCR's egress); recvmmsg in"
    }
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>> {
        let headers = if e.dst.is_ipv4() {
            UDP_V4_HEADERS
        } else {
            UDP_V6_HEADERS
        };
        Ok(Box::new(PacketSend {
            tx: PacketTx::open(e.tx_ifindex, false)?,
            _port: sock,
            frames: (0..MAX_BATCH).map(|_| vec![0u8; headers + e.size]).collect(),
            e: e.clone(),
        }))
    }
    fn rx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Rx>> {
        Ok(Box::new(MmsgRx::new(sock, e)?))
    }
}

impl Tx for PacketSend {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let n = datagrams.len().min(MAX_BATCH);
        let bad = |e: mcr_core::wire::FrameError| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
        for (frame, d) in self.frames.iter_mut().zip(&datagrams[..n]) {
            match (self.e.src, self.e.dst) {
                (SocketAddr::V4(src), SocketAddr::V4(dst)) => {
                    frame[UDP_V4_HEADERS..UDP_V4_HEADERS + d.len()].copy_from_slice(d);
                    let spec = UdpFrameSpec {
                        dst_mac: self.e.dst_mac,
                        src_mac: self.e.src_mac,
                        src,
                        dst,
                        ttl: 8,
                        dscp: 0,
                        ident: 0,
                    };
                    let len = write_udp_v4_frame(frame, &spec, d.len()).map_err(bad)?;
                    frame.truncate(len);
                }
                (SocketAddr::V6(src), SocketAddr::V6(dst)) => {
                    frame[UDP_V6_HEADERS..UDP_V6_HEADERS + d.len()].copy_from_slice(d);
                    let spec = UdpFrameSpecV6 {
                        dst_mac: self.e.dst_mac,
                        src_mac: self.e.src_mac,
                        src,
                        dst,
                        hop_limit: 8,
                        dscp: 0,
                    };
                    let len = write_udp_v6_frame(frame, &spec, d.len()).map_err(bad)?;
                    frame.truncate(len);
                }
                _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
            }
        }
        let refs: Vec<&[u8]> = self.frames[..n].iter().map(Vec::as_slice).collect();
        self.tx.send(&refs, false)
    }
}
