//! io_uring: a request per datagram, a batch submitted with one system
//! call; receives either single-shot (requests kept in flight on owned
//! buffers) or one multishot request drawing from a provided buffer ring.

use std::io;
use std::time::Duration;

use mcr_sys::sockaddr::RawSockAddr;
use mcr_sys::uring::{UringMultishot, UringUdp};
use socket2::Socket;

use super::{Backend, Ends, Rx, Tx};

pub struct Uring {
    pub multishot: bool,
}

/// Requests in flight per receiver, and the ring's depth for sends.
const DEPTH: u32 = 64;

struct UringTx {
    ring: UringUdp,
    dst: Option<RawSockAddr>,
}

struct SingleRx(UringUdp);
struct MultiRx(UringMultishot);

impl Backend for Uring {
    fn name(&self) -> &'static str {
        if self.multishot { "uring-multi" } else { "uring" }
    }
    fn max_batch(&self) -> usize {
        DEPTH as usize
    }
    fn describe(&self) -> &'static str {
        if self.multishot {
            "io_uring: batched sendmsg; one multishot recv with a provided buffer ring"
        } else {
            "io_uring: batched sendmsg; single-shot recv requests kept in flight"
        }
    }
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>> {
        Ok(Box::new(UringTx {
            ring: UringUdp::new(sock.into(), DEPTH, 0)?,
            dst: (!e.connected).then(|| RawSockAddr::new(e.dst)),
        }))
    }
    fn rx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Rx>> {
        if self.multishot {
            Ok(Box::new(MultiRx(UringMultishot::new(sock.into(), 256, e.size + 1)?)))
        } else {
            Ok(Box::new(SingleRx(UringUdp::new(sock.into(), DEPTH, e.size + 1)?)))
        }
    }
}

impl Tx for UringTx {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        match self.ring.send_batch(datagrams, self.dst.as_ref()) {
            (0, Some(e)) => Err(e),
            (n, _) => Ok(n),
        }
    }
}

impl Rx for SingleRx {
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        self.0.recv(timeout, f)
    }
}

impl Rx for MultiRx {
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        self.0.recv(timeout, f)
    }
}
