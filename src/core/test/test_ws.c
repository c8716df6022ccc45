/* test_ws.c — plain C unit tests of the WebSocket frame codec (src/core/sk_ws.c, RFC 6455).
 *
 * Owns: the frame parser's event-log harness (every input parsed whole, byte by byte and split at
 * every offset, each call's input ending exactly at a PROT_NONE guard page, with the codec's
 * contract checked on every call), the parser cases for every rule of sk_ws.h, RFC 6455 §5.7's
 * examples, and the serializer cases (exact bytes).
 * Never: includes Python.h, uses the network, or depends on the wall clock.
 * Prints "N passed, M failed" last; exits non-zero on any failure.
 * SK_TEST_PRINT=1 in the environment prints each parser case's event log.
 */
#define _DEFAULT_SOURCE

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_core.h"
#include "sk_ws.h"
#include "sk_test.h"

/* RFC 6455 §5.7's masking key. */
static const char KEY[] = "\x37\xfa\x21\x3d";

/* ---- building client frames (independently of the serializer under test) --------------------- */

enum { ENC_SHORTEST = 0, ENC_16 = 16, ENC_64 = 64 };

/* Appends a masked client frame: first byte b0 (FIN, RSV, opcode), then the payload's length in
 * the shortest encoding or the one forced by enc, KEY, and the n payload bytes masked with KEY. */
static void
cframe(sk_buf_t *b, unsigned b0, const char *payload, size_t n, int enc)
{
    unsigned char h[SK_WS_MAX_HEADER];
    size_t hn = 0;

    h[hn++] = (unsigned char)b0;
    if (enc == ENC_SHORTEST && n < 126) {
        h[hn++] = (unsigned char)(0x80 | n);
    }
    else if (enc != ENC_64 && n <= 0xFFFF) {
        h[hn++] = 0x80 | 126;
        h[hn++] = (unsigned char)(n >> 8);
        h[hn++] = (unsigned char)n;
    }
    else {
        h[hn++] = 0x80 | 127;
        for (int shift = 56; shift >= 0; shift -= 8)
            h[hn++] = (unsigned char)((uint64_t)n >> shift);
    }
    memcpy(h + hn, KEY, 4);
    hn += 4;
    sk_buf_append(b, h, hn);
    for (size_t i = 0; i < n; i++) {
        char c = (char)(payload[i] ^ KEY[i & 3]);

        sk_buf_append(b, &c, 1);
    }
}

/* A frame with a literal payload, shortest length encoding. */
#define CF(b, b0, lit) cframe((b), (b0), (lit), sizeof(lit) - 1, ENC_SHORTEST)
#define RAW(b, lit) sk_buf_append((b), (lit), sizeof(lit) - 1)

/* ---- parser harness -------------------------------------------------------------------------- */

typedef struct {
    sk_buf_t log;
    sk_buf_t data; /* the current message's payload not yet logged (pieces merged) */
    int stopped;
    int contract_errors;
} run_t;

