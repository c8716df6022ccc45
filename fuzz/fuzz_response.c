/* fuzz_response.c — fuzz harness for the sans-I/O response serializer (src/core/sk_resp.c).
 *
 * Owns: one LLVMFuzzerTestOneInput body, built for libFuzzer, AFL++ (fuzz/afl_driver.c) and
 * replay (fuzz/replay.c), that turns structured input into what an application sends (status,
 * headers, body events with more_body) and what the request said (HTTP/1.0 or 1.1, HEAD,
 * keep-alive, forced close), drives sk_resp_start/sk_resp_body/sk_resp_body_ref (or sk_resp_error), and parses what
 * was written back with llhttp (HTTP_RESPONSE).
 * Never: includes Python.h, performs I/O, or keeps state between inputs.
 *
 * Input layout (every field optional: a short input ends the message with an empty final event):
 *   status: 2 bytes   high bit of the first: an interesting status from a table; else any 0..699
 *   flags:  1 byte    bit0 HTTP/1.1, bit1 HEAD, bit2 keep-alive, bit3 force_close, bit4 no date,
 *                     bit5 add a correct content-length, bit6 add "transfer-encoding: chunked",
 *                     bit7 a refusal from sk_resp_error() instead
 *   nheaders: 1 byte  (low 4 bits)
 *   header:  name byte (high bit clear: a name from a table; else raw, length in the low 5 bits)
 *            value byte (high bit set: a value from a table; else raw, length in the low 7 bits)
 *   events:  byte: length in the low 6 bits, bit6 more_body, bit7 sent as sk_resp_body_ref()
 *            (the content placed by the harness, as sendfile would); the content bytes follow
 *
 * Checks (each failure aborts):
 *  - a refused call (any negative return) appends nothing and leaves the response state as it was;
 *    a failed sk_resp_start leaves it not started, so sk_resp_body then returns SK_ESTATE;
 *  - once the final event is accepted, llhttp parses the output as exactly one response, with the
 *    same status, the application's written fields first (same names, same values up to OWS) and
 *    then only the server's framing/connection/date/server fields, and the same content (none
 *    when bodyless); a close-delimited message needs EOF and is never keep-alive; when the
 *    serializer says keep-alive, llhttp agrees.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llhttp.h"
#include "sk_core.h"
#include "sk_resp.h"

#define DATE "Sun, 06 Nov 1994 08:49:37 GMT"
#define MAX_HEADERS 15

/* What was written so far, printed when a check fails. */
static const char *wire_now;
static size_t wire_len;

static void
print_wire(void)
{
    if (wire_now != NULL)
        fprintf(stderr, "--- wire (%zu bytes)\n%.*s\n---\n", wire_len, (int)wire_len, wire_now);
}

#define FUZZ_NAME "fuzz_response"
#define FUZZ_DIE_CONTEXT print_wire
#include "fuzz_common.h"

/* ---- input reader ---------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} input_t;

static int
take_byte(input_t *in, uint8_t *out)
{
    if (in->n == 0)
        return 0;
    *out = *in->p++;
    in->n--;
    return 1;
}

/* Up to want bytes; returns how many. */
static size_t
take(input_t *in, size_t want, const char **out)
{
    size_t n = want < in->n ? want : in->n;

    *out = (const char *)in->p;
    in->p += n;
    in->n -= n;
    return n;
}

static const int statuses[16] = {100, 101, 103, 200, 201, 204, 205, 299,
                                 301, 304, 404, 431, 500, 599, 199, 305};
static const char *const names[] = {
    "content-length",
    "Content-Length",
    "transfer-encoding",
    "Transfer-Encoding",
    "connection",
    "Connection",
    "date",
    "server",
    "content-type",
    "x-a",
    "set-cookie",
    "CONNECTION",
    "Date",
    "SERVER",
    "keep-alive",
    "upgrade",
};
static const char *const values[] = {
    "close",
    "keep-alive",
    "chunked",
    " chunked ",
    "0",
    "5",
    "18446744073709551615",
    "18446744073709551616",
    "Close, Upgrade",
    "upgrade",
    "",
    " x ",
    "\tv\t",
    "gzip, chunked",
    "+5",
    "keep-alive, close",
    "1 2",
    "a\x7f b",
    "\x80\xff",
    "text/plain",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))
#define NVALUES (sizeof(values) / sizeof(values[0]))

/* ---- llhttp read-back ------------------------------------------------------------------------ */

typedef struct {
    llhttp_t llh;
    int head_request;
    int begins;
    int completes;
    int in_value;
    int keep_alive; /* llhttp_should_keep_alive() when the message completes */
    uint32_t nfields;
    sk_buf_t name[MAX_HEADERS + 8];
    sk_buf_t value[MAX_HEADERS + 8];
    sk_buf_t body;
} back_t;

