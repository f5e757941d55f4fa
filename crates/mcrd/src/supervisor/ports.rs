//! Unicast inputs: a rule may take the datagrams sent to one of this
//! host's own addresses and ports. The workers read them from their rings
//! like any frame, but the kernel receives them too, and with no socket on
//! that port it would answer every one with an ICMP port unreachable that
//! tells the sender to stop. So the supervisor holds the port: a UDP
//! socket bound to the address and port, whose filter refuses every
//! datagram, so nothing is ever queued to it (the kernel counts each one
//! in the UDP `InErrors` statistic instead).
//!
//! When another program already has the port, that program receives the
//! datagrams and the kernel sends no ICMP: nothing needs holding.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsFd;

use socket2::{Domain, Protocol, Socket, Type};

struct Hold {
    /// The socket, or `None` when another program has the port, or why
    /// neither.
    held: Result<Option<Socket>, String>,
}

/// The ports every unicast input needs held.
#[derive(Default)]
pub struct Ports {
    holds: HashMap<SocketAddr, Hold>,
    /// Sockets the mcrd before held, by address, until a rule of this one
    /// needs the port (then it is held on) or the start is over (then it
    /// is let go).
    adopted: HashMap<SocketAddr, Socket>,
}

impl std::fmt::Debug for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ports").field("holds", &self.holds.len()).finish()
    }
}

fn hold(addr: SocketAddr) -> Result<Option<Socket>, String> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| format!("open a UDP socket: {e}"))?;
    // The filter first, so not one datagram is queued in between.
    mcr_sys::sockopt::drop_everything(s.as_fd()).map_err(|e| format!("filter: {e}"))?;
    // Marked as MCR's own, so the eBPF data path does not take it for a
    // local program that wants the datagrams (without the mark they still
    // reach it, and its filter drops them, as before).
    if let Err(e) = s.set_mark(mcr_core::datapath::SOCKET_MARK) {
        tracing::debug!("SO_MARK on the socket holding {addr}: {e}");
    }
    match s.bind(&addr.into()) {
        Ok(()) => Ok(Some(s)),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => Ok(None),
        Err(e) => Err(format!("bind {addr}: {e}")),
    }
}

impl Ports {
    /// Takes the port sockets the mcrd before held (see `adopted`).
    /// Returns what could not be taken.
    pub fn adopt(&mut self, fds: Vec<std::os::fd::OwnedFd>) -> Vec<String> {
        let mut refused = Vec::new();
        for fd in fds {
            let s = Socket::from(fd);
            match s.local_addr().map(|a| a.as_socket()) {
                Ok(Some(addr)) => {
                    self.adopted.insert(addr, s);
                }
                Ok(None) => refused.push("a port socket of no IP family".to_string()),
                Err(e) => refused.push(format!("a port socket: {e}")),
            }
        }
        refused
    }

    /// Lets go the adopted sockets no rule took: their ports are free.
    pub fn drop_adopted(&mut self) -> usize {
        let n = self.adopted.len();
        self.adopted.clear();
        n
    }

    /// The sockets holding ports, to keep in systemd's store.
    pub fn held(&self) -> impl Iterator<Item = super::handover::Held<'_>> {
        let holds = self.holds.values().filter_map(|h| h.held.as_ref().ok()?.as_ref());
        holds
            .chain(self.adopted.values())
            .map(|s| super::handover::socket("port", s.as_fd()))
    }

    /// Makes sure `addr` is held (or tries again if it could not be).
    /// Returns why it cannot be, if it cannot (the kernel will then answer
    /// senders with ICMP port unreachable). Who needs it is counted by
    /// [`mcr_core::plane::claims::Ledger`], which says when to let it go.
    pub fn ensure(&mut self, addr: SocketAddr) -> Option<String> {
        let h = self.holds.entry(addr).or_insert(Hold {
            held: Err(String::new()),
        });
        if h.held.is_err() {
            h.held = match self.adopted.remove(&addr) {
                Some(s) => Ok(Some(s)),
                None => hold(addr),
            };
        }
        self.problem(addr)
    }

    /// Lets `addr` go (its last user went): closes its socket.
    pub fn free(&mut self, addr: SocketAddr) {
        self.holds.remove(&addr);
    }

    /// Tries again every port that could not be held (its address may
    /// have appeared since); returns how many are held now.
    pub fn retry_failed(&mut self) -> usize {
        let mut now = 0;
        for (addr, h) in &mut self.holds {
            if h.held.is_err() {
                h.held = hold(*addr);
                now += usize::from(h.held.is_ok());
            }
        }
        now
    }

    /// Why `addr` is not held, if it is not.
    pub fn problem(&self, addr: SocketAddr) -> Option<String> {
        match &self.holds.get(&addr)?.held {
            Ok(_) => None,
            Err(e) => Some(format!(
                "could not hold port {addr} ({e}): the kernel answers its senders with ICMP port unreachable"
            )),
        }
    }

    /// True if `addr` is held by a socket of ours (not another program's).
    #[cfg(test)]
    fn ours(&self, addr: SocketAddr) -> bool {
        self.holds.get(&addr).is_some_and(|h| matches!(h.held, Ok(Some(_))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_a_port_until_it_is_freed() {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").expect("probe");
        let addr = probe.local_addr().expect("addr");
        drop(probe);
        let mut p = Ports::default();
        assert_eq!(p.ensure(addr), None);
        assert!(p.ours(addr));
        // A second holder changes nothing.
        assert_eq!(p.ensure(addr), None);
        // Held: nobody else can have it, and nothing reaches our socket.
        assert!(std::net::UdpSocket::bind(addr).is_err());
        p.free(addr);
        let again = std::net::UdpSocket::bind(addr).expect("free once let go");
        // Another program's port: nothing to hold, nothing wrong.
        assert_eq!(p.ensure(addr), None);
        assert!(!p.ours(addr));
        drop(again);
    }

    #[test]
    fn a_held_port_queues_nothing() {
        let mut p = Ports::default();
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").expect("probe");
        let addr = probe.local_addr().expect("addr");
        drop(probe);
        assert_eq!(p.ensure(addr), None);
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("tx");
        tx.connect(addr).expect("connect");
        for _ in 0..3 {
            tx.send(b"x").expect("send");
        }
        // Had the port been closed, the kernel's ICMP would show as
        // ECONNREFUSED on the connected sender's next call.
        std::thread::sleep(std::time::Duration::from_millis(50));
        tx.send(b"x").expect("no ICMP came back");
        let h = p.holds.get(&addr).expect("held");
        let Ok(Some(s)) = &h.held else { panic!("not ours") };
        s.set_nonblocking(true).expect("nonblocking");
        let mut buf = [std::mem::MaybeUninit::new(0u8); 16];
        assert!(s.recv(&mut buf).is_err(), "the filter lets nothing through");
    }
}
