// SPDX-License-Identifier: Apache-2.0
//
// MCR's in-kernel data path: two programs over one set of maps.
//
// `mcr_ingress` runs at the tc ingress hook (tcx) of every input
// interface. A frame that is a clean UDP datagram (no IP options, not a
// fragment, lengths and the IPv4 header checksum right, UDP straight after
// the fixed IPv6 header) and that a fast rule takes is forwarded here: for
// each output the headers are rewritten in place (MACs, addresses, port,
// TTL or hop limit, DSCP, VLAN tag, checksums updated incrementally; for
// an output of the other IP version, the frame made one of that version
// first, see `translate`) and a clone goes to each output interface, whose
// answer (sent, queue full, error) is counted for that output. The frame
// itself is then dropped
// (TCX_DROP), so nothing of it reaches the host's IP stack, unless a local
// socket listens on its port: then its headers are put back and it goes
// on up the stack as if MCR were not there. Everything else goes on
// untouched (TCX_NEXT).
//
// `mcr_ring_filter` is the socket filter of the workers' AF_PACKET rings,
// which see every frame before tc does: it keeps out exactly the frames
// `mcr_ingress` forwards (the same parse and the same lookup decide), and
// lets in what the workers take: frames to groups beyond link-local scope,
// UDP to the unicast addresses rules take, untagged or on the VLANs rules
// take. So every frame is forwarded, or counted by reason, by exactly one
// of the two paths.
//
// Both load for a process with only CAP_BPF, CAP_NET_ADMIN and CAP_NET_RAW
// (mcrd under its systemd unit), whose verifier is stricter than root's:
// no read of stack never written, no pointer left where it could leak, and
// Spectre v1 and v4 mitigations (paths followed under speculation, and a
// barrier after a store to stack that held no plain data). So what a run
// works on lives in a per-CPU map (`struct scratch`), not on the stack,
// and the loop over a rule's outputs carries a barrier of its own (see
// `forward`). tests/unprivileged.rs loads them so.
//
// The layouts below are mirrored in mcr-core's `datapath` module; the
// Rust side checks their sizes and the counter indices against this file.

#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#define INLINE static inline __attribute__((always_inline))

#define BE16(x) ((__u16)__builtin_bswap16((__u16)(x)))
#define BE32(x) ((__u32)__builtin_bswap32((__u32)(x)))

// tcx verdicts (the only ones tcx knows besides TCX_PASS and
// TCX_REDIRECT: any other, TC_ACT_STOLEN included, is taken as TCX_NEXT,
// and the frame would go on up the host's IP stack to be dropped there).
// TCX_NEXT: go on to the next program and the stack; TCX_DROP: the frame
// is done with here (its copies went out, or each output counted why not;
// the kernel counts it as no interface's drop).
#define TCX_NEXT -1
#define TCX_DROP 2

// ---- helpers (ids from linux/bpf.h) ----------------------------------

static void *(*map_lookup)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*load_bytes)(const void *skb, __u32 off, void *to, __u32 len) = (void *)BPF_FUNC_skb_load_bytes;
static long (*store_bytes)(void *skb, __u32 off, const void *from, __u32 len, __u64 flags) =
    (void *)BPF_FUNC_skb_store_bytes;
static long (*l4_csum_replace)(void *skb, __u32 off, __u64 from, __u64 to, __u64 flags) =
    (void *)BPF_FUNC_l4_csum_replace;
static __s64 (*csum_diff)(__be32 *from, __u32 from_size, __be32 *to, __u32 to_size, __wsum seed) =
    (void *)BPF_FUNC_csum_diff;
static long (*clone_redirect)(void *skb, __u32 ifindex, __u64 flags) = (void *)BPF_FUNC_clone_redirect;
static long (*vlan_push)(void *skb, __be16 proto, __u16 tci) = (void *)BPF_FUNC_skb_vlan_push;
static long (*change_proto)(void *skb, __be16 proto, __u64 flags) = (void *)BPF_FUNC_skb_change_proto;
static long (*vlan_pop)(void *skb) = (void *)BPF_FUNC_skb_vlan_pop;
static struct bpf_sock *(*sk_lookup_udp)(void *ctx, struct bpf_sock_tuple *tuple, __u32 size, __u64 netns,
                                         __u64 flags) = (void *)BPF_FUNC_sk_lookup_udp;
