//! `std::net::UdpSocket`, blocking: `send_to`/`send` and `recv`, one
//! datagram a call, as most programs use UDP.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::Socket;

use super::{Backend, Ends, Rx, Tx, is_timeout};

pub struct Std;

struct StdTx {
    sock: UdpSocket,
    dst: Option<SocketAddr>,
}

struct StdRx {
    sock: UdpSocket,
    buf: Vec<u8>,
    timeout: Option<Duration>,
}

impl Backend for Std {
    fn name(&self) -> &'static str {
        "std"
    }
    fn describe(&self) -> &'static str {
        "std::net::UdpSocket, blocking, one datagram per call"
    }
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>> {
        Ok(Box::new(StdTx {
            sock: sock.into(),
            dst: (!e.connected).then_some(e.dst),
        }))
    }
    fn rx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Rx>> {
        Ok(Box::new(StdRx {
            sock: sock.into(),
            buf: vec![0; e.size + 1],
            timeout: None,
        }))
    }
}

impl Tx for StdTx {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let Some(d) = datagrams.first() else { return Ok(0) };
        match self.dst {
            Some(to) => self.sock.send_to(d, to)?,
            None => self.sock.send(d)?,
        };
        Ok(1)
    }
}

impl Rx for StdRx {
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let t = timeout.max(Duration::from_millis(1));
        if self.timeout != Some(t) {
            self.sock.set_read_timeout(Some(t))?;
            self.timeout = Some(t);
        }
        match self.sock.recv(&mut self.buf) {
            Ok(n) => {
                f(&self.buf[..n]);
                Ok(1)
            }
            Err(e) if is_timeout(&e) => Ok(0),
            Err(e) => Err(e),
        }
    }
}
