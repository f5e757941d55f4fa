//! AF_PACKET receive rings (`PACKET_RX_RING`): frames arrive in memory
//! shared with the kernel, with no system call per packet.
//!
//! Two formats: TPACKET_V2 hands over each frame as soon as it is written;
//! TPACKET_V3 hands over whole blocks of frames, and a block that is not
//! full waits for its retire timeout (1 ms at least). [`RxRing`] serves
//! both behind one interface, so the worker can run either.
//!
//! A ring socket is set up in an order that keeps it from ever seeing a
//! frame that another member of its fanout group also sees: a filter that
//! drops everything is attached before `bind`, the socket joins the fanout
//! group, and only then is the real filter put in place.

mod v2;
mod v3;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::mmap::Mmap;
use crate::sockopt::set_raw;

/// Which ring format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingVersion {
    /// Frame by frame.
    V2,
    /// Block by block, with a retire timeout.
    V3,
}

/// The shape of a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// The format.
    pub version: RingVersion,
    /// Bytes of memory for the ring.
    pub bytes: usize,
    /// The largest frame a slot holds (the interface's MTU plus link
    /// headers). A V2 ring reads a longer one whole from its socket's
    /// queue, a system call each; a V3 block holds frames up to its size.
    pub max_frame: usize,
    /// V3: how long a part-filled block waits before it is handed over, in
    /// milliseconds (at least 1).
    pub block_timeout_ms: u32,
}

/// One classic BPF instruction, as the kernel takes it.
pub type FilterInsn = libc::sock_filter;

/// One classic BPF instruction from its parts (as `mcr_core::bpf::Insn`
/// holds them).
pub fn filter_insn(code: u16, jt: u8, jf: u8, k: u32) -> FilterInsn {
    FilterInsn { code, jt, jf, k }
}

/// What a ring lets in.
#[derive(Debug, Clone, Copy)]
pub enum Filter<'a> {
    /// A classic BPF program.
    Classic(&'a [FilterInsn]),
    /// A loaded eBPF socket filter program (`SO_ATTACH_BPF`).
    Program(BorrowedFd<'a>),
}

/// How a ring joins its interface's fanout group (classic BPF mode: each
/// frame reaches exactly one member, the one the group's program picks,
/// see [`set_fanout_program`]; until it has one, the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// Join group `id` (made by the first member to join it).
    Join(u16),
    /// Make a new group with an id no group of this network namespace has
    /// (`PACKET_FANOUT_FLAG_UNIQUEID`); [`RxRing::fanout_id`] tells it, for
    /// the other members to join.
    Found,
}

/// A received frame.
#[derive(Debug, Clone, Copy)]
pub struct RxFrame<'a> {
    /// The bytes captured, from the Ethernet header on.
    pub data: &'a [u8],
    /// The frame's length on the wire (more than `data.len()` if cut).
    pub wire_len: usize,
    /// The kernel has verified the transport checksum.
    pub csum_valid: bool,
    /// The transport checksum is not computed yet (the frame was made on
    /// this host with checksum offload).
    pub csum_not_ready: bool,
    /// The VLAN tag the kernel took off the frame, if any.
    pub vlan_tci: Option<u16>,
    /// That tag's TPID (0x8100 for 802.1Q, 0x88a8 for an 802.1ad service
    /// tag), when the kernel says.
    pub vlan_tpid: Option<u16>,
    /// When the kernel took the frame in (its receive timestamp, ns on
    /// `CLOCK_REALTIME`), if it said.
    pub arrived_ns: Option<u64>,
}

/// A ring slot's timestamp in nanoseconds, or None if the kernel left it
/// unset.
fn stamp_ns(sec: u32, nsec: u32) -> Option<u64> {
    (sec != 0).then(|| u64::from(sec) * 1_000_000_000 + u64::from(nsec))
}

fn frame_flags(status: u32) -> (bool, bool) {
    (
        status & libc::TP_STATUS_CSUM_VALID != 0,
        status & libc::TP_STATUS_CSUMNOTREADY != 0,
    )
}

