//! eBPF: loading a compiled object (its maps created, its programs
//! relocated and verified), updating maps, attaching a program to an
//! interface's tc ingress hook through a tcx link, or to a socket as its
//! filter, and running a program over a frame without sending it
//! (`BPF_PROG_TEST_RUN`, for tests).
//!
//! Every kernel object here is a file descriptor owned by a Rust value:
//! a map lives while a [`Map`] (or a program using it) does; an attachment
//! lives exactly as long as its [`Link`], so a process that exits, or is
//! killed, detaches everything it attached.

pub mod elf;
pub mod ringbuf;

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::mmap::Cells;
use elf::{ElfError, MapDef};

// bpf(2) commands and constants (linux/bpf.h; tcx from 6.6).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_TEST_RUN: libc::c_int = 10;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_PROG_QUERY: libc::c_int = 16;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_LINK_UPDATE: libc::c_int = 29;
/// `BPF_LINK_TYPE_TCX` (linux/bpf.h from 6.6; older headers lack it).
const BPF_LINK_TYPE_TCX: u32 = 11;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;
/// An inner map whose entries may number otherwise than the template's.
const BPF_F_INNER_MAP: u32 = 1 << 12;
/// The entries of the template of an array of maps (each inner map says
/// its own).
const INNER_TEMPLATE_ENTRIES: u32 = 1024;
const BPF_ANY: u64 = 0;

/// `bpf(2)` with an attribute block of plain data. Every attribute struct
/// here is laid out with no implicit padding (the kernel refuses non-zero
/// bytes it does not expect, and padding is not guaranteed zero).
fn sys_bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised #[repr(C)] struct of plain
    // integers and pointers the caller keeps valid for the call; the kernel
    // reads at most `size_of::<T>()` bytes of it and writes back only into
    // it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr).cast::<libc::c_void>(),
            crate::conv::u32_len(std::mem::size_of::<T>()),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Takes ownership of a descriptor the kernel just returned.
