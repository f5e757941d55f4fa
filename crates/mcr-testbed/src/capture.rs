//! Recording the frames that cross a link, with `tcpdump`, to check what
//! a relay put on the wire.

use std::path::PathBuf;
use std::time::Duration;

use crate::{Error, Ns, Proc, Result, Signal};

/// A running capture.
#[derive(Debug)]
pub struct Capture {
    proc: Proc,
    file: PathBuf,
}

impl Capture {
    /// Captures, in `ns` on `ifname`, the whole of every frame that
    /// `filter` (tcpdump syntax) selects, and waits until the capture runs.
    pub fn start(ns: &Ns, ifname: &str, filter: &str) -> Result<Capture> {
        Self::start_limited(ns, ifname, filter, None)
    }

    /// As [`Capture::start`], stopping by itself after `count` frames (a
    /// sample costs the machine far less than a whole fast run).
    pub fn start_limited(ns: &Ns, ifname: &str, filter: &str, count: Option<u64>) -> Result<Capture> {
        let file = PathBuf::from(format!("/tmp/{}-{ifname}.pcap", ns.name()));
        let mut cmd = ns.command("tcpdump");
        // -U: write each packet as it comes; --immediate-mode: take each
        // from the kernel as it comes (libpcap's ring otherwise holds a
        // part-filled block back up to a second, and a capture stopped soon
        // after the traffic would miss its tail); -B: a 64 MiB buffer, so
        // that a busy machine does not make the capture drop frames.
        cmd.args([
            "-i",
            ifname,
            "-n",
            "-s",
            "0",
            "-U",
            "--immediate-mode",
            "-B",
            "65536",
            "-w",
        ])
        .arg(&file);
        if let Some(n) = count {
            cmd.arg("-c").arg(n.to_string());
        }
        cmd.arg(filter);
        let mut proc = ns.spawn(cmd)?;
        proc.wait_for_stderr("listening on", Duration::from_secs(30))?;
        Ok(Capture { proc, file })
    }

    /// Stops the capture and returns the frames, oldest first.
    pub fn stop(self) -> Result<Vec<Vec<u8>>> {
        self.stop_keeping(None)
    }

    /// As [`Capture::stop`], keeping the capture file at `keep` (for a
    /// decoder that reads pcap, such as tshark).
    pub fn stop_keeping(mut self, keep: Option<&std::path::Path>) -> Result<Vec<Vec<u8>>> {
        // Let the last frames reach the file.
        std::thread::sleep(Duration::from_millis(200));
        self.proc.signal(Signal::Int)?;
        let file = self.file.clone();
        let _ = self.proc.finish(Duration::from_secs(30))?;
        let bytes = std::fs::read(&file).map_err(|source| Error::Io {
            what: format!("read {}", file.display()),
            source,
        })?;
        if let Some(to) = keep {
            std::fs::write(to, &bytes).map_err(|source| Error::Io {
                what: format!("write {}", to.display()),
                source,
            })?;
        }
        let _ = std::fs::remove_file(&file);
        parse_pcap(&bytes).map_err(|reason| Error::Report {
            what: "tcpdump".into(),
            reason,
            stdout: String::new(),
            stderr: String::new(),
        })
    }
}

/// The frames of a classic pcap file.
pub fn parse_pcap(b: &[u8]) -> std::result::Result<Vec<Vec<u8>>, String> {
    if b.len() < 24 {
        return Err("shorter than a pcap header".into());
    }
    let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        _ => return Err(format!("not a pcap file (magic {magic:#x})")),
    };
    let u32_at = |at: usize| {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32_at(at + 8) as usize;
        let start = at + 16;
        let Some(data) = b.get(start..start + caplen) else {
            break;
        };
        frames.push(data.to_vec());
        at = start + caplen;
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_records_and_refuses_other_files() {
        let mut f = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        f.extend_from_slice(&[0; 16]);
        for payload in [&b"abc"[..], &b"hello"[..]] {
            f.extend_from_slice(&[0; 8]);
            f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            f.extend_from_slice(payload);
        }
        assert_eq!(parse_pcap(&f).expect("pcap"), vec![b"abc".to_vec(), b"hello".to_vec()]);
        assert!(parse_pcap(b"not a pcap file at all, no").is_err());
    }
}
