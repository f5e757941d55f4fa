//! The worker's end of the ring channel: the supervisor keeps a copy of
//! every receive ring the worker holds (see [`RingNote`]), hands the rings
//! of a dead worker to the one started in its place, and hands over the
//! founding ring of each new fanout group.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use mcr_sys::ring::RxRing;

use crate::channel::RingNote;

/// The ring channel.
pub struct Keeper {
    fd: OwnedFd,
}

impl Keeper {
    /// The channel passed at this descriptor.
    pub fn new(fd: OwnedFd) -> Self {
        Keeper { fd }
    }

    /// The rings waiting on the channel, mapped and ready to read on from
    /// where their last reader stopped; and what could not be taken.
    pub fn take(&self) -> (Vec<(u32, RxRing)>, Vec<String>) {
        let mut rings = Vec::new();
        let mut troubles = Vec::new();
        loop {
            let m = match mcr_sys::fdpass::recv_nowait(self.fd.as_fd()) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    troubles.push(format!("ring channel: {e}"));
                    break;
                }
            };
            let notes = match RingNote::decode(&m.text, m.fds.len()) {
                Ok(n) => n,
                Err(e) => {
                    troubles.push(format!("ring channel: {e}"));
                    continue;
                }
            };
            let mut fds = m.fds.into_iter();
            for n in notes {
                let RingNote::Hold { ifindex, geometry } = n else {
                    continue;
                };
                let Some(fd) = fds.next() else { break };
                match RxRing::adopt(fd, geometry) {
                    Ok(r) => rings.push((ifindex, r)),
                    Err(e) => troubles.push(format!("the ring of interface #{ifindex} ({geometry}): {e}")),
                }
            }
        }
        (rings, troubles)
    }

    /// Tells the supervisor which rings to keep (each `Hold` with the
    /// socket `fd_of` gives) and which to close. Waits if the supervisor
    /// is behind rather than lose a note.
    pub fn tell<'a>(&self, notes: &[RingNote], fd_of: impl Fn(u32) -> Option<BorrowedFd<'a>>) -> std::io::Result<()> {
        for chunk in notes.chunks(mcr_sys::fdpass::MAX_FDS) {
            let mut sent = Vec::new();
            let mut fds = Vec::new();
            for n in chunk {
                match n {
                    RingNote::Hold { ifindex, .. } => {
                        if let Some(fd) = fd_of(*ifindex) {
                            fds.push(fd);
                            sent.push(n.clone());
                        }
                    }
                    RingNote::Release { .. } => sent.push(n.clone()),
                }
            }
            if !sent.is_empty() {
                mcr_sys::fdpass::send(self.fd.as_fd(), &RingNote::encode(&sent), &fds)?;
            }
        }
        Ok(())
    }
}