fn owned(rc: libc::c_long) -> io::Result<OwnedFd> {
    let fd = RawFd::try_from(rc).map_err(|_| io::Error::other(format!("bpf(2) returned {rc}, not a descriptor")))?;
    // SAFETY: a successful bpf(2) call that creates an object returns a new
    // descriptor (non-negative, checked by sys_bpf) that nothing else in
    // this process owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Why an object could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The object itself is wrong.
    #[error("the BPF object: {0}")]
    Elf(#[from] ElfError),
    /// A map could not be created.
    #[error("creating map `{name}`: {source}")]
    Map {
        /// The map.
        name: String,
        /// The kernel's error.
        source: io::Error,
    },
    /// The verifier refused a program, or the kernel cannot load it.
    #[error("loading program `{name}`: {source}{}", verifier_tail(.log))]
    Program {
        /// The program.
        name: String,
        /// The kernel's error.
        source: io::Error,
        /// The end of the verifier's log.
        log: String,
    },
    /// A program is not in the object.
    #[error("the BPF object has no program `{0}`")]
    Missing(String),
}

fn verifier_tail(log: &str) -> String {
    if log.is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = log.lines().collect();
    let tail = &lines[lines.len().saturating_sub(12)..];
    format!(" (verifier: ...\n{})", tail.join("\n"))
}

/// A BPF map.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    def: MapDef,
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

impl Map {
    /// Creates a map as `def` says, named `name` (the first 15 bytes).
    pub fn create(name: &str, def: MapDef) -> io::Result<Map> {
        Self::create_in(name, def, None)
    }

    /// An array of `entries` `u64`s, an inner map of an array of maps
    /// (with the template's flags, which an inner map must have).
    pub fn array_u64(name: &str, entries: u32) -> io::Result<Map> {
        Self::create(
            name,
            MapDef {
                map_type: BPF_MAP_TYPE_ARRAY,
                key_size: 4,
                value_size: 8,
                max_entries: entries,
                flags: BPF_F_INNER_MAP,
            },
        )
    }

    /// Creates a map; an array of maps takes its inner maps' shape from
    /// `inner`.
    fn create_in(name: &str, def: MapDef, inner: Option<BorrowedFd<'_>>) -> io::Result<Map> {
        let mut attr = MapCreateAttr {
            map_type: def.map_type,
            key_size: def.key_size,
            value_size: def.value_size,
            max_entries: def.max_entries,
            map_flags: def.flags,
            inner_map_fd: inner.map_or(0, |fd| crate::conv::fd_u32(fd.as_raw_fd())),
            ..Default::default()
        };
        for (d, s) in attr.map_name.iter_mut().zip(name.bytes().take(15)) {
            *d = s;
        }
        let fd = owned(sys_bpf(BPF_MAP_CREATE, &mut attr)?)?;
        Ok(Map { fd, def })
    }

    /// Its definition.
    pub fn def(&self) -> MapDef {
        self.def
    }

    fn check(&self, key: &[u8], value: Option<&[u8]>) -> io::Result<()> {
        let bad =
            key.len() != self.def.key_size as usize || value.is_some_and(|v| v.len() != self.def.value_size as usize);
        if bad {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "map key/value of {}/{} bytes, {}/{} expected",
                    key.len(),
                    value.map_or(0, <[u8]>::len),
                    self.def.key_size,
                    self.def.value_size
                ),
            ));
        }
        Ok(())
    }

    /// Sets `key` to `value` (creating or replacing it).
    pub fn update(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.check(key, Some(value))?;
        let mut attr = MapElemAttr {
            map_fd: crate::conv::fd_u32(self.fd.as_raw_fd()),
            key: key.as_ptr() as u64,
            value: value.as_ptr() as u64,
            flags: BPF_ANY,
            ..Default::default()
        };
        sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
    }

    /// Sets entry `index` of an array of maps to `inner`.
    pub fn set_inner(&self, index: u32, inner: &Map) -> io::Result<()> {
        let fd = crate::conv::fd_u32(inner.fd.as_raw_fd());
        self.update(&index.to_ne_bytes(), &fd.to_ne_bytes())
    }

    /// Removes `key`; true if it was there.
    pub fn delete(&self, key: &[u8]) -> io::Result<bool> {
        self.check(key, None)?;
        let mut attr = MapElemAttr {
            map_fd: crate::conv::fd_u32(self.fd.as_raw_fd()),
            key: key.as_ptr() as u64,
            ..Default::default()
        };
        match sys_bpf(BPF_MAP_DELETE_ELEM, &mut attr) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The value of `key`, if any.
    pub fn lookup(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        self.check(key, None)?;
        let mut value = vec![0u8; self.def.value_size as usize];
        let mut attr = MapElemAttr {
            map_fd: crate::conv::fd_u32(self.fd.as_raw_fd()),
            key: key.as_ptr() as u64,
            value: value.as_mut_ptr() as u64,
            ..Default::default()
        };
        match sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
            Ok(_) => Ok(Some(value)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl AsFd for MappedCounters {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsFd for Map {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An array map of `u64` made with `BPF_F_MMAPABLE`, mapped into this
/// process: programs add to its cells atomically, this process reads and
/// zeroes them with no system call.
#[derive(Debug)]
pub struct MappedCounters {
    // Field order: unmapped before the map's fd closes.
    cells: Cells,
    fd: OwnedFd,
}

impl MappedCounters {
    /// Maps `map`, which must be a mmapable array of 8-byte values.
    pub fn new(map: &Map) -> io::Result<MappedCounters> {
        let d = map.def();
        if d.value_size != 8 || d.flags & BPF_F_MMAPABLE == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "counters need a mmapable array of u64",
            ));
        }
        let fd = map.as_fd().try_clone_to_owned()?;
        // The programs touch these words only with atomic adds.
        let cells = Cells::map(fd.as_fd(), d.max_entries as usize)?;
        Ok(MappedCounters { cells, fd })
    }

    /// Maps the counters behind `fd`, a map that another process made
    /// (handed over across a restart); it must be a mmapable array of
    /// 8-byte values, which the kernel is asked.
    pub fn open(fd: OwnedFd) -> io::Result<MappedCounters> {
        let mut info = MapInfo::default();
        info_by_fd(fd.as_fd(), &mut info)?;
        if info.map_type != BPF_MAP_TYPE_ARRAY || info.value_size != 8 || info.map_flags & BPF_F_MMAPABLE == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "map {} is not a mmapable array of u64 (type {}, {}-byte values, flags {:#x})",
                    info.id, info.map_type, info.value_size, info.map_flags
                ),
            ));
        }
        let cells = Cells::map(fd.as_fd(), info.max_entries as usize)?;
        Ok(MappedCounters { cells, fd })
    }

    /// How many counters.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads counter `i` (0 if out of range).
    pub fn get(&self, i: usize) -> u64 {
        self.cells.get(i)
    }

    /// Sets counter `i` to `v`.
    pub fn set(&self, i: usize, v: u64) {
        self.cells.set(i, v);
    }
}

