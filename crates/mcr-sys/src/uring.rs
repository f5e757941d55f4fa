//! UDP through io_uring: batches of sends, receives kept in flight on owned
//! buffers (single-shot), and multishot receive drawing its buffers from a
//! provided buffer ring.
//!
//! The kernel writes into the buffers of requests in flight, so each type
//! owns them and, when dropped, shuts the socket down and waits for every
//! request to complete before freeing them (and leaks them rather than
//! free memory the kernel might still write, should that wait fail).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use io_uring::types::{BufRingEntry, Fd, SubmitArgs, Timespec};
use io_uring::{IoUring, cqueue, opcode};

use crate::sockaddr::RawSockAddr;

fn timespec(d: Duration) -> Timespec {
    Timespec::new().sec(d.as_secs()).nsec(d.subsec_nanos())
}

/// Submits what is queued and waits up to `timeout` for one completion
/// (none is an error only if it is not the timeout).
fn submit_and_wait(ring: &IoUring, timeout: Duration) -> io::Result<()> {
    let ts = timespec(timeout);
    let args = SubmitArgs::new().timespec(&ts);
    match ring.submitter().submit_with_args(1, &args) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The user data of cancellation requests (whose own completions
/// [`drain`] does not count).
const CANCEL_UD: u64 = u64::MAX;

/// Asks the kernel to cancel every request in flight on `ring`.
fn cancel_all(ring: &mut IoUring) {
    let e = opcode::AsyncCancel2::new(io_uring::types::CancelBuilder::any())
        .build()
        .user_data(CANCEL_UD);
    // SAFETY: a cancellation refers to no memory of ours.
    let _ = unsafe { ring.submission().push(&e) };
}

/// Waits (up to a second in all) until `pending` requests have completed,
/// counting down as their final completions arrive. True if all did.
fn drain(ring: &mut IoUring, mut pending: usize) -> bool {
    let deadline = crate::clock::monotonic_ns() + 1_000_000_000;
    while pending > 0 && crate::clock::monotonic_ns() < deadline {
        if submit_and_wait(ring, Duration::from_millis(50)).is_err() {
            return false;
        }
        for cqe in ring.completion() {
            if cqe.user_data() != CANCEL_UD && !cqueue::more(cqe.flags()) {
                pending = pending.saturating_sub(1);
            }
        }
    }
    pending == 0
}

/// Shuts a socket down for reading and writing, so that its requests in
/// flight complete.
fn shut_down(fd: &OwnedFd) {
    // SAFETY: shutdown takes a descriptor we own and touches no memory.
    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
}

impl std::fmt::Debug for UringUdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringUdp")
            .field("buffers", &self.bufs.len())
            .field("armed", &self.armed())
            .field("sends_in_flight", &self.sends_in_flight)
            .finish()
    }
}

impl std::fmt::Debug for UringMultishot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringMultishot")
            .field("buffers", &self.count)
            .field("buf_size", &self.buf_size)
            .field("armed", &self.armed)
            .finish()
    }
}

/// A UDP socket driven through io_uring, one request per datagram.
pub struct UringUdp {
    ring: IoUring,
    sock: OwnedFd,
    /// Receive buffers, each with a request in flight once armed.
    bufs: Vec<Vec<u8>>,
    /// Receive buffers with no request in flight.
    idle: Vec<usize>,
    /// Copies of what is being sent, with the address: the kernel reads
    /// them until each send completes.
    out: Vec<Vec<u8>>,
    /// On the heap, so that it can outlive `self` should the kernel
    /// still hold it.
    out_to: Option<Box<RawSockAddr>>,
    /// Sends still in flight (after a batch timed out), and the batch
    /// number their user data carries.
    sends_in_flight: usize,
    batch: u32,
}

/// User data of a send: the batch number above, the index below.
const SEND_TAG: u64 = 1 << 63;

impl UringUdp {
    /// Takes `sock` (a UDP socket) with a ring of `depth` entries; receives
    /// keep `depth` requests in flight on buffers of `buf_size` bytes.
    pub fn new(sock: OwnedFd, depth: u32, buf_size: usize) -> io::Result<UringUdp> {
        let ring = IoUring::new(depth.next_power_of_two().max(8) * 2)?;
        Ok(UringUdp {
            ring,
            sock,
            bufs: (0..depth).map(|_| vec![0u8; buf_size]).collect(),
            idle: (0..depth as usize).rev().collect(),
            out: Vec::new(),
            out_to: None,
            sends_in_flight: 0,
            batch: 0,
        })
    }

