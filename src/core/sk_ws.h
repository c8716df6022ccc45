/* sk_ws.h — sans-I/O WebSocket frame codec (RFC 6455 §5, §7.4): the server's side.
 *
 * Owns: turning client-to-server frame bytes into pull-style message events (message start, data
 * piece, message end, ping, pong, close, error with the close code to send), every frame and
 * message rule of RFC 6455 §5 a server must enforce, incremental UTF-8 validation of text messages
 * (§8.1), the per-message size limit, and writing server-to-client frame headers and close frames.
 * Never: includes Python.h, performs I/O, allocates (the serializer appends to an sk_buf_t the
 * caller gives; a control frame's payload is kept in the parser struct), keeps global mutable
 * state, or inflates permessage-deflate data (RFC 7692: the embedder's job, see allow_rsv1).
 *
 * Parser usage (the shape of sk_parser_execute): the embedder calls sk_ws_parser_execute() with
 * the bytes it has; it returns how many it consumed and fills one event. After any event but
 * SK_WS_EV_NONE and SK_WS_EV_ERROR the embedder handles it and calls again with the unconsumed rest
 * (which may be empty). SK_WS_EV_NONE means every byte was consumed and more are needed. Masked
 * payload bytes are unmasked in place: the input is writable, and only bytes the call reports as
 * consumed are ever modified. After SK_WS_EV_ERROR the parser is dead (every later call returns the
 * same error and consumes nothing): the embedder sends a close frame with ev.code (RFC 6455 §7.1.7,
 * "Fail the WebSocket Connection") and closes. After SK_WS_EV_CLOSE the parser is closed: later
 * bytes are consumed and ignored (§5.5.1: the peer sends no frame after its Close).
 *
 * The events of a byte stream do not depend on how it is split across calls, except that a data
 * frame's payload may come as several SK_WS_EV_DATA pieces (a piece is never empty).
 */
#ifndef SK_WS_H
#define SK_WS_H

#include <stddef.h>
#include <stdint.h>
#include "sk_core.h"

/* Opcodes (RFC 6455 §5.2, §11.8). Every other value is reserved: received, it fails the
 * connection with 1002. */
enum sk_ws_opcode {
    SK_WS_CONT = 0x0,
    SK_WS_TEXT = 0x1,
    SK_WS_BINARY = 0x2,
    SK_WS_CLOSE = 0x8,
    SK_WS_PING = 0x9,
    SK_WS_PONG = 0xA,
};

/* Close codes (RFC 6455 §7.4.1) the codec produces or needs by name. */
enum sk_ws_close_code {
    SK_WS_NORMAL = 1000,
    SK_WS_PROTOCOL_ERROR = 1002,
    SK_WS_NO_STATUS = 1005, /* reported for a Close with an empty payload; never sent (§7.4.1) */
    SK_WS_ABNORMAL = 1006,  /* the peer vanished without a Close; never sent (§7.4.1) */
    SK_WS_INVALID_DATA = 1007,
    SK_WS_TOO_BIG = 1009,
};

/* A control frame's payload is at most this many bytes (RFC 6455 §5.5). */
#define SK_WS_MAX_CONTROL 125
/* The longest frame header: 2 bytes, 8 of extended payload length, 4 of masking key (§5.2). */
#define SK_WS_MAX_HEADER 14

typedef struct {
    uint64_t max_message; /* bytes of payload per message, all its frames together; 0 = unlimited.
                           * A frame header that would pass it fails with 1009 (RFC 6455 §7.4.1)
                           * before any of that frame's payload is delivered. */
    uint64_t max_compressed; /* bytes of payload per frame of a compressed message (RSV1),
                              * checked at each frame header instead of max_message; 0 =
                              * max_message as for any message. The embedder bounds the
                              * inflated size at max_message itself: on the wire deflate may
                              * make a message a little longer (sk_ws_deflate_bound), and a
                              * sender that flushes every fragment longer still (RFC 7692
                              * §7.2.1 allows it), so its frames are bounded one by one, as the
                              * websockets library bounds them. */
    uint8_t allow_rsv1;      /* 1 once permessage-deflate is negotiated (RFC 7692 §6): RSV1 is then
                           * allowed on a message's first frame and reported as ev.compressed;
                           * such a message's text is not UTF-8 checked here (the embedder checks
                           * it after inflating). 0: any RSV bit fails with 1002 (RFC 6455 §5.2). */
} sk_ws_limits_t;

enum sk_ws_event_type {
    SK_WS_EV_NONE = 0,        /* all bytes consumed, need more input */
    SK_WS_EV_MESSAGE = 1,     /* a data message starts: ev.opcode SK_WS_TEXT or SK_WS_BINARY,
                               * ev.compressed (RSV1, only with allow_rsv1) */
    SK_WS_EV_DATA = 2,        /* ev.data/ev.len: unmasked payload of the current message, inside
                               * the caller's input (len > 0); text is valid UTF-8 so far */
    SK_WS_EV_MESSAGE_END = 3, /* the current message is complete (its final frame ended) */
    SK_WS_EV_PING = 4,        /* ev.data/ev.len: the payload (<= 125 bytes); answer with a pong */
    SK_WS_EV_PONG = 5,        /* ev.data/ev.len: the payload (<= 125 bytes) */
    SK_WS_EV_CLOSE = 6,       /* ev.code: the peer's code (1005 when the payload was empty);
                               * ev.data/ev.len: its reason, valid UTF-8 (<= 123 bytes) */
    SK_WS_EV_ERROR = 7,       /* ev.code: the close code to send (1002, 1007 or 1009);
                               * ev.reason: static, human-readable cause (not sent) */
};

