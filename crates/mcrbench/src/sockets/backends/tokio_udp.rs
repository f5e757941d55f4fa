//! `tokio::net::UdpSocket` on a current-thread runtime: awaiting
//! `send_to`/`recv`, or, with readiness, awaiting `writable`/`readable`
//! and then `try_send_to`/`try_recv` until the socket would block.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::Socket;
use tokio::runtime::Runtime;

use super::{Backend, Ends, Rx, Tx};

pub struct Tokio {
    pub readiness: bool,
}

struct TokioTx {
    rt: Runtime,
    sock: tokio::net::UdpSocket,
    dst: Option<SocketAddr>,
    readiness: bool,
}

struct TokioRx {
    rt: Runtime,
    sock: tokio::net::UdpSocket,
    buf: Vec<u8>,
    readiness: bool,
}

fn runtime() -> io::Result<Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

fn adopt(rt: &Runtime, sock: Socket) -> io::Result<tokio::net::UdpSocket> {
    sock.set_nonblocking(true)?;
    let _guard = rt.enter();
    tokio::net::UdpSocket::from_std(sock.into())
}

impl Backend for Tokio {
    fn name(&self) -> &'static str {
        if self.readiness { "tokio-ready" } else { "tokio" }
    }
    fn max_batch(&self) -> usize {
        if self.readiness { 64 } else { 1 }
    }
    fn describe(&self) -> &'static str {
        if self.readiness {
            "tokio readiness: writable/readable, then try_send_to/try_recv until it would block"
        } else {
            "tokio: send_to(..).await / recv(..).await, one datagram per await"
        }
    }
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>> {
        let rt = runtime()?;
        let sock = adopt(&rt, sock)?;
        Ok(Box::new(TokioTx {
            rt,
            sock,
            dst: (!e.connected).then_some(e.dst),
            readiness: self.readiness,
        }))
    }
    fn rx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Rx>> {
        let rt = runtime()?;
        let sock = adopt(&rt, sock)?;
        Ok(Box::new(TokioRx {
            rt,
            sock,
            buf: vec![0; e.size + 1],
            readiness: self.readiness,
        }))
    }
}

impl Tx for TokioTx {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let (sock, dst) = (&self.sock, self.dst);
        if !self.readiness {
            let Some(d) = datagrams.first() else { return Ok(0) };
            return self.rt.block_on(async {
                match dst {
                    Some(to) => sock.send_to(d, to).await?,
                    None => sock.send(d).await?,
                };
                Ok(1)
            });
        }
        self.rt.block_on(async {
            let mut sent = 0;
            while sent < datagrams.len() {
                let d = datagrams[sent];
                let r = match dst {
                    Some(to) => sock.try_send_to(d, to),
                    None => sock.try_send(d),
                };
                match r {
                    Ok(_) => sent += 1,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => sock.writable().await?,
                    Err(e) if sent > 0 => {
                        drop(e);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(sent)
        })
    }
}

impl Rx for TokioRx {
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let (sock, buf, readiness) = (&self.sock, &mut self.buf, self.readiness);
        self.rt.block_on(async {
            if !readiness {
                return match tokio::time::timeout(timeout, sock.recv(buf)).await {
                    Ok(Ok(n)) => {
                        f(&buf[..n]);
                        Ok(1)
                    }
                    Ok(Err(e)) => Err(e),
                    Err(_) => Ok(0),
                };
            }
            if tokio::time::timeout(timeout, sock.readable()).await.is_err() {
                return Ok(0);
            }
            let mut n = 0;
            // Until it would block, or 64 (the caller's clock must run).
            while n < 64 {
                match sock.try_recv(buf) {
                    Ok(len) => {
                        f(&buf[..len]);
                        n += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                    Err(e) => return Err(e),
                }
            }
            Ok(n)
        })
    }
}