/// What kind of program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramKind {
    /// A socket filter (`SO_ATTACH_BPF`).
    SocketFilter,
    /// A tc classifier (tcx).
    Classifier,
}

/// A loaded, verified program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
    kind: ProgramKind,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

impl Program {
    fn load(name: &str, kind: ProgramKind, insns: &[u8], license: &str) -> Result<Program, LoadError> {
        let license = std::ffi::CString::new(license).unwrap_or_default();
        let prog_type = match kind {
            ProgramKind::SocketFilter => BPF_PROG_TYPE_SOCKET_FILTER,
            ProgramKind::Classifier => BPF_PROG_TYPE_SCHED_CLS,
        };
        let attempt = |log: &mut Vec<u8>| {
            let mut attr = ProgLoadAttr {
                prog_type,
                insn_cnt: crate::conv::u32_len(insns.len() / 8),
                insns: insns.as_ptr() as u64,
                license: license.as_ptr() as u64,
                log_level: u32::from(!log.is_empty()),
                log_size: crate::conv::u32_len(log.len()),
                log_buf: if log.is_empty() { 0 } else { log.as_mut_ptr() as u64 },
                ..Default::default()
            };
            for (d, s) in attr.prog_name.iter_mut().zip(name.bytes().take(15)) {
                *d = s;
            }
            sys_bpf(BPF_PROG_LOAD, &mut attr).and_then(owned)
        };
        match attempt(&mut Vec::new()) {
            Ok(fd) => Ok(Program { fd, kind }),
            Err(first) => {
                // Again with the verifier's log, to say why.
                let mut log = vec![0u8; 4 << 20];
                let source = attempt(&mut log).err().unwrap_or(first);
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                Err(LoadError::Program {
                    name: name.to_string(),
                    source,
                    log: String::from_utf8_lossy(&log[..end]).into_owned(),
                })
            }
        }
    }

    /// What kind it is.
    pub fn kind(&self) -> ProgramKind {
        self.kind
    }

    /// Attaches this classifier to the tc ingress hook of `ifindex`, after
    /// any programs already there. It stays attached while the returned
    /// link lives, and not a moment longer.
    pub fn attach_tcx_ingress(&self, ifindex: u32) -> io::Result<Link> {
        #[repr(C)]
        #[derive(Default)]
        struct LinkCreateAttr {
            prog_fd: u32,
            target_ifindex: u32,
            attach_type: u32,
            flags: u32,
            relative_fd: u32,
            pad: u32,
            expected_revision: u64,
        }
        let mut attr = LinkCreateAttr {
            prog_fd: crate::conv::fd_u32(self.fd.as_raw_fd()),
            target_ifindex: ifindex,
            attach_type: BPF_TCX_INGRESS,
            ..Default::default()
        };
        let fd = owned(sys_bpf(BPF_LINK_CREATE, &mut attr)?)?;
        let mut info = LinkInfo::default();
        let id = info_by_fd(fd.as_fd(), &mut info).map_or(0, |()| info.id);
        Ok(Link { fd, ifindex, id })
    }

