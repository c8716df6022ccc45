/* sk_resp.c — sans-I/O HTTP/1.1 response serializer.
 *
 * Owns: the status-line, validation of the application's response fields (RFC 9110 §5), the
 * framing choice (RFC 9112 §6: Content-Length, chunked, close-delimited, or none for HEAD, 1xx,
 * 204, 205 and 304), Content-Length accounting, the server's own date/server/connection fields, the
 * complete refusal responses (the one error sink for server-generated responses), reason phrases
 * the IMF-fixdate, and the asserts of the serializer's state (resp_check()).
 * Never: includes Python.h, performs I/O, keeps global mutable state, re-implements a token or list
 * rule that sk_token.h has, or leaves a partial message in the caller's buffer: every call appends
 * all of its bytes or none of them.
 *
 * Field rules (the application's fields, names written as given):
 *  - content-length: one field, decimal digits only; passed through; for 1xx and 204 dropped
 *    (RFC 9110 §8.6: MUST NOT be sent there); for 205 replaced by "content-length: 0" (§15.3.6).
 *  - transfer-encoding: only "chunked" (case-insensitive, OWS trimmed), never with content-length;
 *    never written as given: the framing writes its own when the response is chunked.
 *  - connection: passed through; a "close" token makes the connection close after the response,
 *    and a "keep-alive" token stands in for the one the server adds to an HTTP/1.0 response.
 *  - date, server: replace the server's own.
 */
#define _POSIX_C_SOURCE 200809L

#include "sk_resp.h"
#include "sk_token.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

const char SK_CONTINUE_RESPONSE[] = SK_CONTINUE_RESPONSE_LITERAL;

/* Byte counts come from the literals themselves, never from counting by hand. */
#define LIT_LEN(lit) (sizeof("" lit) - 1)
/* The longest lower-case hex form of a uint64_t (the decimal one: SK_DEC_MAX_LEN). */
#define HEX_MAX_LEN LIT_LEN("ffffffffffffffff")

/* The lines the serializer writes itself (RFC 9112 §4 status-line, RFC 9110 field lines). */
#define STATUS_LINE_START "HTTP/1.1 "
#define CRLF "\r\n"
#define FIELD_SEP ": "
#define FIELD_TE_CHUNKED "transfer-encoding: chunked\r\n"
#define FIELD_CONN_CLOSE "connection: close\r\n"
#define FIELD_CONN_KEEP_ALIVE "connection: keep-alive\r\n"
#define FIELD_SERVER "server: skirr\r\n"
#define FIELD_TEXT_PLAIN "content-type: text/plain; charset=utf-8\r\n"
/* Bytes of a field line "name: value\r\n" around the name and value. */
#define FIELD_LINE_EXTRA (LIT_LEN(FIELD_SEP) + LIT_LEN(CRLF))
#define CONTENT_LENGTH_FIELD_MAX (LIT_LEN("content-length") + FIELD_LINE_EXTRA + SK_DEC_MAX_LEN)
#define DATE_FIELD_LEN (LIT_LEN("date") + FIELD_LINE_EXTRA + SK_DATE_LEN)
/* The most bytes sk_resp_body() adds after the recorded head: one framing field (content-length is
 * the longer one), one connection field (keep-alive is the longer one), server, and the blank line;
 * the date field comes on top when one is sent. */
#define HEAD_TAIL_MAX                                                                    \
    (CONTENT_LENGTH_FIELD_MAX + LIT_LEN(FIELD_CONN_KEEP_ALIVE) + LIT_LEN(FIELD_SERVER) + \
     LIT_LEN(CRLF))