typedef struct {
    int type;           /* enum sk_ws_event_type */
    int opcode;         /* SK_WS_EV_MESSAGE: SK_WS_TEXT or SK_WS_BINARY */
    int compressed;     /* SK_WS_EV_MESSAGE: 1 if RSV1 was set (permessage-deflate) */
    const char *data;   /* DATA: into the caller's input. PING, PONG, CLOSE: into the parser,
                         * valid until the next call */
    size_t len;         /* bytes at data */
    int code;           /* CLOSE: the peer's close code; ERROR: the close code to send */
    const char *reason; /* ERROR: static text naming the rule and its RFC section */
} sk_ws_event_t;

/* Incremental UTF-8 validation state (RFC 3629 §4), private to sk_ws.c. */
typedef struct {
    uint8_t need; /* continuation bytes still expected */
    uint8_t lo;   /* the next continuation byte's allowed range */
    uint8_t hi;
} sk_ws_utf8_t;

typedef struct {
    sk_ws_limits_t limits;
    /* Private to sk_ws.c. */
    uint8_t state;      /* where in a frame the next byte goes */
    uint8_t fin;        /* current frame: FIN bit */
    uint8_t opcode;     /* current frame: opcode */
    uint8_t need;       /* bytes of extended length or masking key still to read */
    uint8_t mask[4];    /* current frame: masking key */
    uint8_t msg_opcode; /* SK_WS_TEXT/SK_WS_BINARY while a message is in progress, else 0 */
    uint8_t msg_compressed;
    sk_ws_utf8_t utf8;  /* the current text message's UTF-8 state */
    uint8_t ctl_len;    /* bytes of the control frame's payload received */
    uint64_t frame_len; /* current frame: payload length, bytes */
    uint64_t frame_pos; /* current frame: payload bytes consumed */
    uint64_t msg_len;   /* current message: payload bytes so far (all frames) */
    int err_code;       /* dead: the close code to send */
    const char *err_reason;
    char ctl[SK_WS_MAX_CONTROL]; /* the control frame's payload, unmasked */
} sk_ws_parser_t;

/* The longest DEFLATE stream (RFC 1951) of n bytes, whatever the compressor's settings (zlib's
 * deflateBound for parameters other than its defaults, less its 6-byte zlib wrapper): a
 * permessage-deflate message (RFC 7692 §7.2.1, its 4-byte tail removed) of n bytes or fewer
 * inflated, compressed without a flush before its end, is never longer on the wire; one flushed
 * at every fragment may be (hence max_compressed bounds each frame). Saturates at UINT64_MAX. */
static inline uint64_t
sk_ws_deflate_bound(uint64_t n)
{
    uint64_t extra = ((n >> 3) + 1) + ((n >> 6) + 1) + 5;
    return n > UINT64_MAX - extra ? UINT64_MAX : n + extra;
}

/* Initialises p for a new connection with the given limits (copied). */
void sk_ws_parser_init(sk_ws_parser_t *p, const sk_ws_limits_t *limits);

/* Parses up to len bytes of data, unmasking payload bytes in place. Returns the bytes consumed
 * (<= len) and fills *ev. On SK_WS_EV_ERROR the return value is 0 when the parser was already
 * dead, else the bytes before the one that failed; either way p returns that error for ever. */
size_t sk_ws_parser_execute(sk_ws_parser_t *p, char *data, size_t len, sk_ws_event_t *ev);

/* 1 while between messages and frames (no partial frame, no message in progress, not dead):
 * a clean point for the peer's TCP connection to end. */
int sk_ws_parser_idle(const sk_ws_parser_t *p);

/* 1 if code may appear in a received Close frame (RFC 6455 §7.4.1, §7.4.2 and the IANA registry
 * of §11.7): 1000-1003, 1007-1014, 3000-4999. */
int sk_ws_close_code_valid(int code);

/* Checks n bytes as one complete UTF-8 text (RFC 3629 §4: no overlong forms, no surrogates,
 * nothing above U+10FFFF). 1 if valid. */
int sk_ws_utf8_valid(const char *s, size_t n);

/* ---- serializer (server to client: never masked, RFC 6455 §5.1) ------------------------------ */

/* Appends a frame header (2, 4 or 10 bytes: the shortest length encoding, §5.2) for a payload of
 * len bytes that the caller appends next. fin is 0 or 1; rsv1 is 0, or 1 for the first frame of a
 * permessage-deflate compressed message. Returns 0; SK_ENOMEM; SK_ESTATE (nothing appended) for
 * an opcode not in enum sk_ws_opcode, a control frame that is not final or longer than 125 bytes
 * (§5.5), or RSV1 on a control or continuation frame (RFC 7692 §6.1). */
int sk_ws_frame_header(sk_buf_t *out, int fin, int opcode, int rsv1, uint64_t len);

/* Appends a whole final or non-final frame: the header then len bytes of payload. Returns as
 * sk_ws_frame_header(); nothing is appended on an error. */
int sk_ws_frame(sk_buf_t *out, int fin, int opcode, const void *payload, size_t len);

/* Appends a Close frame (§5.5.1). code 0: an empty payload. Otherwise the payload is the code (2
 * bytes, network order) then reason_len bytes of reason. Returns 0; SK_ENOMEM; SK_ESTATE (nothing
 * appended) for a code that must not be sent (not sk_ws_close_code_valid(), e.g. 1005, 1006, 1015),
 * a reason longer than 123 bytes, a reason without a code, or a reason that is not UTF-8. */
int sk_ws_close_frame(sk_buf_t *out, int code, const char *reason, size_t reason_len);

#endif
