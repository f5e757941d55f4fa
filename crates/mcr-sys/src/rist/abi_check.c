/* The ABI guard for MCR's hand-written librist bindings (src/rist/ffi.rs).
 * build.rs compiles this file against the installed <librist/librist.h>;
 * if a mirrored struct, field or constant differs from what the Rust side
 * assumes, the build stops here instead of corrupting memory at run time.
 * The Rust side asserts the same numbers with offset_of!, and a unit test
 * (rist::ffi::tests) checks that the two lists agree line by line.
 *
 * Each line: FIELD(C type, field, C field type, byte offset),
 * SIZE(C type, bytes) or VALUE(constant, value). */

#define ABI_BINDINGS "src/rist/"
#include "../abi_check.h"
#include <librist/librist.h>

/* The API the bindings were written against (checked again at run time). */
#include <librist/version.h>
VALUE(LIBRIST_API_VERSION_MAJOR, 4);

/* struct rist_data_block (headers.h) */
SIZE(struct rist_data_block, 72);
FIELD(struct rist_data_block, payload, const void *, 0);
FIELD(struct rist_data_block, payload_len, size_t, 8);
FIELD(struct rist_data_block, ts_ntp, uint64_t, 16);
FIELD(struct rist_data_block, virt_src_port, uint16_t, 24);
FIELD(struct rist_data_block, virt_dst_port, uint16_t, 26);
FIELD(struct rist_data_block, peer, struct rist_peer *, 32);
FIELD(struct rist_data_block, flow_id, uint32_t, 40);
FIELD(struct rist_data_block, seq, uint64_t, 48);
FIELD(struct rist_data_block, flags, uint32_t, 56);
FIELD(struct rist_data_block, ref, struct rist_ref *, 64);

/* struct rist_stats_sender_peer (stats.h) */
SIZE(struct rist_stats_sender_peer, 192);
FIELD(struct rist_stats_sender_peer, cname, char[128], 0);
FIELD(struct rist_stats_sender_peer, peer_id, uint32_t, 128);
FIELD(struct rist_stats_sender_peer, bandwidth, size_t, 136);
FIELD(struct rist_stats_sender_peer, retry_bandwidth, size_t, 144);
FIELD(struct rist_stats_sender_peer, sent, uint64_t, 152);
FIELD(struct rist_stats_sender_peer, received, uint64_t, 160);
FIELD(struct rist_stats_sender_peer, retransmitted, uint64_t, 168);
FIELD(struct rist_stats_sender_peer, quality, double, 176);
FIELD(struct rist_stats_sender_peer, rtt, uint32_t, 184);

/* struct rist_stats_receiver_flow (stats.h) */
SIZE(struct rist_stats_receiver_flow, 368);
FIELD(struct rist_stats_receiver_flow, peer_count, uint32_t, 0);
FIELD(struct rist_stats_receiver_flow, cname, char[256], 4);
FIELD(struct rist_stats_receiver_flow, flow_id, uint32_t, 260);
FIELD(struct rist_stats_receiver_flow, status, int, 264);
FIELD(struct rist_stats_receiver_flow, bandwidth, size_t, 272);
FIELD(struct rist_stats_receiver_flow, retry_bandwidth, size_t, 280);
FIELD(struct rist_stats_receiver_flow, sent, uint64_t, 288);
FIELD(struct rist_stats_receiver_flow, received, uint64_t, 296);
FIELD(struct rist_stats_receiver_flow, missing, uint32_t, 304);
FIELD(struct rist_stats_receiver_flow, reordered, uint32_t, 308);
FIELD(struct rist_stats_receiver_flow, recovered, uint32_t, 312);
FIELD(struct rist_stats_receiver_flow, recovered_one_retry, uint32_t, 316);
FIELD(struct rist_stats_receiver_flow, lost, uint32_t, 320);
FIELD(struct rist_stats_receiver_flow, quality, double, 328);
FIELD(struct rist_stats_receiver_flow, min_inter_packet_spacing, uint64_t, 336);
FIELD(struct rist_stats_receiver_flow, cur_inter_packet_spacing, uint64_t, 344);
FIELD(struct rist_stats_receiver_flow, max_inter_packet_spacing, uint64_t, 352);
FIELD(struct rist_stats_receiver_flow, rtt, uint32_t, 360);

/* struct rist_stats (stats.h): the union of the two above at 24 */
#define RIST_STATS_UNION __typeof__(((struct rist_stats *)0)->stats)
SIZE(struct rist_stats, 392);
FIELD(struct rist_stats, json_size, uint32_t, 0);
FIELD(struct rist_stats, stats_json, char *, 8);
FIELD(struct rist_stats, version, uint16_t, 16);
FIELD(struct rist_stats, stats_type, enum rist_stats_type, 20);
FIELD(struct rist_stats, stats, RIST_STATS_UNION, 24);
_Static_assert(sizeof(RIST_STATS_UNION) == 368, "the union of rist_stats changed");

/* Enums */
VALUE(RIST_PROFILE_SIMPLE, 0);
VALUE(RIST_PROFILE_MAIN, 1);
VALUE(RIST_STATS_SENDER_PEER, 0);
VALUE(RIST_STATS_RECEIVER_FLOW, 1);
VALUE(RIST_LOG_DISABLE, -1);
VALUE(RIST_LOG_ERROR, 3);
VALUE(RIST_LOG_WARN, 4);
VALUE(RIST_LOG_NOTICE, 5);
VALUE(RIST_LOG_INFO, 6);
VALUE(RIST_LOG_DEBUG, 7);
VALUE(RIST_CONNECTION_ESTABLISHED, 0);
VALUE(RIST_CONNECTION_TIMED_OUT, 1);
VALUE(RIST_CLIENT_CONNECTED, 2);
VALUE(RIST_CLIENT_TIMED_OUT, 3);
VALUE(RIST_DATA_FLAGS_DISCONTINUITY, 1);
VALUE(RIST_MAX_STRING_SHORT, 128);
VALUE(RIST_MAX_STRING_LONG, 256);