/* 64-bit FNV-1a, to log long payloads in one short line. */
static uint64_t
fnv1a(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void
log_payload(sk_buf_t *log, const char *s, size_t n)
{
    if (n > 64) {
        logf_(log, "fnv=%016llx", (unsigned long long)fnv1a(s, n));
        return;
    }
    sk_buf_append(log, "[", 1);
    log_bytes(log, s, n);
    sk_buf_append(log, "]", 1);
}

static void
flush_data(run_t *r)
{
    if (sk_buf_len(&r->data) == 0)
        return;
    logf_(&r->log, "DATA %zu ", sk_buf_len(&r->data));
    log_payload(&r->log, sk_buf_head(&r->data), sk_buf_len(&r->data));
    sk_buf_append(&r->log, "\n", 1);
    sk_buf_consume(&r->data, sk_buf_len(&r->data));
}

/* One event into the log; returns 0, or 1 when the run stops (error). */
static int
log_event(run_t *r, const sk_ws_event_t *ev, const char *d, size_t c)
{
    switch (ev->type) {
    case SK_WS_EV_MESSAGE:
        flush_data(r);
        logf_(&r->log, "MSG %s%s\n", ev->opcode == SK_WS_TEXT ? "text" : "binary",
              ev->compressed ? " z" : "");
        if (ev->opcode != SK_WS_TEXT && ev->opcode != SK_WS_BINARY)
            r->contract_errors++;
        return 0;
    case SK_WS_EV_DATA:
        if (ev->len == 0 || ev->data < d || ev->data + ev->len > d + c)
            r->contract_errors++;
        else
            sk_buf_append(&r->data, ev->data, ev->len);
        return 0;
    case SK_WS_EV_MESSAGE_END:
        flush_data(r);
        logf_(&r->log, "END\n");
        return 0;
    case SK_WS_EV_PING:
    case SK_WS_EV_PONG:
        flush_data(r);
        logf_(&r->log, "%s %zu ", ev->type == SK_WS_EV_PING ? "PING" : "PONG", ev->len);
        log_payload(&r->log, ev->data, ev->len);
        sk_buf_append(&r->log, "\n", 1);
        if (ev->data == NULL || ev->len > SK_WS_MAX_CONTROL)
            r->contract_errors++;
        return 0;
    case SK_WS_EV_CLOSE:
        flush_data(r);
        logf_(&r->log, "CLOSE %d %zu ", ev->code, ev->len);
        log_payload(&r->log, ev->data, ev->len);
        sk_buf_append(&r->log, "\n", 1);
        if (ev->data == NULL || ev->len > SK_WS_MAX_CONTROL - 2)
            r->contract_errors++;
        return 0;
    case SK_WS_EV_ERROR:
        flush_data(r);
        logf_(&r->log, "ERROR %d %s\n", ev->code, ev->reason ? ev->reason : "(null)");
        if (ev->reason == NULL)
            r->contract_errors++;
        return 1;
    default: r->contract_errors++; return 1;
    }
}

/* Feeds everything pending to the parser until it needs more bytes or fails. Each call's input
 * is a copy ending at the guard page; the bytes it does not consume must come back unchanged. */
static void
pump(T *t, sk_ws_parser_t *p, sk_buf_t *pend, run_t *r)
{
    for (int iter = 0; iter < 10000000 && !r->stopped; iter++) {
        size_t len = sk_buf_len(pend);
        char *d = guard_place(t, sk_buf_head(pend), len);
        sk_ws_event_t ev;
        size_t c = sk_ws_parser_execute(p, d, len, &ev);

        if (c > len) {
            r->contract_errors++;
            c = len;
        }
        if (c < len && memcmp(d + c, sk_buf_head(pend) + c, len - c) != 0)
            r->contract_errors++; /* an unconsumed byte was modified */
        if (ev.type == SK_WS_EV_NONE) {
            if (c != len)
                r->contract_errors++;
            sk_buf_consume(pend, c);
            return;
        }
        r->stopped = log_event(r, &ev, d, c);
        if (ev.type == SK_WS_EV_ERROR) {
            sk_ws_event_t again;

            /* dead: the same error again, nothing consumed */
            if (sk_ws_parser_execute(p, d, len, &again) != 0 || again.type != SK_WS_EV_ERROR ||
                again.code != ev.code)
                r->contract_errors++;
        }
        sk_buf_consume(pend, c);
    }
}

/* Parses in[0..n) fed whole, split at k, or byte by byte; the event log goes to *out. */
static void
run_ws(T *t, const void *lim, const char *in, size_t n, int mode, size_t k, sk_buf_t *out)
{
    sk_ws_parser_t p;
    sk_buf_t pend = {0};
    run_t r;
    size_t pos = 0;

    memset(&r, 0, sizeof(r));
    sk_ws_parser_init(&p, lim);
    pump(t, &p, &pend, &r); /* an empty first read */
    while (pos < n && !r.stopped) {
        size_t next = mode == FEED_WHOLE ? n : mode == FEED_SPLIT ? (pos < k ? k : n) : pos + 1;

        sk_buf_append(&pend, in + pos, next - pos);
        pos = next;
        pump(t, &p, &pend, &r);
    }
    flush_data(&r);
    logf_(&r.log, "EOF idle=%d\n", sk_ws_parser_idle(&p));
    if (r.contract_errors)
        logf_(&r.log, "CONTRACT ERRORS %d\n", r.contract_errors);
    *out = r.log;
    sk_buf_free(&r.data);
    sk_buf_free(&pend);
}

/* Inputs longer than this are split at the first and last 64 offsets and about 100 between;
 * shorter ones at every offset (next_split). */
#define EVERY_SPLIT_MAX 4096

/* run_case over the frame parser; lim NULL: no size limit, no extension. */
static void
ws_case_n(T *t, const char *name, const sk_ws_limits_t *lim, const char *in, size_t n,
          const char *expect, const char *file, int line)
{
    sk_ws_limits_t def = {.max_message = 0};

    run_case(t, "ws", name, run_ws, lim != NULL ? lim : &def, in, n, EVERY_SPLIT_MAX, expect, file,
             line);
}

/* Runs the case over buf's bytes, then empties buf for the next case. */
#define WCASE(t, name, lim, buf, expect)                                                     \
    do {                                                                                     \
        ws_case_n((t), (name), (lim), sk_buf_head(buf), sk_buf_len(buf), (expect), __FILE__, \
                  __LINE__);                                                                 \
        sk_buf_free(buf);                                                                    \
    } while (0)

#define E_UNMASKED "ERROR 1002 client frame not masked (RFC 6455 §5.1)\n"
#define E_OPCODE "ERROR 1002 reserved opcode (RFC 6455 §5.2)\n"
#define E_RSV23 "ERROR 1002 RSV2 or RSV3 set, no extension negotiated (RFC 6455 §5.2)\n"
#define E_RSV1 "ERROR 1002 RSV1 set, no extension negotiated (RFC 6455 §5.2)\n"
#define E_RSV1_CTL "ERROR 1002 RSV1 on a control or continuation frame (RFC 7692 §6.1)\n"
#define E_CTL_FRAG "ERROR 1002 fragmented control frame (RFC 6455 §5.5)\n"
#define E_CTL_LONG "ERROR 1002 control frame payload over 125 bytes (RFC 6455 §5.5)\n"
#define E_CONT "ERROR 1002 continuation frame without a message in progress (RFC 6455 §5.4)\n"
#define E_NEW "ERROR 1002 new data frame inside a fragmented message (RFC 6455 §5.4)\n"
#define E_LEN64 \
    "ERROR 1002 64-bit payload length with the most significant bit set (RFC 6455 §5.2)\n"
#define E_CLOSE1 \
    "ERROR 1002 close frame payload of 1 byte (RFC 6455 §5.5.1: empty or a 2-byte code first)\n"
#define E_CODE "ERROR 1002 close code not allowed on the wire (RFC 6455 §7.4.1, §7.4.2)\n"
#define E_REASON "ERROR 1007 close reason is not UTF-8 (RFC 6455 §5.5.1)\n"
#define E_UTF8 "ERROR 1007 text message is not UTF-8 (RFC 6455 §8.1)\n"
#define E_UTF8_END "ERROR 1007 text message ends inside a UTF-8 sequence (RFC 6455 §8.1)\n"
#define E_BIG "ERROR 1009 message larger than max_message (RFC 6455 §7.4.1, 1009)\n"

/* ---- parser cases ---------------------------------------------------------------------------- */

/* RFC 6455 §5.7's examples, as a server receives them. */
static void
test_rfc_examples(T *t)
{
    sk_buf_t b = {0};
    char *big = malloc(65536);

    RAW(&b, "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58");
    WCASE(t, "5.7 masked Hello", NULL, &b, "MSG text\nDATA 5 [Hello]\nEND\nEOF idle=1\n");
    RAW(&b, "\x81\x05\x48\x65\x6c\x6c\x6f");
    WCASE(t, "5.7 unmasked Hello (a client's must be masked)", NULL, &b, E_UNMASKED "EOF idle=0\n");
    /* the fragmented "Hel" "lo", masked as a client sends it */
    CF(&b, 0x01, "Hel");
    CF(&b, 0x80, "lo");
    WCASE(t, "5.7 fragmented Hel+lo", NULL, &b, "MSG text\nDATA 5 [Hello]\nEND\nEOF idle=1\n");
    CF(&b, 0x89, "Hello");
    WCASE(t, "5.7 ping Hello (masked)", NULL, &b, "PING 5 [Hello]\nEOF idle=1\n");
    RAW(&b, "\x8a\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58");
    WCASE(t, "5.7 masked pong Hello", NULL, &b, "PONG 5 [Hello]\nEOF idle=1\n");
    for (size_t i = 0; i < 65536; i++)
        big[i] = (char)(i * 7 + 3);
    cframe(&b, 0x82, big, 256, ENC_SHORTEST);
    CHECK(t, memcmp(sk_buf_head(&b), "\x82\xfe\x01\x00", 4) == 0);
    {
        char want[96];

        snprintf(want, sizeof(want), "MSG binary\nDATA 256 fnv=%016llx\nEND\nEOF idle=1\n",
                 (unsigned long long)fnv1a(big, 256));
        WCASE(t, "5.7 256 bytes binary, 16-bit length", NULL, &b, want);
        cframe(&b, 0x82, big, 65536, ENC_SHORTEST);
        CHECK(t, memcmp(sk_buf_head(&b), "\x82\xff\x00\x00\x00\x00\x00\x01\x00\x00", 10) == 0);
        snprintf(want, sizeof(want), "MSG binary\nDATA 65536 fnv=%016llx\nEND\nEOF idle=1\n",
                 (unsigned long long)fnv1a(big, 65536));
        WCASE(t, "5.7 64 KiB binary, 64-bit length", NULL, &b, want);
    }
    free(big);
}

static void
test_messages(T *t)
{
    sk_buf_t b = {0};

    CF(&b, 0x81, "");
    WCASE(t, "empty text message", NULL, &b, "MSG text\nEND\nEOF idle=1\n");
    CF(&b, 0x82, "");
    CF(&b, 0x82, "\x00\xff");
    WCASE(t, "two binary messages", NULL, &b,
          "MSG binary\nEND\nMSG binary\nDATA 2 [\\x00\\xff]\nEND\nEOF idle=1\n");
    CF(&b, 0x01, "");
    CF(&b, 0x00, "abc");
    CF(&b, 0x00, "");
    CF(&b, 0x80, "");
    WCASE(t, "empty fragments around data", NULL, &b, "MSG text\nDATA 3 [abc]\nEND\nEOF idle=1\n");
    CF(&b, 0x01, "Hel");
    CF(&b, 0x89, "x");
    CF(&b, 0x8a, "");
    CF(&b, 0x80, "lo");
    WCASE(t, "control frames between fragments", NULL, &b,
          "MSG text\nDATA 3 [Hel]\nPING 1 [x]\nPONG 0 []\nDATA 2 [lo]\nEND\nEOF idle=1\n");
    cframe(&b, 0x81, "Hi", 2, ENC_16);
    cframe(&b, 0x82, "Yo", 2, ENC_64);
    WCASE(t, "non-minimal 16- and 64-bit lengths are accepted", NULL, &b,
          "MSG text\nDATA 2 [Hi]\nEND\nMSG binary\nDATA 2 [Yo]\nEND\nEOF idle=1\n");
    CF(&b, 0x81, "Hel");
    b.end -= 1;
    WCASE(t, "frame cut short", NULL, &b, "MSG text\nDATA 2 [He]\nEOF idle=0\n");
    RAW(&b, "\x81\xfe\x00");
    WCASE(t, "header cut short", NULL, &b, "EOF idle=0\n");
    RAW(&b, "\x82\xff\x3f\xff\xff\xff\xff\xff\xff\xff"
            "\x01\x02\x03\x04"
            "\x00");
    WCASE(t, "largest 64-bit length, unlimited", NULL, &b,
          "MSG binary\nDATA 1 [\\x01]\nEOF idle=0\n");
}

static void
test_control(T *t)
{
    sk_buf_t b = {0};
    char p125[SK_WS_MAX_CONTROL + 1];
    char want[96];

    memset(p125, 'p', sizeof(p125));
    cframe(&b, 0x89, p125, SK_WS_MAX_CONTROL, ENC_SHORTEST);
    snprintf(want, sizeof(want), "PING 125 fnv=%016llx\nEOF idle=1\n",
             (unsigned long long)fnv1a(p125, SK_WS_MAX_CONTROL));
    WCASE(t, "ping of 125 bytes", NULL, &b, want);
    cframe(&b, 0x89, p125, sizeof(p125), ENC_SHORTEST);
    WCASE(t, "ping of 126 bytes", NULL, &b, E_CTL_LONG "EOF idle=0\n");
    cframe(&b, 0x8a, p125, 1, ENC_16);
    WCASE(t, "pong with a 16-bit length", NULL, &b, E_CTL_LONG "EOF idle=0\n");
    cframe(&b, 0x88, p125, 0, ENC_64);
    WCASE(t, "close with a 64-bit length", NULL, &b, E_CTL_LONG "EOF idle=0\n");
    CF(&b, 0x09, "x");
    WCASE(t, "ping with FIN=0", NULL, &b, E_CTL_FRAG "EOF idle=0\n");
    CF(&b, 0x08, "");
    WCASE(t, "close with FIN=0", NULL, &b, E_CTL_FRAG "EOF idle=0\n");
    CF(&b, 0x01, "a");
    CF(&b, 0x0a, "");
    WCASE(t, "pong with FIN=0 between fragments", NULL, &b,
          "MSG text\nDATA 1 [a]\n" E_CTL_FRAG "EOF idle=0\n");
}

static void
test_close(T *t)
{
    static const int valid[] = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                                1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999};
    static const int invalid[] = {0,    1,    999,  1004, 1005, 1006, 1015,
                                  1016, 1100, 2000, 2999, 5000, 9999, 65535};
    sk_buf_t b = {0};
    char reason[SK_WS_MAX_CONTROL];

    CF(&b, 0x88, "");
    CF(&b, 0x81, "ignored");
    WCASE(t, "empty close, then bytes ignored", NULL, &b, "CLOSE 1005 0 []\nEOF idle=0\n");
    CF(&b, 0x88,
       "\x03\xe8"
       "bye");
    WCASE(t, "close 1000 bye", NULL, &b, "CLOSE 1000 3 [bye]\nEOF idle=0\n");
    CF(&b, 0x88, "\x03");
    WCASE(t, "close payload of 1 byte", NULL, &b, E_CLOSE1 "EOF idle=0\n");
    CF(&b, 0x88,
       "\x03\xe8"
       "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5");
    WCASE(t, "close reason UTF-8", NULL, &b,
          "CLOSE 1000 11 [\\xce\\xba\\xe1\\xbd\\xb9\\xcf\\x83\\xce\\xbc\\xce\\xb5]\nEOF idle=0\n");
    CF(&b, 0x88,
       "\x03\xe8"
       "a\xed\xa0\x80");
    WCASE(t, "close reason not UTF-8", NULL, &b, E_REASON "EOF idle=0\n");
    CF(&b, 0x88,
       "\x03\xe8"
       "\xce");
    WCASE(t, "close reason cut inside a sequence", NULL, &b, E_REASON "EOF idle=0\n");
    memcpy(reason, "\x03\xe8", 2);
    memset(reason + 2, 'r', sizeof(reason) - 2);
    cframe(&b, 0x88, reason, sizeof(reason), ENC_SHORTEST);
    {
        char want[96];

        snprintf(want, sizeof(want), "CLOSE 1000 123 fnv=%016llx\nEOF idle=0\n",
                 (unsigned long long)fnv1a(reason + 2, sizeof(reason) - 2));
        WCASE(t, "close with a 123-byte reason", NULL, &b, want);
    }
    CF(&b, 0x01, "He");
    CF(&b, 0x88, "\x03\xe9");
    WCASE(t, "close inside a fragmented message", NULL, &b,
          "MSG text\nDATA 2 [He]\nCLOSE 1001 0 []\nEOF idle=0\n");
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
        char pl[2] = {(char)(valid[i] >> 8), (char)valid[i]};
        char want[64];

        cframe(&b, 0x88, pl, sizeof(pl), ENC_SHORTEST);
        snprintf(want, sizeof(want), "CLOSE %d 0 []\nEOF idle=0\n", valid[i]);
        WCASE(t, "valid close code", NULL, &b, want);
        CHECK(t, sk_ws_close_code_valid(valid[i]));
    }
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        char pl[2] = {(char)(invalid[i] >> 8), (char)invalid[i]};

        cframe(&b, 0x88, pl, sizeof(pl), ENC_SHORTEST);
        WCASE(t, "invalid close code", NULL, &b, E_CODE "EOF idle=0\n");
        CHECK(t, !sk_ws_close_code_valid(invalid[i]));
    }
}

