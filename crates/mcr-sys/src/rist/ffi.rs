//! The part of librist's C API (0.2.x, API 4, `/usr/include/librist/`)
//! that MCR uses, written by hand like the libsrt bindings: the names are
//! the C names, so a reader can grep the headers for them.
//!
//! Every struct and constant mirrored here is also asserted in
//! `abi_check.c`, which `build.rs` compiles against the installed headers
//! (see [`crate::cabi`]).

// The C names are kept on purpose; not every constant and field of a
// mirrored struct is read.
#![allow(non_snake_case, non_camel_case_types, dead_code)]

use libc::{c_char, c_int, c_void};

use crate::cabi::{c_consts, c_struct};

/// `struct rist_ctx`: a sender or a receiver (opaque).
#[repr(C)]
pub(crate) struct rist_ctx {
    _private: [u8; 0],
}

/// `struct rist_peer` (opaque).
#[repr(C)]
pub(crate) struct rist_peer {
    _private: [u8; 0],
}

/// `struct rist_peer_config` (opaque here: only librist fills and reads
/// it, from a URL, [`rist_parse_address2`]).
#[repr(C)]
pub(crate) struct rist_peer_config {
    _private: [u8; 0],
}

/// `struct rist_logging_settings` (opaque here: made by
/// [`rist_logging_set`]).
#[repr(C)]
pub(crate) struct rist_logging_settings {
    _private: [u8; 0],
}

/// `struct rist_ref` (opaque).
#[repr(C)]
pub(crate) struct rist_ref {
    _private: [u8; 0],
}

c_struct! {
    /// `struct rist_data_block` (headers.h): one datagram, handed to
    /// `rist_sender_data_write` or taken from `rist_receiver_data_read2`.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct rist_data_block as "struct rist_data_block", size 72 {
        payload: *const c_void = 0 as "const void *",
        payload_len: usize = 8 as "size_t",
        ts_ntp: u64 = 16 as "uint64_t",
        virt_src_port: u16 = 24 as "uint16_t",
        virt_dst_port: u16 = 26 as "uint16_t",
        peer: *mut rist_peer = 32 as "struct rist_peer *",
        flow_id: u32 = 40 as "uint32_t",
        seq: u64 = 48 as "uint64_t",
        flags: u32 = 56 as "uint32_t",
        r#ref: *mut rist_ref = 64 as "struct rist_ref *",
    }
}

c_struct! {
    /// `struct rist_stats_sender_peer` (stats.h): one peer of a sender.
    #[derive(Clone, Copy)]
    pub(crate) struct rist_stats_sender_peer as "struct rist_stats_sender_peer", size 192 {
        cname: [c_char; 128] = 0 as "char[128]",
        peer_id: u32 = 128 as "uint32_t",
        bandwidth: usize = 136 as "size_t",
        retry_bandwidth: usize = 144 as "size_t",
        sent: u64 = 152 as "uint64_t",
        received: u64 = 160 as "uint64_t",
        retransmitted: u64 = 168 as "uint64_t",
        quality: f64 = 176 as "double",
        rtt: u32 = 184 as "uint32_t",
    }
}

c_struct! {
    /// `struct rist_stats_receiver_flow` (stats.h): one flow a receiver
    /// takes (from one or more peers).
    #[derive(Clone, Copy)]
    pub(crate) struct rist_stats_receiver_flow as "struct rist_stats_receiver_flow", size 368 {
        peer_count: u32 = 0 as "uint32_t",
        cname: [c_char; 256] = 4 as "char[256]",
        flow_id: u32 = 260 as "uint32_t",
        status: c_int = 264 as "int",
        bandwidth: usize = 272 as "size_t",
        retry_bandwidth: usize = 280 as "size_t",
        sent: u64 = 288 as "uint64_t",
        received: u64 = 296 as "uint64_t",
        missing: u32 = 304 as "uint32_t",
        reordered: u32 = 308 as "uint32_t",
        recovered: u32 = 312 as "uint32_t",
        recovered_one_retry: u32 = 316 as "uint32_t",
        lost: u32 = 320 as "uint32_t",
        quality: f64 = 328 as "double",
        min_inter_packet_spacing: u64 = 336 as "uint64_t",
        cur_inter_packet_spacing: u64 = 344 as "uint64_t",
        max_inter_packet_spacing: u64 = 352 as "uint64_t",
        rtt: u32 = 360 as "uint32_t",
    }
}

