//! The UDP-socket path: one unconnected socket, a destination per packet.

use std::net::SocketAddr;
use std::os::fd::AsFd;

use mcr_sys::mmsg::{MAX_BATCH, Outgoing, send_batch};
use mcr_sys::sockaddr::RawSockAddr;
use socket2::{Domain, Protocol, Socket, Type};

use super::{SendConfig, SendError, Sent, Transmit, send_all, setup, stream_and_seq};
use crate::payload;
use crate::wrap::Wrap;

pub(super) struct UdpPath {
    sock: Socket,
    streams: Vec<SocketAddr>,
    addrs: Vec<RawSockAddr>,
    first_id: u32,
    bufs: Vec<Vec<u8>>,
    wrap: Wrap,
    /// The RTP sequence number of packet 0.
    rtp_start: u16,
    scratch: Vec<u8>,
}

impl UdpPath {
    pub(super) fn open(cfg: &SendConfig, ipv6: bool) -> Result<UdpPath, SendError> {
        let domain = if ipv6 { Domain::IPV6 } else { Domain::IPV4 };
        let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(setup("open a UDP socket"))?;
        if let Some(ifname) = &cfg.interface {
            let idx = mcr_sys::iface::index(ifname).map_err(setup(format!("interface `{ifname}`")))?;
            sock.bind_device(Some(ifname.as_bytes()))
                .map_err(setup(format!("bind to interface `{ifname}`")))?;
            if ipv6 {
                sock.set_multicast_if_v6(idx).map_err(setup("IPV6_MULTICAST_IF"))?;
            } else {
                mcr_sys::sockopt::set_multicast_if_v4_index(sock.as_fd(), idx).map_err(setup("IP_MULTICAST_IF"))?;
            }
        }
        if ipv6 {
            sock.set_multicast_hops_v6(cfg.ttl)
                .map_err(setup("IPV6_MULTICAST_HOPS"))?;
            sock.set_unicast_hops_v6(cfg.ttl).map_err(setup("IPV6_UNICAST_HOPS"))?;
            sock.set_multicast_loop_v6(false)
                .map_err(setup("IPV6_MULTICAST_LOOP"))?;
            sock.set_tclass_v6(u32::from(cfg.dscp) << 2)
                .map_err(setup("IPV6_TCLASS"))?;
        } else {
            sock.set_multicast_ttl_v4(cfg.ttl).map_err(setup("IP_MULTICAST_TTL"))?;
            sock.set_ttl_v4(cfg.ttl).map_err(setup("IP_TTL"))?;
            sock.set_multicast_loop_v4(false).map_err(setup("IP_MULTICAST_LOOP"))?;
            sock.set_tos_v4(u32::from(cfg.dscp) << 2).map_err(setup("IP_TOS"))?;
        }
        if let Some(src) = cfg.source {
            sock.bind(&SocketAddr::new(src, 0).into())
                .map_err(setup(format!("bind source address {src}")))?;
        }
        mcr_sys::sockopt::force_send_buffer(sock.as_fd(), 4 << 20).map_err(setup("SO_SNDBUF"))?;
        // Without it, a send the queue below drops would look like success.
        mcr_sys::sockopt::set_recv_errors(sock.as_fd(), ipv6).map_err(setup("IP_RECVERR"))?;
        Ok(UdpPath {
            sock,
            streams: cfg.streams.clone(),
            addrs: cfg.streams.iter().map(|a| RawSockAddr::new(*a)).collect(),
            first_id: cfg.first_id,
            bufs: (0..MAX_BATCH).map(|_| vec![0u8; cfg.payload_bytes]).collect(),
            wrap: cfg.wrap,
            rtp_start: cfg.rtp_start,
            scratch: Vec::new(),
        })
    }
}

impl Transmit for UdpPath {
    fn send(&mut self, first: u64, n: usize, now_ns: u64, stop: &dyn Fn() -> bool) -> Result<Sent, SendError> {
        let s = self.streams.len();
        for (i, buf) in self.bufs.iter_mut().take(n).enumerate() {
            let (stream, seq) = stream_and_seq(first + i as u64, s);
            let id = self.first_id.wrapping_add(stream as u32);
            self.wrap
                .fill(buf, id, seq, self.rtp_start, now_ns, &mut self.scratch, |b| {
                    payload::fill(b, id, seq, now_ns);
                });
        }
        let mut msgs = [Outgoing::new(None, &[]); MAX_BATCH];
        for (i, (m, b)) in msgs.iter_mut().zip(&self.bufs).take(n).enumerate() {
            m.to = Some(&self.addrs[stream_and_seq(first + i as u64, s).0]);
            m.data = b;
        }
        let fd = self.sock.as_fd();
        send_all(n, stop, |off| send_batch(fd, &msgs[off..n], false)).map_err(|(off, source)| {
            let destination = self.streams[stream_and_seq(first + off as u64, s).0];
            match source.raw_os_error() {
                Some(libc::ENETUNREACH) => SendError::NoRoute { destination },
                _ => SendError::Send { destination, source },
            }
        })
    }

    fn name(&self) -> &'static str {
        "udp"
    }
}