static void
test_frame_errors(T *t)
{
    static const unsigned reserved[] = {3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF};
    sk_ws_limits_t deflate = {.allow_rsv1 = 1};
    sk_buf_t b = {0};

    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
        cframe(&b, 0x80 | reserved[i], "", 0, ENC_SHORTEST);
        WCASE(t, "reserved opcode", NULL, &b, E_OPCODE "EOF idle=0\n");
    }
    CF(&b, 0xC1, "a");
    WCASE(t, "RSV1 without an extension", NULL, &b, E_RSV1 "EOF idle=0\n");
    CF(&b, 0xA1, "a");
    WCASE(t, "RSV2", NULL, &b, E_RSV23 "EOF idle=0\n");
    CF(&b, 0x91, "a");
    WCASE(t, "RSV3", &deflate, &b, E_RSV23 "EOF idle=0\n");
    CF(&b, 0xC1, "\xff\xfe");
    CF(&b, 0x81, "a");
    WCASE(t, "RSV1 with permessage-deflate: compressed, not UTF-8 checked", &deflate, &b,
          "MSG text z\nDATA 2 [\\xff\\xfe]\nEND\nMSG text\nDATA 1 [a]\nEND\nEOF idle=1\n");
    CF(&b, 0x41, "a");
    CF(&b, 0xC0, "b");
    WCASE(t, "RSV1 on a continuation frame", &deflate, &b,
          "MSG text z\nDATA 1 [a]\n" E_RSV1_CTL "EOF idle=0\n");
    CF(&b, 0xC9, "");
    WCASE(t, "RSV1 on a ping", &deflate, &b, E_RSV1_CTL "EOF idle=0\n");
    CF(&b, 0x80, "a");
    WCASE(t, "continuation without a message", NULL, &b, E_CONT "EOF idle=0\n");
    CF(&b, 0x81, "a");
    CF(&b, 0x80, "b");
    WCASE(t, "continuation after a final frame", NULL, &b,
          "MSG text\nDATA 1 [a]\nEND\n" E_CONT "EOF idle=0\n");
    CF(&b, 0x01, "a");
    CF(&b, 0x81, "b");
    WCASE(t, "text frame inside a fragmented message", NULL, &b,
          "MSG text\nDATA 1 [a]\n" E_NEW "EOF idle=0\n");
    CF(&b, 0x02, "a");
    CF(&b, 0x02, "b");
    WCASE(t, "binary frame inside a fragmented message", NULL, &b,
          "MSG binary\nDATA 1 [a]\n" E_NEW "EOF idle=0\n");
    RAW(&b, "\x82\xff\x80");
    WCASE(t, "64-bit length with its top bit set, at its first byte", NULL, &b,
          E_LEN64 "EOF idle=0\n");
    CF(&b, 0x82, "ab");
    b.data[1] = 0x02; /* the mask bit cleared on a frame that is otherwise masked */
    WCASE(t, "mask bit clear", NULL, &b, E_UNMASKED "EOF idle=0\n");
}

