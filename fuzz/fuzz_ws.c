/* fuzz_ws.c — fuzz harness for the WebSocket frame codec (src/core/sk_ws.c, RFC 6455).
 *
 * Owns: one LLVMFuzzerTestOneInput body, built for libFuzzer, for AFL++ (fuzz/afl_driver.c) and
 * for replaying files (fuzz/replay.c).
 * Never: includes Python.h, performs I/O, or keeps state between inputs.
 *
 * Input layout: 4 leading bytes choose the limits (max_message, permessage-deflate's RSV1 and
 * max_compressed) and how the rest is split across reads; the rest is the bytes a client sends
 * after the handshake.
 * The same bytes are parsed twice: whole, and split as the leading bytes say (byte by byte, two
 * pieces, small or larger pseudo-random pieces). Every call's input is a fresh heap copy of
 * exactly the unconsumed bytes, so ASan reports any read outside them.
 *
 * Checks (each failure aborts, so both fuzzers report it as a crash):
 *  - consumed bytes never exceed the input; SK_WS_EV_NONE consumes everything; bytes a call does
 *    not consume come back unchanged (unmasking touches consumed bytes only);
 *  - SK_WS_EV_DATA is non-empty, lies inside the bytes consumed by that call, only inside a
 *    message; a message never exceeds max_message (unless compressed, with max_compressed set:
 *    then its frames are bounded one by one); a complete uncompressed text message is UTF-8;
 *  - MESSAGE never inside a message, END only inside one; control payloads <= 125 bytes; a CLOSE
 *    has a valid code and a UTF-8 reason, or code 1005 and no reason; after it, input is ignored;
 *  - an error's code is 1002, 1007 or 1009, and a dead parser keeps returning it, consuming 0;
 *  - the serializer answers every ping with a pong and echoes every close (code and reason) in
 *    exactly the bytes RFC 6455 §5.2 defines;
 *  - the event log (data pieces merged) of the split run equals the whole run's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_core.h"
#include "sk_ws.h"

#define FUZZ_NAME "fuzz_ws"
#include "fuzz_common.h"

#define CONFIG_BYTES 4

typedef struct {
    sk_ws_limits_t lim;
    sk_buf_t log;       /* the event log compared between runs */
    sk_buf_t msg;       /* the current message's payload (for the UTF-8 and size checks) */
    size_t logged;      /* bytes of msg already in the log */
    int in_msg;         /* MESSAGE seen, END not yet */
    int msg_text;       /* the current message is uncompressed text */
    int msg_compressed; /* the current message is compressed (RSV1) */
    int closed;         /* CLOSE seen */
    int stopped;        /* ERROR seen */
} run_t;

static void
flush_data(run_t *r)
{
    size_t n = sk_buf_len(&r->msg) - r->logged;

    if (n == 0)
        return;
    put(&r->log, "D", 1);
    put_u64(&r->log, n);
    put(&r->log, sk_buf_head(&r->msg) + r->logged, n);
    r->logged = sk_buf_len(&r->msg);
}

/* The serializer's answer to a control frame must be the RFC 6455 §5.2 bytes. */
static void
check_answer(const sk_ws_event_t *ev)
{
    sk_buf_t out = {0};
    size_t hdr = 2;

    if (ev->type == SK_WS_EV_PING) {
        REQUIRE(sk_ws_frame(&out, 1, SK_WS_PONG, ev->data, ev->len) == 0);
        REQUIRE(sk_buf_len(&out) == hdr + ev->len);
        REQUIRE((unsigned char)out.data[0] == 0x8A && (size_t)out.data[1] == ev->len);
        REQUIRE(ev->len == 0 || memcmp(out.data + hdr, ev->data, ev->len) == 0);
    }
    else if (ev->code == SK_WS_NO_STATUS) {
        REQUIRE(sk_ws_close_frame(&out, ev->code, NULL, 0) == SK_ESTATE);
        REQUIRE(sk_buf_len(&out) == 0);
        REQUIRE(sk_ws_close_frame(&out, 0, NULL, 0) == 0);
        REQUIRE(sk_buf_len(&out) == hdr && memcmp(out.data, "\x88\x00", hdr) == 0);
    }
    else {
        REQUIRE(sk_ws_close_frame(&out, ev->code, ev->data, ev->len) == 0);
        REQUIRE(sk_buf_len(&out) == hdr + 2 + ev->len);
        REQUIRE((unsigned char)out.data[0] == 0x88 && (size_t)out.data[1] == 2 + ev->len);
        REQUIRE(((unsigned char)out.data[2] << 8 | (unsigned char)out.data[3]) == ev->code);
        REQUIRE(ev->len == 0 || memcmp(out.data + hdr + 2, ev->data, ev->len) == 0);
    }
    sk_buf_free(&out);
}

