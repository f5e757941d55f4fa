//! `socket2::Socket`: the destination converted once to a `SockAddr`,
//! `send_to`/`send`, and `recv` through `Read`, one datagram a call.

use std::io::{self, Read};
use std::time::Duration;

use socket2::{SockAddr, Socket};

use super::{Backend, Ends, Rx, Tx, is_timeout, set_timeout};

pub struct Socket2;

struct S2Tx {
    sock: Socket,
    dst: Option<SockAddr>,
}

struct S2Rx {
    sock: Socket,
    buf: Vec<u8>,
    timeout: Option<Duration>,
}

impl Backend for Socket2 {
    fn name(&self) -> &'static str {
        "socket2"
    }
    fn describe(&self) -> &'static str {
        "socket2::Socket, blocking, the address converted once"
    }
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>> {
        Ok(Box::new(S2Tx {
            sock,
            dst: (!e.connected).then(|| e.dst.into()),
        }))
    }
    fn rx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Rx>> {
        Ok(Box::new(S2Rx {
            sock,
            buf: vec![0; e.size + 1],
            timeout: None,
        }))
    }
}

impl Tx for S2Tx {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let Some(d) = datagrams.first() else { return Ok(0) };
        match &self.dst {
            Some(to) => self.sock.send_to(d, to)?,
            None => self.sock.send(d)?,
        };
        Ok(1)
    }
}

impl Rx for S2Rx {
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        set_timeout(&self.sock, &mut self.timeout, timeout)?;
        match (&self.sock).read(&mut self.buf) {
            Ok(n) => {
                f(&self.buf[..n]);
                Ok(1)
            }
            Err(e) if is_timeout(&e) => Ok(0),
            Err(e) => Err(e),
        }
    }
}
