/* The ABI guard for MCR's hand-written libsrt bindings (src/srt/ffi.rs and
 * src/srt/perfmon.rs). build.rs compiles this file against the installed
 * <srt/srt.h>; if a mirrored struct, field or constant differs from what the
 * Rust side assumes, the build stops here instead of corrupting memory at
 * run time. The Rust side asserts the same numbers with offset_of!, and a
 * unit test (srt::ffi::tests) checks that the two lists agree line by line.
 *
 * Each line: FIELD(C type, field, C field type, byte offset),
 * SIZE(C type, bytes) or VALUE(constant, value). */

#include <stddef.h>
#include <stdint.h>
#include <srt/srt.h>
#include <srt/access_control.h>

#define FIELD(type, field, ctype, offset)                                      \
    _Static_assert(offsetof(type, field) == (offset) &&                        \
                       _Generic(((type *)0)->field, ctype: 1, default: 0),     \
                   #type "." #field " is not a " #ctype " at " #offset         \
                   ": update src/srt/ (libsrt's header changed)")
#define SIZE(type, bytes)                                                      \
    _Static_assert(sizeof(type) == (bytes),                                    \
                   "sizeof(" #type ") is not " #bytes                          \
                   ": update src/srt/ (libsrt's header changed)")
#define VALUE(name, value)                                                     \
    _Static_assert((long long)(name) == (long long)(value),                    \
                   #name " is not " #value                                     \
                   ": update src/srt/ffi.rs (libsrt's header changed)")

/* The version the bindings were written against (checked again at run time
 * with srt_getversion()). */
VALUE(SRT_VERSION_MAJOR, 1);
VALUE(SRT_VERSION_MINOR, 5);

