//! The part of libsrt's C API (1.5.x, `/usr/include/srt/srt.h`) that MCR
//! uses, written by hand: no bindgen, no vendored library. The names are
//! the C names, so a reader can grep the header for them.
//!
//! Every struct and constant mirrored here is also asserted in
//! `abi_check.c`, which `build.rs` compiles against the installed header:
//! a header that differs stops the build. The Rust side asserts the same
//! offsets at compile time ([`c_struct!`]), and the tests at the bottom
//! check that the two files list the same things with the same numbers.

// The C names are kept on purpose; not every constant and field of a
// mirrored struct is read.
#![allow(non_snake_case, non_camel_case_types, dead_code, clippy::upper_case_acronyms)]

use libc::{c_char, c_int, c_void, sockaddr};

/// `SRTSOCKET`: a socket id (not a file descriptor).
pub(crate) type SRTSOCKET = i32;

/// `SRT_INVALID_SOCK` and `SRT_ERROR` (both `static const` in the header,
/// which C cannot use in a static assertion; they are -1 in every release).
pub(crate) const SRT_INVALID_SOCK: SRTSOCKET = -1;
pub(crate) const SRT_ERROR: c_int = -1;

use crate::cabi::{c_consts, c_struct};

c_struct! {
    /// `SRT_MSGCTRL` (srt.h:786-797): per-message parameters of
    /// `srt_sendmsg2`/`srt_recvmsg2`.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct SRT_MSGCTRL as "SRT_MSGCTRL", size 48 {
        flags: c_int = 0 as "int",
        msgttl: c_int = 4 as "int",
        inorder: c_int = 8 as "int",
        boundary: c_int = 12 as "int",
        srctime: i64 = 16 as "int64_t",
        pktseq: i32 = 24 as "int32_t",
        msgno: i32 = 28 as "int32_t",
        grpdata: *mut c_void = 32 as "SRT_SOCKGROUPDATA *",
        grpdata_size: usize = 40 as "size_t",
    }
}

c_struct! {
    /// `SRT_EPOLL_EVENT` (srt.h:883-890): one ready socket from
    /// `srt_epoll_uwait`.
    #[derive(Debug, Clone, Copy, Default)]
    pub(crate) struct SRT_EPOLL_EVENT as "SRT_EPOLL_EVENT", size 8 {
        fd: SRTSOCKET = 0 as "SRTSOCKET",
        events: c_int = 4 as "int",
    }
}

pub(crate) use super::perfmon::SRT_TRACEBSTATS;