/// What the kernel counted for a ring since the last reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Frames that reached the socket.
    pub packets: u64,
    /// Frames dropped because the ring was full.
    pub drops: u64,
}

/// The shape of an open ring: enough for another process that holds the
/// socket (passed with [`crate::fdpass`]) to map it and go on reading
/// ([`RxRing::adopt`]). Written `v2/2048x16384`: the format, the bytes of a
/// frame slot (V2) or block (V3), and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// The format.
    pub version: RingVersion,
    /// Bytes of a frame slot (V2) or a block (V3).
    pub unit_bytes: usize,
    /// How many of them.
    pub units: usize,
}

impl std::fmt::Display for RingGeometry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = match self.version {
            RingVersion::V2 => "v2",
            RingVersion::V3 => "v3",
        };
        write!(f, "{v}/{}x{}", self.unit_bytes, self.units)
    }
}

impl std::str::FromStr for RingGeometry {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a ring geometry (v2/2048x16384)");
        let (v, rest) = s.split_once('/').ok_or_else(bad)?;
        let (unit, units) = rest.split_once('x').ok_or_else(bad)?;
        let version = match v {
            "v2" => RingVersion::V2,
            "v3" => RingVersion::V3,
            _ => return Err(bad()),
        };
        let unit_bytes: usize = unit.parse().map_err(|_| bad())?;
        let units: usize = units.parse().map_err(|_| bad())?;
        if unit_bytes == 0 || units == 0 || unit_bytes.checked_mul(units).is_none() {
            return Err(bad());
        }
        Ok(RingGeometry {
            version,
            unit_bytes,
            units,
        })
    }
}

enum Cursor {
    V2(v2::Cursor),
    V3(v3::Cursor),
}

/// A receive ring on one interface.
pub struct RxRing {
    // Field order: the mapping is unmapped before the socket closes.
    map: Mmap,
    cursor: Cursor,
    geometry: RingGeometry,
    fd: OwnedFd,
}

impl std::fmt::Debug for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxRing")
            .field("bytes", &self.map.len())
            .finish_non_exhaustive()
    }
}

/// A ring dimension as the kernel's request takes it.
fn ring_u32(n: usize) -> io::Result<u32> {
    u32::try_from(n).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a ring dimension of {n} is beyond what the kernel takes: give the ring fewer bytes (mcrd --ring-mb)"
            ),
        )
    })
}

/// The system's page size (ring blocks must be multiples of it).
/// The most bytes of frames too long for their V2 slots that wait on a
/// ring's socket.
const MAX_WHOLE_QUEUE: usize = 64 << 20;

/// Rounds `x` up to a multiple of `to` (a power of two).
fn align(x: usize, to: usize) -> usize {
    (x + to - 1) & !(to - 1)
}