/// The union in `struct rist_stats`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union rist_stats_union {
    pub(crate) sender_peer: rist_stats_sender_peer,
    pub(crate) receiver_flow: rist_stats_receiver_flow,
}

c_struct! {
    /// `struct rist_stats` (stats.h): what the statistics callback gets;
    /// `stats_type` says which member of the union is filled.
    pub(crate) struct rist_stats as "struct rist_stats", size 392 {
        json_size: u32 = 0 as "uint32_t",
        stats_json: *mut c_char = 8 as "char *",
        version: u16 = 16 as "uint16_t",
        stats_type: c_int = 20 as "enum rist_stats_type",
        stats: rist_stats_union = 24 as "RIST_STATS_UNION",
    }
}

c_consts!(CONSTS {
    LIBRIST_API_VERSION_MAJOR: u32 = 4;
    RIST_PROFILE_SIMPLE: c_int = 0;
    RIST_PROFILE_MAIN: c_int = 1;
    RIST_STATS_SENDER_PEER: c_int = 0;
    RIST_STATS_RECEIVER_FLOW: c_int = 1;
    RIST_LOG_DISABLE: c_int = -1;
    RIST_LOG_ERROR: c_int = 3;
    RIST_LOG_WARN: c_int = 4;
    RIST_LOG_NOTICE: c_int = 5;
    RIST_LOG_INFO: c_int = 6;
    RIST_LOG_DEBUG: c_int = 7;
    RIST_CONNECTION_ESTABLISHED: c_int = 0;
    RIST_CONNECTION_TIMED_OUT: c_int = 1;
    RIST_CLIENT_CONNECTED: c_int = 2;
    RIST_CLIENT_TIMED_OUT: c_int = 3;
    RIST_DATA_FLAGS_DISCONTINUITY: u32 = 1;
    RIST_MAX_STRING_SHORT: usize = 128;
    RIST_MAX_STRING_LONG: usize = 256;
});

/// `int (*log_cb)(void *arg, enum rist_log_level, const char *msg)`.
pub(crate) type rist_log_cb = unsafe extern "C" fn(arg: *mut c_void, level: c_int, msg: *const c_char) -> c_int;
/// `int (*stats_cb)(void *arg, const struct rist_stats *)`.
pub(crate) type rist_stats_cb = unsafe extern "C" fn(arg: *mut c_void, stats: *const rist_stats) -> c_int;
/// `connection_status_callback_t`.
pub(crate) type connection_status_callback_t =
    unsafe extern "C" fn(arg: *mut c_void, peer: *mut rist_peer, status: c_int);
/// `rist_auth_handler_connect_cb`.
pub(crate) type rist_auth_handler_connect_cb = unsafe extern "C" fn(
    arg: *mut c_void,
    conn_ip: *const c_char,
    conn_port: u16,
    local_ip: *const c_char,
    local_port: u16,
    peer: *mut rist_peer,
) -> c_int;
/// `rist_auth_handler_disconnect_cb`.
pub(crate) type rist_auth_handler_disconnect_cb = unsafe extern "C" fn(arg: *mut c_void, peer: *mut rist_peer) -> c_int;

