/* test_h2guard.c — the HTTP/2 defences' token buckets (src/ext/sk_h2guard.c) against their header
 * (sk_h2guard.h): a full start, one token per event, refill at `rate` per second up to `burst`,
 * rate 0 (the burst is all), tripping (and staying tripped for every kind), credits and their cap,
 * each kind's name, an out-of-range kind, and the defaults' promises (a well-behaved client's
 * pattern stays within them for an hour; a flood trips within its first second).
 *
 * Owns: nothing (each guard is on the stack). Never: reads a clock (the tests pass their own
 * seconds), uses Python or nghttp2.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_h2guard.h"
#include "test/sk_test.h" /* src/core/test/ */

/* Limits with every kind at (burst, rate). */
static sk_h2guard_limits_t
uniform(uint32_t burst, double rate)
{
    sk_h2guard_limits_t l;
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        l.burst[k] = burst;
        l.rate[k] = rate;
    }
    return l;
}

/* Counts n events of kind at time now: how many were within budget (answer 0) before the first
 * non-zero answer, which must be SK_H2_ENHANCE_YOUR_CALM. */
static uint32_t
spend(sk_h2guard_t *g, int kind, uint32_t n, double now, int *bad_answer)
{
    uint32_t ok = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = sk_h2guard_count(g, kind, now);
        if (r == 0) {
            ok++;
            continue;
        }
        if (r != SK_H2_ENHANCE_YOUR_CALM) {
            *bad_answer = 1;
        }
        break;
    }
    return ok;
}

/* init: every bucket full at `now`, nothing seen, nothing tripped. */
static void
test_init(T *t)
{
    sk_h2guard_limits_t l = uniform(5, 1.0);
    sk_h2guard_t g;
    memset(&g, 0xab, sizeof(g));
    sk_h2guard_init(&g, &l, 100.0);
    CHECK(t, g.limits == &l && g.tripped == -1);
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        CHECK(t, g.tokens[k] == 5.0 && g.last[k] == 100.0 && g.seen[k] == 0);
    }
}

/* burst: exactly `burst` events at one instant, the next trips; per kind, independent. */
static void
test_burst(T *t)
{
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        sk_h2guard_limits_t l = uniform(1000, 50.0);
        l.burst[k] = 7;
        sk_h2guard_t g;
        int bad = 0;
        sk_h2guard_init(&g, &l, 0.0);
        CHECK(t, spend(&g, k, 100, 0.0, &bad) == 7 && !bad);
        CHECK(t, g.tripped == k);
        CHECK(t, g.seen[k] == 8); /* the 8th counted too */
    }
}

