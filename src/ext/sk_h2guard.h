/* sk_h2guard.h — the defences an HTTP/2 connection adds to its framing library (nghttp2): per
 * connection budgets for the frames the published HTTP/2 attacks of 2019-2025 send, each a token
 * bucket. Layer 1 (transport): plain C, no Python, no nghttp2 header (error codes are RFC 9113
 * §7 numbers), so the C tests drive it with a clock of their own.
 *
 * Why skirr counts at all: nghttp2 1.52 (Debian bookworm, with backports) already limits
 * client-sent RST_STREAM (Rapid Reset, CVE-2023-44487: nghttp2_option_set_stream_reset_rate_limit)
 * and CONTINUATION frames per header block (CVE-2024-27316 / -28182:
 * nghttp2_option_set_max_continuations), and the SETTINGS entries and outbound ACKs it queues.
 * It does not count the streams the SERVER resets because the client broke a rule (MadeYouReset,
 * CVE-2025-8671: a WINDOW_UPDATE of 0 on a stream, DATA past a stream's window or on a closed
 * stream, a bad header block, each costing the server a stream's work and freeing the client's
 * slot at once), nor frames that cost the server work and carry nothing: SETTINGS and PING (each
 * answered with an ACK), DATA with no payload and no END_STREAM, PRIORITY, WINDOW_UPDATE. The
 * HTTP/2 handler (sk_h2.c) calls sk_h2guard_count() for each such event as nghttp2 reports it
 * (on_frame_recv / on_frame_send / on_invalid_frame_recv callbacks) and, on a non-zero answer,
 * sends GOAWAY with that error code (ENHANCE_YOUR_CALM) and closes the connection once it is out.
 *
 * Each kind has a bucket of `burst` tokens refilled at `rate` tokens per second; an event takes
 * one token; an event with no token left is over budget. A well-behaved client never comes near:
 * the defaults allow a browser's or a gRPC client's pattern (a SETTINGS per connection, a PING
 * every few seconds, resets as a user navigates) with a margin of two orders of magnitude, and
 * refuse a flood within its first second.
 */
#ifndef SK_H2GUARD_H
#define SK_H2GUARD_H

#include <stdint.h>

/* RFC 9113 §7 error code of the GOAWAY a connection over budget gets. */
#define SK_H2_ENHANCE_YOUR_CALM 0xb

/* The events counted (index into the tables below). */
enum sk_h2guard_kind {
    SK_H2G_SERVER_RESET = 0, /* a stream the server reset (RST_STREAM sent) or refused because of
                              * what the client sent, not because the app failed (MadeYouReset) */
    SK_H2G_CLIENT_RESET,     /* a RST_STREAM received (Rapid Reset; beside nghttp2's own limit,
                              * so the budget is the same on a library without it) */
    SK_H2G_SETTINGS,         /* a SETTINGS frame received (not an ACK): each is acknowledged */
    SK_H2G_PING,             /* a PING received (not an ACK): each is answered */
    SK_H2G_EMPTY_DATA,       /* a DATA frame with no payload and no END_STREAM */
    SK_H2G_PRIORITY,         /* a PRIORITY frame (RFC 9113 §5.3.2: deprecated, still parsed) */
    SK_H2G_WINDOW_UPDATE,    /* a WINDOW_UPDATE frame received */
    SK_H2G_KINDS
};

/* Budgets: burst (tokens, >= 1) and rate (tokens per second, >= 0; 0: the burst is all a
 * connection ever gets). */
typedef struct {
    uint32_t burst[SK_H2G_KINDS];
    double rate[SK_H2G_KINDS];
} sk_h2guard_limits_t;

/* A connection's buckets. Plain data: zero-filled is not valid, use sk_h2guard_init. */
typedef struct {
    const sk_h2guard_limits_t *limits; /* borrowed: outlives the guard (the server's) */
    double tokens[SK_H2G_KINDS];       /* tokens left */
    double last[SK_H2G_KINDS];         /* monotonic seconds of the last refill */
    uint64_t seen[SK_H2G_KINDS];       /* events counted (for the debug line and the tests) */
    int tripped;                       /* the kind that went over budget, or -1 */
} sk_h2guard_t;

/* The defaults (static storage), as described above; a server copies them and may change them. */
extern const sk_h2guard_limits_t sk_h2guard_defaults;

/* Starts `g` full, at monotonic time `now` (seconds). */
void sk_h2guard_init(sk_h2guard_t *g, const sk_h2guard_limits_t *limits, double now);

/* Counts one event of `kind` at monotonic time `now` (seconds, never decreasing between calls on
 * one guard). Returns 0 within budget, or SK_H2_ENHANCE_YOUR_CALM once the kind's bucket is empty
 * (and from then on for every event of any kind: the connection is to be closed; g->tripped says
 * which kind). An out-of-range kind counts nothing and returns 0. */
uint32_t sk_h2guard_count(sk_h2guard_t *g, int kind, double now);

/* Gives `kind` `tokens` more, beyond its refill (added to the seam by h2guard): events the server
 * itself provoked and so paid for. The handler credits SK_H2G_WINDOW_UPDATE with one token per
 * 2 KiB of each DATA frame it sends (rounded up: a Go or grpc-go client sends a stream and a
 * connection WINDOW_UPDATE every 4 KiB it reads) and SK_H2G_PING with one per DATA frame sent
 * (grpc's BDP probe: at most one PING per DATA it receives). A bucket holds at most its burst plus
 * 2^20 credited tokens. Nothing for an out-of-range kind or a tripped guard. */
void sk_h2guard_credit(sk_h2guard_t *g, int kind, uint32_t tokens);

/* The kind's name for logs and tests ("server_reset", "client_reset", "settings", "ping",
 * "empty_data", "priority", "window_update"), static storage; "?" for an out-of-range kind. */
const char *sk_h2guard_name(int kind);

#endif