c_consts!(CONSTS {
    // The version the bindings were written for.
    SRT_VERSION_MAJOR: u32 = 1;
    SRT_VERSION_MINOR: u32 = 5;

    // SRT_SOCKOPT (srt.h:179-243)
    SRTO_SNDSYN: c_int = 1;
    SRTO_RCVSYN: c_int = 2;
    SRTO_SNDBUF: c_int = 5;
    SRTO_RCVBUF: c_int = 6;
    SRTO_MAXBW: c_int = 16;
    SRTO_LATENCY: c_int = 23;
    SRTO_PASSPHRASE: c_int = 26;
    SRTO_PBKEYLEN: c_int = 27;
    SRTO_CONNTIMEO: c_int = 36;
    SRTO_RCVLATENCY: c_int = 43;
    SRTO_PEERLATENCY: c_int = 44;
    SRTO_STREAMID: c_int = 46;
    SRTO_PAYLOADSIZE: c_int = 49;
    SRTO_TRANSTYPE: c_int = 50;
    SRTO_PEERIDLETIMEO: c_int = 55;

    // SRT_TRANSTYPE
    SRTT_LIVE: c_int = 0;

    // SRT_SOCKSTATUS (srt.h:165-174)
    SRTS_INIT: c_int = 1;
    SRTS_OPENED: c_int = 2;
    SRTS_LISTENING: c_int = 3;
    SRTS_CONNECTING: c_int = 4;
    SRTS_CONNECTED: c_int = 5;
    SRTS_BROKEN: c_int = 6;
    SRTS_CLOSING: c_int = 7;
    SRTS_CLOSED: c_int = 8;
    SRTS_NONEXIST: c_int = 9;

    // SRT_ERRNO (srt.h:482-530)
    SRT_EUNKNOWN: c_int = -1;
    SRT_SUCCESS: c_int = 0;
    SRT_ECONNSETUP: c_int = 1000;
    SRT_ENOSERVER: c_int = 1001;
    SRT_ECONNREJ: c_int = 1002;
    SRT_ESCLOSED: c_int = 1005;
    SRT_ECONNFAIL: c_int = 2000;
    SRT_ECONNLOST: c_int = 2001;
    SRT_ENOCONN: c_int = 2002;
    SRT_EINVPARAM: c_int = 5003;
    SRT_EINVSOCK: c_int = 5004;
    SRT_ELARGEMSG: c_int = 5012;
    SRT_EASYNCFAIL: c_int = 6000;
    SRT_EASYNCSND: c_int = 6001;
    SRT_EASYNCRCV: c_int = 6002;
    SRT_ETIMEOUT: c_int = 6003;

    // SRT_REJECT_REASON (srt.h:537-558) and the code categories
    SRT_REJ_UNKNOWN: c_int = 0;
    SRT_REJ_PEER: c_int = 2;
    SRT_REJ_BACKLOG: c_int = 5;
    SRT_REJ_CLOSE: c_int = 7;
    SRT_REJ_BADSECRET: c_int = 10;
    SRT_REJ_UNSECURE: c_int = 11;
    SRT_REJ_TIMEOUT: c_int = 16;
    SRT_REJC_PREDEFINED: c_int = 1000;
    SRT_REJC_USERDEFINED: c_int = 2000;

    // access_control.h
    SRT_REJX_FALLBACK: c_int = 1000;
    SRT_REJX_BAD_REQUEST: c_int = 1400;
    SRT_REJX_UNAUTHORIZED: c_int = 1401;
    SRT_REJX_OVERLOAD: c_int = 1402;
    SRT_REJX_FORBIDDEN: c_int = 1403;
    SRT_REJX_NOTFOUND: c_int = 1404;
    SRT_REJX_BAD_MODE: c_int = 1405;
    SRT_REJX_UNACCEPTABLE: c_int = 1406;
    SRT_REJX_CONFLICT: c_int = 1409;
    SRT_REJX_NOTSUP_MEDIA: c_int = 1415;
    SRT_REJX_LOCKED: c_int = 1423;
    SRT_REJX_FAILED_DEPEND: c_int = 1424;
    SRT_REJX_ISE: c_int = 1500;
    SRT_REJX_UNIMPLEMENTED: c_int = 1501;
    SRT_REJX_GW: c_int = 1502;
    SRT_REJX_DOWN: c_int = 1503;
    SRT_REJX_VERSION: c_int = 1505;
    SRT_REJX_NOROOM: c_int = 1507;

    // SRT_EPOLL_OPT, SRT_EPOLL_FLAGS (srt.h:660-725)
    SRT_EPOLL_IN: u32 = 0x1;
    SRT_EPOLL_OUT: u32 = 0x4;
    SRT_EPOLL_ERR: u32 = 0x8;
    SRT_EPOLL_ET: u32 = 0x8000_0000;
    SRT_EPOLL_ENABLE_EMPTY: i32 = 1;

    // Log levels (syslog's) and flags (logging_api.h)
    LOG_CRIT: c_int = 2;
    LOG_ERR: c_int = 3;
    LOG_WARNING: c_int = 4;
    LOG_NOTICE: c_int = 5;
    LOG_DEBUG: c_int = 7;
    SRT_LOGF_DISABLE_TIME: c_int = 1;
    SRT_LOGF_DISABLE_THREADNAME: c_int = 2;
    SRT_LOGF_DISABLE_SEVERITY: c_int = 4;
    SRT_LOGF_DISABLE_EOL: c_int = 8;
});

/// `srt_listen_callback_fn` (srt.h:765).
pub(crate) type srt_listen_callback_fn = unsafe extern "C" fn(
    opaq: *mut c_void,
    ns: SRTSOCKET,
    hsversion: c_int,
    peeraddr: *const sockaddr,
    streamid: *const c_char,
) -> c_int;

/// `SRT_LOG_HANDLER_FN` (logging_api.h:49).
pub(crate) type SRT_LOG_HANDLER_FN = unsafe extern "C" fn(
    opaque: *mut c_void,
    level: c_int,
    file: *const c_char,
    line: c_int,
    area: *const c_char,
    message: *const c_char,
);

