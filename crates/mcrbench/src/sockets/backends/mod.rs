//! The ways of sending and receiving UDP that `mcrbench sockets` compares,
//! one module each behind one trait. The benchmark makes the sockets
//! (family, binding, reuse, connection, buffers, group memberships) and a
//! backend drives them its own way.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use socket2::Socket;

mod gso;
mod mmsg;
mod packet;
mod rustix_udp;
mod socket2_udp;
mod std_udp;
mod tokio_udp;
mod uring;

/// What a backend needs to know about the ends it drives.
#[derive(Debug, Clone)]
pub struct Ends {
    /// Where senders send: the receivers' address or group, and port.
    pub dst: SocketAddr,
    /// Sender sockets are connected to `dst`.
    pub connected: bool,
    /// Datagram payload size.
    pub size: usize,
    /// The sender's interface (for frames).
    pub tx_ifindex: u32,
    /// The sender's address and port (for frames).
    pub src: SocketAddr,
    /// The sender interface's MAC and the next hop's (for frames).
    pub src_mac: [u8; 6],
    /// The destination MAC: the receiver's, or the group's.
    pub dst_mac: [u8; 6],
}

/// The sending side of one thread.
pub trait Tx: Send {
    /// Sends `datagrams` (at most the batch size); `Ok(n)`: the first `n`
    /// were taken by the kernel.
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize>;
}

/// The receiving side of one thread.
pub trait Rx: Send {
    /// Waits up to `timeout` for datagrams and hands each to `f`; returns
    /// how many arrived (0 on timeout).
    fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize>;
}

/// One way of using UDP sockets.
pub trait Backend: Sync + Send {
    /// Its name on the command line and in reports.
    fn name(&self) -> &'static str;
    /// How many datagrams one send call can carry (1: one at a time).
    fn max_batch(&self) -> usize {
        1
    }
    /// Whether a connected sender means anything to it.
    fn connects(&self) -> bool {
        true
    }
    /// What it does, for `--list`.
    fn describe(&self) -> &'static str;
    /// A sender on `sock` (bound, connected if `e.connected`).
    fn tx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Tx>>;
    /// A receiver on `sock` (bound, joined, buffers set).
    fn rx(&self, sock: Socket, e: &Ends) -> io::Result<Box<dyn Rx>>;
}

/// Every backend, in the order reports list them.
pub fn all() -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(std_udp::Std),
        Box::new(socket2_udp::Socket2),
        Box::new(rustix_udp::Rustix),
        Box::new(mmsg::Mmsg),
        Box::new(gso::Gso),
        Box::new(tokio_udp::Tokio { readiness: false }),
        Box::new(tokio_udp::Tokio { readiness: true }),
        Box::new(uring::Uring { multishot: false }),
        Box::new(uring::Uring { multishot: true }),
        Box::new(packet::Packet),
    ]
}

/// True for the errors a receive with a timeout gives when nothing came.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Sets a blocking socket's receive timeout, if it changed.
pub(crate) fn set_timeout(sock: &Socket, last: &mut Option<Duration>, t: Duration) -> io::Result<()> {
    let t = t.max(Duration::from_millis(1));
    if *last != Some(t) {
        sock.set_read_timeout(Some(t))?;
        *last = Some(t);
    }
    Ok(())
}

/// Waiting, with a timeout, for a non-blocking socket to be readable:
/// the receivers that drain a socket without blocking.
pub(crate) struct Readable(mcr_sys::epoll::Epoll);

impl Readable {
    /// Makes `sock` non-blocking and watches it.
    pub(crate) fn new(sock: &Socket) -> io::Result<Readable> {
        sock.set_nonblocking(true)?;
        let epoll = mcr_sys::epoll::Epoll::new(1)?;
        epoll.add_readable(std::os::fd::AsFd::as_fd(sock), 0)?;
        Ok(Readable(epoll))
    }

    /// Waits up to `timeout` for it to be readable.
    pub(crate) fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        self.0.wait(ms)?.for_each(drop);
        Ok(())
    }
}

/// An unspecified address of `dst`'s family.
pub(crate) fn any_like(dst: SocketAddr) -> IpAddr {
    if dst.is_ipv4() {
        IpAddr::from([0u8; 4])
    } else {
        IpAddr::from([0u16; 8])
    }
}