static void
test_utf8(T *t)
{
    sk_buf_t b = {0};

    CF(&b, 0x81, "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5");
    WCASE(t, "kosme", NULL, &b,
          "MSG text\nDATA 11 [\\xce\\xba\\xe1\\xbd\\xb9\\xcf\\x83\\xce\\xbc\\xce\\xb5]\nEND\n"
          "EOF idle=1\n");
    CF(&b, 0x81, "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf");
    WCASE(
        t, "boundaries U+7F U+80 U+7FF U+800 U+FFFF U+10000 U+10FFFF", NULL, &b,
        "MSG text\nDATA 19 [\\x7f\\xc2\\x80\\xdf\\xbf\\xe0\\xa0\\x80\\xef\\xbf\\xbf\\xf0\\x90\\x80"
        "\\x80\\xf4\\x8f\\xbf\\xbf]\nEND\nEOF idle=1\n");
    CF(&b, 0x81,
       "ab\xff"
       "cd");
    WCASE(t, "fails at the bad byte, not at the end", NULL, &b,
          "MSG text\nDATA 2 [ab]\n" E_UTF8 "EOF idle=0\n");
    CF(&b, 0x81, "abcdefghijklmnopq\x80");
    WCASE(t, "bad byte after an ASCII run", NULL, &b,
          "MSG text\nDATA 17 [abcdefghijklmnopq]\n" E_UTF8 "EOF idle=0\n");
    CF(&b, 0x01, "\xce");
    CF(&b, 0x89, "");
    CF(&b, 0x80, "\xba");
    WCASE(t, "a sequence across fragments and a ping", NULL, &b,
          "MSG text\nDATA 1 [\\xce]\nPING 0 []\nDATA 1 [\\xba]\nEND\nEOF idle=1\n");
    CF(&b, 0x01, "a\xed");
    CF(&b, 0x80, "\xa0\x80");
    WCASE(t, "surrogate across fragments fails at its second byte", NULL, &b,
          "MSG text\nDATA 2 [a\\xed]\n" E_UTF8 "EOF idle=0\n");
    CF(&b, 0x81, "\xc0\xaf");
    WCASE(t, "overlong 2-byte lead", NULL, &b, "MSG text\n" E_UTF8 "EOF idle=0\n");
    CF(&b, 0x81, "\xe0\x80\xaf");
    WCASE(t, "overlong 3-byte", NULL, &b, "MSG text\nDATA 1 [\\xe0]\n" E_UTF8 "EOF idle=0\n");
    CF(&b, 0x81, "\xf0\x8f\xbf\xbf");
    WCASE(t, "overlong 4-byte", NULL, &b, "MSG text\nDATA 1 [\\xf0]\n" E_UTF8 "EOF idle=0\n");
    CF(&b, 0x81, "\xf4\x90\x80\x80");
    WCASE(t, "above U+10FFFF", NULL, &b, "MSG text\nDATA 1 [\\xf4]\n" E_UTF8 "EOF idle=0\n");
    CF(&b, 0x81, "\xf5");
    WCASE(t, "byte F5", NULL, &b, "MSG text\n" E_UTF8 "EOF idle=0\n");
    CF(&b, 0x81, "\xe2\x82");
    WCASE(t, "message ends inside a sequence", NULL, &b,
          "MSG text\nDATA 2 [\\xe2\\x82]\n" E_UTF8_END "EOF idle=0\n");
    CF(&b, 0x01, "\xe2\x82");
    CF(&b, 0x80, "");
    WCASE(t, "message ends inside a sequence, empty final frame", NULL, &b,
          "MSG text\nDATA 2 [\\xe2\\x82]\n" E_UTF8_END "EOF idle=0\n");
    CF(&b, 0x82, "\xff\xc0");
    WCASE(t, "binary is not checked", NULL, &b,
          "MSG binary\nDATA 2 [\\xff\\xc0]\nEND\nEOF idle=1\n");

    CHECK(t, sk_ws_utf8_valid("", 0));
    CHECK(t, sk_ws_utf8_valid("\xf4\x8f\xbf\xbf", 4));
    CHECK(t, !sk_ws_utf8_valid("\xf4\x8f\xbf", 3));
    CHECK(t, !sk_ws_utf8_valid("\xed\xbf\xbf", 3));
    CHECK(t, sk_ws_utf8_valid("\xed\x9f\xbf", 3));
    CHECK(t, !sk_ws_utf8_valid("\xc1\xbf", 2));
    CHECK(t, !sk_ws_utf8_valid("\x80", 1));
}

