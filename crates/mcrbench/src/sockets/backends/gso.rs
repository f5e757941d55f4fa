//! UDP generic segmentation and receive offload: a train of same-sized
//! datagrams sent as one buffer (`UDP_SEGMENT`), and received as one
//! (`UDP_GRO`) where the kernel coalesces them.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::Socket;

use super::{Backend, Ends, Readable, Rx, Tx};

pub struct Gso;

/// The most one GSO send may carry (the kernel's limit: 64 segments, and
/// an IP datagram's 64 KiB).
const MAX_SEGMENTS: usize = 64;
const MAX_BYTES: usize = 65_000;

struct GsoTx {
    sock: Socket,
    dst: Option<SocketAddr>,
    train: Vec<u8>,
    per_send: usize,
}

struct GsoRx {
    sock: Socket,
    readable: Readable,
    buf: Vec<u8>,
}

impl Backend for Gso {
    fn name(&self) -> &'static str {
        "gso"
    }
    fn max_batch(&self) -> usize {
        MAX_SEGMENTS
    }
    fn describe(&self) -> &'static str {
        "UDP_SEGMENT trains out, UDP_GRO coalesced buffers in"
    }
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>> {
        let seg = u16::try_from(e.size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        mcr_sys::sockopt::set_udp_segment(sock.as_fd(), seg)?;
        Ok(Box::new(GsoTx {
            sock,
            dst: (!e.connected).then_some(e.dst),
            train: Vec::with_capacity(MAX_BYTES),
            per_send: (MAX_BYTES / e.size.max(1)).clamp(1, MAX_SEGMENTS),
        }))
    }
    fn rx(&self, sock: Socket, _e: &Ends) -> io::Result<Box<dyn Rx>> {
        mcr_sys::sockopt::set_udp_gro(sock.as_fd(), true)?;
        Ok(Box::new(GsoRx {
            readable: Readable::new(&sock)?,
            sock,
            buf: vec![0; 65_536],
        }))
    }
}

impl Tx for GsoTx {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let n = datagrams.len().min(self.per_send);
        self.train.clear();
        for d in &datagrams[..n] {
            self.train.extend_from_slice(d);
        }
        match self.dst {
            Some(to) => self.sock.send_to(&self.train, &to.into())?,
            None => self.sock.send(&self.train)?,
        };
        Ok(n)
    }
}

impl Rx for GsoRx {
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut got = mcr_sys::sockopt::recv_gro(self.sock.as_fd(), &mut self.buf, true);
        if matches!(&got, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.readable.wait(timeout)?;
            got = mcr_sys::sockopt::recv_gro(self.sock.as_fd(), &mut self.buf, true);
        }
        let (len, segment) = match got {
            Ok(v) => v,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        };
        let seg = segment.unwrap_or(len).max(1);
        let mut n = 0;
        for d in self.buf[..len].chunks(seg) {
            f(d);
            n += 1;
        }
        Ok(n)
    }
}