static void
on_event(run_t *r, const sk_ws_event_t *ev, const char *d, size_t c)
{
    switch (ev->type) {
    case SK_WS_EV_MESSAGE:
        REQUIRE(!r->in_msg);
        REQUIRE(ev->opcode == SK_WS_TEXT || ev->opcode == SK_WS_BINARY);
        REQUIRE(!ev->compressed || r->lim.allow_rsv1);
        r->in_msg = 1;
        r->msg_text = ev->opcode == SK_WS_TEXT && !ev->compressed;
        r->msg_compressed = ev->compressed != 0;
        put(&r->log, "M", 1);
        put(&r->log, (const char[]){(char)ev->opcode, (char)ev->compressed}, 2);
        return;
    case SK_WS_EV_DATA:
        REQUIRE(r->in_msg);
        REQUIRE(ev->len > 0 && ev->data >= d && ev->data + ev->len <= d + c);
        put(&r->msg, ev->data, ev->len);
        /* a compressed message's frames are bounded one by one (max_compressed), not its
         * total: the unit cases (test_ws.c) hold that */
        if (r->lim.max_message != 0 && !(r->msg_compressed && r->lim.max_compressed != 0))
            REQUIRE(sk_buf_len(&r->msg) <= r->lim.max_message);
        return;
    case SK_WS_EV_MESSAGE_END:
        REQUIRE(r->in_msg);
        if (r->msg_text)
            REQUIRE(sk_ws_utf8_valid(sk_buf_head(&r->msg), sk_buf_len(&r->msg)));
        flush_data(r);
        put(&r->log, "E", 1);
        sk_buf_consume(&r->msg, sk_buf_len(&r->msg));
        r->logged = 0;
        r->in_msg = 0;
        return;
    case SK_WS_EV_PING:
    case SK_WS_EV_PONG:
    case SK_WS_EV_CLOSE:
        flush_data(r);
        REQUIRE(ev->data != NULL && ev->len <= SK_WS_MAX_CONTROL);
        if (ev->type == SK_WS_EV_CLOSE) {
            REQUIRE(ev->code == SK_WS_NO_STATUS ? ev->len == 0 : sk_ws_close_code_valid(ev->code));
            REQUIRE(ev->len <= SK_WS_MAX_CONTROL - 2 && sk_ws_utf8_valid(ev->data, ev->len));
            r->closed = 1;
        }
        if (ev->type != SK_WS_EV_PONG)
            check_answer(ev);
        put(&r->log, ev->type == SK_WS_EV_PING ? "P" : ev->type == SK_WS_EV_PONG ? "O" : "C", 1);
        put_u64(&r->log, (uint64_t)ev->code);
        put_u64(&r->log, ev->len);
        put(&r->log, ev->data, ev->len);
        return;
    case SK_WS_EV_ERROR:
        flush_data(r);
        REQUIRE(ev->reason != NULL);
        REQUIRE(ev->code == SK_WS_PROTOCOL_ERROR || ev->code == SK_WS_INVALID_DATA ||
                ev->code == SK_WS_TOO_BIG);
        if (getenv("FUZZ_VERBOSE") != NULL)
            fprintf(stderr, "failed: %d %s\n", ev->code, ev->reason);
        put(&r->log, "X", 1);
        put_u64(&r->log, (uint64_t)ev->code);
        r->stopped = 1;
        return;
    default: die("unknown event type");
    }
}

/* Feeds the pending bytes until the parser needs more or fails; each call gets a fresh heap copy
 * of exactly the unconsumed bytes. */
