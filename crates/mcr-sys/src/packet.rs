//! AF_PACKET sockets: whole Ethernet frames in and out of one interface.
//!
//! A transmit socket ([`PacketTx`]) is bound to its interface with protocol
//! 0, so it receives nothing; frames go out with `sendmmsg` batches and need
//! no route, no neighbour entry and no IP processing in the kernel. A
//! receive socket ([`PacketRx`]) gets every frame that arrives on its
//! interface, read in `recvmmsg` batches with [`crate::mmsg::RecvBatch`].

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::mmsg::{self, Outgoing};

/// An AF_PACKET raw socket bound to one interface, for sending frames.
#[derive(Debug)]
pub struct PacketTx {
    fd: OwnedFd,
    ifindex: u32,
}

impl PacketTx {
    /// Opens a transmit socket on the interface with index `ifindex`.
    /// `bypass_qdisc` sends straight to the driver, skipping traffic
    /// control (faster; `tc` rules such as netem then do not apply).
    pub fn open(ifindex: u32, bypass_qdisc: bool) -> io::Result<PacketTx> {
        let fd = raw_socket()?;
        bind(&fd, ifindex, 0)?;
        let tx = PacketTx { fd, ifindex };
        if bypass_qdisc {
            set_packet_flag(&tx.fd, libc::PACKET_QDISC_BYPASS)?;
        }
        Ok(tx)
    }

    /// The interface this socket sends on.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Sends up to [`mmsg::MAX_BATCH`] frames in one call; returns how many
    /// the kernel took.
    pub fn send(&self, frames: &[&[u8]], dont_wait: bool) -> io::Result<usize> {
        let mut msgs = [Outgoing::new(None, &[]); mmsg::MAX_BATCH];
        let n = frames.len().min(mmsg::MAX_BATCH);
        for (m, f) in msgs.iter_mut().zip(frames) {
            m.data = f;
        }
        mmsg::send_batch(self.fd.as_fd(), &msgs[..n], dont_wait)
    }
}

/// An AF_PACKET socket with protocol 0: it receives nothing until bound.
pub(crate) fn raw_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes plain integers; protocol 0 means no frame is
    // queued to the socket before `bind` names a protocol.
    let raw = crate::check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `raw` is a freshly created fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Binds a packet socket to one interface and an EtherType (0: none,
/// `ETH_P_ALL`: every frame), in host order.
pub(crate) fn bind(fd: &OwnedFd, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is valid.
    let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
    sll.sll_family = crate::conv::family(libc::AF_PACKET);
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = crate::conv::ifindex_int(ifindex);
    // SAFETY: `sll` is a valid sockaddr_ll of the length passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast(),
            crate::conv::socklen_of::<libc::sockaddr_ll>(),
        )
    };
    crate::check(rc).map(|_| ())
}

/// Turns on an integer SOL_PACKET option.
fn set_packet_flag(fd: &OwnedFd, option: libc::c_int) -> io::Result<()> {
    crate::sockopt::set_raw(fd.as_fd(), libc::SOL_PACKET, option, &(1 as libc::c_int))
}

/// An AF_PACKET raw socket that receives every frame arriving on one
/// interface (not those sent from this host), without blocking.
#[derive(Debug)]
pub struct PacketRx {
    fd: OwnedFd,
}

impl PacketRx {
    /// Opens a receive socket on the interface with index `ifindex`, with a
    /// receive buffer of `recv_buffer_bytes`.
    pub fn open(ifindex: u32, recv_buffer_bytes: usize) -> io::Result<PacketRx> {
        let fd = raw_socket()?;
        // Frames this host sends out of the interface are not wanted: a
        // relay must never read back what it sent.
        set_packet_flag(&fd, libc::PACKET_IGNORE_OUTGOING)?;
        crate::sockopt::force_recv_buffer(fd.as_fd(), recv_buffer_bytes)?;
        bind(&fd, ifindex, crate::conv::ethertype(libc::ETH_P_ALL))?;
        // SAFETY: F_SETFL with O_NONBLOCK only changes the fd's flags.
        crate::check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) })?;
        Ok(PacketRx { fd })
    }
}

impl AsFd for PacketRx {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsFd for PacketTx {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
