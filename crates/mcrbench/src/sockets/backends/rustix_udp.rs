//! Raw system calls through `rustix`: `sendto`/`send` and `recv` on the
//! descriptor, one datagram a call, no standard-library wrapper between.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::{RecvFlags, SendFlags};
use socket2::Socket;

use super::{Backend, Ends, Rx, Tx, set_timeout};

pub struct Rustix;

struct RxTx {
    fd: OwnedFd,
    dst: Option<SocketAddr>,
}

struct RxRx {
    sock: Socket,
    buf: Vec<u8>,
    timeout: Option<Duration>,
}

impl Backend for Rustix {
    fn name(&self) -> &'static str {
        "rustix"
    }
    fn describe(&self) -> &'static str {
        "rustix: raw sendto/send and recv on the descriptor"
    }
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>> {
        Ok(Box::new(RxTx {
            fd: sock.into(),
            dst: (!e.connected).then_some(e.dst),
        }))
    }
    fn rx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Rx>> {
        Ok(Box::new(RxRx {
            sock,
            buf: vec![0; e.size + 1],
            timeout: None,
        }))
    }
}

impl Tx for RxTx {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let Some(d) = datagrams.first() else { return Ok(0) };
        match &self.dst {
            Some(to) => rustix::net::sendto(&self.fd, d, SendFlags::empty(), to)?,
            None => rustix::net::send(&self.fd, d, SendFlags::empty())?,
        };
        Ok(1)
    }
}

impl Rx for RxRx {
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        set_timeout(&self.sock, &mut self.timeout, timeout)?;
        match rustix::net::recv(&self.sock, &mut self.buf[..], RecvFlags::empty()) {
            Ok((n, _)) => {
                f(&self.buf[..n]);
                Ok(1)
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}