/* SRT_TRACEBSTATS, all of it. */
SIZE(SRT_TRACEBSTATS, 496);
FIELD(SRT_TRACEBSTATS, msTimeStamp, int64_t, 0);
FIELD(SRT_TRACEBSTATS, pktSentTotal, int64_t, 8);
FIELD(SRT_TRACEBSTATS, pktRecvTotal, int64_t, 16);
FIELD(SRT_TRACEBSTATS, pktSndLossTotal, int, 24);
FIELD(SRT_TRACEBSTATS, pktRcvLossTotal, int, 28);
FIELD(SRT_TRACEBSTATS, pktRetransTotal, int, 32);
FIELD(SRT_TRACEBSTATS, pktSentACKTotal, int, 36);
FIELD(SRT_TRACEBSTATS, pktRecvACKTotal, int, 40);
FIELD(SRT_TRACEBSTATS, pktSentNAKTotal, int, 44);
FIELD(SRT_TRACEBSTATS, pktRecvNAKTotal, int, 48);
FIELD(SRT_TRACEBSTATS, usSndDurationTotal, int64_t, 56);
FIELD(SRT_TRACEBSTATS, pktSndDropTotal, int, 64);
FIELD(SRT_TRACEBSTATS, pktRcvDropTotal, int, 68);
FIELD(SRT_TRACEBSTATS, pktRcvUndecryptTotal, int, 72);
FIELD(SRT_TRACEBSTATS, byteSentTotal, uint64_t, 80);
FIELD(SRT_TRACEBSTATS, byteRecvTotal, uint64_t, 88);
FIELD(SRT_TRACEBSTATS, byteRcvLossTotal, uint64_t, 96);
FIELD(SRT_TRACEBSTATS, byteRetransTotal, uint64_t, 104);
FIELD(SRT_TRACEBSTATS, byteSndDropTotal, uint64_t, 112);
FIELD(SRT_TRACEBSTATS, byteRcvDropTotal, uint64_t, 120);
FIELD(SRT_TRACEBSTATS, byteRcvUndecryptTotal, uint64_t, 128);
FIELD(SRT_TRACEBSTATS, pktSent, int64_t, 136);
FIELD(SRT_TRACEBSTATS, pktRecv, int64_t, 144);
FIELD(SRT_TRACEBSTATS, pktSndLoss, int, 152);
FIELD(SRT_TRACEBSTATS, pktRcvLoss, int, 156);
FIELD(SRT_TRACEBSTATS, pktRetrans, int, 160);
FIELD(SRT_TRACEBSTATS, pktRcvRetrans, int, 164);
FIELD(SRT_TRACEBSTATS, pktSentACK, int, 168);
FIELD(SRT_TRACEBSTATS, pktRecvACK, int, 172);
FIELD(SRT_TRACEBSTATS, pktSentNAK, int, 176);
FIELD(SRT_TRACEBSTATS, pktRecvNAK, int, 180);
FIELD(SRT_TRACEBSTATS, mbpsSendRate, double, 184);
FIELD(SRT_TRACEBSTATS, mbpsRecvRate, double, 192);
FIELD(SRT_TRACEBSTATS, usSndDuration, int64_t, 200);
FIELD(SRT_TRACEBSTATS, pktReorderDistance, int, 208);
FIELD(SRT_TRACEBSTATS, pktRcvAvgBelatedTime, double, 216);
FIELD(SRT_TRACEBSTATS, pktRcvBelated, int64_t, 224);
FIELD(SRT_TRACEBSTATS, pktSndDrop, int, 232);
FIELD(SRT_TRACEBSTATS, pktRcvDrop, int, 236);
FIELD(SRT_TRACEBSTATS, pktRcvUndecrypt, int, 240);
FIELD(SRT_TRACEBSTATS, byteSent, uint64_t, 248);
FIELD(SRT_TRACEBSTATS, byteRecv, uint64_t, 256);
FIELD(SRT_TRACEBSTATS, byteRcvLoss, uint64_t, 264);
FIELD(SRT_TRACEBSTATS, byteRetrans, uint64_t, 272);
FIELD(SRT_TRACEBSTATS, byteSndDrop, uint64_t, 280);
FIELD(SRT_TRACEBSTATS, byteRcvDrop, uint64_t, 288);
FIELD(SRT_TRACEBSTATS, byteRcvUndecrypt, uint64_t, 296);
FIELD(SRT_TRACEBSTATS, usPktSndPeriod, double, 304);
FIELD(SRT_TRACEBSTATS, pktFlowWindow, int, 312);
FIELD(SRT_TRACEBSTATS, pktCongestionWindow, int, 316);
FIELD(SRT_TRACEBSTATS, pktFlightSize, int, 320);
FIELD(SRT_TRACEBSTATS, msRTT, double, 328);
FIELD(SRT_TRACEBSTATS, mbpsBandwidth, double, 336);
FIELD(SRT_TRACEBSTATS, byteAvailSndBuf, int, 344);
FIELD(SRT_TRACEBSTATS, byteAvailRcvBuf, int, 348);
FIELD(SRT_TRACEBSTATS, mbpsMaxBW, double, 352);
FIELD(SRT_TRACEBSTATS, byteMSS, int, 360);
FIELD(SRT_TRACEBSTATS, pktSndBuf, int, 364);
FIELD(SRT_TRACEBSTATS, byteSndBuf, int, 368);
FIELD(SRT_TRACEBSTATS, msSndBuf, int, 372);
FIELD(SRT_TRACEBSTATS, msSndTsbPdDelay, int, 376);
FIELD(SRT_TRACEBSTATS, pktRcvBuf, int, 380);
FIELD(SRT_TRACEBSTATS, byteRcvBuf, int, 384);
FIELD(SRT_TRACEBSTATS, msRcvBuf, int, 388);
FIELD(SRT_TRACEBSTATS, msRcvTsbPdDelay, int, 392);
FIELD(SRT_TRACEBSTATS, pktSndFilterExtraTotal, int, 396);
FIELD(SRT_TRACEBSTATS, pktRcvFilterExtraTotal, int, 400);
FIELD(SRT_TRACEBSTATS, pktRcvFilterSupplyTotal, int, 404);
FIELD(SRT_TRACEBSTATS, pktRcvFilterLossTotal, int, 408);
FIELD(SRT_TRACEBSTATS, pktSndFilterExtra, int, 412);
FIELD(SRT_TRACEBSTATS, pktRcvFilterExtra, int, 416);
FIELD(SRT_TRACEBSTATS, pktRcvFilterSupply, int, 420);
FIELD(SRT_TRACEBSTATS, pktRcvFilterLoss, int, 424);
FIELD(SRT_TRACEBSTATS, pktReorderTolerance, int, 428);
FIELD(SRT_TRACEBSTATS, pktSentUniqueTotal, int64_t, 432);
FIELD(SRT_TRACEBSTATS, pktRecvUniqueTotal, int64_t, 440);
FIELD(SRT_TRACEBSTATS, byteSentUniqueTotal, uint64_t, 448);
FIELD(SRT_TRACEBSTATS, byteRecvUniqueTotal, uint64_t, 456);
FIELD(SRT_TRACEBSTATS, pktSentUnique, int64_t, 464);
FIELD(SRT_TRACEBSTATS, pktRecvUnique, int64_t, 472);
FIELD(SRT_TRACEBSTATS, byteSentUnique, uint64_t, 480);
FIELD(SRT_TRACEBSTATS, byteRecvUnique, uint64_t, 488);