    /// Makes this socket filter the filter of `sock` (`SO_ATTACH_BPF`),
    /// replacing any filter it had, atomically.
    pub fn attach_to_socket(&self, sock: BorrowedFd<'_>) -> io::Result<()> {
        attach_socket_filter(sock, self.fd.as_fd())
    }

    /// Runs the program once over `frame` as if it had arrived on
    /// `ifindex` (nothing is received or sent, but what the program does to
    /// maps and with redirects happens); returns its verdict and the frame
    /// as it left the program.
    pub fn test_run(&self, frame: &[u8], ifindex: u32) -> io::Result<(i32, Vec<u8>)> {
        self.test_run_timed(frame, ifindex)
            .map(|(verdict, out, _)| (verdict, out))
    }

    /// [`Program::test_run`], with the time the program took, in
    /// nanoseconds, as the kernel measured it around the run.
    pub fn test_run_timed(&self, frame: &[u8], ifindex: u32) -> io::Result<(i32, Vec<u8>, u32)> {
        #[repr(C)]
        #[derive(Default)]
        struct TestRunAttr {
            prog_fd: u32,
            retval: u32,
            data_size_in: u32,
            data_size_out: u32,
            data_in: u64,
            data_out: u64,
            repeat: u32,
            duration: u32,
            ctx_size_in: u32,
            ctx_size_out: u32,
            ctx_in: u64,
            ctx_out: u64,
            flags: u32,
            cpu: u32,
            batch_size: u32,
            // Explicit, so that it is zero: the kernel refuses non-zero
            // bytes past the last field it knows.
            pad: u32,
        }
        // struct __sk_buff up to and including `ifindex` (offset 40) and
        // `ingress_ifindex` (offset 36): the fields test runs take.
        let mut ctx = [0u32; 48];
        ctx[10] = ifindex;
        let mut out = vec![0u8; frame.len() + 256];
        let mut attr = TestRunAttr {
            prog_fd: crate::conv::fd_u32(self.fd.as_raw_fd()),
            data_size_in: crate::conv::u32_len(frame.len()),
            data_size_out: crate::conv::u32_len(out.len()),
            data_in: frame.as_ptr() as u64,
            data_out: out.as_mut_ptr() as u64,
            repeat: 1,
            ctx_size_in: if ifindex == 0 {
                0
            } else {
                crate::conv::u32_len(ctx.len() * 4)
            },
            ctx_in: if ifindex == 0 { 0 } else { ctx.as_ptr() as u64 },
            ..Default::default()
        };
        sys_bpf(BPF_PROG_TEST_RUN, &mut attr)?;
        out.truncate(attr.data_size_out as usize);
        // The verdict is the program's int return value, as the kernel stored it.
        Ok((i32::from_ne_bytes(attr.retval.to_ne_bytes()), out, attr.duration))
    }
}