static void
test_max_message(T *t)
{
    sk_ws_limits_t five = {.max_message = 5};
    sk_ws_limits_t one_k = {.max_message = 1000};
    sk_buf_t b = {0};
    char big[1001];
    char want[96];

    memset(big, 'b', sizeof(big));
    CF(&b, 0x81, "Hello");
    WCASE(t, "exactly max_message", &five, &b, "MSG text\nDATA 5 [Hello]\nEND\nEOF idle=1\n");
    CF(&b, 0x81, "Hello!");
    WCASE(t, "one byte over, one frame: fails at the header", &five, &b, E_BIG "EOF idle=0\n");
    CF(&b, 0x01, "Hel");
    CF(&b, 0x89, "pingpingping");
    CF(&b, 0x80, "lo");
    CF(&b, 0x81, "again");
    WCASE(t, "fragments up to the limit; control frames do not count", &five, &b,
          "MSG text\nDATA 3 [Hel]\nPING 12 [pingpingping]\nDATA 2 [lo]\nEND\n"
          "MSG text\nDATA 5 [again]\nEND\nEOF idle=1\n");
    CF(&b, 0x01, "Hel");
    CF(&b, 0x80, "lo!");
    WCASE(t, "fragments over the limit", &five, &b,
          "MSG text\nDATA 3 [Hel]\n" E_BIG "EOF idle=0\n");
    cframe(&b, 0x82, big, sizeof(big), ENC_SHORTEST);
    b.end = b.start + 4; /* the header's length alone fails: no mask, no payload */
    WCASE(t, "16-bit length over the limit, no payload needed", &one_k, &b, E_BIG "EOF idle=0\n");
    cframe(&b, 0x82, big, sizeof(big) - 1, ENC_64);
    snprintf(want, sizeof(want), "MSG binary\nDATA 1000 fnv=%016llx\nEND\nEOF idle=1\n",
             (unsigned long long)fnv1a(big, sizeof(big) - 1));
    WCASE(t, "64-bit length at the limit (non-minimal encoding)", &one_k, &b, want);
    /* permessage-deflate: each frame of a compressed message is held to max_compressed (the
     * embedder bounds its inflated size), an uncompressed message still to max_message */
    sk_ws_limits_t z = {.max_message = 5, .max_compressed = 8, .allow_rsv1 = 1};
    CF(&b, 0xC2, "12345678");
    WCASE(t, "compressed: a frame of exactly max_compressed", &z, &b,
          "MSG binary z\nDATA 8 [12345678]\nEND\nEOF idle=1\n");
    CF(&b, 0x42, "12345678");
    CF(&b, 0x00, "12345678");
    CF(&b, 0x80, "1234");
    WCASE(t, "compressed fragments, each within max_compressed, together over it", &z, &b,
          "MSG binary z\nDATA 20 [12345678123456781234]\nEND\nEOF idle=1\n");
    CF(&b, 0x42, "1234");
    CF(&b, 0x80, "123456789");
    WCASE(t, "a compressed fragment one byte over max_compressed", &z, &b,
          "MSG binary z\nDATA 4 [1234]\n" E_BIG "EOF idle=0\n");
    CF(&b, 0x82, "123456");
    WCASE(t, "uncompressed: max_message still", &z, &b, E_BIG "EOF idle=0\n");
    CHECK(t, sk_ws_deflate_bound(65536) == 65536 + 8193 + 1025 + 5);
    CHECK(t, sk_ws_deflate_bound(UINT64_MAX - 3) == UINT64_MAX);
}

