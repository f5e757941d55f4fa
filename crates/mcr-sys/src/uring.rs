//! Sending frames with io_uring: one submission per batch, one completion
//! per frame.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::{IoUring, opcode, types};

/// An io_uring instance for batched sends on one socket.
pub struct UringSend {
    ring: IoUring,
}

impl std::fmt::Debug for UringSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringSend").finish_non_exhaustive()
    }
}

impl UringSend {
    /// A ring with room for `entries` sends in flight.
    pub fn new(entries: u32) -> io::Result<UringSend> {
        Ok(UringSend {
            ring: IoUring::new(entries.next_power_of_two())?,
        })
    }

    /// Sends every frame on `fd` (a bound AF_PACKET socket) with one
    /// `io_uring_enter`, waiting for the completions; `result[i]` is the
    /// outcome of `frames[i]`.
    pub fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        frames: &[&[u8]],
        results: &mut Vec<io::Result<usize>>,
    ) -> io::Result<()> {
        results.clear();
        let n = frames.len().min(self.ring.params().sq_entries() as usize);
        if n == 0 {
            return Ok(());
        }
        {
            let mut sq = self.ring.submission();
            for (i, f) in frames[..n].iter().enumerate() {
                let e = opcode::Send::new(types::Fd(fd.as_raw_fd()), f.as_ptr(), f.len() as u32)
                    .flags(libc::MSG_DONTWAIT)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the frame buffers are borrowed for this whole call,
                // which does not return before every submitted send has
                // completed (submit_and_wait below, then draining the queue),
                // so the kernel never reads a buffer after it is released.
                if unsafe { sq.push(&e) }.is_err() {
                    return Err(io::Error::other("io_uring submission queue full"));
                }
            }
        }
        self.ring.submit_and_wait(n)?;
        results.resize_with(n, || Ok(0));
        let mut seen = 0;
        while seen < n {
            let cq = self.ring.completion();
            for c in cq {
                let i = c.user_data() as usize;
                let r = c.result();
                if let Some(slot) = results.get_mut(i) {
                    *slot = if r < 0 {
                        Err(io::Error::from_raw_os_error(-r))
                    } else {
                        Ok(r as usize)
                    };
                }
                seen += 1;
            }
            if seen < n {
                self.ring.submit_and_wait(n - seen)?;
            }
        }
        Ok(())
    }
}