impl AsFd for Program {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// How many programs are attached to the tc ingress hook (tcx) of
/// `ifindex`, by this process or any other.
pub fn tcx_ingress_programs(ifindex: u32) -> io::Result<u32> {
    Ok(crate::conv::u32_len(tcx_ingress(ifindex)?.len()))
}

/// The programs attached to the tc ingress hook (tcx) of `ifindex`, by
/// this process or any other, in the order they run (at most 64): each
/// program's id and its link's.
pub fn tcx_ingress(ifindex: u32) -> io::Result<Vec<LinkIds>> {
    #[repr(C)]
    #[derive(Default)]
    struct QueryAttr {
        target_ifindex: u32,
        attach_type: u32,
        query_flags: u32,
        attach_flags: u32,
        prog_ids: u64,
        prog_cnt: u32,
        pad: u32,
        prog_attach_flags: u64,
        link_ids: u64,
        link_attach_flags: u64,
        revision: u64,
    }
    let mut progs = [0u32; 64];
    let mut links = [0u32; 64];
    let mut attr = QueryAttr {
        target_ifindex: ifindex,
        attach_type: BPF_TCX_INGRESS,
        prog_ids: progs.as_mut_ptr() as u64,
        prog_cnt: crate::conv::u32_len(progs.len()),
        link_ids: links.as_mut_ptr() as u64,
        ..Default::default()
    };
    sys_bpf(BPF_PROG_QUERY, &mut attr)?;
    let n = (attr.prog_cnt as usize).min(progs.len());
    Ok((0..n)
        .map(|i| LinkIds {
            link: links[i],
            program: progs[i],
        })
        .collect())
}

/// Attaches the BPF socket filter program `prog` to `sock`.
pub fn attach_socket_filter(sock: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    let raw: libc::c_int = prog.as_raw_fd();
    crate::sockopt::set_raw(sock, libc::SOL_SOCKET, libc::SO_ATTACH_BPF, &raw)
}

/// A program attached to an interface; dropping it detaches the program,
/// unless another process holds a copy of its descriptor (as systemd's
/// file-descriptor store or the next mcrd does across a restart).
#[derive(Debug)]
pub struct Link {
    /// The attachment lasts as long as a descriptor of it does.
    fd: OwnedFd,
    ifindex: u32,
    /// The kernel's id of the link (0 if it could not be read).
    id: u32,
}

/// `struct bpf_link_info` as far as a tcx link fills it: the union of
/// per-type fields starts at offset 16 (it holds 8-byte members).
#[repr(C)]
#[derive(Default)]
struct LinkInfo {
    link_type: u32,
    id: u32,
    prog_id: u32,
    pad: u32,
    tcx_ifindex: u32,
    tcx_attach_type: u32,
    rest: [u64; 6],
}

/// The head of `struct bpf_map_info`.
#[repr(C)]
#[derive(Default)]
struct MapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Fills `info` (a `#[repr(C)]` struct of plain integers, zeroed) with
/// what `BPF_OBJ_GET_INFO_BY_FD` says of the object behind `fd` (as much
/// of the kernel's structure as `T` holds).
fn info_by_fd<T>(fd: BorrowedFd<'_>, info: &mut T) -> io::Result<()> {
    let mut attr = InfoAttr {
        bpf_fd: crate::conv::fd_u32(fd.as_raw_fd()),
        info_len: crate::conv::u32_len(std::mem::size_of::<T>()),
        info: std::ptr::from_mut(info) as u64,
    };
    sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).map(|_| ())
}

/// The kernel's ids of a link and of the program it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkIds {
    /// The link's.
    pub link: u32,
    /// Its program's.
    pub program: u32,
}

impl Link {
    /// The interface it is attached to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The kernel's id of the link: two descriptors of one link have the
    /// same.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Takes a link another process made (handed over by systemd's
    /// file-descriptor store or a previous mcrd): it must be a tcx ingress
    /// link; says what it is otherwise.
    pub fn adopt(fd: OwnedFd) -> io::Result<Link> {
        let mut info = LinkInfo::default();
        info_by_fd(fd.as_fd(), &mut info)?;
        if info.link_type != BPF_LINK_TYPE_TCX || info.tcx_attach_type != BPF_TCX_INGRESS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "not a tc ingress link (link type {}, attach type {})",
                    info.link_type, info.tcx_attach_type
                ),
            ));
        }
        Ok(Link {
            fd,
            ifindex: info.tcx_ifindex,
            id: info.id,
        })
    }

    /// The ids of the link and of the program it runs now.
    pub fn ids(&self) -> io::Result<LinkIds> {
        let mut info = LinkInfo::default();
        info_by_fd(self.fd.as_fd(), &mut info)?;
        Ok(LinkIds {
            link: info.id,
            program: info.prog_id,
        })
    }

    /// Makes the link run `program` instead, atomically: every frame meets
    /// either the program before or `program`, never neither.
    pub fn update(&self, program: &Program) -> io::Result<()> {
        #[repr(C)]
        #[derive(Default)]
        struct LinkUpdateAttr {
            link_fd: u32,
            new_prog_fd: u32,
            flags: u32,
            old_prog_fd: u32,
        }
        let mut attr = LinkUpdateAttr {
            link_fd: crate::conv::fd_u32(self.fd.as_raw_fd()),
            new_prog_fd: crate::conv::fd_u32(program.fd.as_raw_fd()),
            ..Default::default()
        };
        sys_bpf(BPF_LINK_UPDATE, &mut attr).map(|_| ())
    }
}