/* ---- serializer ------------------------------------------------------------------------------ */

static int
bytes_are(const sk_buf_t *b, const char *want, size_t n)
{
    return sk_buf_len(b) == n && (n == 0 || memcmp(sk_buf_head(b), want, n) == 0);
}

#define BYTES_ARE(b, lit) bytes_are((b), (lit), sizeof(lit) - 1)

static void
test_serializer(T *t)
{
    sk_buf_t b = {0};
    char big[256];
    char reason[SK_WS_MAX_CONTROL];

    memset(big, 'x', sizeof(big));
    memset(reason, 'r', sizeof(reason));

    /* RFC 6455 §5.7, as a server sends them */
    CHECK(t, sk_ws_frame(&b, 1, SK_WS_TEXT, "Hello", 5) == 0);
    CHECK(t, BYTES_ARE(&b, "\x81\x05\x48\x65\x6c\x6c\x6f"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame(&b, 0, SK_WS_TEXT, "Hel", 3) == 0);
    CHECK(t, sk_ws_frame(&b, 1, SK_WS_CONT, "lo", 2) == 0);
    CHECK(t, BYTES_ARE(&b, "\x01\x03\x48\x65\x6c\x80\x02\x6c\x6f"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame(&b, 1, SK_WS_PING, "Hello", 5) == 0);
    CHECK(t, BYTES_ARE(&b, "\x89\x05\x48\x65\x6c\x6c\x6f"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame(&b, 1, SK_WS_PONG, NULL, 0) == 0);
    CHECK(t, BYTES_ARE(&b, "\x8a\x00"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame(&b, 1, SK_WS_BINARY, big, 256) == 0);
    CHECK(t, sk_buf_len(&b) == 4 + 256 && memcmp(sk_buf_head(&b), "\x82\x7e\x01\x00", 4) == 0 &&
                 memcmp(sk_buf_head(&b) + 4, big, 256) == 0);
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_BINARY, 0, 65536) == 0);
    CHECK(t, BYTES_ARE(&b, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00"));
    sk_buf_free(&b);

    /* length encodings at their edges (§5.2) */
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_BINARY, 0, 125) == 0);
    CHECK(t, BYTES_ARE(&b, "\x82\x7d"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_BINARY, 0, 126) == 0);
    CHECK(t, BYTES_ARE(&b, "\x82\x7e\x00\x7e"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame_header(&b, 0, SK_WS_BINARY, 0, 65535) == 0);
    CHECK(t, BYTES_ARE(&b, "\x02\x7e\xff\xff"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_CONT, 0, INT64_MAX) == 0);
    CHECK(t, BYTES_ARE(&b, "\x80\x7f\x7f\xff\xff\xff\xff\xff\xff\xff"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_TEXT, 1, 3) == 0);
    CHECK(t, BYTES_ARE(&b, "\xc1\x03"));
    sk_buf_free(&b);

    /* refusals append nothing */
    CHECK(t, sk_ws_frame(&b, 1, SK_WS_TEXT, "k", 1) == 0);
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_BINARY, 0, (uint64_t)INT64_MAX + 1) == SK_ESTATE);
    CHECK(t, sk_ws_frame_header(&b, 0, SK_WS_PING, 0, 0) == SK_ESTATE);
    CHECK(t, sk_ws_frame_header(&b, 0, SK_WS_CLOSE, 0, 0) == SK_ESTATE);
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_PONG, 0, 126) == SK_ESTATE);
    CHECK(t, sk_ws_frame(&b, 1, SK_WS_PING, big, 126) == SK_ESTATE);
    CHECK(t, sk_ws_frame_header(&b, 1, 3, 0, 0) == SK_ESTATE);
    CHECK(t, sk_ws_frame_header(&b, 1, 0xB, 0, 0) == SK_ESTATE);
    CHECK(t, sk_ws_frame_header(&b, 2, SK_WS_TEXT, 0, 0) == SK_ESTATE);
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_CONT, 1, 0) == SK_ESTATE);
    CHECK(t, sk_ws_frame_header(&b, 1, SK_WS_PING, 1, 0) == SK_ESTATE);
    CHECK(t, BYTES_ARE(&b, "\x81\x01k"));
    sk_buf_free(&b);

    /* close frames (§5.5.1, §7.4) */
    CHECK(t, sk_ws_close_frame(&b, 0, NULL, 0) == 0);
    CHECK(t, BYTES_ARE(&b, "\x88\x00"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_close_frame(&b, 1000, NULL, 0) == 0);
    CHECK(t, BYTES_ARE(&b, "\x88\x02\x03\xe8"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_close_frame(&b, 4999, "bye", 3) == 0);
    CHECK(t, BYTES_ARE(&b, "\x88\x05\x13\x87"
                           "bye"));
    sk_buf_free(&b);
    CHECK(t, sk_ws_close_frame(&b, 1002, reason, SK_WS_MAX_CONTROL - 2) == 0);
    CHECK(t, sk_buf_len(&b) == 2 + SK_WS_MAX_CONTROL &&
                 memcmp(sk_buf_head(&b), "\x88\x7d\x03\xea", 4) == 0);
    sk_buf_free(&b);
    CHECK(t, sk_ws_close_frame(&b, 1002, reason, SK_WS_MAX_CONTROL - 1) == SK_ESTATE);
    CHECK(t, sk_ws_close_frame(&b, 1005, NULL, 0) == SK_ESTATE);
    CHECK(t, sk_ws_close_frame(&b, 1006, NULL, 0) == SK_ESTATE);
    CHECK(t, sk_ws_close_frame(&b, 1015, NULL, 0) == SK_ESTATE);
    CHECK(t, sk_ws_close_frame(&b, 999, NULL, 0) == SK_ESTATE);
    CHECK(t, sk_ws_close_frame(&b, 5000, NULL, 0) == SK_ESTATE);
    CHECK(t, sk_ws_close_frame(&b, 0, "why", 3) == SK_ESTATE);
    CHECK(t, sk_ws_close_frame(&b, 1000, "\xed\xa0\x80", 3) == SK_ESTATE);
    CHECK(t, sk_buf_len(&b) == 0);
    sk_buf_free(&b);
}

/* A server frame, masked as a client would send it, parses back to the same payload: the
 * serializer's length encodings and the parser's agree at every edge. */
static void
test_round_trip(T *t)
{
    static const size_t sizes[] = {0, 1, 125, 126, 127, 65535, 65536};
    char *payload = malloc(65536);

    for (size_t i = 0; i < 65536; i++)
        payload[i] = (char)(i % 251);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        sk_buf_t out = {0};
        sk_buf_t in = {0};
        size_t hn;
        sk_ws_parser_t p;
        sk_ws_limits_t lim = {.max_message = 0};
        sk_ws_event_t ev;
        size_t pos = 0, got = 0;
        int ends = 0;

        CHECK(t, sk_ws_frame(&out, 1, SK_WS_BINARY, payload, sizes[s]) == 0);
        hn = sk_buf_len(&out) - sizes[s];
        CHECK(t, hn == (sizes[s] < 126 ? 2u : sizes[s] <= 65535 ? 4u : 10u));
        sk_buf_append(&in, sk_buf_head(&out), hn);
        in.data[1] = (char)(in.data[1] | 0x80);
        sk_buf_append(&in, KEY, 4);
        for (size_t i = 0; i < sizes[s]; i++) {
            char c = (char)(payload[i] ^ KEY[i & 3]);

            sk_buf_append(&in, &c, 1);
        }
        sk_ws_parser_init(&p, &lim);
        for (int guard = 0; guard < 100; guard++) {
            pos += sk_ws_parser_execute(&p, in.data + pos, sk_buf_len(&in) - pos, &ev);
            if (ev.type == SK_WS_EV_DATA) {
                CHECK(t, memcmp(ev.data, payload + got, ev.len) == 0);
                got += ev.len;
            }
            ends += ev.type == SK_WS_EV_MESSAGE_END;
            if (ev.type == SK_WS_EV_NONE || ev.type == SK_WS_EV_ERROR)
                break;
        }
        CHECK(t, got == sizes[s] && ends == 1 && ev.type == SK_WS_EV_NONE);
        sk_buf_free(&out);
        sk_buf_free(&in);
    }
    free(payload);
}

