/* fuzz_request.c — fuzz harness for the sans-I/O request parser (src/core/sk_http.c over llhttp).
 *
 * Owns: one LLVMFuzzerTestOneInput body, built for libFuzzer (clang -fsanitize=fuzzer), for AFL++
 * (fuzz/afl_driver.c, persistent mode) and for replaying files (fuzz/replay.c).
 * Never: includes Python.h, performs I/O, or keeps state between inputs.
 *
 * Input layout: 8 leading bytes choose the limits and how the rest is split across reads; the rest
 * is the bytes a client sends. The same bytes are parsed twice: whole, and split into pieces as
 * the leading bytes say (byte by byte, two pieces, or pseudo-random pieces). Every call's input is
 * a fresh heap copy of exactly the unconsumed bytes, so ASan reports any read outside them.
 *
 * Checks (each failure aborts, so both fuzzers report it as a crash):
 *  - consumed bytes never exceed the input; SK_EV_NONE consumes everything;
 *  - SK_EV_BODY is non-empty and lies inside the bytes consumed by that call;
 *  - on SK_EV_HEAD, every span (target, field names and values) lies inside the head block, the
 *    limits hold, field names are tokens and no target or value holds CR, LF or NUL;
 *  - content delivered never exceeds max_body, and equals Content-Length at SK_EV_END;
 *  - a dead parser keeps returning the same SK_EV_ERROR without consuming;
 *  - a head is checked (sk_parser_head_checked) at SK_EV_HEAD and, refused, only for the declared
 *    length's 413; a checked head's target splits (sk_http_target_split) into a non-empty path
 *    and a query inside the target (or the static "/"), as a refusal's access line reads them;
 *  - the event log (heads, content with pieces merged, ends, error status, EOF state) of the split
 *    run equals the whole run's; the one accepted difference is the status of a refusal when one
 *    of the two is a limit's (413/414/431; see same_events()).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_core.h"
#include "sk_http.h"

#define FUZZ_NAME "fuzz_request"
#include "fuzz_common.h"

#define CONFIG_BYTES 8

typedef struct {
    sk_limits_t lim;
    sk_buf_t log;        /* the event log compared between runs */
    sk_buf_t body;       /* content of the current request not yet logged */
    uint64_t body_total; /* content bytes of the current request */
    int stopped;         /* SK_EV_ERROR seen */
    int status;
} run_t;

static void
flush_body(run_t *r)
{
    if (sk_buf_len(&r->body) == 0)
        return;
    PUT_LIT(&r->log, "B");
    put_u64(&r->log, sk_buf_len(&r->body));
    put(&r->log, sk_buf_head(&r->body), sk_buf_len(&r->body));
    sk_buf_consume(&r->body, sk_buf_len(&r->body));
}

static int
has_byte(const char *s, size_t n, int (*bad)(unsigned char))
{
    for (size_t i = 0; i < n; i++)
        if (bad((unsigned char)s[i]))
            return 1;
    return 0;
}

static int
is_crlfnul(unsigned char c)
{
    return c == '\r' || c == '\n' || c == '\0';
}

static int
not_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 0;
    return strchr("!#$%&'*+-.^_`|~", c) == NULL || c == '\0';
}

static void
span_ok(const sk_parser_t *p, sk_span_t s)
{
    REQUIRE(s.off <= p->head_len);
    REQUIRE(s.len <= p->head_len - s.off);
}

static void
split_ok(const sk_parser_t *p)
{
    /* the target of a checked head as the scope and a refusal's access line have it */
    const char *t = sk_parser_ptr(p, p->target), *end = t + p->target.len;
    const char *auth, *path, *query;
    size_t auth_len, path_len, query_len;

    REQUIRE(sk_parser_head_checked(p));
    sk_http_target_split(t, p->target.len, &auth, &auth_len, &path, &path_len, &query, &query_len);
    REQUIRE(path_len > 0 && memchr(path, '?', path_len) == NULL);
    REQUIRE((path_len == 1 && path[0] == '/') || (path >= t && path + path_len <= end));
    REQUIRE(auth == NULL || (auth > t && auth + auth_len <= end));
    REQUIRE(query == NULL ? query_len == 0 : query > t && query + query_len == end);
}