// SAFETY: each declaration is copied from librist 0.2.7's headers (the
// file is named), and the structs they take are checked by abi_check.c;
// build.rs links the system librist found by pkg-config.
unsafe extern "C" {
    // version.h / librist.h
    pub(crate) fn librist_version() -> *const c_char;
    pub(crate) fn librist_api_version() -> *const c_char;

    // logging.h
    pub(crate) fn rist_logging_set(
        logging_settings: *mut *mut rist_logging_settings,
        log_level: c_int,
        log_cb: Option<rist_log_cb>,
        cb_arg: *mut c_void,
        address: *mut c_char,
        logfp: *mut libc::FILE,
    ) -> c_int;
    pub(crate) fn rist_logging_settings_free2(logging_settings: *mut *mut rist_logging_settings) -> c_int;

    // sender.h / receiver.h
    pub(crate) safe fn rist_flow_id_create() -> u32;
    pub(crate) fn rist_sender_create(
        ctx: *mut *mut rist_ctx,
        profile: c_int,
        flow_id: u32,
        logging_settings: *mut rist_logging_settings,
    ) -> c_int;
    pub(crate) fn rist_sender_data_write(ctx: *mut rist_ctx, data_block: *const rist_data_block) -> c_int;
    pub(crate) fn rist_receiver_create(
        ctx: *mut *mut rist_ctx,
        profile: c_int,
        logging_settings: *mut rist_logging_settings,
    ) -> c_int;
    pub(crate) fn rist_receiver_data_read2(
        ctx: *mut rist_ctx,
        data_block: *mut *mut rist_data_block,
        timeout: c_int,
    ) -> c_int;
    pub(crate) fn rist_receiver_data_block_free2(block: *mut *mut rist_data_block);

    // peer.h
    pub(crate) fn rist_parse_address2(url: *const c_char, peer_config: *mut *mut rist_peer_config) -> c_int;
    pub(crate) fn rist_peer_config_free2(peer_config: *mut *mut rist_peer_config) -> c_int;
    pub(crate) fn rist_peer_create(
        ctx: *mut rist_ctx,
        peer: *mut *mut rist_peer,
        config: *const rist_peer_config,
    ) -> c_int;
    pub(crate) fn rist_connection_status_callback_set(
        ctx: *mut rist_ctx,
        cb: Option<connection_status_callback_t>,
        arg: *mut c_void,
    ) -> c_int;
    pub(crate) fn rist_auth_handler_set(
        ctx: *mut rist_ctx,
        connect_cb: Option<rist_auth_handler_connect_cb>,
        disconnect_cb: Option<rist_auth_handler_disconnect_cb>,
        arg: *mut c_void,
    ) -> c_int;

    // stats.h
    pub(crate) fn rist_stats_callback_set(
        ctx: *mut rist_ctx,
        statsinterval: c_int,
        stats_cb: Option<rist_stats_cb>,
        arg: *mut c_void,
    ) -> c_int;
    pub(crate) fn rist_stats_free(stats_container: *const rist_stats) -> c_int;

    // librist.h
    pub(crate) fn rist_start(ctx: *mut rist_ctx) -> c_int;
    pub(crate) fn rist_destroy(ctx: *mut rist_ctx) -> c_int;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cabi::check;

    const ABI_CHECK_C: &str = include_str!("abi_check.c");

    /// The Rust type each C field type must be mirrored with.
    fn rust_type_for(c_type: &str) -> &'static str {
        match c_type {
            "int" | "enum rist_stats_type" => "c_int",
            "uint16_t" => "u16",
            "uint32_t" => "u32",
            "uint64_t" => "u64",
            "double" => "f64",
            "size_t" => "usize",
            "const void *" => "*const c_void",
            "char *" => "*mut c_char",
            "char[128]" => "[c_char; 128]",
            "char[256]" => "[c_char; 256]",
            "struct rist_peer *" => "*mut rist_peer",
            "struct rist_ref *" => "*mut rist_ref",
            "RIST_STATS_UNION" => "rist_stats_union",
            other => panic!("no Rust type known for C type `{other}`"),
        }
    }

    #[test]
    fn structs_match_abi_check_c() {
        let layouts = [
            rist_data_block::LAYOUT,
            rist_stats_sender_peer::LAYOUT,
            rist_stats_receiver_flow::LAYOUT,
            rist_stats::LAYOUT,
        ];
        check::structs_match(ABI_CHECK_C, &layouts, rust_type_for);
    }

    #[test]
    fn constants_match_abi_check_c() {
        check::constants_match(ABI_CHECK_C, CONSTS);
    }
}