static back_t *
back_of(llhttp_t *llh)
{
    return (back_t *)(void *)llh;
}

static int
bk_begin(llhttp_t *llh)
{
    back_of(llh)->begins++;
    return 0;
}

static int
bk_field(llhttp_t *llh, const char *at, size_t len)
{
    back_t *b = back_of(llh);

    if (b->in_value) {
        b->in_value = 0;
        b->nfields++;
    }
    REQUIRE(b->nfields < MAX_HEADERS + 8);
    put(&b->name[b->nfields], at, len);
    return 0;
}

static int
bk_value(llhttp_t *llh, const char *at, size_t len)
{
    back_t *b = back_of(llh);

    b->in_value = 1;
    put(&b->value[b->nfields], at, len);
    return 0;
}

static int
bk_value_complete(llhttp_t *llh)
{
    back_of(llh)->in_value = 1; /* also for an empty value */
    return 0;
}

static int
bk_headers_complete(llhttp_t *llh)
{
    back_t *b = back_of(llh);

    if (b->in_value) {
        b->in_value = 0;
        b->nfields++;
    }
    return b->head_request ? 1 : 0; /* 1: no content follows (a response to HEAD) */
}

static int
bk_body(llhttp_t *llh, const char *at, size_t len)
{
    put(&back_of(llh)->body, at, len);
    return 0;
}

static int
bk_complete(llhttp_t *llh)
{
    back_of(llh)->completes++;
    back_of(llh)->keep_alive = llhttp_should_keep_alive(llh); /* flags are reset after this */
    return 0;
}

static const llhttp_settings_t bk_settings = {
    .on_message_begin = bk_begin,
    .on_header_field = bk_field,
    .on_header_value = bk_value,
    .on_header_value_complete = bk_value_complete,
    .on_headers_complete = bk_headers_complete,
    .on_body = bk_body,
    .on_message_complete = bk_complete,
};

static void
back_free(back_t *b)
{
    for (size_t i = 0; i < MAX_HEADERS + 8; i++) {
        sk_buf_free(&b->name[i]);
        sk_buf_free(&b->value[i]);
    }
    sk_buf_free(&b->body);
}

/* ---- comparisons ----------------------------------------------------------------------------- */

static int
ieq(const char *a, size_t an, const char *b, size_t bn)
{
    if (an != bn)
        return 0;
    for (size_t i = 0; i < an; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];

        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y + 32);
        if (x != y)
            return 0;
    }
    return 1;
}

static int
buf_ieq(const sk_buf_t *b, const char *s)
{
    return ieq(sk_buf_head(b), sk_buf_len(b), s, strlen(s));
}