impl RxRing {
    /// Opens a ring on interface `ifindex` that receives what `filter`
    /// lets through. With `fanout`, the socket joins (or founds) a fanout
    /// group (its program picks the member that takes each frame).
    pub fn open(ifindex: u32, cfg: &RingConfig, filter: Filter<'_>, fanout: Option<Fanout>) -> io::Result<RxRing> {
        let fd = crate::packet::raw_socket()?;
        // The relay never reads back what it sends.
        set_raw(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &1 as &libc::c_int,
        )?;
        let version = match cfg.version {
            RingVersion::V2 => libc::tpacket_versions::TPACKET_V2 as libc::c_int,
            RingVersion::V3 => libc::tpacket_versions::TPACKET_V3 as libc::c_int,
        };
        set_raw(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_VERSION, &version)?;
        let page = crate::mmap::page_size();
        let map_len = match cfg.version {
            RingVersion::V2 => {
                // Room for the header, the link-layer address and the frame.
                let frame_size = (libc::TPACKET2_HDRLEN + 16 + cfg.max_frame)
                    .next_power_of_two()
                    .max(2048);
                let block_size = frame_size.max(page) * 4;
                let blocks = (cfg.bytes / block_size).max(1);
                let req = libc::tpacket_req {
                    tp_block_size: ring_u32(block_size)?,
                    tp_block_nr: ring_u32(blocks)?,
                    tp_frame_size: ring_u32(frame_size)?,
                    tp_frame_nr: ring_u32(blocks * block_size / frame_size)?,
                };
                set_raw(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
                // A frame longer than a slot (the MTU grew since) is queued
                // on the socket whole, for the cursor to read at its slot;
                // the queue may hold as many bytes as the ring.
                set_raw(
                    fd.as_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_COPY_THRESH,
                    &1 as &libc::c_int,
                )?;
                crate::sockopt::force_recv_buffer(fd.as_fd(), cfg.bytes.min(MAX_WHOLE_QUEUE))?;
                (frame_size, blocks * block_size / frame_size)
            }
            RingVersion::V3 => {
                let block_size = align((libc::TPACKET3_HDRLEN + 16 + cfg.max_frame) * 8, page).max(1 << 17);
                let blocks = (cfg.bytes / block_size).max(2);
                let frame_size = 2048;
                let req = libc::tpacket_req3 {
                    tp_block_size: ring_u32(block_size)?,
                    tp_block_nr: ring_u32(blocks)?,
                    tp_frame_size: ring_u32(frame_size)?,
                    tp_frame_nr: ring_u32(blocks * block_size / frame_size)?,
                    tp_retire_blk_tov: cfg.block_timeout_ms.max(1),
                    tp_sizeof_priv: 0,
                    tp_feature_req_word: 0,
                };
                set_raw(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
                (block_size, blocks)
            }
        };
        let geometry = RingGeometry {
            version: cfg.version,
            unit_bytes: map_len.0,
            units: map_len.1,
        };
        let map = Mmap::shared(fd.as_fd(), map_len.0 * map_len.1)?;
        let cursor = match cfg.version {
            RingVersion::V2 => Cursor::V2(v2::Cursor::new(map_len.0, map_len.1)),
            RingVersion::V3 => Cursor::V3(v3::Cursor::new(map_len.0, map_len.1)),
        };
        // Drop everything until this socket is in its fanout group.
        crate::sockopt::drop_everything(fd.as_fd())?;
        crate::packet::bind(&fd, ifindex, crate::conv::ethertype(libc::ETH_P_ALL))?;
        if let Some(group) = fanout {
            // Without PACKET_FANOUT_FLAG_DEFRAG: MCR forwards no fragment
            // (each is counted `fragment`), so reassembling them first
            // would only make a datagram too big for the ring's frames
            // and count it `truncated` instead. A datagram's fragments
            // share their addresses, hence their hash and their worker.
            // PACKET_FANOUT_FLAG_IGNORE_OUTGOING, as the socket itself: a
            // member must ask for the same flags, which keeps a program
            // that picked the same id by chance out of the group (and
            // makes the group's word never 0, see `fanout_id`).
            let mode = libc::PACKET_FANOUT_CBPF | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
            let arg: u32 = match group {
                Fanout::Join(id) => u32::from(id) | (mode << 16),
                Fanout::Found => (mode | libc::PACKET_FANOUT_FLAG_UNIQUEID) << 16,
            };
            set_raw(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)?;
        }
        let ring = RxRing {
            map,
            cursor,
            geometry,
            fd,
        };
        ring.set_filter(filter)?;
        // Frames that reached the socket before the filter was in place were
        // dropped by the first filter; start the counters afresh.
        let _ = ring.stats();
        Ok(ring)
    }

    /// Maps the ring of a socket that another process opened (or read
    /// before), with the shape it reported, and goes on where its last
    /// reader stopped: at the frame after the last one handed back, so
    /// that nothing waiting in the ring is lost or read twice. The socket
    /// keeps its binding, fanout group and filter.
    pub fn adopt(fd: OwnedFd, geometry: RingGeometry) -> io::Result<RxRing> {
        let mut version: libc::c_int = -1;
        let mut len = crate::conv::socklen_of::<libc::c_int>();
        // SAFETY: `version` has `len` writable bytes.
        crate::check(unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_VERSION,
                (&raw mut version).cast(),
                &mut len,
            )
        })?;
        let want = match geometry.version {
            RingVersion::V2 => libc::tpacket_versions::TPACKET_V2 as libc::c_int,
            RingVersion::V3 => libc::tpacket_versions::TPACKET_V3 as libc::c_int,
        };
        if version != want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the socket's ring is not {geometry}"),
            ));
        }
        let (unit, units) = (geometry.unit_bytes, geometry.units);
        if unit % 16 != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "ring unit not aligned"));
        }
        // The kernel refuses a mapping longer than the socket's ring.
        let map = Mmap::shared(fd.as_fd(), unit * units)?;
        let cursor = match geometry.version {
            RingVersion::V2 => Cursor::V2(v2::Cursor::resume(unit, units, &map)),
            RingVersion::V3 => Cursor::V3(v3::Cursor::resume(unit, units, &map)),
        };
        Ok(RxRing {
            map,
            cursor,
            geometry,
            fd,
        })
    }

    /// Unmaps the ring and gives up the socket (to pass to another process,
    /// which maps it again with [`RxRing::adopt`]), with what it took
    /// handed back.
    pub fn into_socket(mut self) -> (RingGeometry, OwnedFd) {
        self.hand_back();
        let RxRing { map, geometry, fd, .. } = self;
        drop(map);
        (geometry, fd)
    }

    /// The id of the fanout group the socket is in, if any.
    pub fn fanout_id(&self) -> io::Result<Option<u16>> {
        fanout_id_of(self.fd.as_fd())
    }

    /// The longest Ethernet frame (headers included) that fits in one of
    /// its slots (V2) or blocks (V3), and so is read without a system call.
    pub fn slot_frame_bytes(&self) -> usize {
        // The kernel puts the frame after its header, the address and a
        // 16-byte aligned gap: 80 bytes in all for Ethernet with TPACKET_V2,
        // and a little more room than that with V3's block header.
        let before = match self.geometry.version {
            RingVersion::V2 => 80,
            RingVersion::V3 => 128,
        };
        self.geometry.unit_bytes.saturating_sub(before)
    }

    /// Its shape (for [`RxRing::adopt`]).
    pub fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    /// Replaces the filter (atomically: no frame passes unfiltered).
    pub fn set_filter(&self, filter: Filter<'_>) -> io::Result<()> {
        match filter {
            Filter::Classic(p) => crate::sockopt::attach_filter(self.fd.as_fd(), p),
            Filter::Program(p) => crate::bpf::attach_socket_filter(self.fd.as_fd(), p),
        }
    }

    /// Puts interface `ifindex` in promiscuous mode (`PACKET_MR_PROMISC`,
    /// for as long as this socket lives): for a VLAN of a trunk, whose
    /// groups the host joins on no interface and whose VLAN id no
    /// sub-interface registers, so that a NIC filtering multicast MACs or
    /// VLAN ids (`rx-vlan-filter`) still delivers them. The ingress filter
    /// keeps everything else out.
    pub fn add_promisc(&self, ifindex: u32) -> io::Result<()> {
        let mr = libc::packet_mreq {
            mr_ifindex: crate::conv::ifindex_int(ifindex),
            mr_type: libc::c_ushort::try_from(libc::PACKET_MR_PROMISC).unwrap_or_default(),
            mr_alen: 0,
            mr_address: [0; 8],
        };
        set_raw(self.fd.as_fd(), libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mr)
    }

    /// Hands every ready frame, at most `max`, to `f`, returning each slot
    /// to the kernel after `f` is done with it. Returns how many.
    pub fn for_each_ready(&mut self, max: usize, mut f: impl FnMut(&RxFrame<'_>)) -> usize {
        let n = self.take_ready(max, |frame| {
            f(frame);
            true
        });
        self.hand_back();
        n
    }

    /// Hands every ready frame, at most `max`, to `f` until it returns
    /// false, and keeps them: they go back to the kernel at
    /// [`RxRing::hand_back`] (or the next take). A reader that forwards
    /// what it took before handing it back loses nothing if it dies in
    /// between: the next reader of the ring ([`RxRing::adopt`]) reads
    /// those frames again. Returns how many.
    pub fn take_ready(&mut self, max: usize, f: impl FnMut(&RxFrame<'_>) -> bool) -> usize {
        self.hand_back();
        match &mut self.cursor {
            Cursor::V2(c) => c.take_ready(&self.map, self.fd.as_fd(), max, f),
            Cursor::V3(c) => c.take_ready(&self.map, max, f),
        }
    }

    /// Returns the frames taken since the last hand-back to the kernel.
    pub fn hand_back(&mut self) {
        match &mut self.cursor {
            Cursor::V2(c) => c.hand_back(&self.map),
            Cursor::V3(c) => c.hand_back(&self.map),
        }
    }

    /// Takes the socket's pending error, if any (`SO_ERROR`; the kernel sets
    /// ENETDOWN when the interface goes down). Until it is read, epoll keeps
    /// reporting the socket.
    pub fn take_error(&self) -> Option<io::Error> {
        crate::sockopt::take_error(self.fd.as_fd())
    }

    /// Reads (and resets) the kernel's counters for this socket.
    pub fn stats(&self) -> io::Result<RingStats> {
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = crate::conv::socklen_of::<libc::tpacket_stats_v3>();
        // SAFETY: `st` has `len` writable bytes (the V3 form is the larger;
        // V2 rings write only the first two fields).
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&raw mut st).cast(),
                &mut len,
            )
        };
        crate::check(rc)?;
        // tp_packets counts every frame that reached the socket, dropped
        // ones included.
        Ok(RingStats {
            packets: u64::from(st.tp_packets),
            drops: u64::from(st.tp_drops),
        })
    }
}