/* SRT_MSGCTRL */
SIZE(SRT_MSGCTRL, 48);
FIELD(SRT_MSGCTRL, flags, int, 0);
FIELD(SRT_MSGCTRL, msgttl, int, 4);
FIELD(SRT_MSGCTRL, inorder, int, 8);
FIELD(SRT_MSGCTRL, boundary, int, 12);
FIELD(SRT_MSGCTRL, srctime, int64_t, 16);
FIELD(SRT_MSGCTRL, pktseq, int32_t, 24);
FIELD(SRT_MSGCTRL, msgno, int32_t, 28);
FIELD(SRT_MSGCTRL, grpdata, SRT_SOCKGROUPDATA *, 32);
FIELD(SRT_MSGCTRL, grpdata_size, size_t, 40);

/* SRT_EPOLL_EVENT */
SIZE(SRT_EPOLL_EVENT, 8);
FIELD(SRT_EPOLL_EVENT, fd, SRTSOCKET, 0);
FIELD(SRT_EPOLL_EVENT, events, int, 4);

/* Socket options (SRT_SOCKOPT) the bindings set or read. */
VALUE(SRTO_SNDSYN, 1);
VALUE(SRTO_RCVSYN, 2);
VALUE(SRTO_SNDBUF, 5);
VALUE(SRTO_RCVBUF, 6);
VALUE(SRTO_MAXBW, 16);
VALUE(SRTO_LATENCY, 23);
VALUE(SRTO_PASSPHRASE, 26);
VALUE(SRTO_PBKEYLEN, 27);
VALUE(SRTO_CONNTIMEO, 36);
VALUE(SRTO_RCVLATENCY, 43);
VALUE(SRTO_PEERLATENCY, 44);
VALUE(SRTO_STREAMID, 46);
VALUE(SRTO_PAYLOADSIZE, 49);
VALUE(SRTO_TRANSTYPE, 50);
VALUE(SRTO_PEERIDLETIMEO, 55);

/* SRT_TRANSTYPE */
VALUE(SRTT_LIVE, 0);

/* SRT_SOCKSTATUS */
VALUE(SRTS_INIT, 1);
VALUE(SRTS_OPENED, 2);
VALUE(SRTS_LISTENING, 3);
VALUE(SRTS_CONNECTING, 4);
VALUE(SRTS_CONNECTED, 5);
VALUE(SRTS_BROKEN, 6);
VALUE(SRTS_CLOSING, 7);
VALUE(SRTS_CLOSED, 8);
VALUE(SRTS_NONEXIST, 9);