static void
test_api(T *t)
{
    sk_ws_parser_t p;
    sk_ws_limits_t lim = {.max_message = 0};
    sk_ws_event_t ev;
    char bad[] = "\x81\x05";

    sk_ws_parser_init(&p, &lim);
    CHECK(t, sk_ws_parser_idle(&p));
    CHECK(t, sk_ws_parser_execute(&p, NULL, 0, &ev) == 0 && ev.type == SK_WS_EV_NONE);
    CHECK(t, sk_ws_parser_execute(&p, bad, 2, &ev) == 1 && ev.type == SK_WS_EV_ERROR &&
                 ev.code == SK_WS_PROTOCOL_ERROR);
    CHECK(t, sk_ws_parser_execute(&p, NULL, 0, &ev) == 0 && ev.type == SK_WS_EV_ERROR &&
                 ev.code == SK_WS_PROTOCOL_ERROR);
    CHECK(t, !sk_ws_parser_idle(&p));
}

int
main(void)
{
    T t;
    const char *print = getenv("SK_TEST_PRINT");

    memset(&t, 0, sizeof(t));
    t.print = print != NULL && print[0] == '1';
    if (guard_init(&t, (size_t)1 << 20) != 0) {
        perror("guard page");
        return 2;
    }
    test_api(&t);
    test_rfc_examples(&t);
    test_messages(&t);
    test_control(&t);
    test_close(&t);
    test_frame_errors(&t);
    test_utf8(&t);
    test_max_message(&t);
    test_serializer(&t);
    test_round_trip(&t);
    munmap(t.base, t.map_len);
    printf("test_ws: %d passed, %d failed\n", t.passed, t.failed);
    return t.failed == 0 ? 0 : 1;
}