/* refill: `rate` tokens per second, fractions kept, never above the burst. */
static void
test_refill(T *t)
{
    sk_h2guard_limits_t l = uniform(4, 2.0); /* 2 per second: one per 0.5 s */
    sk_h2guard_t g;
    int bad = 0;
    sk_h2guard_init(&g, &l, 10.0);
    CHECK(t, spend(&g, SK_H2G_PING, 4, 10.0, &bad) == 4 && !bad); /* the burst, no trip */
    CHECK(t, g.tripped == -1 && g.tokens[SK_H2G_PING] == 0.0);
    /* 0.25 s: half a token, not enough (on a copy) */
    sk_h2guard_t h = g;
    CHECK(t, sk_h2guard_count(&h, SK_H2G_PING, 10.25) == SK_H2_ENHANCE_YOUR_CALM);
    /* 0.5 s: one token exactly */
    CHECK(t, sk_h2guard_count(&g, SK_H2G_PING, 10.5) == 0);
    CHECK(t, g.tokens[SK_H2G_PING] == 0.0 && g.last[SK_H2G_PING] == 10.5);
    /* fractions are kept between calls: 0.3 s then 0.2 s more make one token */
    sk_h2guard_t q = g;
    CHECK(t, sk_h2guard_count(&q, SK_H2G_PING, 10.8) == SK_H2_ENHANCE_YOUR_CALM);
    q = g;
    CHECK(t, spend(&q, SK_H2G_SETTINGS, 4, 10.8, &bad) == 4 && !bad); /* another kind: its own */
    CHECK(t, q.tokens[SK_H2G_PING] == 0.0 && q.tripped == -1);
    CHECK(t, sk_h2guard_count(&q, SK_H2G_PING, 11.0) == 0); /* 0.5 s after 10.5 */
    /* an hour later: full (4), not 7200 */
    CHECK(t, spend(&g, SK_H2G_PING, 100, 3610.5, &bad) == 4 && !bad);
    CHECK(t, g.tripped == SK_H2G_PING);
    /* steady state: one event per 0.5 s forever stays within budget */
    sk_h2guard_init(&g, &l, 0.0);
    for (int i = 1; i <= 10000; i++) {
        if (sk_h2guard_count(&g, SK_H2G_PRIORITY, i * 0.5) != 0) {
            CHECK(t, !"steady rate tripped");
            break;
        }
    }
    CHECK(t, g.tripped == -1 && g.seen[SK_H2G_PRIORITY] == 10000);
    /* a rate 1% over the refill trips once the burst is gone: each event after the first nets
     * 1 - 1/1.01 = 0.0099 tokens, so the 3 left after it last about 3 / 0.0099 = 303 events */
    sk_h2guard_init(&g, &l, 0.0);
    int tripped_at = -1;
    for (int i = 1; i <= 1000; i++) {
        if (sk_h2guard_count(&g, SK_H2G_PRIORITY, i * (0.5 / 1.01)) != 0) {
            tripped_at = i;
            break;
        }
    }
    CHECK(t, tripped_at == 304); /* 303 within budget (~150 s), then empty */
}

/* The clock must not go back; if it does (or is NaN), nothing is added and `last` stays. */
static void
test_clock_back(T *t)
{
    sk_h2guard_limits_t l = uniform(2, 1.0);
    sk_h2guard_t g;
    sk_h2guard_init(&g, &l, 50.0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_PING, 50.0) == 0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_PING, 40.0) == 0); /* the 2nd token, not a refill */
    CHECK(t, g.last[SK_H2G_PING] == 50.0 && g.tokens[SK_H2G_PING] == 0.0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_PING, NAN) == SK_H2_ENHANCE_YOUR_CALM);
    CHECK(t, g.last[SK_H2G_PING] == 50.0);
}

/* rate 0: the burst is all a connection ever gets, however long it lives. */
static void
test_rate_zero(T *t)
{
    sk_h2guard_limits_t l = uniform(3, 0.0);
    sk_h2guard_t g;
    sk_h2guard_init(&g, &l, 0.0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_SETTINGS, 0.0) == 0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_SETTINGS, 1e6) == 0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_SETTINGS, 2e9) == 0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_SETTINGS, 3e9) == SK_H2_ENHANCE_YOUR_CALM);
    /* a negative or NaN rate is treated as 0 */
    l.rate[SK_H2G_PING] = -5.0;
    l.rate[SK_H2G_PRIORITY] = NAN;
    sk_h2guard_init(&g, &l, 0.0);
    int bad = 0;
    CHECK(t, spend(&g, SK_H2G_PING, 10, 1e3, &bad) == 3 && !bad);
    sk_h2guard_init(&g, &l, 0.0);
    CHECK(t, spend(&g, SK_H2G_PRIORITY, 10, 1e3, &bad) == 3 && !bad);
}

/* Tripped: the answer stays ENHANCE_YOUR_CALM for every kind (even a full one, even after a long
 * refill), `tripped` keeps the first kind, and every event is still seen. */
static void
test_tripped_stays(T *t)
{
    sk_h2guard_limits_t l = uniform(2, 100.0);
    l.burst[SK_H2G_EMPTY_DATA] = 1;
    sk_h2guard_t g;
    sk_h2guard_init(&g, &l, 0.0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_EMPTY_DATA, 0.0) == 0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_EMPTY_DATA, 0.0) == SK_H2_ENHANCE_YOUR_CALM);
    CHECK(t, g.tripped == SK_H2G_EMPTY_DATA);
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        CHECK(t, sk_h2guard_count(&g, k, 1e6) == SK_H2_ENHANCE_YOUR_CALM);
    }
    CHECK(t, g.tripped == SK_H2G_EMPTY_DATA);
    CHECK(t, g.seen[SK_H2G_EMPTY_DATA] == 3 && g.seen[SK_H2G_PING] == 1);
    sk_h2guard_credit(&g, SK_H2G_EMPTY_DATA, 100); /* credits do not untrip */
    CHECK(t, sk_h2guard_count(&g, SK_H2G_EMPTY_DATA, 2e6) == SK_H2_ENHANCE_YOUR_CALM);
}