// SAFETY: each declaration is copied from srt.h of libsrt 1.5.1 (the line
// numbers are given) and the structs they take are checked by abi_check.c;
// build.rs links the system libsrt found by pkg-config. Functions that take
// and return only integers are declared `safe`: libsrt looks up every socket
// and epoll id it is given and returns an error for an unknown one, so no
// argument value can make them touch memory they should not.
unsafe extern "C" {
    // Library (srt.h:744, 917, 897-905)
    pub(crate) safe fn srt_startup() -> c_int;
    pub(crate) safe fn srt_getversion() -> u32;
    pub(crate) safe fn srt_setloglevel(ll: c_int);
    pub(crate) safe fn srt_setlogflags(flags: c_int);
    pub(crate) fn srt_setloghandler(opaque: *mut c_void, handler: Option<SRT_LOG_HANDLER_FN>);

    // Sockets (srt.h:754-782)
    pub(crate) safe fn srt_create_socket() -> SRTSOCKET;
    pub(crate) fn srt_bind(u: SRTSOCKET, name: *const sockaddr, namelen: c_int) -> c_int;
    /// Takes ownership of `sys_udp_sock` when it succeeds (see
    /// `SrtSocket::bind_acquire`), so it is not `safe`.
    pub(crate) fn srt_bind_acquire(u: SRTSOCKET, sys_udp_sock: c_int) -> c_int;
    pub(crate) safe fn srt_listen(u: SRTSOCKET, backlog: c_int) -> c_int;
    pub(crate) fn srt_accept(u: SRTSOCKET, addr: *mut sockaddr, addrlen: *mut c_int) -> SRTSOCKET;
    pub(crate) fn srt_listen_callback(
        lsn: SRTSOCKET,
        hook_fn: Option<srt_listen_callback_fn>,
        hook_opaque: *mut c_void,
    ) -> c_int;
    pub(crate) fn srt_connect(u: SRTSOCKET, name: *const sockaddr, namelen: c_int) -> c_int;
    pub(crate) safe fn srt_close(u: SRTSOCKET) -> c_int;
    pub(crate) fn srt_getpeername(u: SRTSOCKET, name: *mut sockaddr, namelen: *mut c_int) -> c_int;
    pub(crate) fn srt_getsockname(u: SRTSOCKET, name: *mut sockaddr, namelen: *mut c_int) -> c_int;
    pub(crate) fn srt_getsockflag(u: SRTSOCKET, opt: c_int, optval: *mut c_void, optlen: *mut c_int) -> c_int;
    pub(crate) fn srt_setsockflag(u: SRTSOCKET, opt: c_int, optval: *const c_void, optlen: c_int) -> c_int;
    pub(crate) safe fn srt_getsockstate(u: SRTSOCKET) -> c_int;

    // Data (srt.h:813-845)
    pub(crate) static srt_msgctrl_default: SRT_MSGCTRL;
    pub(crate) fn srt_sendmsg2(u: SRTSOCKET, buf: *const c_char, len: c_int, mctrl: *mut SRT_MSGCTRL) -> c_int;
    pub(crate) fn srt_recvmsg2(u: SRTSOCKET, buf: *mut c_char, len: c_int, mctrl: *mut SRT_MSGCTRL) -> c_int;

    // Errors (srt.h:853-857). The error state is per thread;
    // srt_getlasterror_str is thread safe, srt_strerror is not (not bound).
    pub(crate) fn srt_getlasterror_str() -> *const c_char;
    pub(crate) fn srt_getlasterror(errno_loc: *mut c_int) -> c_int;
    pub(crate) safe fn srt_clearlasterror();

    // Statistics (srt.h:863-865)
    pub(crate) fn srt_bistats(u: SRTSOCKET, perf: *mut SRT_TRACEBSTATS, clear: c_int, instantaneous: c_int) -> c_int;

    // Epoll (srt.h:870-895)
    pub(crate) safe fn srt_epoll_create() -> c_int;
    pub(crate) fn srt_epoll_add_usock(eid: c_int, u: SRTSOCKET, events: *const c_int) -> c_int;
    pub(crate) fn srt_epoll_update_usock(eid: c_int, u: SRTSOCKET, events: *const c_int) -> c_int;
    pub(crate) safe fn srt_epoll_remove_usock(eid: c_int, u: SRTSOCKET) -> c_int;
    pub(crate) fn srt_epoll_uwait(eid: c_int, fdsSet: *mut SRT_EPOLL_EVENT, fdsSize: c_int, msTimeOut: i64) -> c_int;
    pub(crate) safe fn srt_epoll_set(eid: c_int, flags: i32) -> i32;
    pub(crate) safe fn srt_epoll_release(eid: c_int) -> c_int;

    // Rejection (srt.h:909-915)
    pub(crate) safe fn srt_getrejectreason(sock: SRTSOCKET) -> c_int;
    pub(crate) safe fn srt_setrejectreason(sock: SRTSOCKET, value: c_int) -> c_int;
    pub(crate) fn srt_rejectreason_str(id: c_int) -> *const c_char;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cabi::check;

    const ABI_CHECK_C: &str = include_str!("abi_check.c");

    /// The Rust type each C field type must be mirrored with.
    fn rust_type_for(c_type: &str) -> &'static str {
        match c_type {
            "int" => "c_int",
            "int32_t" => "i32",
            "int64_t" => "i64",
            "uint64_t" => "u64",
            "double" => "f64",
            "size_t" => "usize",
            "SRTSOCKET" => "SRTSOCKET",
            "SRT_SOCKGROUPDATA *" => "*mut c_void",
            other => panic!("no Rust type known for C type `{other}`"),
        }
    }

    #[test]
    fn structs_match_abi_check_c() {
        let layouts = [SRT_MSGCTRL::LAYOUT, SRT_EPOLL_EVENT::LAYOUT, SRT_TRACEBSTATS::LAYOUT];
        check::structs_match(ABI_CHECK_C, &layouts, rust_type_for);
        // The whole of SRT_TRACEBSTATS is mirrored, as in the header.
        assert_eq!(SRT_TRACEBSTATS::LAYOUT.2.len(), 82);
    }

    #[test]
    fn constants_match_abi_check_c() {
        check::constants_match(ABI_CHECK_C, CONSTS);
    }
}