int
sk_resp_reason_phrase(int status, const char **reason)
{
    switch (status) {
    case 100: *reason = "Continue"; return 1;
    case 101: *reason = "Switching Protocols"; return 1;
    case 102: *reason = "Processing"; return 1;
    case 103: *reason = "Early Hints"; return 1;
    case 200: *reason = "OK"; return 1;
    case 201: *reason = "Created"; return 1;
    case 202: *reason = "Accepted"; return 1;
    case 203: *reason = "Non-Authoritative Information"; return 1;
    case 204: *reason = "No Content"; return 1;
    case 205: *reason = "Reset Content"; return 1;
    case 206: *reason = "Partial Content"; return 1;
    case 207: *reason = "Multi-Status"; return 1;
    case 208: *reason = "Already Reported"; return 1;
    case 226: *reason = "IM Used"; return 1;
    case 300: *reason = "Multiple Choices"; return 1;
    case 301: *reason = "Moved Permanently"; return 1;
    case 302: *reason = "Found"; return 1;
    case 303: *reason = "See Other"; return 1;
    case 304: *reason = "Not Modified"; return 1;
    case 305: *reason = "Use Proxy"; return 1;
    case 307: *reason = "Temporary Redirect"; return 1;
    case 308: *reason = "Permanent Redirect"; return 1;
    case 400: *reason = "Bad Request"; return 1;
    case 401: *reason = "Unauthorized"; return 1;
    case 402: *reason = "Payment Required"; return 1;
    case 403: *reason = "Forbidden"; return 1;
    case 404: *reason = "Not Found"; return 1;
    case 405: *reason = "Method Not Allowed"; return 1;
    case 406: *reason = "Not Acceptable"; return 1;
    case 407: *reason = "Proxy Authentication Required"; return 1;
    case 408: *reason = "Request Timeout"; return 1;
    case 409: *reason = "Conflict"; return 1;
    case 410: *reason = "Gone"; return 1;
    case 411: *reason = "Length Required"; return 1;
    case 412: *reason = "Precondition Failed"; return 1;
    case 413: *reason = "Content Too Large"; return 1;
    case 414: *reason = "URI Too Long"; return 1;
    case 415: *reason = "Unsupported Media Type"; return 1;
    case 416: *reason = "Range Not Satisfiable"; return 1;
    case 417: *reason = "Expectation Failed"; return 1;
    case 421: *reason = "Misdirected Request"; return 1;
    case 422: *reason = "Unprocessable Content"; return 1;
    case 423: *reason = "Locked"; return 1;
    case 424: *reason = "Failed Dependency"; return 1;
    case 425: *reason = "Too Early"; return 1;
    case 426: *reason = "Upgrade Required"; return 1;
    case 428: *reason = "Precondition Required"; return 1;
    case 429: *reason = "Too Many Requests"; return 1;
    case 431: *reason = "Request Header Fields Too Large"; return 1;
    case 451: *reason = "Unavailable For Legal Reasons"; return 1;
    case 500: *reason = "Internal Server Error"; return 1;
    case 501: *reason = "Not Implemented"; return 1;
    case 502: *reason = "Bad Gateway"; return 1;
    case 503: *reason = "Service Unavailable"; return 1;
    case 504: *reason = "Gateway Timeout"; return 1;
    case 505: *reason = "HTTP Version Not Supported"; return 1;
    case 506: *reason = "Variant Also Negotiates"; return 1;
    case 507: *reason = "Insufficient Storage"; return 1;
    case 508: *reason = "Loop Detected"; return 1;
    case 510: *reason = "Not Extended"; return 1;
    case 511: *reason = "Network Authentication Required"; return 1;
    default: *reason = NULL; return 0;
    }
}