static void
on_head(run_t *r, const sk_parser_t *p)
{
    uint64_t section = 0;
    const char *method = sk_parser_method_name(p);

    flush_body(r);
    REQUIRE(p->head_len <= p->head_cap);
    REQUIRE(p->http_major == 1 && p->http_minor <= 1);
    span_ok(p, p->target);
    REQUIRE(p->target.len > 0);
    REQUIRE(p->target.len <= r->lim.max_request_line);
    REQUIRE(!has_byte(sk_parser_ptr(p, p->target), p->target.len, is_crlfnul));
    REQUIRE(p->nfields <= r->lim.max_fields);
    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];

        span_ok(p, f->name);
        span_ok(p, f->value);
        REQUIRE(f->name.len > 0);
        REQUIRE(!has_byte(sk_parser_ptr(p, f->name), f->name.len, not_tchar));
        REQUIRE(!has_byte(sk_parser_ptr(p, f->value), f->value.len, is_crlfnul));
        section += (uint64_t)f->name.len + f->value.len;
    }
    REQUIRE(section <= r->lim.max_field_section);
    REQUIRE(!(p->chunked && p->has_content_length));
    if (r->lim.max_body != 0)
        REQUIRE(p->content_length <= r->lim.max_body);
    REQUIRE(method != NULL);
    split_ok(p);

    PUT_LIT(&r->log, "H");
    put(&r->log, method, strlen(method) + 1);
    put_u64(&r->log, p->target.len);
    put(&r->log, sk_parser_ptr(p, p->target), p->target.len);
    {
        uint8_t flags[7] = {p->method,          p->http_major, p->http_minor,        p->keep_alive,
                            p->expect_continue, p->chunked,    p->has_content_length};

        put(&r->log, flags, sizeof(flags));
    }
    put_u64(&r->log, p->content_length);
    put_u64(&r->log, p->nfields);
    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];

        put_u64(&r->log, f->name.len);
        put(&r->log, sk_parser_ptr(p, f->name), f->name.len);
        put_u64(&r->log, f->value.len);
        put(&r->log, sk_parser_ptr(p, f->value), f->value.len);
    }
    r->body_total = 0;
}

/* Feeds the pending bytes to the parser until it needs more or refuses. Each call gets a fresh
 * heap copy of exactly the unconsumed bytes. */
static void
pump(sk_parser_t *p, sk_buf_t *pend, run_t *r)
{
    /* Every event but NONE either consumes a byte or is one of at most a few zero-byte events
     * (END after the last body piece, HEAD of a bodyless request ...); more means a livelock. */
    size_t budget = 4 * sk_buf_len(pend) + 16;

    while (!r->stopped) {
        size_t len = sk_buf_len(pend);
        char *d = malloc(len ? len : 1);
        sk_event_t ev;
        size_t c;

        if (d == NULL)
            die("out of memory");
        if (len > 0)
            memcpy(d, sk_buf_head(pend), len);
        c = sk_parser_execute(p, d, len, &ev);
        REQUIRE(c <= len);
        REQUIRE(budget-- > 0);
        switch (ev.type) {
        case SK_EV_NONE: REQUIRE(c == len); break;
        case SK_EV_HEAD: on_head(r, p); break;
        case SK_EV_BODY:
            REQUIRE(ev.len > 0);
            REQUIRE(ev.data >= d && ev.data + ev.len <= d + c);
            r->body_total += ev.len;
            REQUIRE(p->body_received == r->body_total);
            if (r->lim.max_body != 0)
                REQUIRE(r->body_total <= r->lim.max_body);
            if (p->has_content_length)
                REQUIRE(r->body_total <= p->content_length);
            put(&r->body, ev.data, ev.len);
            break;
        case SK_EV_END:
            flush_body(r);
            if (p->has_content_length)
                REQUIRE(r->body_total == p->content_length);
            PUT_LIT(&r->log, "E");
            break;
        case SK_EV_ERROR: {
            sk_event_t again;

            flush_body(r);
            REQUIRE(ev.reason != NULL);
            REQUIRE(ev.status == 400 || ev.status == 413 || ev.status == 414 || ev.status == 421 ||
                    ev.status == 431 || ev.status == 501 || ev.status == 505);
            if (getenv("FUZZ_VERBOSE") != NULL)
                fprintf(stderr, "refused: %d %s (%zu bytes pending)\n", ev.status, ev.reason, len);
            PUT_LIT(&r->log, "X");
            put_u64(&r->log, (uint64_t)ev.status);
            r->stopped = 1;
            r->status = ev.status;
            /* dead: the same refusal again, nothing consumed */
            REQUIRE(sk_parser_execute(p, d, len, &again) == 0);
            REQUIRE(again.type == SK_EV_ERROR && again.status == ev.status);
            REQUIRE(!sk_parser_idle(p));
            /* a refused head is checked only for its declared length's 413, or past its head */
            if (sk_parser_head_checked(p) && !p->head_done) {
                REQUIRE(ev.status == 413 && p->head_read);
                split_ok(p);
            }
            break;
        }
        default: die("unknown event type");
        }
        free(d);
        sk_buf_consume(pend, c);
        if (ev.type == SK_EV_NONE)
            return;
    }
}