static long (*sk_release)(void *sock) = (void *)BPF_FUNC_sk_release;
static __u64 (*ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;
static void *(*ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)BPF_FUNC_ringbuf_reserve;
static void (*ringbuf_submit)(void *data, __u64 flags) = (void *)BPF_FUNC_ringbuf_submit;
static __u64 (*ringbuf_query)(void *ringbuf, __u64 flags) = (void *)BPF_FUNC_ringbuf_query;
static void (*ringbuf_discard)(void *data, __u64 flags) = (void *)BPF_FUNC_ringbuf_discard;

// ---- maps ---------------------------------------------------------------

// A map as the loader creates it (the loader may set max_entries).
struct map_def {
    __u32 type;
    __u32 key_size;
    __u32 value_size;
    __u32 max_entries;
    __u32 flags;
};

// What a frame is looked up by: the interface it arrived on, its VLAN (0:
// untagged), destination port, family and addresses. `src` is all zeroes
// for the any-source entry. IPv4 addresses take the first 4 bytes.
struct rule_key {
    __u32 ifindex;
    __u16 vlan;
    __u16 port;
    __u8 family;
    __u8 pad[3];
    __u8 src[16];
    __u8 dst[16];
};

// This data path forwards the rule's frames (else the workers do).
#define RULE_FAST 1
// An any-source entry with no any-source rule: only the (S,G) entries of
// other sources take the destination (a frame from anyone else is a
// `wrong_source` for the workers to count).
#define RULE_SSM_ONLY 2
// An any-source entry of a destination that also has (S,G) entries: look
// for the source's own entry first.
#define RULE_HAS_SOURCES 4
// The health of the rule's input is followed: each datagram's payload goes
// to the `health` ring, where worker 0 reads it.
#define RULE_HEALTH 8
// A line of an arbitrated market-data feed: only the first copy of each
// sequence number goes on (see `arbitrate`).
#define RULE_ARB 16
// An IPv4 key of a rule with an IPv6 output: a datagram without a UDP
// checksum (0) is the workers' (IPv6 needs one, computed over the whole
// payload; here the checksum is only ever updated for what changes).
#define RULE_CHECKSUM_FOR_V6 32

struct rule {
    __u32 counters;      // the rule's first counter: packets, then bytes
    __u32 first;         // its first entry in `outputs`
    __u32 count;         // how many outputs
    __u32 flags;
    __u32 arb;           // arbitrated: the rule's entry in `arbs`
    __u32 line;          // ... which of its lines this key is
    __u32 in_counters;   // ... the line's first counter (its packets)
    __u32 line_counters; // ... its second line of counters (messages)
};

// Set: keep the source address the datagram came with.
#define OUT_KEEP_SRC 1
// Set: the TTL (hop limit) is `ttl`; else the one it came with minus one.
#define OUT_TTL_FIXED 2
// Set: the DSCP is `dscp`; else the one it came with.
#define OUT_DSCP_SET 4
// Set: the output is of the other IP version (IPv4 <-> IPv6). A rule's
// outputs of the other version come after all of its own, so a frame is
// translated once (see `translate`).
#define OUT_OTHER_FAMILY 8

struct output {
    __u32 ifindex;
    __u32 counters; // the output's first counter (see C_OUT_*)
    __u32 mtu;      // the output interface's MTU
    __u16 port;     // new destination port
    __u16 vlan;     // 802.1Q VLAN id to tag with, 0: untagged
    __u8 dst_mac[6];
    __u8 src_mac[6];
    __u8 flags;
    __u8 ttl;
    __u8 dscp;
    __u8 pad;
    __u8 dst[16];
    __u8 src[16];
};

// Addresses the workers' rings take UDP to (unicast inputs), by interface.
struct unicast_key {
    __u32 ifindex;
    __u8 family;
    __u8 pad[3];
    __u8 addr[16];
};

// VLANs the workers' rings take, by interface.
struct vlan_key {
    __u32 ifindex;
    __u32 vlan;
};

// What the `health` ring carries for each datagram of a rule whose health
// is followed, in one of two forms behind the same head: the rule (its
// first counter), the UDP payload's length, the form, when the datagram
// came (CLOCK_MONOTONIC), and the records lost so far because the ring was
// full (so the reader knows that a gap it sees is its own, not the
// stream's).
//
// HEALTH_PIECES (most datagrams: MPEG-TS in UDP or in plain RTP, RTP of
// anything): only the bytes the health checks read, which lie at fixed
// places: the first 16 bytes (the RTP header, the first transport packet's
// header), the last byte (RTP padding), and 16 bytes at the start of every
// whole 188-byte transport packet counted from 0 and from 12 (after a plain
// RTP header). A datagram where the checks would read elsewhere (an RTP
// header with CSRCs or an extension; a PAT section whose table id lies
// past its piece) goes whole instead.
// HEALTH_WHOLE: the payload itself, as much as `payload` holds (a whole
// datagram of a 1500-byte MTU).
#define HEALTH_PAYLOAD 1472
#define HEALTH_WHOLE 0
#define HEALTH_PIECES 1
#define TS_PACKET 188
#define TS_IN_DATAGRAM 7
#define PIECE 16
struct health_head {
    __u32 rule;
    __u16 length;
    __u16 form;
    __u64 arrived_ns;
    __u64 missed;
};
struct health_record {
    struct health_head head;
    __u8 payload[HEALTH_PAYLOAD];
};
struct health_pieces {
    struct health_head head;
    __u8 first[PIECE];
    __u8 last;
    __u8 pad[7];
    __u8 at[2][TS_IN_DATAGRAM][PIECE];
};

// The most outputs one rule may have here (more: the workers forward it).
#define MAX_FANOUT 256

// Counter indices: the data path's own counters, then per rule and per
// output from the base index each carries (the statistics layout of one
// worker block, mcr-core's `stats`).
#define C_RX_FRAMES 0
#define C_RX_BYTES 1
#define C_TX_PACKETS 3
#define C_HEALTH_MISSED 18
// Written by mcrd's supervisor: 1 while the relay is standby (it counts
// what it would send, as C_OUT_HELD, and sends nothing).
#define C_STANDBY 19
#define C_RULE_PACKETS 0
#define C_RULE_BYTES 1
#define C_RULE_HEALTH_SAMPLED 5
#define C_OUT_PACKETS 0
#define C_OUT_BYTES 1
#define C_OUT_QUEUE_FULL 2
#define C_OUT_SEND_ERROR 3
#define C_OUT_TTL_EXPIRED 4
#define C_OUT_TOO_BIG 5
#define C_OUT_HELD 6

// The mark of the sockets MCR itself holds a port with: not a listener.
#define MCR_SOCKET_MARK 0x4d435200

struct map_def SEC("maps") rules = {BPF_MAP_TYPE_HASH, sizeof(struct rule_key), sizeof(struct rule), 131072,
                                    BPF_F_NO_PREALLOC};
struct map_def SEC("maps") outputs = {BPF_MAP_TYPE_ARRAY, sizeof(__u32), sizeof(struct output), 65536, 0};
struct map_def SEC("maps") counters = {BPF_MAP_TYPE_ARRAY, sizeof(__u32), sizeof(__u64), 1, BPF_F_MMAPABLE};
struct map_def SEC("maps") unicast_inputs = {BPF_MAP_TYPE_HASH, sizeof(struct unicast_key), sizeof(__u8), 65536,
                                             BPF_F_NO_PREALLOC};
struct map_def SEC("maps") vlans = {BPF_MAP_TYPE_HASH, sizeof(struct vlan_key), sizeof(__u8), 65536,
                                    BPF_F_NO_PREALLOC};
// Room for about 15,000 records of pieces (a second of 15,000 packets):
// worker 0 empties it at least every 25 ms and is woken when it is a
// quarter full.
#define HEALTH_RING (4 << 20)
struct map_def SEC("maps") health = {BPF_MAP_TYPE_RINGBUF, 0, 0, HEALTH_RING, 0};
// Where a payload is read to take its pieces from (one per CPU).
struct map_def SEC("maps") health_scratch = {BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(__u32), HEALTH_PAYLOAD, 1, 0};

// ---- A/B line arbitration: its layouts and maps ------------------------
//
// An arbitrated rule's framing (`struct arb`, written by the supervisor)
// says where each packet's sequence number, message count, unit and
// session lie in the first ARB_HEADER bytes of the UDP payload. Each of
// the rule's units (up to ARB_UNITS, taken as they come) has its state in
// `arb_units` and its window in `arb_windows` (an array of maps: each
// window is an array of 2^bits u64 slots, made by the supervisor for the
// rule's window size); the lag of each line's copies behind the first
// copy goes to a histogram in `arb_race`, which the supervisor maps.
#define ARB_RULES 256
#define ARB_UNITS 4
#define ARB_LINES 8
#define ARB_HEADER 64
#define RACE_BUCKETS 108
// A line that jumps back by at least this much may have been reset.
#define RESET_BACK 16
// A heartbeat with the same number as one that went out this recently is
// a copy of it.
#define HEARTBEAT_COPY_NS 500000000
// A slot's time is ns >> TIME_SHIFT (1.024 µs), 28 bits of it.
#define TIME_SHIFT 10
// An input's counters (mcr-core's InputCounter), from `in_counters`.
#define C_IN_PACKETS 0
#define C_IN_BYTES 1
#define C_IN_FORWARDED 2
#define C_IN_DUPLICATES 3
#define C_IN_TOO_LATE 5
#define C_IN_STRAYS 6
// A line's own (LineCounter), from `line_counters`.
#define C_LINE_MESSAGES 0
#define C_LINE_GAPS 1
#define C_LINE_REPEATS 2
#define C_LINE_HEARTBEATS 3
#define C_LINE_WRONG_SESSION 4
#define C_LINE_MALFORMED 5
#define C_LINE_RESETS 6
// The rule's (RuleCounter): numbers no line had brought when a later one
// went out, and of those, the ones a line brought later.
#define C_RULE_GAPS_OPENED 6
#define C_RULE_GAPS_FILLED 7

struct arb {
    __u16 seq_off;
    __u8 seq_width; // 1, 2, 4 or 8
    __u8 seq_be;
    __u16 count_off;
    __u8 count_width; // 0: the sequence numbers count packets
    __u8 count_be;
    __u16 session_off;
    __u8 session_len; // 0: no session
    __u8 unit_width;  // 0: no unit; else 1
    __u16 unit_off;
    __u8 length_check; // PITCH, MITCH: the u16 LE at 0 is the payload's length
    __u8 mold_end;     // MoldUDP64: a count of 0xffff ends the session
    __u16 header_len;  // the shortest payload of the framing (at most ARB_HEADER)
    __u8 bits;         // the window has 2^bits slots
    __u8 lines;
    __u32 pad;
};

// One line's place in the sequence of one unit.
struct arb_line {
    __u64 next;         // the number it should bring next (if has_next)
    __u64 pending_next; // what its next packet must be, to confirm
    __u8 started;
    __u8 era;     // its generation
    __u8 has_next;
    __u8 pending; // 0, or a change waits: 1 a reset, 2 a session, 3 a jump ahead, 3 a jump ahead
    __u8 pad[4];
    __u8 session[16];
    __u8 pending_session[16];
};

// How far a generation of a unit reached: its first number, and the end of
// what went out. Each word carries its generation in its top byte, and
// REACH_SET (see `arb_reach`).
struct arb_reach {
    __u64 base;
    __u64 high;
    __u64 pad;
};

struct arb_unit {
    __u32 unit; // the unit + 1; 0: free (taken with a compare-and-exchange)
    __u8 era;   // the newest generation of any line
    __u8 has_session;
    __u8 pad[2];
    __u8 session[16]; // that generation's session
    __u64 hb_seq;     // the last heartbeat that went out: its number,
    __u64 hb_ns;      // when,
    __u32 hb_kind;    // and its kind + 1 (0: none yet)
    __u32 pad2;
    struct arb_reach reach[2];
    struct arb_line lines[ARB_LINES];
};

struct map_def SEC("maps") arbs = {BPF_MAP_TYPE_ARRAY, sizeof(__u32), sizeof(struct arb), ARB_RULES, 0};
struct map_def SEC("maps") arb_units = {BPF_MAP_TYPE_ARRAY, sizeof(__u32), sizeof(struct arb_unit),
                                        ARB_RULES * ARB_UNITS, 0};
struct map_def SEC("maps") arb_windows = {BPF_MAP_TYPE_ARRAY_OF_MAPS, sizeof(__u32), sizeof(__u32),
                                          ARB_RULES * ARB_UNITS, 0};
struct map_def SEC("maps") arb_race = {BPF_MAP_TYPE_ARRAY, sizeof(__u32), sizeof(__u64),
                                       ARB_RULES * ARB_LINES * RACE_BUCKETS, BPF_F_MMAPABLE};

_Static_assert(sizeof(struct arb) == 24, "arb layout");
_Static_assert(sizeof(struct arb_line) == 56, "arb_line layout");
_Static_assert(sizeof(struct arb_unit) == 544, "arb_unit layout");
_Static_assert(sizeof(struct rule_key) == 44, "rule_key layout");
_Static_assert(sizeof(struct rule) == 32, "rule layout");
_Static_assert(sizeof(struct output) == 64, "output layout");
_Static_assert(sizeof(struct unicast_key) == 24, "unicast_key layout");
_Static_assert(sizeof(struct vlan_key) == 8, "vlan_key layout");
_Static_assert(sizeof(struct health_head) == 24, "health_head layout");
_Static_assert(sizeof(struct health_record) == 1496, "health_record layout");
_Static_assert(sizeof(struct health_pieces) == 272, "health_pieces layout");

// ---- parsing ----------------------------------------------------------

#define ETH_LEN 14
#define V4_LEN 20
#define V6_LEN 40
#define UDP_LEN 8

// A clean UDP datagram in a frame.
struct pkt {
    __u32 l4;       // offset of the UDP header
    __u16 vlan;     // VLAN id, 0 if untagged
    __u16 tci;      // the tag as it came (0 if untagged)
    __u8 tagged;    // the kernel took a tag off the frame
    __u8 family;    // 4 or 6
    __u8 no_csum;   // the UDP checksum is 0 (none, IPv4 only)
    __u8 ttl;       // TTL or hop limit
    __u8 tos;       // TOS byte or traffic class
    __u16 dport;    // destination port, host order
    __u16 udp_len;  // UDP header and payload, host order
    __u8 src[16];
    __u8 dst[16];
};

// The headers as they came: Ethernet, IP and UDP.
#define SAVED 64

// What a run of a program works on, in this CPU's entry of the `scratch`
// map rather than on the stack. The verifier of a process without
// CAP_PERFMON follows each byte of the stack by kind (never written, zero,
// a spilled value, other), refuses to read one never written, and puts a
// speculation barrier after every store to one that holds no plain data
// yet; and paths that left different kinds of bytes behind are not the
// same to it, so it would walk the whole loop over the outputs again after
// each (past its limit of a million instructions). Map memory is plain
// data to it, and costs no barrier. The ring filter has an entry of its
// own: it can run on this CPU in the middle of the tc program (a clone
// sent out of an interface whose ring sees outgoing frames).
struct scratch {
    __u32 key;                      // of an array map (first: its address is `s`)
    __u32 rule;                     // the rule's first counter
    __u32 first, nout;              // its outputs: the first, how many
    struct pkt p;
    struct rule_key k;
    struct unicast_key uk;
    struct vlan_key vk;
    struct bpf_sock_tuple t;
    __u32 from[8], to[8];           // the addresses a rewrite takes out and puts in
    __u8 hdr[ETH_LEN + V6_LEN + 4]; // headers read, or written by a rewrite
    __u8 udp[UDP_LEN];
    __u8 saved[SAVED];
    // A translated output's headers, from byte 2 (so that the IP header
    // starts on 8 bytes and its addresses are copied a word at a time).
    __u8 xh[2 + ETH_LEN + V6_LEN + 4] __attribute__((aligned(8)));
    __u16 ethertype;
    __u16 sport;
    __u8 b0;                        // a payload's first byte
    // Kept here rather than in a register, so that no branch on them is
    // one whose outcome the verifier already knows (it would then tell
    // the paths apart by their values).
    __u8 keep;                      // a local socket wants the frame too
    __u8 xlat;                      // the frame is of the other IP version now
    __u8 xlat_first;                // ... since this output: the UDP checksum
                                    // still covers the input version's addresses
    __u16 port_now;                 // the UDP destination port in the frame
    __u64 standby;                  // the relay is standby
    // Arbitration's working values (see `arbitrate`).
    __u8 ah[ARB_HEADER + 8];        // the feed's header
    __u8 sess[16];                  // its session
    __u64 seq, msgs, end, now;
    __u32 aidx, aline, inc, lnc;    // the rule's entry, the line, its counters
    __u32 unit, widx, wkey, skey;
    __u8 kind, data, other, far, joins, era, bits, race;
    // What the decision counts, each in a field of its own (stores to
    // one array with differing indices would be merged into one with a
    // computed offset, which the verifier refuses without CAP_PERFMON).
    __u64 in_packets, in_bytes, in_forwarded, in_duplicates, in_too_late, in_strays;
    __u64 l_messages, l_gaps, l_repeats, l_heartbeats, l_wrong_session, l_malformed, l_resets;
    __u64 add_opened, add_filled, lag;
    struct arb ac;                  // the rule's framing
    __u32 verdict;
    __u32 rflags;                   // the rule's flags
};
#define SCRATCH_INGRESS 0
#define SCRATCH_FILTER 1
struct map_def SEC("maps") scratch = {BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(__u32), sizeof(struct scratch), 2, 0};

// This CPU's scratch for program `which`.
INLINE struct scratch *scratch_of(__u32 which) {
    return map_lookup(&scratch, &which);
}

// Entry `key` of array map `map` (the key is written to the scratch).
INLINE void *array_entry(struct scratch *s, void *map, __u32 key) {
    s->key = key;
    return map_lookup(map, &s->key);
}

INLINE void count(struct scratch *s, __u32 index, __u64 n) {
    __u64 *c = array_entry(s, &counters, index);
    if (c)
        __sync_fetch_and_add(c, n);
}

// The ones'-complement sum of an IPv4 header is all ones when its
// checksum is right.
INLINE int v4_header_ok(const __u8 *h) {
    __u32 sum = 0;
#pragma clang loop unroll(full)
    for (int i = 0; i < V4_LEN; i += 2)
        sum += ((__u32)h[i] << 8) | h[i + 1];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
}

// Reads the frame's UDP datagram into `s->p` if it is one this data path
// may forward: 1 if so, 0 if the workers must look at it (or nobody).
INLINE int parse(struct __sk_buff *skb, struct scratch *s) {
    struct pkt *p = &s->p;
    __builtin_memset(p, 0, sizeof(*p));
    if (skb->vlan_present) {
        // An 802.1ad service tag is no rule's VLAN.
        if (skb->vlan_proto != BE16(0x8100))
            return 0;
        p->tagged = 1;
        p->tci = skb->vlan_tci;
        p->vlan = skb->vlan_tci & 0x0fff;
    }
    if (load_bytes(skb, 12, &s->ethertype, 2) < 0)
        return 0;
    __u16 ethertype = s->ethertype;
    __u8 *h = s->hdr, *u = s->udp;
    if (ethertype == BE16(0x0800)) {
        if (load_bytes(skb, ETH_LEN, h, V4_LEN) < 0)
            return 0;
        // Version 4, no options; not a fragment; UDP.
        if (h[0] != 0x45 || ((h[6] << 8 | h[7]) & 0x3fff) != 0 || h[9] != 17)
            return 0;
        __u32 total = h[2] << 8 | h[3];
        if (total < V4_LEN + UDP_LEN || ETH_LEN + total > skb->len || !v4_header_ok(h))
            return 0;
        if (load_bytes(skb, ETH_LEN + V4_LEN, u, UDP_LEN) < 0)
            return 0;
        __u32 udp_len = u[4] << 8 | u[5];
        if (udp_len != total - V4_LEN)
            return 0;
        p->family = 4;
        p->no_csum = u[6] == 0 && u[7] == 0;
        p->tos = h[1];
        p->ttl = h[8];
        __builtin_memcpy(p->src, h + 12, 4);
        __builtin_memcpy(p->dst, h + 16, 4);
        p->dport = u[2] << 8 | u[3];
        p->udp_len = udp_len;
        p->l4 = ETH_LEN + V4_LEN;
        return 1;
    }
    if (ethertype == BE16(0x86dd)) {
        if (load_bytes(skb, ETH_LEN, h, V6_LEN) < 0)
            return 0;
        // Version 6, UDP straight after the fixed header (extension
        // headers are the workers' to walk).
        if ((h[0] >> 4) != 6 || h[6] != 17)
            return 0;
        __u32 plen = h[4] << 8 | h[5];
        if (plen < UDP_LEN || ETH_LEN + V6_LEN + plen > skb->len)
            return 0;
        if (load_bytes(skb, ETH_LEN + V6_LEN, u, UDP_LEN) < 0)
            return 0;
        __u32 udp_len = u[4] << 8 | u[5];
        // IPv6 requires a UDP checksum; a zero one is the workers' to count.
        if (udp_len != plen || (u[6] == 0 && u[7] == 0))
            return 0;
        p->family = 6;
        p->tos = (h[0] << 4) | (h[1] >> 4);
        p->ttl = h[7];
        __builtin_memcpy(p->src, h + 8, 16);
        __builtin_memcpy(p->dst, h + 24, 16);
        p->dport = u[2] << 8 | u[3];
        p->udp_len = udp_len;
        p->l4 = ETH_LEN + V6_LEN;
        return 1;
    }
    return 0;
}

// The rule that takes the datagram, if any: the (S,G) entry of its
// source, else the any-source entry. Every destination has an any-source
// entry (with RULE_SSM_ONLY when no rule takes any source), so a
// destination without (S,G) entries costs one lookup.
INLINE struct rule *rule_of(struct __sk_buff *skb, struct scratch *s) {
    const struct pkt *p = &s->p;
    struct rule_key *k = &s->k;
    __builtin_memset(k, 0, sizeof(*k));
    k->ifindex = skb->ifindex;
    k->vlan = p->vlan;
    k->port = p->dport;
    k->family = p->family;
    __builtin_memcpy(k->dst, p->dst, 16);
    struct rule *r = map_lookup(&rules, k);
    if (!r)
        return 0;
    if (r->flags & RULE_HAS_SOURCES) {
        __builtin_memcpy(k->src, p->src, 16);
        struct rule *src = map_lookup(&rules, k);
        if (src)
            r = src;
        else if (r->flags & RULE_SSM_ONLY)
            return 0;
    }
    return r;
}

// The rule that takes the datagram if this data path forwards it.
INLINE struct rule *owner(struct __sk_buff *skb, struct scratch *s) {
    struct rule *r = rule_of(skb, s);
    if (!r || !(r->flags & RULE_FAST))
        return 0;
    return (r->flags & RULE_CHECKSUM_FOR_V6) && s->p.no_csum ? 0 : r;
}

// ---- the ring filter --------------------------------------------------

// What the workers take, as their classic filter would: IPv4 or IPv6 to a
// group of wider than link-local scope, or UDP to a unicast address a rule
// takes; untagged, or tagged with a VLAN a rule takes; and, for them to
// count, headers cut short and frames tagged twice.
INLINE int admitted(struct __sk_buff *skb, struct scratch *s) {
    __u32 ifindex = skb->ifindex;
    if (skb->vlan_present) {
        if (skb->vlan_proto != BE16(0x8100))
            return 0;
        struct vlan_key *vk = &s->vk;
        vk->ifindex = ifindex;
        vk->vlan = skb->vlan_tci & 0x0fff;
        if (vk->vlan != 0 && !map_lookup(&vlans, vk))
            return 0;
    }
    if (load_bytes(skb, 12, &s->ethertype, 2) < 0)
        return 0;
    __u16 ethertype = s->ethertype;
    struct unicast_key *uk = &s->uk;
    __builtin_memset(uk, 0, sizeof(*uk));
    uk->ifindex = ifindex;
    __u8 *h = s->hdr;
    if (ethertype == BE16(0x0800)) {
        if (skb->len < ETH_LEN + V4_LEN)
            return 1;
        if (load_bytes(skb, ETH_LEN, h, V4_LEN) < 0)
            return 1;
        __u8 first = h[16];
        if (first >= 0xe0) {
            // 240/4 is reserved; 224.0.0.0/24 is link-local control
            // traffic (IGMP among it), which no rule takes.
            if (first >= 0xf0)
                return 0;
            return !(first == 0xe0 && h[17] == 0 && h[18] == 0);
        }
        if (h[9] != 17)
            return 0;
        uk->family = 4;
        __builtin_memcpy(uk->addr, h + 16, 4);
        return map_lookup(&unicast_inputs, uk) != 0;
    }
    if (ethertype == BE16(0x86dd)) {
        if (skb->len < ETH_LEN + V6_LEN)
            return 1;
        if (load_bytes(skb, ETH_LEN, h, V6_LEN) < 0)
            return 1;
        if (h[24] == 0xff)
            return (h[25] & 0x0f) > 2;
        if (h[6] != 17)
            return 0;
        uk->family = 6;
        __builtin_memcpy(uk->addr, h + 24, 16);
        return map_lookup(&unicast_inputs, uk) != 0;
    }
    // A tag still in the frame, behind the one the kernel took off.
    return ethertype == BE16(0x8100) || ethertype == BE16(0x88a8);
}

SEC("socket")
int mcr_ring_filter(struct __sk_buff *skb) {
    struct scratch *s = scratch_of(SCRATCH_FILTER);
    // (Never: every CPU has the entry.) Let the workers have it.
    if (!s)
        return 0x7fffffff;
    if (parse(skb, s) && owner(skb, s))
        return 0;
    return admitted(skb, s) ? 0x7fffffff : 0;
}

// ---- forwarding -------------------------------------------------------

INLINE void health_head(struct scratch *s, struct health_head *h, __u32 rule, __u32 len, __u16 form) {
    __u64 *missed = array_entry(s, &counters, C_HEALTH_MISSED);
    h->rule = rule;
    h->length = len;
    h->form = form;
    h->arrived_ns = ktime_get_ns();
    h->missed = missed ? *missed : 0;
}

// Commits a record. Worker 0 reads the ring on its own timer; it is woken
// only when the ring fills up past a quarter.
INLINE void health_submit(void *h) {
    __u64 wake = ringbuf_query(&health, BPF_RB_AVAIL_DATA) > HEALTH_RING / 4 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
    ringbuf_submit(h, wake);
}

// The payload as it is (up to HEALTH_PAYLOAD bytes of it).
INLINE void follow_whole(struct __sk_buff *skb, struct scratch *s, __u32 at, __u32 len, __u32 rule) {
    struct health_record *h = ringbuf_reserve(&health, sizeof(*h), 0);
    if (!h) {
        count(s, C_HEALTH_MISSED, 1);
        return;
    }
    health_head(s, &h->head, rule, len, HEALTH_WHOLE);
    __u32 take = len < HEALTH_PAYLOAD ? len : HEALTH_PAYLOAD;
    if (take > 0 && take <= HEALTH_PAYLOAD)
        load_bytes(skb, at, h->payload, take);
    health_submit(h);
}

// Four bytes of the health scratch at `off`, a multiple of 4.
INLINE __u32 payload_word(const __u8 *buf, __u32 off) {
    __u32 w;
    __builtin_memcpy(&w, __builtin_assume_aligned(buf + off, 4), 4);
    return w;
}

// The pieces of the payload the checks read; 0 if they would read
// elsewhere (then nothing is committed). The payload is read once, into
// this CPU's health scratch, and the pieces are taken from there (their
// places are constants), four bytes at a time.
//
// Nothing here branches on the payload's length: a piece the payload does
// not hold whole is masked to zeros, and the first 16 bytes are zeroed
// before the payload is read over them. (A branch on the length splits it
// into ranges that the verifier follows one by one through the rest of the
// program.)
INLINE int follow_pieces(struct __sk_buff *skb, struct scratch *s, __u32 at, __u32 len, __u32 rule) {
    __u8 *buf = array_entry(s, &health_scratch, 0);
    if (!buf || len == 0 || len > HEALTH_PAYLOAD)
        return 0;
    buf = __builtin_assume_aligned(buf, 8);
    __builtin_memset(buf, 0, PIECE);
    if (load_bytes(skb, at, buf, len) < 0)
        return 0;
    __u8 b0 = buf[0];
    // RTP with CSRCs or an extension: the transport packets start
    // elsewhere.
    if ((b0 & 0xc0) == 0x80 && (b0 & 0x1f) != 0)
        return 0;
    struct health_pieces *h = ringbuf_reserve(&health, sizeof(*h), 0);
    if (!h) {
        count(s, C_HEALTH_MISSED, 1);
        return 1;
    }
    h = __builtin_assume_aligned(h, 8);
#pragma clang loop unroll(full)
    for (__u32 j = 0; j < PIECE; j += 4) {
        __u32 w = payload_word(buf, j);
        __builtin_memcpy(h->first + j, &w, 4);
    }
    // `last` and the padding after it.
    __builtin_memset(&h->last, 0, 8);
    __u32 last = len - 1;
    // Keep the compiler from checking a copy of `last` other than the one
    // it indexes with (the verifier bounds the register it checks).
    asm volatile("" : "+r"(last));
    if (last < HEALTH_PAYLOAD)
        h->last = buf[last];
#pragma clang loop unroll(full)
    for (int b = 0; b < 2; b++) {
#pragma clang loop unroll(full)
        for (int k = 0; k < TS_IN_DATAGRAM; k++) {
            const __u32 off = b * 12 + k * TS_PACKET;
            // All ones if the payload holds the piece whole, else zero: the
            // sign of len - (off + PIECE), hidden from the compiler, which
            // would make a branch of it.
            __s32 short_by = (__s32)len - (__s32)(off + PIECE);
            asm volatile("" : "+r"(short_by));
            __u32 whole = ~(__u32)(short_by >> 31);
            __u32 w0 = payload_word(buf, off) & whole, w1 = payload_word(buf, off + 4) & whole;
            __u32 w2 = payload_word(buf, off + 8) & whole, w3 = payload_word(buf, off + 12) & whole;
            // A PAT packet that starts a section: its table id lies after
            // the pointer field, and after an adaptation field if there is
            // one; past the piece, the checks need the whole datagram
            // (rare: the record is given back). Bytes 0 to 4 of the piece,
            // little-endian in w0 and w1; a masked piece has no sync byte.
            if ((w0 & 0x00ff5fff) == 0x00004047 && ((w0 & 0x20000000) || 5 + (w1 & 0xff) >= PIECE)) {
                ringbuf_discard(h, BPF_RB_NO_WAKEUP);
                return 0;
            }
            __u32 *to = __builtin_assume_aligned(h->at[b][k], 4);
            to[0] = w0;
            to[1] = w1;
            to[2] = w2;
            to[3] = w3;
        }
    }
    health_head(s, &h->head, rule, len, HEALTH_PIECES);
    health_submit(h);
    return 1;
}

// Of a stream that is neither RTP nor MPEG-TS, the checks learn only that
// it flows: one datagram in this long goes to the ring.
#define HEALTH_SAMPLE_NS 25000000

// Hands what the health checks need of the datagram's payload to the
// `health` ring (its rule's health is followed). A full ring counts the
// record missed. Every datagram that may be RTP (version 2) or MPEG-TS (a
// sync byte first, or a whole number of transport packets) goes; of the
// others, one per HEALTH_SAMPLE_NS per rule (the time of the last is kept
// in the rule's counter line).
INLINE void follow(struct __sk_buff *skb, struct scratch *s, __u32 rule) {
    __u32 len = s->p.udp_len - UDP_LEN, at = s->p.l4 + UDP_LEN;
    s->b0 = 0;
    if (len > 0)
        load_bytes(skb, at, &s->b0, 1);
    __u8 b0 = s->b0;
    if (!((b0 & 0xc0) == 0x80 || b0 == 0x47 || (len > 0 && len % TS_PACKET == 0))) {
        __u64 *last = array_entry(s, &counters, rule + C_RULE_HEALTH_SAMPLED);
        __u64 now = ktime_get_ns();
        if (!last || now - *last < HEALTH_SAMPLE_NS)
            return;
        *last = now;
    }
    if (len > HEALTH_PAYLOAD || !follow_pieces(skb, s, at, len, rule))
        follow_whole(skb, s, at, len, rule);
}

// ---- A/B line arbitration ---------------------------------------------
//
// The first copy of each sequence number of a market-data feed goes on;
// later copies are dropped, and nothing is held for a gap. The decisions
// are mcr-core's `arbitrate` (the equivalence test holds them equal): a
// unit's window slot `seq mod 2^bits` holds, in one word, the tag of the
// number that took it last (its generation, and seq >> bits), when and on
// which line it came; a packet is first if the slot holds an older tag,
// a copy if the same, too late if a newer one, and a slot is taken with
// one compare-and-exchange, so that two lines on two CPUs never both win.
// Each line's own sequence (its gaps, resets, session) is per unit in
// `arb_units`; a line's state is written by its own frames only.

#define K_DATA 0
#define K_HEARTBEAT 1
#define K_END 2

// A field of `width` bytes (1 to 8) at `off` of the header in `s->ah`
// (the supervisor keeps every field within the header's length).
INLINE __u64 arb_field(const struct scratch *s, __u32 off, __u32 width, __u32 be) {
    __u64 v = 0;
#pragma clang loop unroll(full)
    for (__u32 i = 0; i < 8; i++) {
        if (i < width) {
            __u32 k = be ? off + i : off + width - 1 - i;
            v = (v << 8) | s->ah[k & (ARB_HEADER - 1)];
        }
    }
    return v;
}

INLINE int same16(const __u8 *a, const __u8 *b) {
    __u64 a0, a1, b0, b1;
    __builtin_memcpy(&a0, a, 8);
    __builtin_memcpy(&a1, a + 8, 8);
    __builtin_memcpy(&b0, b, 8);
    __builtin_memcpy(&b1, b + 8, 8);
    return a0 == b0 && a1 == b1;
}

INLINE void copy16(__u8 *to, const __u8 *from) {
    __builtin_memcpy(to, from, 16);
}

// Generation `a` is newer than `b` (as serial numbers).
INLINE int newer(__u8 a, __u8 b) {
    return (__s8)(__u8)(a - b) > 0;
}

// The histogram bucket of a lag of `units` (of 1.024 µs): the first four
// exact, then four per doubling (mcr-core's `race::bucket`).
INLINE __u32 lag_bucket(__u64 units) {
    if (units < 4)
        return units;
    __u32 o = 0;
    __u64 v = units;
    if (v >> 16) { v >>= 16; o += 16; }
    if (v >> 8) { v >>= 8; o += 8; }
    if (v >> 4) { v >>= 4; o += 4; }
    if (v >> 2) { v >>= 2; o += 2; }
    if (v >> 1) { o += 1; }
    __u32 b = 4 * (o - 1) + ((units >> (o - 2)) & 3);
    return b < RACE_BUCKETS ? b : RACE_BUCKETS - 1;
}

// Sequence numbers `seq..end` of the current generation went out first (a
// heartbeat: end == seq): a jump past the generation's reach opens a gap,
// a first copy behind it fills one (counted when the packet is done).
//
// Two lines on two CPUs may both bring a generation's first numbers, so
// `high` is one word holding the generation (top byte), REACH_SET and the
// number: the first packet of a generation takes it with a
// compare-and-exchange, and a line that loses reads the winner's. `base`
// is written by the winner just after; until it is, nothing counts as
// filled (no gap is open that early). Numbers of REACH_SET or more (2^55;
// no feed counts that far) are not followed.
#define REACH_SET (1ull << 55)
#define REACH_NUMBER (REACH_SET - 1)
INLINE void arb_reach(struct scratch *s, struct arb_unit *u) {
    struct arb_reach *r = &u->reach[s->era & 1];
    __u64 tag = ((__u64)s->era << 56) | REACH_SET;
    if (s->end > REACH_NUMBER)
        return;
#pragma clang loop unroll(full)
    for (int tries = 0; tries < 3; tries++) {
        __u64 w = *(volatile __u64 *)&r->high;
        if ((w & ~REACH_NUMBER) != tag) {
            if (__sync_val_compare_and_swap(&r->high, w, tag | s->end) == w) {
                *(volatile __u64 *)&r->base = tag | s->seq;
                return;
            }
            continue;
        }
        __u64 h = w & REACH_NUMBER;
        if (s->seq > h) {
            if (__sync_val_compare_and_swap(&r->high, w, tag | s->end) == w) {
                s->add_opened = s->seq - h;
                return;
            }
            continue;
        }
        __u64 b = *(volatile __u64 *)&r->base;
        if (s->end <= h && (b & ~REACH_NUMBER) == tag && s->seq >= (b & REACH_NUMBER))
            s->add_filled = s->end - s->seq;
        else if (s->end > h)
            __sync_val_compare_and_swap(&r->high, w, tag | s->end);
        return;
    }
}

// The decision for the datagram of rule `r` (an arbitrated line): 1 if it
// goes on, 0 if it is dropped. What it counts is noted in `s` (`in_*`,
// `l_*`, ...), and added by `arbitrate` once every pointer into the
// maps is dead: a pointer kept across a helper call could be spilled to
// the stack, whose slot the verifier of a process without CAP_PERFMON
// refuses to see reused for plain data.
INLINE int arb_decide(struct __sk_buff *skb, struct scratch *s, const struct rule *r) {
    s->aidx = r->arb;
    s->aline = r->line & (ARB_LINES - 1);
    s->inc = r->in_counters;
    s->lnc = r->line_counters;
    __u32 len = s->p.udp_len - UDP_LEN;
    s->in_packets = 1;
    s->in_bytes = len;
    struct arb *a = array_entry(s, &arbs, s->aidx);
    if (!a)
        return 0;
    __builtin_memcpy(&s->ac, a, sizeof(struct arb));
    __u32 hl = s->ac.header_len;
    if (hl == 0 || hl > ARB_HEADER || len < hl || load_bytes(skb, s->p.l4 + UDP_LEN, s->ah, hl) < 0 ||
        (s->ac.length_check && arb_field(s, 0, 2, 0) != len)) {
        s->l_malformed = 1;
        return 0;
    }
    s->seq = arb_field(s, s->ac.seq_off, s->ac.seq_width, s->ac.seq_be);
    s->msgs = 1;
    s->kind = K_DATA;
    if (s->ac.count_width) {
        __u64 c = arb_field(s, s->ac.count_off, s->ac.count_width, s->ac.count_be);
        if (c == 0) {
            s->kind = K_HEARTBEAT;
            s->msgs = 0;
        } else if (s->ac.mold_end && c == 0xffff) {
            s->kind = K_END;
            s->msgs = 0;
        } else {
            s->msgs = c;
        }
    }
    __builtin_memset(s->sess, 0, 16);
#pragma clang loop unroll(full)
    for (__u32 i = 0; i < 16; i++) {
        if (i < s->ac.session_len)
            s->sess[i] = s->ah[(s->ac.session_off + i) & (ARB_HEADER - 1)];
    }
    s->unit = s->ac.unit_width ? (__u32)s->ah[s->ac.unit_off & (ARB_HEADER - 1)] + 1 : 1;
    s->bits = s->ac.bits;
    s->now = ktime_get_ns();

    // The unit's state: its own, or a free one taken for it.
    s->widx = 0xffffffff;
#pragma clang loop unroll(full)
    for (__u32 k = 0; k < ARB_UNITS; k++) {
        if (s->widx == 0xffffffff) {
            struct arb_unit *c = array_entry(s, &arb_units, s->aidx * ARB_UNITS + k);
            if (c) {
                __u32 have = c->unit;
                if (have == 0) {
                    __u32 was = __sync_val_compare_and_swap(&c->unit, 0, s->unit);
                    have = was ? was : s->unit;
                }
                if (have == s->unit)
                    s->widx = s->aidx * ARB_UNITS + k;
            }
        }
    }
    if (s->widx == 0xffffffff) {
        s->in_strays = 1;
        return 0;
    }
    // Its window's slot (a heartbeat has none to take), then its state:
    // no helper is called after that.
    __u64 *slot = 0;
    if (s->kind == K_DATA) {
        s->wkey = s->widx;
        void *w = map_lookup(&arb_windows, &s->wkey);
        if (w) {
            s->skey = (__u32)s->seq & ((1u << (s->bits & 31)) - 1);
            slot = map_lookup(w, &s->skey);
        }
        if (!slot) {
            s->in_too_late = 1;
            return 0;
        }
    }
    struct arb_unit *u = array_entry(s, &arb_units, s->widx);
    if (!u)
        return 0;
    struct arb_line *st = &u->lines[s->aline & (ARB_LINES - 1)];
    if (!st->started) {
        st->started = 1;
        st->era = u->era;
        copy16(st->session, s->sess);
        if (!u->has_session) {
            u->has_session = 1;
            copy16(u->session, s->sess);
        }
    }
    s->data = s->kind == K_DATA;
    s->end = s->seq + s->msgs;
    // A change of session, or a reset: at sequence number 1 at once, or
    // when another line made it already, else when the line's next packet
    // follows.
    s->other = !same16(st->session, s->sess);
    s->far = s->data && !s->other && st->has_next && s->seq + RESET_BACK <= st->next;
    if (s->other || s->far) {
        s->joins = newer(u->era, st->era) && (!s->other || (u->has_session && same16(u->session, s->sess)));
        int confirmed = s->seq <= 1 || s->joins ||
                        (st->pending == 1 && s->far && st->pending_next == s->seq) ||
                        (st->pending == 2 && s->other && st->pending_next == s->seq &&
                         same16(st->pending_session, s->sess));
        if (!confirmed) {
            st->pending = s->other ? 2 : 1;
            st->pending_next = s->end;
            copy16(st->pending_session, s->sess);
            if (s->other)
                s->l_wrong_session = 1;
            else
                s->in_strays = 1;
            return 0;
        }
        __u8 next_era = st->era + 1;
        st->era = newer(u->era, next_era) ? u->era : next_era;
        if (newer(st->era, u->era)) {
            u->era = st->era;
            u->has_session = 1;
            copy16(u->session, s->sess);
        }
        copy16(st->session, s->sess);
        st->has_next = 0;
        s->l_resets = 1;
    }
    // A jump ahead by a window or more is taken once the line's next
    // packet follows it (a lone packet that far ahead must not move it).
    if (s->data && !s->other && !s->far && st->has_next && s->seq >= st->next + (1ull << (s->bits & 63)) &&
        !(st->pending == 3 && st->pending_next == s->seq)) {
        st->pending = 3;
        st->pending_next = s->end;
        s->in_strays = 1;
        return 0;
    }
    st->pending = 0;

    // The line's own sequence.
    if (s->data)
        s->l_messages = s->msgs;
    else
        s->l_heartbeats = 1;
    if (st->has_next) {
        if (s->seq > st->next)
            s->l_gaps = s->seq - st->next;
        else if (s->data && s->end <= st->next)
            s->l_repeats = 1;
        if (s->end > st->next)
            st->next = s->end;
    } else {
        st->next = s->end;
        st->has_next = 1;
    }
    s->era = st->era;

    if (!slot) {
        // A heartbeat carries the next number; each goes out once.
        s->end = s->seq;
        arb_reach(s, u);
        if (u->hb_kind == (__u32)s->kind + 1 && u->hb_seq == s->seq && s->now - u->hb_ns < HEARTBEAT_COPY_NS) {
            s->in_duplicates = 1;
            return 0;
        }
        u->hb_seq = s->seq;
        u->hb_kind = (__u32)s->kind + 1;
        u->hb_ns = s->now;
        s->in_forwarded = 1;
        return 1;
    }

    __u32 tag = ((__u32)s->era << 24) | ((__u32)(s->seq >> (s->bits & 63)) & 0xffffff);
    __u64 now_u = (s->now >> TIME_SHIFT) & 0x0fffffff;
    __u64 word = ((__u64)tag << 32) | (now_u << 4) | 8 | s->aline;
#pragma clang loop unroll(full)
    for (int tries = 0; tries < 2; tries++) {
        __u64 cur = *(volatile __u64 *)slot;
        if (cur & 8) {
            __s32 d = (__s32)(tag - (__u32)(cur >> 32));
            if (d == 0) {
                s->in_duplicates = 1;
                if ((cur & 7) != s->aline) {
                    s->race = 1;
                    s->lag = (now_u - ((cur >> 4) & 0x0fffffff)) & 0x0fffffff;
                }
                return 0;
            }
            if (d < 0) {
                s->in_too_late = 1;
                return 0;
            }
        }
        if (__sync_val_compare_and_swap(slot, cur, word) == cur) {
            arb_reach(s, u);
            s->in_forwarded = 1;
            return 1;
        }
    }
    // Another line took the slot meanwhile, twice: its copy went out.
    s->in_duplicates = 1;
    return 0;
}

// Arbitrates the datagram of rule `r` (see `arb_decide`), then adds what
// it counted: 1 if it goes on, 0 if it is dropped.
INLINE int arbitrate(struct __sk_buff *skb, struct scratch *s, const struct rule *r) {
    s->in_packets = s->in_bytes = s->in_forwarded = s->in_duplicates = s->in_too_late = s->in_strays = 0;
    s->l_messages = s->l_gaps = s->l_repeats = s->l_heartbeats = s->l_wrong_session = s->l_malformed = 0;
    s->l_resets = 0;
    s->add_opened = 0;
    s->add_filled = 0;
    s->race = 0;
    s->verdict = arb_decide(skb, s, r);
    count(s, s->inc + C_IN_PACKETS, s->in_packets);
    count(s, s->inc + C_IN_BYTES, s->in_bytes);
    if (s->in_forwarded)
        count(s, s->inc + C_IN_FORWARDED, s->in_forwarded);
    if (s->in_duplicates)
        count(s, s->inc + C_IN_DUPLICATES, s->in_duplicates);
    if (s->in_too_late)
        count(s, s->inc + C_IN_TOO_LATE, s->in_too_late);
    if (s->in_strays)
        count(s, s->inc + C_IN_STRAYS, s->in_strays);
    if (s->l_messages)
        count(s, s->lnc + C_LINE_MESSAGES, s->l_messages);
    if (s->l_gaps)
        count(s, s->lnc + C_LINE_GAPS, s->l_gaps);
    if (s->l_repeats)
        count(s, s->lnc + C_LINE_REPEATS, s->l_repeats);
    if (s->l_heartbeats)
        count(s, s->lnc + C_LINE_HEARTBEATS, s->l_heartbeats);
    if (s->l_wrong_session)
        count(s, s->lnc + C_LINE_WRONG_SESSION, s->l_wrong_session);
    if (s->l_malformed)
        count(s, s->lnc + C_LINE_MALFORMED, s->l_malformed);
    if (s->l_resets)
        count(s, s->lnc + C_LINE_RESETS, s->l_resets);
    if (s->add_opened)
        count(s, s->rule + C_RULE_GAPS_OPENED, s->add_opened);
    if (s->add_filled)
        count(s, s->rule + C_RULE_GAPS_FILLED, s->add_filled);
    if (s->race) {
        __u64 *b = array_entry(s, &arb_race, (s->aidx * ARB_LINES + s->aline) * RACE_BUCKETS + lag_bucket(s->lag));
        if (b)
            __sync_fetch_and_add(b, 1);
    }
    return s->verdict;
}

// A socket of this host that listens to the datagram's port (other than
// MCR's own), to which the frame must still go.
INLINE int listened(struct __sk_buff *skb, struct scratch *s, const int family) {
    const struct pkt *p = &s->p;
    struct bpf_sock_tuple *t = &s->t;
    __builtin_memset(t, 0, sizeof(*t));
    struct bpf_sock *sk;
    if (load_bytes(skb, p->l4, &s->sport, 2) < 0)
        return 0;
    if (family == 4) {
        __builtin_memcpy(&t->ipv4.saddr, p->src, 4);
        __builtin_memcpy(&t->ipv4.daddr, p->dst, 4);
        t->ipv4.sport = s->sport;
        t->ipv4.dport = BE16(p->dport);
        sk = sk_lookup_udp(skb, t, sizeof(t->ipv4), BPF_F_CURRENT_NETNS, 0);
    } else {
        __builtin_memcpy(t->ipv6.saddr, p->src, 16);
        __builtin_memcpy(t->ipv6.daddr, p->dst, 16);
        t->ipv6.sport = s->sport;
        t->ipv6.dport = BE16(p->dport);
        sk = sk_lookup_udp(skb, t, sizeof(t->ipv6), BPF_F_CURRENT_NETNS, 0);
    }
    if (!sk)
        return 0;
    int theirs = sk->mark != MCR_SOCKET_MARK;
    sk_release(sk);
    return theirs;
}

INLINE void set_v4_checksum(__u8 *h) {
    h[10] = 0;
    h[11] = 0;
    __u32 sum = 0;
#pragma clang loop unroll(full)
    for (int i = 0; i < V4_LEN; i += 2)
        sum += ((__u32)h[i] << 8) | h[i + 1];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    __u16 c = ~sum;
    h[10] = c >> 8;
    h[11] = c & 0xff;
}

// The TTL (hop limit) and the TOS byte (traffic class) of output `o`.
INLINE __u8 ttl_for(const struct scratch *s, const struct output *o) {
    return (o->flags & OUT_TTL_FIXED) ? o->ttl : s->p.ttl - 1;
}

INLINE __u8 tos_for(const struct scratch *s, const struct output *o) {
    return (o->flags & OUT_DSCP_SET) ? (o->dscp << 2) | (s->p.tos & 3) : s->p.tos;
}

// Writes output `o`'s headers into the frame, in one store from the
// Ethernet header to the UDP ports: MACs, the IP header (built from the one
// the datagram came with, `s->saved`, with the output's TTL, DSCP, source
// and destination, and for IPv4 a checksum computed afresh) and the port;
// the UDP checksum is updated for what changed in the pseudo-header and the
// port (and left for the kernel to complete if it has not computed it
// yet); then the VLAN tag. What the frame holds before is read from the
// frame itself, so that nothing is carried from one output to the next but
// the frame. 0, or -1 if a helper refused.
//
// What lives across a helper call is in `s` or `o` (read again after it),
// not in a local: then the loop over the outputs needs no register spilled
// to the stack (each spill costs a speculation barrier where the verifier
// runs without CAP_PERFMON).
INLINE int rewrite_v4(struct __sk_buff *skb, struct scratch *s, const struct output *o) {
    // Ethernet, IPv4, UDP ports.
    __u8 *h = s->hdr;
    if (load_bytes(skb, ETH_LEN, h + ETH_LEN, V4_LEN + 4) < 0)
        return -1;
    __u32 *from = s->from, *to = s->to;
    __builtin_memcpy(&from[0], h + ETH_LEN + 16, 4);
    __builtin_memcpy(&from[1], h + ETH_LEN + 12, 4);
    __builtin_memcpy(&to[0], o->dst, 4);
    __builtin_memcpy(&to[1], (o->flags & OUT_KEEP_SRC) ? s->p.src : o->src, 4);
    __s64 diff = csum_diff(from, 8, to, 8, 0);
    if (diff < 0 || l4_csum_replace(skb, s->p.l4 + 6, 0, diff, BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0) < 0)
        return -1;
    __u16 now_port;
    __builtin_memcpy(&now_port, h + ETH_LEN + V4_LEN + 2, 2);
    if (l4_csum_replace(skb, s->p.l4 + 6, now_port, BE16(o->port), 2 | BPF_F_MARK_MANGLED_0) < 0)
        return -1;
    const __u8 *orig = s->saved;
    __builtin_memcpy(h, o->dst_mac, 12);
    __builtin_memcpy(h + 12, orig + 12, 2);
    __u8 *ip = h + ETH_LEN;
    __builtin_memcpy(ip, orig + ETH_LEN, V4_LEN);
    ip[1] = tos_for(s, o);
    ip[8] = ttl_for(s, o);
    __builtin_memcpy(ip + 12, &to[1], 4);
    __builtin_memcpy(ip + 16, &to[0], 4);
    __builtin_memcpy(ip + V4_LEN, orig + ETH_LEN + V4_LEN, 2);
    __u16 to_port = BE16(o->port);
    __builtin_memcpy(ip + V4_LEN + 2, &to_port, 2);
    // The checksum of the header as written, read back (summed from the
    // values on their way in, they would all be held in registers at once,
    // and some spilled).
    asm volatile("" ::: "memory");
    set_v4_checksum(ip);
    return store_bytes(skb, 0, h, ETH_LEN + V4_LEN + 4, 0) < 0 ? -1 : 0;
}

INLINE int rewrite_v6(struct __sk_buff *skb, struct scratch *s, const struct output *o) {
    // Ethernet, IPv6, UDP ports.
    __u8 *h = s->hdr;
    if (load_bytes(skb, ETH_LEN, h + ETH_LEN, V6_LEN + 4) < 0)
        return -1;
    __u32 *from = s->from, *to = s->to;
    __builtin_memcpy(&from[0], h + ETH_LEN + 24, 16);
    __builtin_memcpy(&from[4], h + ETH_LEN + 8, 16);
    __builtin_memcpy(&to[0], o->dst, 16);
    __builtin_memcpy(&to[4], (o->flags & OUT_KEEP_SRC) ? s->p.src : o->src, 16);
    __s64 diff = csum_diff(from, 32, to, 32, 0);
    if (diff < 0 || l4_csum_replace(skb, s->p.l4 + 6, 0, diff, BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0) < 0)
        return -1;
    __u16 now_port;
    __builtin_memcpy(&now_port, h + ETH_LEN + V6_LEN + 2, 2);
    if (l4_csum_replace(skb, s->p.l4 + 6, now_port, BE16(o->port), 2 | BPF_F_MARK_MANGLED_0) < 0)
        return -1;
    const __u8 *orig = s->saved;
    __builtin_memcpy(h, o->dst_mac, 12);
    __builtin_memcpy(h + 12, orig + 12, 2);
    __u8 *ip = h + ETH_LEN;
    __builtin_memcpy(ip, orig + ETH_LEN, V6_LEN);
    __u8 tos = tos_for(s, o);
    ip[0] = 0x60 | (tos >> 4);
    ip[1] = (tos << 4) | (ip[1] & 0x0f);
    ip[7] = ttl_for(s, o);
    __builtin_memcpy(ip + 8, &to[4], 16);
    __builtin_memcpy(ip + 24, &to[0], 16);
    __builtin_memcpy(ip + V6_LEN, orig + ETH_LEN + V6_LEN, 2);
    __u16 to_port = BE16(o->port);
    __builtin_memcpy(ip + V6_LEN + 2, &to_port, 2);
    return store_bytes(skb, 0, h, ETH_LEN + V6_LEN + 4, 0) < 0 ? -1 : 0;
}

// The addresses (destination, then source) of the IP header of `family`
// at `ip` (8-byte aligned), into `to`: 8 bytes for IPv4, 32 for IPv6.
INLINE void addresses_of(const __u8 *ip, __u32 *to, const int family) {
    const __u32 *w = __builtin_assume_aligned(ip, 8);
    if (family == 4) {
        to[0] = w[4];
        to[1] = w[3];
    } else {
        to[0] = w[6];
        to[1] = w[7];
        to[2] = w[8];
        to[3] = w[9];
        to[4] = w[2];
        to[5] = w[3];
        to[6] = w[4];
        to[7] = w[5];
    }
}

// Writes output `o`'s headers for a datagram of `family` that leaves as
// the other IP version. At the first such output the frame itself becomes
// one of the other version (bpf_skb_change_proto makes room for the longer
// header, or takes the difference off, right after the Ethernet header;
// the UDP header and payload stay as they are); later ones find it so. The
// UDP checksum is updated for the pseudo-header's addresses (at the first,
// those of the input's version still in the frame; later, the last
// output's) and for the port; the IP header is written afresh, as the
// workers write it: IPv6 with the TOS byte as its traffic class and no
// flow label, IPv4 with identification 0 and don't-fragment set. An IPv4
// datagram without a UDP checksum never comes here (RULE_CHECKSUM_FOR_V6).
INLINE int translate(struct __sk_buff *skb, struct scratch *s, const struct output *o, const int family) {
    const int other = family == 4 ? 6 : 4;
    const __u32 in_len = family == 4 ? V4_LEN : V6_LEN;
    const __u32 out_len = family == 4 ? V6_LEN : V4_LEN;
    s->xlat_first = !s->xlat;
    if (s->xlat_first) {
        if (load_bytes(skb, ETH_LEN, s->xh + 2 + ETH_LEN, in_len + 4) < 0)
            return -1;
        addresses_of(s->xh + 2 + ETH_LEN, s->from, family);
        __builtin_memcpy(&s->port_now, s->xh + 2 + ETH_LEN + in_len + 2, 2);
        if (change_proto(skb, family == 4 ? BE16(0x86dd) : BE16(0x0800), 0) < 0)
            return -1;
        s->xlat = 1;
    } else {
        if (load_bytes(skb, ETH_LEN, s->xh + 2 + ETH_LEN, out_len + 4) < 0)
            return -1;
        addresses_of(s->xh + 2 + ETH_LEN, s->from, other);
        __builtin_memcpy(&s->port_now, s->xh + 2 + ETH_LEN + out_len + 2, 2);
    }
    __s64 diff;
    if (other == 6) {
        __builtin_memcpy(&s->to[0], o->dst, 16);
        __builtin_memcpy(&s->to[4], o->src, 16);
        diff = s->xlat_first ? csum_diff(s->from, 8, s->to, 32, 0) : csum_diff(s->from, 32, s->to, 32, 0);
    } else {
        __builtin_memcpy(&s->to[0], o->dst, 4);
        __builtin_memcpy(&s->to[1], o->src, 4);
        diff = s->xlat_first ? csum_diff(s->from, 32, s->to, 8, 0) : csum_diff(s->from, 8, s->to, 8, 0);
    }
    if (diff < 0 ||
        l4_csum_replace(skb, ETH_LEN + out_len + 6, 0, diff, BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0) < 0)
        return -1;
    if (l4_csum_replace(skb, ETH_LEN + out_len + 6, s->port_now, BE16(o->port), 2 | BPF_F_MARK_MANGLED_0) < 0)
        return -1;
    __u8 *h = s->xh + 2;
    __u16 *mac = __builtin_assume_aligned(h, 2);
    const __u16 *omac = __builtin_assume_aligned(o->dst_mac, 4);
#pragma clang loop unroll(full)
    for (int i = 0; i < 6; i++) {
        mac[i] = omac[i];
        asm volatile("" ::: "memory");
    }
    __u8 *ip = s->xh + 2 + ETH_LEN;
    __u32 *w = __builtin_assume_aligned(ip, 8);
    if (other == 6) {
        h[12] = 0x86;
        h[13] = 0xdd;
        ip[0] = 0x60 | (tos_for(s, o) >> 4);
        ip[1] = tos_for(s, o) << 4;
        ip[2] = 0;
        ip[3] = 0;
        ip[4] = s->p.udp_len >> 8;
        ip[5] = s->p.udp_len & 0xff;
        ip[6] = 17;
        ip[7] = ttl_for(s, o);
        w[2] = s->to[4];
        w[3] = s->to[5];
        w[4] = s->to[6];
        w[5] = s->to[7];
        w[6] = s->to[0];
        w[7] = s->to[1];
        w[8] = s->to[2];
        w[9] = s->to[3];
    } else {
        h[12] = 0x08;
        h[13] = 0x00;
        ip[0] = 0x45;
        ip[1] = tos_for(s, o);
        ip[2] = (V4_LEN + s->p.udp_len) >> 8;
        ip[3] = (V4_LEN + s->p.udp_len) & 0xff;
        ip[4] = 0;
        ip[5] = 0;
        ip[6] = 0x40;
        ip[7] = 0;
        ip[8] = ttl_for(s, o);
        ip[9] = 17;
        w[3] = s->to[1];
        w[4] = s->to[0];
    }
    __builtin_memcpy(ip + out_len, s->saved + ETH_LEN + in_len, 2);
    ip[out_len + 2] = o->port >> 8;
    ip[out_len + 3] = o->port & 0xff;
    if (other == 4) {
        asm volatile("" ::: "memory");
        set_v4_checksum(ip);
    }
    return store_bytes(skb, 0, s->xh + 2, ETH_LEN + out_len + 4, 0) < 0 ? -1 : 0;
}

INLINE int rewrite(struct __sk_buff *skb, struct scratch *s, const struct output *o, const int family) {
    // (An output of the input's own version after one of the other never
    // comes: the other version's come last.)
    int rc = (o->flags & OUT_OTHER_FAMILY) ? translate(skb, s, o, family)
             : s->xlat                     ? -1
             : family == 4                 ? rewrite_v4(skb, s, o)
                                           : rewrite_v6(skb, s, o);
    if (rc < 0)
        return -1;
    __u32 tci = o->vlan ? (s->p.tci & 0xe000) | o->vlan : 0;
    if (skb->vlan_present) {
        if (o->vlan && skb->vlan_tci == tci)
            return 0;
        if (vlan_pop(skb) < 0)
            return -1;
    }
    // (The tag worked out again rather than kept across the pop.)
    if (o->vlan && vlan_push(skb, BE16(0x8100), (s->p.tci & 0xe000) | o->vlan) < 0)
        return -1;
    return 0;
}

// Forwards a datagram of `family` (a constant: each family is compiled,
// and verified, on a path of its own) that rule `r` takes.
INLINE int forward(struct __sk_buff *skb, struct scratch *s, struct rule *r, const int family) {
    const __u32 saved_len = ETH_LEN + (family == 4 ? V4_LEN : V6_LEN) + UDP_LEN;
    s->rule = r->counters;
    s->first = r->first;
    s->nout = r->count;
    s->rflags = r->flags;
    __u32 payload = s->p.udp_len - UDP_LEN;
    count(s, C_RX_FRAMES, 1);
    count(s, C_RX_BYTES, skb->len);
    // An arbitrated line's copy stops here (a local listener still gets
    // it); the rule counts what it forwarded.
    if ((s->rflags & RULE_ARB) && !arbitrate(skb, s, r)) {
        s->keep = listened(skb, s, family);
        return s->keep ? TCX_NEXT : TCX_DROP;
    }
    count(s, s->rule + C_RULE_PACKETS, 1);
    count(s, s->rule + C_RULE_BYTES, payload);
    if (s->rflags & RULE_HEALTH)
        follow(skb, s, s->rule);

    s->keep = listened(skb, s, family);
    if (load_bytes(skb, 0, s->saved, saved_len) < 0)
        return TCX_NEXT;
    s->xlat = 0;
    __u64 *standby_word = array_entry(s, &counters, C_STANDBY);
    s->standby = standby_word ? *(volatile __u64 *)standby_word : 0;

    // A pointer stored on the stack, once per output (nothing reads it).
    // Without CAP_PERFMON the verifier puts a speculation barrier after
    // such a store, and a path it follows under speculation ends there:
    // the one past the loop's last check, which would otherwise go on
    // round the loop with the count forgotten until the verifier gives up
    // (`i != MAX_FANOUT` never holds again) or calls it an infinite loop.
    // With CAP_PERFMON, or as root, it is a plain store.
    void *volatile fence __attribute__((unused));
    for (__u32 i = 0; i < MAX_FANOUT; i++) {
        fence = s;
        // Addresses in `s` are worked out where they are used, for each
        // output, rather than once before the loop and kept on the stack.
        asm volatile("" : "+r"(s));
        if (i >= s->nout)
            break;
        struct output *o = array_entry(s, &outputs, s->first + i);
        if (!o)
            break;
        if (!(o->flags & OUT_TTL_FIXED) && s->p.ttl <= 1) {
            count(s, o->counters + C_OUT_TTL_EXPIRED, 1);
            continue;
        }
        if (((family == 4) == !(o->flags & OUT_OTHER_FAMILY) ? V4_LEN : V6_LEN) + s->p.udp_len > o->mtu) {
            count(s, o->counters + C_OUT_TOO_BIG, 1);
            continue;
        }
        if (s->standby) {
            count(s, o->counters + C_OUT_HELD, 1);
            continue;
        }
        if (rewrite(skb, s, o, family) < 0) {
            count(s, o->counters + C_OUT_SEND_ERROR, 1);
            continue;
        }
        long ret = clone_redirect(skb, o->ifindex, 0);
        if (ret == 0 || ret == 2 /* NET_XMIT_CN: queued */) {
            count(s, o->counters + C_OUT_PACKETS, 1);
            count(s, o->counters + C_OUT_BYTES, s->p.udp_len - UDP_LEN);
            count(s, C_TX_PACKETS, 1);
        } else {
            count(s, o->counters + (ret > 0 ? C_OUT_QUEUE_FULL : C_OUT_SEND_ERROR), 1);
        }
    }
    // Every output has its copy (or counted why not): the frame itself is
    // done with, and nothing of it goes up the host's stack.
    if (!s->keep)
        return TCX_DROP;
    // A local socket wants it: the frame goes up as it came.
    if (s->xlat && change_proto(skb, family == 4 ? BE16(0x0800) : BE16(0x86dd), 0) < 0)
        return TCX_DROP;
    if (skb->vlan_present)
        vlan_pop(skb);
    if (s->p.tagged)
        vlan_push(skb, BE16(0x8100), s->p.tci);
    store_bytes(skb, 0, s->saved, saved_len, 0);
    return TCX_NEXT;
}

SEC("tcx/ingress")
int mcr_ingress(struct __sk_buff *skb) {
    struct scratch *s = scratch_of(SCRATCH_INGRESS);
    // (Never: every CPU has the entry.)
    if (!s || !parse(skb, s))
        return TCX_NEXT;
    // A rule the workers forward: their ring took the frame before this
    // hook, and it goes on up the host's stack as it would without MCR.
    // (Consuming it here, to spare the stack, measured no cheaper.)
    struct rule *r = owner(skb, s);
    if (!r)
        return TCX_NEXT;
    return s->p.family == 4 ? forward(skb, s, r, 4) : forward(skb, s, r, 6);
}

char LICENSE[] SEC("license") = "Apache-2.0";