size_t
sk_fmt_dec(char *out, uint64_t v)
{
    char tmp[SK_DEC_MAX_LEN];
    size_t n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

/* Writes v in lower-case hex; returns the number of bytes (at most HEX_MAX_LEN). */
static size_t
fmt_hex(char *out, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[HEX_MAX_LEN];
    size_t n = 0;

    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

#define APPEND_LIT(buf, lit) sk_buf_append((buf), "" lit, LIT_LEN(lit))

static int
append_server(sk_buf_t *b, const sk_resp_opts_t *opts)
{
    /* The server field: FIELD_SERVER by default, else what opts says (maybe nothing). */
    if (opts == NULL)
        return APPEND_LIT(b, FIELD_SERVER);
    return opts->server_len > 0 ? sk_buf_append(b, opts->server, opts->server_len) : 0;
}

/* status-line = HTTP-version SP status-code SP [ reason-phrase ] CRLF (RFC 9112 §4);
 * status is 100..599 (three digits). */
static int
append_status_line(sk_buf_t *b, int status, const char *reason)
{
    char line[] = STATUS_LINE_START "000 ";
    char *code = line + LIT_LEN(STATUS_LINE_START);
    int rc;

    assert(status >= 100 && status <= 599);
    code[0] = (char)('0' + status / 100);
    code[1] = (char)('0' + status / 10 % 10);
    code[2] = (char)('0' + status % 10);
    rc = sk_buf_append(b, line, sizeof(line) - 1);
    if (rc == 0)
        rc = sk_buf_append(b, reason, strlen(reason));
    if (rc == 0)
        rc = APPEND_LIT(b, CRLF);
    return rc;
}

static int
append_field(sk_buf_t *b, const char *name, size_t name_len, const char *value, size_t value_len)
{
    int rc = sk_buf_reserve(b, name_len + value_len + FIELD_LINE_EXTRA);

    if (rc < 0)
        return rc;
    rc = sk_buf_append(b, name, name_len);
    if (rc == 0)
        rc = APPEND_LIT(b, FIELD_SEP);
    if (rc == 0)
        rc = sk_buf_append(b, value, value_len);
    if (rc == 0)
        rc = APPEND_LIT(b, CRLF);
    return rc;
}

/* append_field() with a string-literal name. */
#define APPEND_FIELD(b, name, value, value_len) \
    append_field((b), "" name, LIT_LEN(name), (value), (value_len))

static int
append_content_length(sk_buf_t *b, uint64_t n)
{
    char num[SK_DEC_MAX_LEN];
    size_t len = sk_fmt_dec(num, n);

    return APPEND_FIELD(b, "content-length", num, len);
}

/* Content-Length from the application: 1*DIGIT, no sign, no whitespace, fits in 64 bits. */
static int
parse_content_length(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;

    if (n == 0)
        return SK_ECL;
    for (size_t i = 0; i < n; i++) {
        unsigned d;

        if (!sk_is_digit((unsigned char)s[i]))
            return SK_ECL;
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return SK_ECL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

#ifndef NDEBUG
/* Asserts the serializer's state machine (not started -> started -> head written -> done) and its
 * accounting, between calls. */
static void
resp_check(const sk_resp_t *r)
{
    sk_buf_check(&r->head);
    assert(!r->head_written || r->started);
    assert(!r->done || r->head_written);
    assert(!r->started || (r->status >= 100 && r->status <= 599));
    assert(!r->started || !(r->app_has_cl && r->app_chunked));
    assert(r->framing <= SK_FRAME_CLOSE);
    assert(r->head_written || (r->framing == SK_FRAME_NONE && r->body_sent == 0));
    assert(r->framing != SK_FRAME_NONE || r->body_sent == 0);
    assert(r->framing != SK_FRAME_CHUNKED || r->req.http_minor >= 1);
    assert(r->framing != SK_FRAME_CLOSE || !r->keep_alive);
    assert(r->framing != SK_FRAME_LENGTH || r->body_sent <= r->content_length);
    assert(!(r->done && r->framing == SK_FRAME_LENGTH) || r->body_sent == r->content_length);
}
#define RESP_CHECK(r) resp_check(r)
#else
#define RESP_CHECK(r) ((void)0)
#endif

/* RFC 9110 §6.4.1: responses to HEAD, and 1xx, 204, 205 and 304 responses, have no content
 * (2xx to CONNECT would too; skirr refuses CONNECT). What the application sends as body is
 * dropped. */
static int
is_bodyless(const sk_resp_t *r)
{
    return r->req.head || r->status < 200 || r->status == 204 || r->status == 205 ||
           r->status == 304;
}

int
sk_resp_check_field(const sk_header_t *f)
{
    if (f->name_len == 0 || sk_token_len(f->name, f->name_len) != f->name_len)
        return SK_EHDRNAME;
    /* Found by fuzzing (fuzz/regressions/response/ctl-in-value): any CTL, not only CR, LF and
     * NUL, made a response that strict parsers such as llhttp refuse as a whole. */
    if (!sk_field_value_ok(f->value, f->value_len))
        return SK_EHDRVALUE;
    return 0;
}

void
sk_resp_reset(sk_resp_t *r)
{
    sk_buf_t head = r->head;

    memset(r, 0, sizeof(*r));
    head.start = 0;
    head.end = 0;
    r->head = head;
}

void
sk_resp_free(sk_resp_t *r)
{
    sk_buf_free(&r->head);
    memset(r, 0, sizeof(*r));
}

int
sk_resp_start(sk_resp_t *r, const sk_req_info_t *req, int status, const sk_header_t *headers,
              size_t nheaders)
{
    sk_buf_t *h = &r->head;
    const char *reason;
    /* 1xx and 204: Content-Length and Transfer-Encoding MUST NOT be sent (RFC 9110 §8.6, RFC 9112
     * §6.1); 205: the server's own "content-length: 0" replaces the application's (§15.3.6) */
    int no_framing_fields;
    int rc;

    RESP_CHECK(r);
    if (r->started)
        return SK_ESTATE;
    sk_resp_reset(r);
    if (status < 100 || status > 599)
        return SK_ESTATUS;
    r->status = status;
    r->req = *req;
    no_framing_fields = status < 200 || status == 204 || status == 205;

    if (sk_resp_reason_phrase(status, &reason) == 0)
        reason = ""; /* RFC 9112 §4: reason-phrase is optional; SP stays */
    rc = append_status_line(h, status, reason);
    if (rc < 0)
        goto error;
    for (size_t i = 0; i < nheaders; i++) {
        const sk_header_t *f = &headers[i];
        int write = 1;

        rc = sk_resp_check_field(f);
        if (rc < 0)
            goto error;
        if (SK_TOKEN_IEQ(f->name, f->name_len, "content-length")) {
            if (r->app_has_cl) {
                rc = SK_ECL;
                goto error;
            }
            rc = parse_content_length(f->value, f->value_len, &r->content_length);
            if (rc < 0)
                goto error;
            r->app_has_cl = 1;
            write = !no_framing_fields;
        }
        else if (SK_TOKEN_IEQ(f->name, f->name_len, "transfer-encoding")) {
            const char *v = f->value;
            size_t n = f->value_len;

            sk_ows_trim(&v, &n);
            if (r->app_chunked || !SK_TOKEN_IEQ(v, n, "chunked")) {
                rc = SK_ETE;
                goto error;
            }
            r->app_chunked = 1;
            write = 0; /* the framing writes its own */
        }
        else if (SK_TOKEN_IEQ(f->name, f->name_len, "date")) {
            r->app_has_date = 1;
        }
        else if (SK_TOKEN_IEQ(f->name, f->name_len, "server")) {
            r->app_has_server = 1;
        }
        else if (SK_TOKEN_IEQ(f->name, f->name_len, "connection")) {
            if (SK_LIST_HAS_TOKEN(f->value, f->value_len, "close"))
                r->app_conn_close = 1;
            if (SK_LIST_HAS_TOKEN(f->value, f->value_len, "keep-alive"))
                r->app_conn_keep_alive = 1;
        }
        if (write) {
            rc = append_field(h, f->name, f->name_len, f->value, f->value_len);
            if (rc < 0)
                goto error;
        }
    }
    if (r->app_has_cl && r->app_chunked) {
        rc = SK_ETE;
        goto error;
    }
    r->started = 1;
    RESP_CHECK(r);
    return 0;

error:
    sk_resp_reset(r);
    RESP_CHECK(r);
    return rc;
}

/* The last-chunk and an empty trailer section (RFC 9112 §7.1). */
#define LAST_CHUNK "0" CRLF CRLF

/* 1 when the response's trailers go on the wire: announced, asked for ("TE: trailers") and
 * chunked. Valid once the head is written (or with the framing being chosen). */
static int
sends_trailers(const sk_resp_t *r, uint8_t framing)
{
    return r->trailers && r->req.te_trailers && framing == SK_FRAME_CHUNKED;
}

/* sk_resp_body() and sk_resp_body_ref() in one: data == NULL is the ref form (the caller sends
 * the len content bytes between what goes to out and what goes to after). */
static int
body_frame(sk_resp_t *r, sk_buf_t *out, const char *data, uint64_t len64, int more_body,
           const char *date, char *after, size_t *after_len)
{
    size_t len = (size_t)len64;
    size_t saved = sk_buf_len(out);
    uint8_t framing = r->framing;
    uint8_t keep_alive = r->keep_alive;
    uint64_t content_length = r->content_length;
    int rc;

    RESP_CHECK(r);
    sk_buf_check(out);
    if (!r->started || r->done)
        return SK_ESTATE;
    if (!r->head_written) {
        if (is_bodyless(r))
            framing = SK_FRAME_NONE;
        else if (r->app_has_cl)
            framing = SK_FRAME_LENGTH;
        else if ((r->app_chunked || (r->trailers && r->req.te_trailers)) && r->req.http_minor >= 1)
            framing = SK_FRAME_CHUNKED; /* the app's, or for a trailer section */
        else if (!more_body) {
            framing = SK_FRAME_LENGTH;
            content_length = len;
        }
        else if (r->req.http_minor >= 1)
            framing = SK_FRAME_CHUNKED;
        else
            framing = SK_FRAME_CLOSE;
        keep_alive = r->req.keep_alive && !r->req.force_close && !r->app_conn_close &&
                     framing != SK_FRAME_CLOSE;
    }
    if (after_len != NULL)
        *after_len = 0;
    if (framing == SK_FRAME_LENGTH) {
        if (len64 > content_length - r->body_sent)
            return SK_ETOOLONG;
        if (!more_body && r->body_sent + len64 < content_length)
            return SK_ETOOSHORT;
    }

    if (!r->head_written) {
        rc =
            sk_buf_reserve(out, sk_buf_len(&r->head) + HEAD_TAIL_MAX + (date ? DATE_FIELD_LEN : 0));
        if (rc < 0)
            goto error;
        rc = sk_buf_append(out, sk_buf_head(&r->head), sk_buf_len(&r->head));
        if (rc < 0)
            goto error;
        if (framing == SK_FRAME_LENGTH && !r->app_has_cl)
            rc = append_content_length(out, content_length);
        else if (data == NULL && r->req.head && !more_body && !r->app_has_cl && r->status >= 200 &&
                 r->status != 204 && r->status != 205 && r->status != 304)
            /* HEAD of a file: the length a GET would have (RFC 9110 §9.3.2, §8.6) */
            rc = append_content_length(out, len64);
        else if (r->status == 205) /* RFC 9110 §15.3.6: zero-length content, said so */
            rc = append_content_length(out, 0);
        else if (framing == SK_FRAME_CHUNKED)
            rc = APPEND_LIT(out, FIELD_TE_CHUNKED);
        if (rc < 0)
            goto error;
        if (!keep_alive && !r->app_conn_close)
            rc = APPEND_LIT(out, FIELD_CONN_CLOSE);
        else if (keep_alive && r->req.http_minor == 0 && !r->app_conn_keep_alive)
            rc = APPEND_LIT(out, FIELD_CONN_KEEP_ALIVE);
        if (rc < 0)
            goto error;
        if (!r->app_has_date && date != NULL)
            rc = APPEND_FIELD(out, "date", date, SK_DATE_LEN);
        if (rc < 0)
            goto error;
        if (!r->app_has_server)
            rc = append_server(out, r->req.opts);
        if (rc == 0 && r->req.opts != NULL && r->req.opts->extra_len > 0)
            rc = sk_buf_append(out, r->req.opts->extra, r->req.opts->extra_len);
        if (rc < 0)
            goto error;
        rc = APPEND_LIT(out, CRLF);
        if (rc < 0)
            goto error;
    }

    switch (framing) {
    case SK_FRAME_LENGTH:
    case SK_FRAME_CLOSE: rc = data != NULL ? sk_buf_append(out, data, len) : 0; break;
    case SK_FRAME_CHUNKED: {
        /* the last-chunk waits for sk_resp_trailers() when a trailer section follows */
        int last = !more_body && !sends_trailers(r, framing);
        size_t n_after = 0;

        rc = 0;
        if (len > 0) {
            char size[HEX_MAX_LEN + LIT_LEN(CRLF)];
            size_t n = fmt_hex(size, len64);

            size[n++] = '\r';
            size[n++] = '\n';
            rc = sk_buf_reserve(out, n + (data != NULL ? len : 0) + LIT_LEN(CRLF));
            if (rc == 0)
                rc = sk_buf_append(out, size, n);
            if (rc == 0 && data != NULL)
                rc = sk_buf_append(out, data, len);
            else if (rc == 0) {
                memcpy(after, CRLF, LIT_LEN(CRLF));
                n_after = LIT_LEN(CRLF);
            }
            if (rc == 0 && data != NULL)
                rc = APPEND_LIT(out, CRLF);
        }
        if (rc == 0 && last && data != NULL)
            rc = APPEND_LIT(out, LAST_CHUNK);
        else if (rc == 0 && last) {
            memcpy(after + n_after, LAST_CHUNK, LIT_LEN(LAST_CHUNK));
            n_after += LIT_LEN(LAST_CHUNK);
        }
        if (rc == 0 && after_len != NULL)
            *after_len = n_after;
        break;
    }
    default: /* SK_FRAME_NONE: content is not sent (HEAD, 1xx, 204, 205, 304) */ rc = 0; break;
    }
    if (rc < 0)
        goto error;

    r->head_written = 1;
    r->framing = framing;
    r->keep_alive = keep_alive;
    r->content_length = content_length;
    if (framing != SK_FRAME_NONE)
        r->body_sent += len64;
    if (!more_body)
        r->done = 1;
    RESP_CHECK(r);
    assert(sk_buf_len(out) >= saved);
    return 0;

error:
    out->end = out->start + saved; /* nothing appended */
    RESP_CHECK(r);
    sk_buf_check(out);
    return rc;
}

int
sk_resp_body(sk_resp_t *r, sk_buf_t *out, const char *data, size_t len, int more_body,
             const char *date)
{
    return body_frame(r, out, data != NULL ? data : "", len, more_body, date, NULL, NULL);
}

int
sk_resp_body_ref(sk_resp_t *r, sk_buf_t *out, uint64_t len, int more_body, const char *date,
                 char after[SK_RESP_AFTER_MAX], size_t *after_len)
{
    return body_frame(r, out, NULL, len, more_body, date, after, after_len);
}

int
sk_resp_announce_trailers(sk_resp_t *r)
{
    if (!r->started || r->head_written)
        return SK_ESTATE;
    r->trailers = 1;
    return 0;
}

/* RFC 9110 §6.5.1: fields a sender MUST NOT generate in trailers unless a field says it may:
 * message framing (content-length, transfer-encoding, trailer), routing and connection
 * management (host, connection and its kin, te, upgrade), request modifiers and response
 * controls (cache-control, expect, max-forwards, range, age, expires, retry-after, location,
 * vary, date), authentication (authorization, proxy-*, www-authenticate, set-cookie, cookie) and
 * the fields that say how to process the content (content-encoding, content-type,
 * content-range). */
static const char *const trailer_forbidden[] = {
    "age",
    "authorization",
    "cache-control",
    "connection",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "expect",
    "expires",
    "host",
    "keep-alive",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "range",
    "retry-after",
    "set-cookie",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "vary",
    "www-authenticate",
};

int
sk_resp_trailer_forbidden(const char *name, size_t name_len)
{
    for (size_t i = 0; i < sizeof(trailer_forbidden) / sizeof(trailer_forbidden[0]); i++) {
        const char *f = trailer_forbidden[i];
        size_t n = strlen(f);

        if (n == name_len && sk_token_ieq(name, name_len, f, n))
            return 1;
    }
    return 0;
}

int
sk_resp_trailers(sk_resp_t *r, sk_buf_t *out, const sk_header_t *fields, size_t nfields,
                 int more_trailers)
{
    size_t saved = sk_buf_len(out);
    int on = sends_trailers(r, r->framing);
    int rc = 0;

    RESP_CHECK(r);
    if (!r->trailers || !r->done || r->trailers_done)
        return SK_ESTATE;
    for (size_t i = 0; i < nfields; i++) {
        rc = sk_resp_check_field(&fields[i]);
        if (rc == 0 && sk_resp_trailer_forbidden(fields[i].name, fields[i].name_len))
            rc = SK_ETRAILER;
        if (rc < 0)
            return rc;
    }
    if (on && !r->trailers_begun)
        rc = APPEND_LIT(out, "0" CRLF); /* last-chunk; the trailer section follows */
    for (size_t i = 0; on && rc == 0 && i < nfields; i++)
        rc = append_field(out, fields[i].name, fields[i].name_len, fields[i].value,
                          fields[i].value_len);
    if (on && rc == 0 && !more_trailers)
        rc = APPEND_LIT(out, CRLF);
    if (rc < 0) {
        out->end = out->start + saved;
        return rc;
    }
    if (on)
        r->trailers_begun = 1;
    if (!more_trailers)
        r->trailers_done = 1;
    RESP_CHECK(r);
    return 0;
}

int
sk_resp_interim(sk_buf_t *out, int status, const sk_header_t *fields, size_t nfields)
{
    size_t saved = sk_buf_len(out);
    const char *reason;
    int rc;

    if (status < 100 || status > 199 || status == 101)
        return SK_ESTATUS;
    for (size_t i = 0; i < nfields; i++) {
        rc = sk_resp_check_field(&fields[i]);
        if (rc < 0)
            return rc;
    }
    if (sk_resp_reason_phrase(status, &reason) == 0)
        reason = "";
    rc = append_status_line(out, status, reason);
    for (size_t i = 0; rc == 0 && i < nfields; i++)
        rc = append_field(out, fields[i].name, fields[i].name_len, fields[i].value,
                          fields[i].value_len);
    if (rc == 0)
        rc = APPEND_LIT(out, CRLF);
    if (rc < 0)
        out->end = out->start + saved;
    return rc;
}

int
sk_resp_error(sk_buf_t *out, int status, int head_request, const char *date)
{
    return sk_resp_error_opts(out, status, head_request, date, NULL);
}

size_t
sk_resp_error_content_length(int status, int head_request)
{
    const char *reason;
    if (head_request)
        return 0;
    if (status < 100 || status > 599)
        status = 500;
    if (sk_resp_reason_phrase(status, &reason) == 0)
        reason = "Error";
    return strlen(reason);
}

int
sk_resp_error_opts(sk_buf_t *out, int status, int head_request, const char *date,
                   const sk_resp_opts_t *opts)
{
    size_t saved = sk_buf_len(out);
    const char *reason;
    size_t reason_len;
    int rc;

    if (status < 100 || status > 599)
        status = 500;
    if (sk_resp_reason_phrase(status, &reason) == 0)
        reason = "Error";
    reason_len = strlen(reason);

    /* status-line, content-type, content-length, connection, date, server, blank line, body */
    rc = sk_buf_reserve(out, LIT_LEN(STATUS_LINE_START "000 " CRLF) + reason_len +
                                 LIT_LEN(FIELD_TEXT_PLAIN) + CONTENT_LENGTH_FIELD_MAX +
                                 LIT_LEN(FIELD_CONN_CLOSE) + DATE_FIELD_LEN +
                                 LIT_LEN(FIELD_SERVER CRLF) + reason_len);
    if (rc == 0)
        rc = append_status_line(out, status, reason);
    if (rc == 0)
        rc = APPEND_LIT(out, FIELD_TEXT_PLAIN);
    if (rc == 0)
        rc = append_content_length(out, reason_len);
    if (rc == 0)
        rc = APPEND_LIT(out, FIELD_CONN_CLOSE);
    if (rc == 0 && date != NULL)
        rc = APPEND_FIELD(out, "date", date, SK_DATE_LEN);
    if (rc == 0)
        rc = append_server(out, opts);
    if (rc == 0 && opts != NULL && opts->extra_len > 0)
        rc = sk_buf_append(out, opts->extra, opts->extra_len);
    if (rc == 0)
        rc = APPEND_LIT(out, CRLF);
    if (rc == 0 && !head_request)
        rc = sk_buf_append(out, reason, reason_len);
    if (rc < 0)
        goto error;
    return 0;

error:
    out->end = out->start + saved;
    return rc;
}

/* Writes the last `width` decimal digits of v (v >= 0) to o; returns o + width. */
static char *
put_digits(char *o, int v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        o[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return o + width;
}

/* Copies a string literal's bytes (without its NUL) to o; evaluates to the byte after them. */
#define PUT_LIT(o, lit) ((char *)memcpy((o), "" lit, LIT_LEN(lit)) + LIT_LEN(lit))

void
sk_format_date(int64_t t, char out[SK_DATE_LEN + 1])
{
    /* IMF-fixdate = day-name "," SP date1 SP time-of-day SP GMT, with date1 = day SP month SP year
     * (2DIGIT, 3 letters, 4DIGIT) and time-of-day = hour ":" minute ":" second (2DIGIT each):
     * RFC 9110 §5.6.7. */
    static const char days[7][sizeof("Sun")] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][sizeof("Jan")] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    static const char epoch[] = "Thu, 01 Jan 1970 00:00:00 GMT";
    time_t tt = (time_t)t;
    struct tm tm;
    int year;
    char *o = out;

    if (gmtime_r(&tt, &tm) == NULL || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) {
        memcpy(out, epoch, sizeof(epoch));
        return;
    }
    year = tm.tm_year + 1900;
    memcpy(o, days[tm.tm_wday], sizeof(days[0]) - 1);
    o += sizeof(days[0]) - 1;
    o = PUT_LIT(o, ", ");
    o = put_digits(o, tm.tm_mday, 2);
    o = PUT_LIT(o, " ");
    memcpy(o, months[tm.tm_mon], sizeof(months[0]) - 1);
    o += sizeof(months[0]) - 1;
    o = PUT_LIT(o, " ");
    o = put_digits(o, year, 4);
    o = PUT_LIT(o, " ");
    o = put_digits(o, tm.tm_hour, 2);
    o = PUT_LIT(o, ":");
    o = put_digits(o, tm.tm_min, 2);
    o = PUT_LIT(o, ":");
    o = put_digits(o, tm.tm_sec, 2);
    o = PUT_LIT(o, " GMT");
    *o = '\0';
    assert(o - out == (ptrdiff_t)SK_DATE_LEN);
}

int
sk_resp_next_line(const char **s, const char *end, sk_header_t *f)
{
    if (*s >= end) {
        return 0;
    }
    const char *eol = memchr(*s, '\r', (size_t)(end - *s));
    const char *colon = memchr(*s, ':', (size_t)(end - *s));
    if (eol == NULL || end - eol < 2 || eol[1] != '\n' || colon == NULL || colon > eol) {
        return 0;
    }
    f->name = *s;
    f->name_len = (size_t)(colon - *s);
    f->value = colon + 1;
    f->value_len = (size_t)(eol - f->value);
    sk_ows_trim(&f->value, &f->value_len);
    *s = eol + 2;
    return 1;
}

static size_t
lines_measure(const char *s, size_t n, size_t *lines, size_t *names_len)
{
    /* RFC 9113 §6.5.2's measure of s[0..n)'s lines, adding to *lines and *names_len. */
    size_t size = 0;
    if (s == NULL) {
        return 0;
    }
    const char *end = s + n;
    sk_header_t f;
    while (sk_resp_next_line(&s, end, &f)) {
        size += SK_FIELD_SIZE(f.name_len, f.value_len);
        *names_len += f.name_len;
        *lines += 1;
    }
    return size;
}

void
sk_resp_opts_measure(sk_resp_opts_t *o)
{
    o->lines = o->names_len = 0;
    o->server_size = lines_measure(o->server, o->server_len, &o->lines, &o->names_len);
    o->extra_size = lines_measure(o->extra, o->extra_len, &o->lines, &o->names_len);
}

size_t
sk_resp_opts_h2_own_size(const sk_resp_opts_t *o, int date)
{
    return o->server_size + o->extra_size + SK_H2_OWN_RESPONSE_SIZE +
           (date ? SK_FIELD_SIZE(4, SK_DATE_LEN) : 0);
}
