/* sk_h2guard.c — an HTTP/2 connection's per-kind token buckets (sk_h2guard.h): the defaults and
 * the arithmetic. Layer 1 (transport): plain C, no Python, no nghttp2, no clock of its own (the
 * caller passes monotonic seconds), so test_h2guard.c drives it with a clock of its own.
 *
 * Owns: nothing beyond the guard the caller hands in (plain data, no allocation).
 * Never: reads a clock, logs, or closes anything (the handler sends the GOAWAY).
 */
#include "sk_h2guard.h"

#include <stddef.h>

/* The defaults. "Never near" is measured against the busiest well-behaved clients known: a
 * browser (Chrome, Firefox, Safari) and gRPC (grpc-go, grpc-core, grpc-java); "a flood" is an
 * attacker on loopback or a LAN, tens of thousands of frames per second, so each budget below is
 * spent within the first second of one (burst + rate events, a few hundred at most, except the
 * resets and WINDOW_UPDATE explained beside them). */
const sk_h2guard_limits_t sk_h2guard_defaults = {
    .burst =
        {
            /* SERVER_RESET: a conforming client makes the server reset nothing; 100 covers a
             * client that opened streams before it saw SETTINGS_MAX_CONCURRENT_STREAMS (100 by
             * default) and had them all refused once. MadeYouReset sends thousands per second. */
            [SK_H2G_SERVER_RESET] = 100,
            /* CLIENT_RESET: a browser cancels at most its open streams (<= 100) per navigation
             * and gRPC one stream per cancelled or hedged call: 500 is five full navigations back
             * to back. Half nghttp2's own default burst (1000 at 33/s,
             * nghttp2_option_set_stream_reset_rate_limit), so this budget speaks first, with
             * ENHANCE_YOUR_CALM, where nghttp2's GOAWAY would say INTERNAL_ERROR. */
            [SK_H2G_CLIENT_RESET] = 500,
            /* SETTINGS: a browser sends one per connection; grpc-go's BDP estimator one more per
             * window change (the window doubles from 64 KiB to its 16 MiB cap: about 9 ever). */
            [SK_H2G_SETTINGS] = 32,
            /* PING: browsers ping an idle connection every 10 s or more; gRPC keepalive is >= 10
             * s (grpc's own servers refuse pings more often than every 5 min without data). BDP
             * probes (one per round trip while DATA arrives) are paid for by the DATA the server
             * sends: the handler credits one token per DATA frame sent (sk_h2guard_credit). */
            [SK_H2G_PING] = 64,
            /* EMPTY_DATA: no client needs a DATA frame without payload and without END_STREAM;
             * 100 tolerates a client that flushes an empty write now and then. */
            [SK_H2G_EMPTY_DATA] = 100,
            /* PRIORITY: Firefox before 2022 sent 5-6 at connection start (its dependency tree),
             * Chrome at most one per stream when it reprioritises: 300 is three full windows of
             * 100 streams. RFC 9113 §5.3.2 deprecated them; the resource-loop attack
             * (CVE-2019-9513) sends them without end. */
            [SK_H2G_PRIORITY] = 300,
            /* WINDOW_UPDATE: a client sends them as it reads the server's DATA (grpc-go and Go's
             * net/http one per stream and one for the connection every 4 KiB read): that share
             * is credited by the handler per DATA frame sent (sk_h2guard_credit). The budget
             * here is what a client may send unprompted: its opening window grants and one per
             * request body it receives for, with room for 1000. */
            [SK_H2G_WINDOW_UPDATE] = 1000,
        },
    .rate =
        {
            [SK_H2G_SERVER_RESET] = 10.0,   /* per second: a racing client's refusals, ten x */
            [SK_H2G_CLIENT_RESET] = 100.0,  /* one full navigation (100 streams) per second */
            [SK_H2G_SETTINGS] = 1.0,        /* a late change now and then (none is usual) */
            [SK_H2G_PING] = 10.0,           /* 100 x the fastest keepalive (every 10 s) */
            [SK_H2G_EMPTY_DATA] = 10.0,     /* none is usual */
            [SK_H2G_PRIORITY] = 100.0,      /* one per new stream at 100 streams per second */
            [SK_H2G_WINDOW_UPDATE] = 100.0, /* beyond the credited ones: none is usual */
        },
};

/* The credited tokens a bucket may hold above its burst: one WINDOW_UPDATE per 2 KiB of the
 * largest window a client may grant (2^31 - 1 bytes, RFC 9113 §6.9.1) is 2^20. */
#define SK_H2G_CREDIT_CAP 1048576.0

static const char *const kind_names[SK_H2G_KINDS] = {
    [SK_H2G_SERVER_RESET] = "server_reset",   [SK_H2G_CLIENT_RESET] = "client_reset",
    [SK_H2G_SETTINGS] = "settings",           [SK_H2G_PING] = "ping",
    [SK_H2G_EMPTY_DATA] = "empty_data",       [SK_H2G_PRIORITY] = "priority",
    [SK_H2G_WINDOW_UPDATE] = "window_update",
};

void
sk_h2guard_init(sk_h2guard_t *g, const sk_h2guard_limits_t *limits, double now)
{
    g->limits = limits;
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        g->tokens[k] = (double)limits->burst[k];
        g->last[k] = now;
        g->seen[k] = 0;
    }
    g->tripped = -1;
}

/* Adds what `kind` earned since its last refill: rate tokens per second, up to its burst (a bucket
 * already above it from credits keeps what it has). A clock that goes back, a NaN, or a rate that
 * is not positive adds nothing; `last` only moves forward. */
static void
refill(sk_h2guard_t *g, int kind, double now)
{
    double rate = g->limits->rate[kind];
    double burst = (double)g->limits->burst[kind];
    double dt = now - g->last[kind];

    if (!(dt > 0.0)) {
        return;
    }
    g->last[kind] = now;
    if (!(rate > 0.0) || g->tokens[kind] >= burst) {
        return;
    }
    g->tokens[kind] += dt * rate; /* dt > 0, rate > 0: never NaN (inf caps below) */
    if (!(g->tokens[kind] < burst)) {
        g->tokens[kind] = burst;
    }
}

uint32_t
sk_h2guard_count(sk_h2guard_t *g, int kind, double now)
{
    if (kind < 0 || kind >= SK_H2G_KINDS) {
        return 0;
    }
    g->seen[kind]++;
    if (g->tripped >= 0) {
        return SK_H2_ENHANCE_YOUR_CALM;
    }
    refill(g, kind, now);
    if (g->tokens[kind] >= 1.0) {
        g->tokens[kind] -= 1.0;
        return 0;
    }
    g->tripped = kind;
    return SK_H2_ENHANCE_YOUR_CALM;
}

void
sk_h2guard_credit(sk_h2guard_t *g, int kind, uint32_t tokens)
{
    if (kind < 0 || kind >= SK_H2G_KINDS || g->tripped >= 0) {
        return;
    }
    g->tokens[kind] += (double)tokens;
    if (g->tokens[kind] > (double)g->limits->burst[kind] + SK_H2G_CREDIT_CAP) {
        g->tokens[kind] = (double)g->limits->burst[kind] + SK_H2G_CREDIT_CAP;
    }
}

const char *
sk_h2guard_name(int kind)
{
    if (kind < 0 || kind >= SK_H2G_KINDS) {
        return "?";
    }
    return kind_names[kind];
}