    /// Sends each of `datagrams` with its own request (to `to`, or to the
    /// connected peer), submits them with one system call and waits for
    /// their completions. Returns how many of the first were sent in a
    /// row (what follows the first failure is sent again by the caller),
    /// and the first error, if any.
    pub fn send_batch(&mut self, datagrams: &[&[u8]], to: Option<&RawSockAddr>) -> (usize, Option<io::Error>) {
        if self.sends_in_flight > 0 {
            // A batch that timed out still holds the buffers.
            return (0, Some(io::Error::from(io::ErrorKind::WouldBlock)));
        }
        let fd = Fd(self.sock.as_raw_fd());
        let n = datagrams.len().min(self.ring.params().sq_entries() as usize);
        self.out.resize_with(n.max(self.out.len()), Vec::new);
        for (o, d) in self.out.iter_mut().zip(&datagrams[..n]) {
            o.clear();
            o.extend_from_slice(d);
        }
        self.out_to = to.map(|a| Box::new(*a));
        self.batch = self.batch.wrapping_add(1);
        let mut iovs: Vec<libc::iovec> = self.out[..n]
            .iter_mut()
            .map(|d| libc::iovec {
                iov_base: d.as_mut_ptr().cast(),
                iov_len: d.len(),
            })
            .collect();
        let mut hdrs: Vec<libc::msghdr> = Vec::with_capacity(n);
        for iov in &mut iovs {
            // SAFETY: msghdr is plain data; all zeroes is a valid value.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            if let Some(to) = &self.out_to {
                h.msg_name = to.as_ptr().cast_mut().cast();
                h.msg_namelen = to.len();
            }
            h.msg_iov = iov;
            h.msg_iovlen = 1;
            hdrs.push(h);
        }
        let mut pushed = 0;
        for (i, h) in hdrs.iter().enumerate() {
            let ud = SEND_TAG | (u64::from(self.batch) << 32) | i as u64;
            let e = opcode::SendMsg::new(fd, h).build().user_data(ud);
            // SAFETY: the header, its iovec, the copied payload and address
            // (owned by `self`) outlive the request: this function waits for
            // every completion, and if it cannot, keeps them (leaked) and
            // refuses to send again.
            if unsafe { self.ring.submission().push(&e) }.is_err() {
                break;
            }
            pushed += 1;
        }
        let mut results: Vec<Option<i32>> = vec![None; pushed];
        let mut done = 0;
        let mut first_err = None;
        let deadline = crate::clock::monotonic_ns() + 5_000_000_000;
        while done < pushed {
            if let Err(e) = submit_and_wait(&self.ring, Duration::from_millis(100)) {
                first_err.get_or_insert(e);
            }
            for cqe in self.ring.completion() {
                let ud = cqe.user_data();
                // Only this batch's sends count.
                if ud & SEND_TAG == 0 || (ud >> 32) as u32 & 0x7fff_ffff != self.batch & 0x7fff_ffff {
                    continue;
                }
                if let Some(r) = results.get_mut((ud & 0xffff_ffff) as usize) {
                    *r = Some(cqe.result());
                    done += 1;
                }
            }
            if done < pushed && crate::clock::monotonic_ns() > deadline {
                // The kernel may still read the headers and the copies:
                // never free them; this socket sends no more.
                self.sends_in_flight = pushed - done;
                std::mem::forget(hdrs);
                std::mem::forget(iovs);
                std::mem::forget(std::mem::take(&mut self.out));
                std::mem::forget(self.out_to.take());
                return (0, Some(io::Error::from(io::ErrorKind::TimedOut)));
            }
        }
        let ok = results.iter().take_while(|r| r.is_some_and(|v| v >= 0)).count();
        if let Some(v) = results.iter().flatten().find(|&&v| v < 0) {
            first_err.get_or_insert(io::Error::from_raw_os_error(-v));
        }
        (ok, first_err)
    }

    fn arm(&mut self, i: usize) -> bool {
        let b = &mut self.bufs[i];
        let e = opcode::Recv::new(Fd(self.sock.as_raw_fd()), b.as_mut_ptr(), crate::conv::u32_len(b.len()))
            .build()
            .user_data(i as u64);
        // SAFETY: buffer `i` is owned by `self` and is neither read nor
        // freed until its completion is reaped (see `recv` and `Drop`).
        unsafe { self.ring.submission().push(&e) }.is_ok()
    }

    /// Waits up to `timeout` for datagrams and hands each to `f`; returns
    /// how many. Every buffer has a receive request in flight between
    /// calls.
    pub fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        while let Some(i) = self.idle.pop() {
            if !self.arm(i) {
                self.idle.push(i);
                break;
            }
        }
        submit_and_wait(&self.ring, timeout)?;
        let done: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        let mut n = 0;
        let mut err = None;
        for (ud, res) in done {
            let i = usize::try_from(ud).unwrap_or(usize::MAX);
            if ud & SEND_TAG != 0 || i >= self.bufs.len() {
                continue;
            }
            if res >= 0 {
                let b = &self.bufs[i];
                f(&b[..crate::conv::count(res).min(b.len())]);
                n += 1;
            } else if res != -libc::EINTR && res != -libc::ECANCELED {
                err.get_or_insert(io::Error::from_raw_os_error(-res));
            }
            self.idle.push(i);
        }
        match err {
            Some(e) if n == 0 => Err(e),
            _ => Ok(n),
        }
    }

    /// Receive requests in flight.
    fn armed(&self) -> usize {
        self.bufs.len() - self.idle.len()
    }
}