/// Gives the fanout group that the ring socket `fd` is a member of the
/// program that picks a member for each frame (`PACKET_FANOUT_DATA`): it
/// sees the frame from the network header on and returns a number, taken
/// modulo the members. It replaces the group's program at once, for every
/// member.
pub fn set_fanout_program(fd: BorrowedFd<'_>, prog: &[FilterInsn]) -> io::Result<()> {
    crate::sockopt::set_program(fd, libc::SOL_PACKET, libc::PACKET_FANOUT_DATA, prog)
}

/// What another program than MCR would do to share an interface's frames
/// with its own sockets: an AF_PACKET socket on `ifindex` that joins fanout
/// group `id` in plain hash mode (no flags). Fails with `EINVAL` if a group
/// with that id exists with other settings (such as MCR's). For tests.
pub fn join_foreign_fanout(ifindex: u32, id: u16) -> io::Result<OwnedFd> {
    let fd = crate::packet::raw_socket()?;
    crate::sockopt::drop_everything(fd.as_fd())?;
    crate::packet::bind(&fd, ifindex, crate::conv::ethertype(libc::ETH_P_ALL))?;
    let arg: u32 = u32::from(id) | (libc::PACKET_FANOUT_HASH << 16);
    set_raw(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)?;
    Ok(fd)
}

impl AsFd for RxRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The fanout group of the packet socket `fd` is a member of, if any (as
/// [`RxRing::fanout_id`], for a ring not mapped in this process).
pub fn fanout_id_of(fd: BorrowedFd<'_>) -> io::Result<Option<u16>> {
    let mut v: u32 = 0;
    let mut len = crate::conv::socklen_of::<u32>();
    // SAFETY: `v` has `len` writable bytes.
    crate::check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&raw mut v).cast(),
            &mut len,
        )
    })?;
    // The id in the low 16 bits, the mode and flags above (never all 0
    // for MCR's groups, which set a flag); 0 when in no group.
    Ok((v != 0).then_some((v & 0xffff) as u16))
}