/* OWS-trimmed equality (RFC 9110 §5.5: leading and trailing whitespace is not part of a value). */
static int
value_eq(const char *a, size_t an, const char *b, size_t bn)
{
    while (an > 0 && (a[0] == ' ' || a[0] == '\t'))
        a++, an--;
    while (an > 0 && (a[an - 1] == ' ' || a[an - 1] == '\t'))
        an--;
    while (bn > 0 && (b[0] == ' ' || b[0] == '\t'))
        b++, bn--;
    while (bn > 0 && (b[bn - 1] == ' ' || b[bn - 1] == '\t'))
        bn--;
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

static int
bodyless(int status, int head)
{
    return head || status < 200 || status == 204 || status == 205 || status == 304;
}

/* Parses out[from..] back and checks it against what the application sent. */
static void
check_wire(const sk_buf_t *out, size_t from, const sk_resp_t *r, int status, const sk_header_t *h,
           size_t nh, const sk_buf_t *content)
{
    back_t b;
    llhttp_errno_t err;
    const char *wire = sk_buf_head(out) + from;
    size_t len = sk_buf_len(out) - from;
    uint32_t k = 0;

    wire_now = wire;
    wire_len = len;
    memset(&b, 0, sizeof(b));
    b.head_request = r->req.head;
    llhttp_init(&b.llh, HTTP_RESPONSE, &bk_settings);
    err = llhttp_execute(&b.llh, wire, len);
    if (err != HPE_OK && !(err == HPE_PAUSED_UPGRADE && status == 101)) {
        fprintf(stderr, "llhttp: %s: %s\n", llhttp_errno_name(err),
                llhttp_get_error_reason(&b.llh));
        die("the response does not parse back");
    }
    if (r->framing == SK_FRAME_CLOSE) {
        REQUIRE(!r->keep_alive);
        REQUIRE(b.completes == 0);
        REQUIRE(llhttp_finish(&b.llh) == HPE_OK);
    }
    REQUIRE(b.begins == 1);
    REQUIRE(b.completes == 1);
    REQUIRE(b.llh.status_code == status);
    if (r->keep_alive && status != 101)
        REQUIRE(b.keep_alive);

    /* the application's fields, in order, minus the framing ones the serializer owns */
    for (size_t i = 0; i < nh; i++) {
        int framing_field =
            ieq(h[i].name, h[i].name_len, "transfer-encoding", sizeof("transfer-encoding") - 1) ||
            (ieq(h[i].name, h[i].name_len, "content-length", sizeof("content-length") - 1) &&
             (status < 200 || status == 204 || status == 205));

        if (framing_field)
            continue;
        REQUIRE(k < b.nfields);
        REQUIRE(sk_buf_len(&b.name[k]) == h[i].name_len &&
                memcmp(sk_buf_head(&b.name[k]), h[i].name, h[i].name_len) == 0);
        REQUIRE(value_eq(sk_buf_head(&b.value[k]), sk_buf_len(&b.value[k]), h[i].value,
                         h[i].value_len));
        k++;
    }
    /* then only the server's own */
    for (; k < b.nfields; k++) {
        const sk_buf_t *n = &b.name[k];

        REQUIRE(buf_ieq(n, "content-length") || buf_ieq(n, "transfer-encoding") ||
                buf_ieq(n, "connection") || buf_ieq(n, "date") || buf_ieq(n, "server"));
        if (buf_ieq(n, "transfer-encoding"))
            REQUIRE(r->framing == SK_FRAME_CHUNKED && buf_ieq(&b.value[k], "chunked"));
        if (status == 205 && buf_ieq(n, "content-length")) /* RFC 9110 §15.3.6 */
            REQUIRE(buf_ieq(&b.value[k], "0"));
    }
    if (bodyless(status, r->req.head))
        REQUIRE(sk_buf_len(&b.body) == 0);
    else
        REQUIRE(sk_buf_len(&b.body) == sk_buf_len(content) &&
                (sk_buf_len(content) == 0 ||
                 memcmp(sk_buf_head(&b.body), sk_buf_head(content), sk_buf_len(content)) == 0));
    back_free(&b);
    wire_now = NULL;
}

/* sk_resp_error(): a complete refusal that parses back to the same status and its reason text.
 * Its callers pass 4xx/5xx codes (1xx, 204 and 304 cannot carry the text), and anything outside
 * 100..599 must become 500. */
static void
check_error(int status, int head)
{
    sk_buf_t out = {0};
    back_t b;
    int want;

    if (status >= 100 && status < 400)
        status = 400 + status % 200;
    want = status < 100 || status > 599 ? 500 : status;

    PUT_LIT(&out, "prefix");
    REQUIRE(sk_resp_error(&out, status, head, (status & 1) ? NULL : DATE) == 0);
    memset(&b, 0, sizeof(b));
    b.head_request = head;
    llhttp_init(&b.llh, HTTP_RESPONSE, &bk_settings);
    REQUIRE(llhttp_execute(&b.llh, sk_buf_head(&out) + 6, sk_buf_len(&out) - 6) == HPE_OK);
    REQUIRE(b.begins == 1 && b.completes == 1);
    REQUIRE(b.llh.status_code == want);
    REQUIRE(!b.keep_alive);
    REQUIRE(head || sk_buf_len(&b.body) > 0);
    back_free(&b);
    sk_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input_t in = {data, size};
    uint8_t s0 = 0, s1 = 0, flags = 0, nh_byte = 0;
    int status;
    sk_req_info_t req = {0}; /* opts NULL: the default server field; no TE: trailers */
    sk_header_t h[MAX_HEADERS + 2];
    size_t nh = 0;
    sk_resp_t r;
    sk_buf_t out = {0};
    sk_buf_t content = {0};
    char cl_text[24];
    const char *date;
    uint64_t planned = 0;
    int rc;

    take_byte(&in, &s0);
    take_byte(&in, &s1);
    take_byte(&in, &flags);
    take_byte(&in, &nh_byte);
    status = (s0 & 0x80) ? statuses[s0 & 15] : ((s0 << 8) | s1) % 700;
    req.http_minor = flags & 1;
    req.head = (flags >> 1) & 1;
    req.keep_alive = (flags >> 2) & 1;
    req.force_close = (flags >> 3) & 1;
    date = (flags & 16) ? NULL : DATE;
    if (flags & 0x80) {
        check_error(status, req.head);
        return 0;
    }

    for (size_t i = 0; i < (size_t)(nh_byte & 15); i++) {
        uint8_t nb, vb;

        if (!take_byte(&in, &nb) || !take_byte(&in, &vb))
            break;
        if (nb & 0x80) {
            h[nh].name_len = take(&in, nb & 0x1f, &h[nh].name);
        }
        else {
            h[nh].name = names[nb % NNAMES];
            h[nh].name_len = strlen(h[nh].name);
        }
        if (vb & 0x80) {
            h[nh].value = values[(vb & 0x7f) % NVALUES];
            h[nh].value_len = strlen(h[nh].value);
        }
        else {
            h[nh].value_len = take(&in, vb & 0x7f, &h[nh].value);
        }
        nh++;
    }
    if (flags & 0x40) {
        h[nh].name = "transfer-encoding";
        h[nh].name_len = 17;
        h[nh].value = "chunked";
        h[nh].value_len = 7;
        nh++;
    }
    if (flags & 0x20) {
        /* the content-length the events below add up to (each event: 1 byte + its length) */
        input_t peek = in;
        uint8_t e;

        while (take_byte(&peek, &e)) {
            const char *skip;

            planned += take(&peek, e & 0x3f, &skip);
            if (!(e & 0x40))
                break;
        }
        h[nh].name = "content-length";
        h[nh].name_len = 14;
        h[nh].value_len =
            (size_t)snprintf(cl_text, sizeof(cl_text), "%llu", (unsigned long long)planned);
        h[nh].value = cl_text;
        nh++;
    }

    memset(&r, 0, sizeof(r));
    PUT_LIT(&out, "Xprefix");
    sk_buf_consume(&out, 1); /* a buffer whose start is not 0, as after a partial write */
    rc = sk_resp_start(&r, &req, status, h, nh);
    if (rc != 0) {
        REQUIRE(rc == SK_ESTATUS || rc == SK_EHDRNAME || rc == SK_EHDRVALUE || rc == SK_ECL ||
                rc == SK_ETE);
        REQUIRE(!r.started);
        REQUIRE(sk_resp_body(&r, &out, "", 0, 0, date) == SK_ESTATE);
        REQUIRE(sk_buf_len(&out) == 6);
        goto done;
    }
    REQUIRE(status >= 100 && status <= 599);

    for (;;) {
        uint8_t e = 0;
        const char *piece = "";
        size_t len;
        int more;
        size_t before = sk_buf_len(&out);
        sk_resp_t saved = r;

        if (!take_byte(&in, &e))
            e = 0; /* input exhausted: an empty final event */
        len = take(&in, e & 0x3f, &piece);
        more = (e & 0x40) != 0 && in.n > 0;
        if (e & 0x80) {
            /* the caller-sent form (pathsend/zerocopysend): the content goes between what the
             * serializer appends and what it gives back for after it; the wire must be the same
             * as with sk_resp_body */
            char after[SK_RESP_AFTER_MAX];
            size_t alen = SK_RESP_AFTER_MAX + 1;

            rc = sk_resp_body_ref(&r, &out, len, more, date, after, &alen);
            REQUIRE(alen <= SK_RESP_AFTER_MAX);
            if (rc == 0 && r.framing != SK_FRAME_NONE)
                put(&out, piece, len);
            if (rc == 0)
                put(&out, after, alen);
        }
        else {
            rc = sk_resp_body(&r, &out, piece, len, more, date);
        }
        if (rc != 0) {
            REQUIRE(rc == SK_ETOOLONG || rc == SK_ETOOSHORT);
            REQUIRE(sk_buf_len(&out) == before);
            REQUIRE(saved.head_written == r.head_written && saved.done == r.done &&
                    saved.framing == r.framing && saved.keep_alive == r.keep_alive &&
                    saved.body_sent == r.body_sent && saved.content_length == r.content_length);
            REQUIRE(memcmp(sk_buf_head(&out), "prefix", sizeof("prefix") - 1) == 0);
            if (!more && in.n == 0)
                break; /* never completed: nothing to read back */
            continue;
        }
        put(&content, piece, len);
        if (!more)
            break;
    }
    REQUIRE(memcmp(sk_buf_head(&out), "prefix", sizeof("prefix") - 1) == 0);
    if (r.done) {
        REQUIRE(sk_resp_body(&r, &out, "x", 1, 0, date) == SK_ESTATE);
        if (r.framing == SK_FRAME_LENGTH)
            REQUIRE(r.body_sent == r.content_length);
        check_wire(&out, 6, &r, status, h, nh, &content);
    }

done:
    sk_resp_free(&r);
    sk_buf_free(&out);
    sk_buf_free(&content);
    return 0;
}