static void
pump(sk_ws_parser_t *p, sk_buf_t *pend, run_t *r)
{
    /* every event but NONE consumes a byte, or is one of at most two zero-byte events (END, the
     * MESSAGE of an empty frame) per frame header of at least 6 bytes */
    size_t budget = 2 * sk_buf_len(pend) + 16;

    while (!r->stopped) {
        size_t len = sk_buf_len(pend);
        char *d = malloc(len ? len : 1);
        sk_ws_event_t ev;
        size_t c;

        if (d == NULL)
            die("out of memory");
        if (len > 0)
            memcpy(d, sk_buf_head(pend), len);
        c = sk_ws_parser_execute(p, d, len, &ev);
        REQUIRE(c <= len);
        REQUIRE(budget-- > 0);
        REQUIRE(c == len || memcmp(d + c, sk_buf_head(pend) + c, len - c) == 0);
        if (ev.type == SK_WS_EV_NONE) {
            REQUIRE(c == len);
        }
        else {
            REQUIRE(!r->closed); /* after a Close, nothing but NONE */
            on_event(r, &ev, d, c);
        }
        if (ev.type == SK_WS_EV_ERROR) {
            sk_ws_event_t again;

            REQUIRE(sk_ws_parser_execute(p, d, len, &again) == 0);
            REQUIRE(again.type == SK_WS_EV_ERROR && again.code == ev.code);
            REQUIRE(!sk_ws_parser_idle(p));
        }
        free(d);
        sk_buf_consume(pend, c);
        if (ev.type == SK_WS_EV_NONE)
            return;
    }
}

/* Parses in[0..n): whole when mode < 0, else split as mode/seed say. */
static void
run(const sk_ws_limits_t *lim, const char *in, size_t n, int mode, uint64_t seed, sk_buf_t *log)
{
    sk_ws_parser_t p;
    sk_buf_t pend = {0};
    run_t r;
    size_t pos = 0;
    size_t calls = 0;

    memset(&r, 0, sizeof(r));
    r.lim = *lim;
    sk_ws_parser_init(&p, lim);
    do {
        size_t piece = split_piece(mode, &seed, ++calls, n, pos);

        put(&pend, in + pos, piece);
        pos += piece;
        pump(&p, &pend, &r);
    } while (pos < n && !r.stopped);
    flush_data(&r);
    {
        uint8_t eof[2] = {(uint8_t)sk_ws_parser_idle(&p), (uint8_t)r.in_msg};

        put(&r.log, "F", 1);
        put(&r.log, eof, sizeof(eof));
    }
    *log = r.log;
    sk_buf_free(&r.msg);
    sk_buf_free(&pend);
}

static const uint64_t max_message_choices[8] = {0, 1, 5, 16, 125, 126, 65536, 16777216};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t cfg[CONFIG_BYTES] = {0};
    sk_ws_limits_t lim = {.max_message = 0};
    sk_buf_t whole, split;
    uint64_t seed;
    const char *in;
    size_t n;

    memcpy(cfg, data, size < CONFIG_BYTES ? size : CONFIG_BYTES);
    in = size > CONFIG_BYTES ? (const char *)data + CONFIG_BYTES : "";
    n = size > CONFIG_BYTES ? size - CONFIG_BYTES : 0;
    lim.max_message = max_message_choices[cfg[0] & 7];
    lim.allow_rsv1 = (cfg[0] & 0x08) != 0;
    /* as the embedder sets it with permessage-deflate (sk_wsh.c); bit 0x10: left 0 */
    if (lim.allow_rsv1 && lim.max_message != 0 && (cfg[0] & 0x10) == 0)
        lim.max_compressed = sk_ws_deflate_bound(lim.max_message);
    seed = ((uint64_t)cfg[2] << 8 | cfg[3]) * 0x9E3779B97F4A7C15ULL + 1;

    run(&lim, in, n, -1, 0, &whole);
    run(&lim, in, n, cfg[1] & 3, seed, &split);
    if (sk_buf_len(&whole) != sk_buf_len(&split) ||
        (sk_buf_len(&whole) > 0 &&
         memcmp(sk_buf_head(&whole), sk_buf_head(&split), sk_buf_len(&whole)) != 0)) {
        dump("whole", &whole);
        dump("split", &split);
        die("split run's events differ from the whole run's");
    }
    sk_buf_free(&whole);
    sk_buf_free(&split);
    return 0;
}