impl AsFd for Link {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A loaded object: its maps by name and its programs by name.
#[derive(Debug)]
pub struct Object {
    maps: BTreeMap<String, Map>,
    programs: BTreeMap<String, Program>,
}

impl Object {
    /// Loads the BPF object `file`: creates each map (with the entries
    /// `sizes` gives by name instead of the object's), relocates each
    /// program onto them, and loads and verifies it (a `socket` section is a
    /// socket filter, anything else a tc classifier).
    pub fn load(file: &[u8], sizes: &[(&str, u32)]) -> Result<Object, LoadError> {
        let obj = elf::parse(file)?;
        let mut maps = BTreeMap::new();
        for (name, def) in &obj.maps {
            let mut def = *def;
            if let Some(&(_, n)) = sizes.iter().find(|(m, _)| m == name) {
                def.max_entries = n;
            }
            let err = |source| LoadError::Map {
                name: name.clone(),
                source,
            };
            // An array of maps holds arrays of u64 of any length (the
            // template's shape; each inner map has its own length).
            let m = if def.map_type == BPF_MAP_TYPE_ARRAY_OF_MAPS {
                let template = Map::create(
                    name,
                    MapDef {
                        map_type: BPF_MAP_TYPE_ARRAY,
                        key_size: 4,
                        value_size: 8,
                        max_entries: INNER_TEMPLATE_ENTRIES,
                        flags: BPF_F_INNER_MAP,
                    },
                )
                .map_err(err)?;
                Map::create_in(name, def, Some(template.as_fd())).map_err(err)?
            } else {
                Map::create(name, def).map_err(err)?
            };
            maps.insert(name.clone(), m);
        }
        let mut programs = BTreeMap::new();
        for p in &obj.programs {
            let mut insns = p.insns.clone();
            for (at, map) in &p.map_refs {
                let fd = maps
                    .get(map)
                    .ok_or_else(|| LoadError::Missing(map.clone()))?
                    .fd
                    .as_raw_fd();
                let i = at * 8;
                let insn = insns
                    .get_mut(i..i + 8)
                    .ok_or(LoadError::Elf(ElfError::Short("relocation")))?;
                // src_reg (high nibble of byte 1) = BPF_PSEUDO_MAP_FD; imm = fd.
                insn[1] = (insn[1] & 0x0f) | (BPF_PSEUDO_MAP_FD << 4);
                insn[4..8].copy_from_slice(&fd.to_le_bytes());
            }
            let kind = if p.section == "socket" {
                ProgramKind::SocketFilter
            } else {
                ProgramKind::Classifier
            };
            programs.insert(p.name.clone(), Program::load(&p.name, kind, &insns, &obj.license)?);
        }
        Ok(Object { maps, programs })
    }

    /// The map called `name`.
    pub fn map(&self, name: &str) -> Option<&Map> {
        self.maps.get(name)
    }

    /// The program called `name`.
    pub fn program(&self, name: &str) -> Result<&Program, LoadError> {
        self.programs
            .get(name)
            .ok_or_else(|| LoadError::Missing(name.to_string()))
    }
}