/* Credits: tokens beyond the burst, spent before the bucket trips, capped at burst + 2^20; the
 * refill does not take them away and does not add above the burst. */
static void
test_credit(T *t)
{
    sk_h2guard_limits_t l = uniform(10, 1.0);
    sk_h2guard_t g;
    int bad = 0;
    sk_h2guard_init(&g, &l, 0.0);
    sk_h2guard_credit(&g, SK_H2G_WINDOW_UPDATE, 8);
    CHECK(t, g.tokens[SK_H2G_WINDOW_UPDATE] == 18.0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_WINDOW_UPDATE, 1000.0) == 0); /* no refill above 18 */
    CHECK(t, g.tokens[SK_H2G_WINDOW_UPDATE] == 17.0);
    CHECK(t, spend(&g, SK_H2G_WINDOW_UPDATE, 100, 1000.0, &bad) == 17 && !bad);
    sk_h2guard_init(&g, &l, 0.0);
    for (int i = 0; i < 3; i++) {
        sk_h2guard_credit(&g, SK_H2G_WINDOW_UPDATE, UINT32_MAX);
    }
    CHECK(t, g.tokens[SK_H2G_WINDOW_UPDATE] == 10.0 + 1048576.0);
    /* a download's pattern: 8 credits per 16 KiB DATA frame, 8 WINDOW_UPDATEs back, for a
     * million frames (16 GiB) at 10^5 frames per second: never trips */
    sk_h2guard_init(&g, &sk_h2guard_defaults, 0.0);
    for (int i = 0; i < 1000000; i++) {
        double now = i * 1e-5;
        sk_h2guard_credit(&g, SK_H2G_WINDOW_UPDATE, 8);
        sk_h2guard_credit(&g, SK_H2G_PING, 1);
        if (sk_h2guard_count(&g, SK_H2G_PING, now) != 0) {
            break;
        }
        for (int j = 0; j < 8; j++) {
            if (sk_h2guard_count(&g, SK_H2G_WINDOW_UPDATE, now) != 0) {
                break;
            }
        }
        if (g.tripped >= 0) {
            break;
        }
    }
    CHECK(t, g.tripped == -1 && g.seen[SK_H2G_WINDOW_UPDATE] == 8000000);
    /* out of range: nothing */
    sk_h2guard_init(&g, &l, 0.0);
    sk_h2guard_credit(&g, -1, 5);
    sk_h2guard_credit(&g, SK_H2G_KINDS, 5);
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        CHECK(t, g.tokens[k] == 10.0);
    }
}

/* Names: each kind's, exactly; "?" out of range. */
static void
test_names(T *t)
{
    static const char *const want[SK_H2G_KINDS] = {"server_reset", "client_reset", "settings",
                                                   "ping",         "empty_data",   "priority",
                                                   "window_update"};
    CHECK(t, SK_H2G_KINDS == 7);
    CHECK(t, SK_H2G_SERVER_RESET == 0 && SK_H2G_WINDOW_UPDATE == 6);
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        CHECK(t, strcmp(sk_h2guard_name(k), want[k]) == 0);
    }
    CHECK(t, strcmp(sk_h2guard_name(-1), "?") == 0);
    CHECK(t, strcmp(sk_h2guard_name(SK_H2G_KINDS), "?") == 0);
    CHECK(t, strcmp(sk_h2guard_name(1 << 30), "?") == 0);
    CHECK(t, SK_H2_ENHANCE_YOUR_CALM == 0xb); /* RFC 9113 §7 */
}

