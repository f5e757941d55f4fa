//! `sendmmsg`/`recvmmsg`: a batch of datagrams per system call, as MCR's
//! unicast outputs send and `mcrgen recv` receives.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use mcr_sys::mmsg::{MAX_BATCH, Outgoing, RecvBatch, send_batch};
use mcr_sys::sockaddr::RawSockAddr;
use socket2::Socket;

use super::{Backend, Ends, Readable, Rx, Tx};

pub struct Mmsg;

struct MmsgTx {
    sock: Socket,
    dst: Option<RawSockAddr>,
}

/// A receiver of batches: epoll for the wait, `recvmmsg` for the batch.
pub(super) struct MmsgRx {
    sock: Socket,
    readable: Readable,
    batch: RecvBatch,
}

impl MmsgRx {
    pub(super) fn new(sock: Socket, e: &Ends) -> io::Result<MmsgRx> {
        Ok(MmsgRx {
            readable: Readable::new(&sock)?,
            sock,
            batch: RecvBatch::new(MAX_BATCH, e.size + 1),
        })
    }
}

impl Backend for Mmsg {
    fn name(&self) -> &'static str {
        "mmsg"
    }
    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
    fn describe(&self) -> &'static str {
        "sendmmsg / recvmmsg: a batch per system call"
    }
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>> {
        Ok(Box::new(MmsgTx {
            sock,
            dst: (!e.connected).then(|| RawSockAddr::new(e.dst)),
        }))
    }
    fn rx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Rx>> {
        Ok(Box::new(MmsgRx::new(sock, e)?))
    }
}

impl Tx for MmsgTx {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let mut msgs = [Outgoing::new(None, &[]); MAX_BATCH];
        let n = datagrams.len().min(MAX_BATCH);
        for (m, d) in msgs.iter_mut().zip(datagrams) {
            m.to = self.dst.as_ref();
            m.data = d;
        }
        send_batch(self.sock.as_fd(), &msgs[..n], false)
    }
}

impl Rx for MmsgRx {
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut n = self.batch.recv(self.sock.as_fd())?;
        if n == 0 {
            self.readable.wait(timeout)?;
            n = self.batch.recv(self.sock.as_fd())?;
        }
        for i in 0..n {
            f(self.batch.get(i).0);
        }
        Ok(n)
    }
}