/* Parses in[0..n): whole when mode < 0, else split as mode/seed say. */
static void
run(const sk_limits_t *lim, const char *in, size_t n, int mode, uint64_t seed, sk_buf_t *log)
{
    sk_parser_t p;
    sk_buf_t pend = {0};
    run_t r;
    size_t pos = 0;
    size_t calls = 0;

    memset(&r, 0, sizeof(r));
    r.lim = *lim;
    sk_parser_init(&p, lim);
    do {
        size_t piece = split_piece(mode, &seed, ++calls, n, pos);

        put(&pend, in + pos, piece);
        pos += piece;
        pump(&p, &pend, &r);
    } while (pos < n && !r.stopped);
    flush_body(&r);
    {
        uint8_t eof[2] = {(uint8_t)sk_parser_eof_mid_message(&p), (uint8_t)sk_parser_idle(&p)};

        PUT_LIT(&r.log, "F");
        put(&r.log, eof, sizeof(eof));
    }
    *log = r.log;
    sk_buf_free(&r.body);
    sk_buf_free(&pend);
    sk_parser_free(&p);
}

static int
is_limit(uint64_t status)
{
    return status == 413 || status == 414 || status == 431;
}

/* The two logs are equal; or both end in a refusal after the same events, and one refusal is a
 * limit's. A limit is enforced as soon as the bytes passing it are seen (so a peer cannot make
 * the head block grow), while llhttp refuses a malformed span only where its bad byte is: when
 * one field-line is both over a limit and malformed, the status depends on how the bytes were
 * split (431 vs 400, 414 vs 400). Both are refusals that close the connection before anything
 * reaches the application, so the harness accepts that divergence and no other. */
static int
same_events(const sk_buf_t *a, const sk_buf_t *b)
{
    /* every log ends with: 'X' status(8) 'F' eof(2) when refused */
    const size_t tail = 1 + 8 + 1 + 2;
    size_t n = sk_buf_len(a);
    const char *x = sk_buf_head(a);
    const char *y = sk_buf_head(b);
    uint64_t sx, sy;

    if (n == sk_buf_len(b) && memcmp(x, y, n) == 0)
        return 1;
    if (n != sk_buf_len(b) || n < tail || x[n - tail] != 'X' || y[n - tail] != 'X' ||
        memcmp(x, y, n - tail) != 0 || memcmp(x + n - 3, y + n - 3, 3) != 0)
        return 0;
    memcpy(&sx, x + n - tail + 1, 8);
    memcpy(&sy, y + n - tail + 1, 8);
    return is_limit(sx) || is_limit(sy);
}

static const size_t req_line_choices[8] = {8190, 1, 8, 32, 100, 1024, 65535, SIZE_MAX};
static const size_t section_choices[8] = {65536, 0, 1, 16, 64, 256, 4096, SIZE_MAX};
static const uint32_t fields_choices[8] = {100, 0, 1, 2, 3, 8, 1000, UINT32_MAX};
static const uint64_t body_choices[8] = {0, 1, 5, 16, 100, 1000, 65536, UINT64_MAX};
static const size_t ext_choices[8] = {4096, 0, 1, 8, 64, 1000, 16, SIZE_MAX};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t cfg[CONFIG_BYTES] = {0};
    sk_limits_t lim;
    sk_buf_t whole, split;
    uint64_t seed;
    const char *in;
    size_t n;

    memcpy(cfg, data, size < CONFIG_BYTES ? size : CONFIG_BYTES);
    in = size > CONFIG_BYTES ? (const char *)data + CONFIG_BYTES : "";
    n = size > CONFIG_BYTES ? size - CONFIG_BYTES : 0;

    /* Mostly the defaults: a config byte below 0x80 keeps its default limit. */
    sk_limits_default(&lim);
    if (cfg[0] & 0x80)
        lim.max_request_line = req_line_choices[cfg[0] & 7];
    if (cfg[1] & 0x80)
        lim.max_field_section = section_choices[cfg[1] & 7];
    if (cfg[2] & 0x80)
        lim.max_fields = fields_choices[cfg[2] & 7];
    if (cfg[3] & 0x80)
        lim.max_body = body_choices[cfg[3] & 7];
    if (cfg[4] & 0x80)
        lim.max_chunk_ext = ext_choices[cfg[4] & 7];
    seed = ((uint64_t)cfg[6] << 8 | cfg[7]) * 0x9E3779B97F4A7C15ULL + 1;

    run(&lim, in, n, -1, 0, &whole);
    run(&lim, in, n, cfg[5] & 3, seed, &split);
    if (!same_events(&whole, &split)) {
        dump("whole", &whole);
        dump("split", &split);
        die("split run's events differ from the whole run's");
    }
    sk_buf_free(&whole);
    sk_buf_free(&split);
    return 0;
}