/* SRT_ERRNO */
VALUE(SRT_EUNKNOWN, -1);
VALUE(SRT_SUCCESS, 0);
VALUE(SRT_ECONNSETUP, 1000);
VALUE(SRT_ENOSERVER, 1001);
VALUE(SRT_ECONNREJ, 1002);
VALUE(SRT_ESCLOSED, 1005);
VALUE(SRT_ECONNFAIL, 2000);
VALUE(SRT_ECONNLOST, 2001);
VALUE(SRT_ENOCONN, 2002);
VALUE(SRT_EINVPARAM, 5003);
VALUE(SRT_EINVSOCK, 5004);
VALUE(SRT_ELARGEMSG, 5012);
VALUE(SRT_EASYNCFAIL, 6000);
VALUE(SRT_EASYNCSND, 6001);
VALUE(SRT_EASYNCRCV, 6002);
VALUE(SRT_ETIMEOUT, 6003);

/* SRT_REJECT_REASON and the reject code categories */
VALUE(SRT_REJ_UNKNOWN, 0);
VALUE(SRT_REJ_PEER, 2);
VALUE(SRT_REJ_BACKLOG, 5);
VALUE(SRT_REJ_CLOSE, 7);
VALUE(SRT_REJ_BADSECRET, 10);
VALUE(SRT_REJ_UNSECURE, 11);
VALUE(SRT_REJ_TIMEOUT, 16);
VALUE(SRT_REJC_PREDEFINED, 1000);
VALUE(SRT_REJC_USERDEFINED, 2000);

/* access_control.h */
VALUE(SRT_REJX_FALLBACK, 1000);
VALUE(SRT_REJX_BAD_REQUEST, 1400);
VALUE(SRT_REJX_UNAUTHORIZED, 1401);
VALUE(SRT_REJX_OVERLOAD, 1402);
VALUE(SRT_REJX_FORBIDDEN, 1403);
VALUE(SRT_REJX_NOTFOUND, 1404);
VALUE(SRT_REJX_BAD_MODE, 1405);
VALUE(SRT_REJX_UNACCEPTABLE, 1406);
VALUE(SRT_REJX_CONFLICT, 1409);
VALUE(SRT_REJX_NOTSUP_MEDIA, 1415);
VALUE(SRT_REJX_LOCKED, 1423);
VALUE(SRT_REJX_FAILED_DEPEND, 1424);
VALUE(SRT_REJX_ISE, 1500);
VALUE(SRT_REJX_UNIMPLEMENTED, 1501);
VALUE(SRT_REJX_GW, 1502);
VALUE(SRT_REJX_DOWN, 1503);
VALUE(SRT_REJX_VERSION, 1505);
VALUE(SRT_REJX_NOROOM, 1507);

/* SRT_EPOLL_OPT and SRT_EPOLL_FLAGS */
VALUE(SRT_EPOLL_IN, 0x1);
VALUE(SRT_EPOLL_OUT, 0x4);
VALUE(SRT_EPOLL_ERR, 0x8);
VALUE(SRT_EPOLL_ET, 0x80000000);
VALUE(SRT_EPOLL_ENABLE_EMPTY, 1);

/* Logging (syslog levels, logging_api.h flags) */
VALUE(LOG_CRIT, 2);
VALUE(LOG_ERR, 3);
VALUE(LOG_WARNING, 4);
VALUE(LOG_NOTICE, 5);
VALUE(LOG_DEBUG, 7);
VALUE(SRT_LOGF_DISABLE_TIME, 1);
VALUE(SRT_LOGF_DISABLE_THREADNAME, 2);
VALUE(SRT_LOGF_DISABLE_SEVERITY, 4);
VALUE(SRT_LOGF_DISABLE_EOL, 8);