/* An out-of-range kind counts nothing, answers 0 and changes nothing (even on a tripped guard). */
static void
test_out_of_range(T *t)
{
    sk_h2guard_limits_t l = uniform(1, 0.0);
    sk_h2guard_t g, before;
    sk_h2guard_init(&g, &l, 0.0);
    before = g;
    CHECK(t, sk_h2guard_count(&g, -1, 1.0) == 0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_KINDS, 1.0) == 0);
    CHECK(t, sk_h2guard_count(&g, -2147483647 - 1, 1.0) == 0);
    CHECK(t, g.tripped == before.tripped && g.limits == before.limits);
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        CHECK(t, g.tokens[k] == before.tokens[k] && g.last[k] == before.last[k]);
        CHECK(t, g.seen[k] == 0);
    }
    CHECK(t, sk_h2guard_count(&g, SK_H2G_PING, 1.0) == 0);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_PING, 1.0) == SK_H2_ENHANCE_YOUR_CALM);
    CHECK(t, sk_h2guard_count(&g, SK_H2G_KINDS + 3, 1.0) == 0);
}

/* The defaults' promises (sk_h2guard.c): valid (burst >= 1, rate >= 0); a browser's and a gRPC
 * client's hour stays within budget; a flood of 10^4 frames per second of any kind trips within
 * its first second, after at most burst + rate events. */
static void
test_defaults(T *t)
{
    const sk_h2guard_limits_t *d = &sk_h2guard_defaults;
    for (int k = 0; k < SK_H2G_KINDS; k++) {
        CHECK(t, d->burst[k] >= 1 && d->rate[k] >= 0.0);
        sk_h2guard_t g;
        sk_h2guard_init(&g, d, 0.0);
        uint32_t ok = 0;
        int i;
        for (i = 0; i < 10000; i++) {
            if (sk_h2guard_count(&g, k, i * 1e-4) != 0) {
                break;
            }
            ok++;
        }
        CHECK(t, i < 10000 && g.tripped == k); /* within the first second */
        CHECK(t, ok <= d->burst[k] + (uint32_t)d->rate[k]);
        CHECK(t, ok >= d->burst[k]);
    }
    /* An hour of a busy browser tab and a gRPC channel on one connection: one SETTINGS at the
     * start and 9 more (BDP window changes) in the first minute, a PING every 10 s, 100 streams
     * reset on a navigation every 5 s, a PRIORITY per stream at 50 streams per second, 20
     * WINDOW_UPDATEs per second unprompted (request bodies), 100 refused streams at the start. */
    sk_h2guard_t g;
    sk_h2guard_init(&g, d, 0.0);
    int bad = 0;
    for (int i = 0; i < 100; i++) {
        bad |= sk_h2guard_count(&g, SK_H2G_SERVER_RESET, 0.0) != 0;
    }
    for (int i = 0; i < 10; i++) {
        bad |= sk_h2guard_count(&g, SK_H2G_SETTINGS, i * 6.0) != 0;
    }
    for (int s = 0; s < 3600 && !bad; s++) {
        if (s % 10 == 0) {
            bad |= sk_h2guard_count(&g, SK_H2G_PING, s) != 0;
        }
        if (s % 5 == 0) {
            for (int i = 0; i < 100; i++) {
                bad |= sk_h2guard_count(&g, SK_H2G_CLIENT_RESET, s) != 0;
            }
        }
        for (int i = 0; i < 50; i++) {
            bad |= sk_h2guard_count(&g, SK_H2G_PRIORITY, s + i * 0.02) != 0;
        }
        for (int i = 0; i < 20; i++) {
            bad |= sk_h2guard_count(&g, SK_H2G_WINDOW_UPDATE, s + i * 0.05) != 0;
        }
    }
    CHECK(t, !bad && g.tripped == -1);
}

int
main(void)
{
    T t;
    memset(&t, 0, sizeof(t));
    test_init(&t);
    test_burst(&t);
    test_refill(&t);
    test_clock_back(&t);
    test_rate_zero(&t);
    test_tripped_stays(&t);
    test_credit(&t);
    test_names(&t);
    test_out_of_range(&t);
    test_defaults(&t);
    printf("test_h2guard: %d passed, %d failed\n", t.passed, t.failed);
    return t.failed == 0 ? 0 : 1;
}