impl Drop for UringUdp {
    fn drop(&mut self) {
        let pending = self.armed() + self.sends_in_flight;
        if pending == 0 {
            return;
        }
        cancel_all(&mut self.ring);
        shut_down(&self.sock);
        if !drain(&mut self.ring, pending) {
            std::mem::forget(std::mem::take(&mut self.bufs));
            std::mem::forget(std::mem::take(&mut self.out));
            std::mem::forget(self.out_to.take());
        }
    }
}

/// Multishot receive: one request that completes once per datagram, each
/// time in a buffer the kernel takes from a provided buffer ring.
pub struct UringMultishot {
    ring: IoUring,
    sock: OwnedFd,
    /// The buffer ring, shared with the kernel (page-aligned, mmap'd).
    entries: *mut BufRingEntry,
    entries_len: usize,
    /// The buffers themselves.
    slab: Vec<u8>,
    buf_size: usize,
    count: u16,
    tail: u16,
    armed: bool,
}

// SAFETY: the mapping and the slab belong to this value alone; nothing
// else refers to them, so moving it to another thread is sound.
unsafe impl Send for UringMultishot {}

const BGID: u16 = 7;

impl UringMultishot {
    /// Takes `sock` (a UDP socket) with `count` buffers (a power of two,
    /// at most 32768) of `buf_size` bytes.
    pub fn new(sock: OwnedFd, count: u16, buf_size: usize) -> io::Result<UringMultishot> {
        let count = count.clamp(1, 32768).next_power_of_two();
        let ring = IoUring::new(64)?;
        let entries_len = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping of `entries_len` bytes at an
        // address of the kernel's choosing; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                entries_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut m = UringMultishot {
            ring,
            sock,
            entries: p.cast(),
            entries_len,
            slab: vec![0u8; usize::from(count) * buf_size],
            buf_size,
            count,
            tail: 0,
            armed: false,
        };
        // SAFETY: the ring memory is page-aligned (mmap), holds `count`
        // entries, and lives until `Drop` unregisters it.
        unsafe {
            m.ring
                .submitter()
                .register_buf_ring_with_flags(m.entries as u64, count, BGID, 0)?;
        }
        for bid in 0..count {
            m.give_back(bid);
        }
        Ok(m)
    }

    /// Puts buffer `bid` back in the ring for the kernel to fill.
    fn give_back(&mut self, bid: u16) {
        let mask = self.count - 1;
        let at = usize::from(self.tail & mask);
        let addr = self.slab.as_ptr() as u64 + u64::from(bid) * self.buf_size as u64;
        // SAFETY: `at` < `count`: the pointer stays inside the mapping.
        let p = unsafe { self.entries.add(at) }.cast::<u8>();
        // The entry's fields (struct io_uring_buf: addr at 0, len at 8, bid
        // at 12) are written through raw pointers, never through a
        // reference: entry 0's last two bytes are the tail, which the
        // kernel reads at any time.
        // SAFETY: the entry lies inside the mapping; the kernel reads only
        // entries below the tail, which is moved past this one after.
        unsafe {
            p.cast::<u64>().write_unaligned(addr);
        }
        // SAFETY: as above, the `len` field.
        unsafe {
            p.wrapping_add(8)
                .cast::<u32>()
                .write_unaligned(crate::conv::u32_len(self.buf_size));
        }
        // SAFETY: as above, the `bid` field.
        unsafe {
            p.wrapping_add(12).cast::<u16>().write_unaligned(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the `resv` field of the first entry, inside
        // the mapping; it is written with release ordering as the kernel
        // expects, after the entry above.
        let tail = unsafe { BufRingEntry::tail(self.entries) } as *const std::sync::atomic::AtomicU16;
        // SAFETY: an aligned u16 inside the mapping, shared with the kernel
        // only through atomic accesses.
        unsafe { &*tail }.store(self.tail, std::sync::atomic::Ordering::Release);
    }

    fn arm(&mut self) -> io::Result<()> {
        let e = opcode::RecvMulti::new(Fd(self.sock.as_raw_fd()), BGID)
            .build()
            .user_data(1);
        // SAFETY: the request takes its buffers from the registered ring,
        // whose memory lives as long as `self`.
        unsafe { self.ring.submission().push(&e) }.map_err(|_| io::Error::from(io::ErrorKind::WouldBlock))?;
        self.armed = true;
        Ok(())
    }

    /// Waits up to `timeout` for datagrams and hands each to `f`; returns
    /// how many.
    pub fn recv(&mut self, timeout: Duration, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        if !self.armed {
            self.arm()?;
        }
        submit_and_wait(&self.ring, timeout)?;
        let done: Vec<(i32, u32)> = self.ring.completion().map(|c| (c.result(), c.flags())).collect();
        let mut n = 0;
        let mut err = None;
        for (res, flags) in done {
            if !cqueue::more(flags) {
                self.armed = false;
            }
            match cqueue::buffer_select(flags) {
                Some(bid) if bid < self.count => {
                    if res >= 0 {
                        let start = usize::from(bid) * self.buf_size;
                        f(&self.slab[start..start + crate::conv::count(res).min(self.buf_size)]);
                        n += 1;
                    }
                    self.give_back(bid);
                }
                Some(_) => {}
                None if res < 0 && !matches!(-res, libc::ENOBUFS | libc::EINTR | libc::ECANCELED) => {
                    err.get_or_insert(io::Error::from_raw_os_error(-res));
                }
                None => {}
            }
        }
        match err {
            Some(e) if n == 0 => Err(e),
            _ => Ok(n),
        }
    }
}

impl Drop for UringMultishot {
    fn drop(&mut self) {
        let quiet = !self.armed || {
            cancel_all(&mut self.ring);
            shut_down(&self.sock);
            drain(&mut self.ring, 1)
        };
        if !quiet {
            // The kernel may still write: keep everything it could touch.
            std::mem::forget(std::mem::take(&mut self.slab));
            return;
        }
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
        // SAFETY: the mapping made in `new`, no longer registered with the
        // kernel nor referred to by any request.
        unsafe { libc::munmap(self.entries.cast(), self.entries_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind rx");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind tx");
        tx.connect(rx.local_addr().expect("addr")).expect("connect");
        (tx, rx)
    }

    #[test]
    fn single_shot_sends_and_receives_every_datagram() {
        let (tx, rx) = pair();
        let to = RawSockAddr::new(rx.local_addr().expect("addr"));
        let mut t = UringUdp::new(tx.into(), 8, 64).expect("ring");
        let mut r = UringUdp::new(rx.into(), 8, 64).expect("ring");
        let data: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let (sent, err) = t.send_batch(&refs[..8], Some(&to));
        assert_eq!((sent, err.map(|e| e.to_string())), (8, None));
        let (sent, _) = t.send_batch(&refs[8..], None);
        assert_eq!(sent, 12, "connected: no address needed");
        let mut got = Vec::new();
        for _ in 0..50 {
            r.recv(Duration::from_millis(20), &mut |d| got.push(d.to_vec()))
                .expect("recv");
            if got.len() == 20 {
                break;
            }
        }
        got.sort();
        assert_eq!(got, data);
    }

    #[test]
    fn multishot_receives_every_datagram_through_the_buffer_ring() {
        let (tx, rx) = pair();
        let mut r = UringMultishot::new(rx.into(), 4, 128).expect("ring");
        let mut got = Vec::new();
        // More datagrams than buffers: each buffer goes back and is used
        // again.
        for round in 0..5u8 {
            for i in 0..3u8 {
                tx.send(&[round, i, 0xab]).expect("send");
            }
            for _ in 0..50 {
                r.recv(Duration::from_millis(20), &mut |d| got.push(d.to_vec()))
                    .expect("recv");
                if got.len() == usize::from(round + 1) * 3 {
                    break;
                }
            }
        }
        let want: Vec<Vec<u8>> = (0..5u8).flat_map(|r| (0..3u8).map(move |i| vec![r, i, 0xab])).collect();
        assert_eq!(got, want);
    }
}
