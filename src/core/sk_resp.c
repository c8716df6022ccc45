/* sk_resp.c — sans-I/O HTTP/1.1 response serializer.
 *
 * Owns: the status-line, validation of the application's response fields (RFC 9110 §5), the
 * framing choice (RFC 9112 §6: Content-Length, chunked, close-delimited, or none for HEAD, 1xx,
 * 204 and 304), Content-Length accounting, the server's own date/server/connection fields, the
 * complete refusal responses (the one error sink for server-generated responses), reason phrases
 * and the IMF-fixdate.
 * Never: includes Python.h, performs I/O, keeps global mutable state, or leaves a partial message
 * in the caller's buffer: every call appends all of its bytes or none of them.
 *
 * Field rules (the application's fields, names written as given):
 *  - content-length: one field, decimal digits only; passed through; for 1xx and 204 dropped
 *    (RFC 9110 §8.6: MUST NOT be sent there).
 *  - transfer-encoding: only "chunked" (case-insensitive, OWS trimmed), never with content-length;
 *    never written as given: the framing writes its own when the response is chunked.
 *  - connection: passed through; a "close" token makes the connection close after the response.
 *  - date, server: replace the server's own.
 */
#define _POSIX_C_SOURCE 200809L

#include "sk_resp.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

const char SK_CONTINUE_RESPONSE[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* Reason phrases of RFC 9110 §15 (and the registered extensions); "" for any other code. */
static const char *
reason_phrase(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 102: return "Processing";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 207: return "Multi-Status";
    case 208: return "Already Reported";
    case 226: return "IM Used";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 305: return "Use Proxy";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 423: return "Locked";
    case 424: return "Failed Dependency";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 506: return "Variant Also Negotiates";
    case 507: return "Insufficient Storage";
    case 508: return "Loop Detected";
    case 510: return "Not Extended";
    case 511: return "Network Authentication Required";
    default: return "";
    }
}

/* RFC 9110 §5.6.2 tchar. */
static int
is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    /* clang-format off */
    switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
        return 1;
    default:
        return 0;
    }
    /* clang-format on */
}

static unsigned char
lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + ('a' - 'A')) : c;
}

static int
ieq(const char *s, size_t n, const char *lit, size_t litlen)
{
    if (n != litlen)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s[i]) != (unsigned char)lit[i])
            return 0;
    return 1;
}

#define IEQ(s, n, lit) ieq((s), (n), lit, sizeof(lit) - 1)

/* Writes v in decimal; returns the number of bytes (at most 20). */
static size_t
fmt_dec(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

/* Writes v in lower-case hex; returns the number of bytes (at most 16). */
static size_t
fmt_hex(char *out, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    size_t n = 0;

    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

#define APPEND_LIT(buf, lit) sk_buf_append((buf), (lit), sizeof(lit) - 1)

static int
append_server(sk_buf_t *b, const sk_resp_opts_t *opts)
{
    /* The server field: "server: skirr" by default, else what opts says (maybe nothing). */
    if (opts == NULL)
        return APPEND_LIT(b, "server: skirr\r\n");
    return opts->server_len > 0 ? sk_buf_append(b, opts->server, opts->server_len) : 0;
}

static int
append_status_line(sk_buf_t *b, int status, const char *reason)
{
    char line[16];
    int rc;

    memcpy(line, "HTTP/1.1 ", 9);
    line[9] = (char)('0' + status / 100);
    line[10] = (char)('0' + status / 10 % 10);
    line[11] = (char)('0' + status % 10);
    line[12] = ' ';
    rc = sk_buf_append(b, line, 13);
    if (rc == 0)
        rc = sk_buf_append(b, reason, strlen(reason));
    if (rc == 0)
        rc = APPEND_LIT(b, "\r\n");
    return rc;
}

static int
append_field(sk_buf_t *b, const char *name, size_t name_len, const char *value, size_t value_len)
{
    int rc = sk_buf_reserve(b, name_len + value_len + 4);

    if (rc < 0)
        return rc;
    rc = sk_buf_append(b, name, name_len);
    if (rc == 0)
        rc = APPEND_LIT(b, ": ");
    if (rc == 0)
        rc = sk_buf_append(b, value, value_len);
    if (rc == 0)
        rc = APPEND_LIT(b, "\r\n");
    return rc;
}

static int
append_content_length(sk_buf_t *b, uint64_t n)
{
    char num[20];
    size_t len = fmt_dec(num, n);

    return append_field(b, "content-length", 14, num, len);
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

        if (s[i] < '0' || s[i] > '9')
            return SK_ECL;
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return SK_ECL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* 1 if the comma-separated list s contains the token tok (case-insensitive, OWS trimmed). */
static int
list_has_token(const char *s, size_t n, const char *tok, size_t tok_len)
{
    size_t pos = 0;

    while (pos <= n) {
        size_t b = pos;
        size_t e;

        while (pos < n && s[pos] != ',')
            pos++;
        e = pos++;
        while (b < e && (s[b] == ' ' || s[b] == '\t'))
            b++;
        while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t'))
            e--;
        if (ieq(s + b, e - b, tok, tok_len))
            return 1;
    }
    return 0;
}

static int
is_bodyless(const sk_resp_t *r)
{
    return r->req.head || r->status < 200 || r->status == 204 || r->status == 304;
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
    int no_framing_fields; /* 1xx and 204: Content-Length and Transfer-Encoding MUST NOT be sent */
    int rc;

    if (r->started)
        return SK_ESTATE;
    sk_resp_reset(r);
    if (status < 100 || status > 599)
        return SK_ESTATUS;
    r->status = status;
    r->req = *req;
    no_framing_fields = status < 200 || status == 204;

    rc = append_status_line(h, status, reason_phrase(status));
    if (rc < 0)
        goto error;
    for (size_t i = 0; i < nheaders; i++) {
        const sk_header_t *f = &headers[i];
        int write = 1;

        if (f->name_len == 0) {
            rc = SK_EHDRNAME;
            goto error;
        }
        for (size_t k = 0; k < f->name_len; k++) {
            if (!is_tchar((unsigned char)f->name[k])) {
                rc = SK_EHDRNAME;
                goto error;
            }
        }
        for (size_t k = 0; k < f->value_len; k++) {
            unsigned char c = (unsigned char)f->value[k];

            /* RFC 9110 §5.5: field-value is VCHAR, obs-text, SP and HTAB. Found by fuzzing
             * (fuzz/regressions/response/ctl-in-value): any other CTL (not only CR, LF, NUL) made
             * a response that strict parsers such as llhttp refuse as a whole. */
            if ((c < 0x20 && c != '\t') || c == 0x7f) {
                rc = SK_EHDRVALUE;
                goto error;
            }
        }
        if (IEQ(f->name, f->name_len, "content-length")) {
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
        else if (IEQ(f->name, f->name_len, "transfer-encoding")) {
            const char *v = f->value;
            size_t n = f->value_len;

            while (n > 0 && (v[0] == ' ' || v[0] == '\t')) {
                v++;
                n--;
            }
            while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
                n--;
            if (r->app_chunked || !IEQ(v, n, "chunked")) {
                rc = SK_ETE;
                goto error;
            }
            r->app_chunked = 1;
            write = 0; /* the framing writes its own */
        }
        else if (IEQ(f->name, f->name_len, "date")) {
            r->app_has_date = 1;
        }
        else if (IEQ(f->name, f->name_len, "server")) {
            r->app_has_server = 1;
        }
        else if (IEQ(f->name, f->name_len, "connection")) {
            if (list_has_token(f->value, f->value_len, "close", 5))
                r->app_conn_close = 1;
            if (list_has_token(f->value, f->value_len, "keep-alive", 10))
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
    return 0;

error:
    sk_resp_reset(r);
    return rc;
}

int
sk_resp_body(sk_resp_t *r, sk_buf_t *out, const char *data, size_t len, int more_body,
             const char *date)
{
    size_t saved = sk_buf_len(out);
    uint8_t framing = r->framing;
    uint8_t keep_alive = r->keep_alive;
    uint64_t content_length = r->content_length;
    int rc;

    if (!r->started || r->done)
        return SK_ESTATE;
    if (!r->head_written) {
        if (is_bodyless(r))
            framing = SK_FRAME_NONE;
        else if (r->app_has_cl)
            framing = SK_FRAME_LENGTH;
        else if (r->app_chunked && r->req.http_minor >= 1)
            framing = SK_FRAME_CHUNKED;
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
    if (framing == SK_FRAME_LENGTH) {
        if (len > content_length - r->body_sent)
            return SK_ETOOLONG;
        if (!more_body && r->body_sent + len < content_length)
            return SK_ETOOSHORT;
    }

    if (!r->head_written) {
        rc = sk_buf_reserve(out, sk_buf_len(&r->head) + 160 + (date ? 37 : 0));
        if (rc < 0)
            goto error;
        rc = sk_buf_append(out, sk_buf_head(&r->head), sk_buf_len(&r->head));
        if (rc < 0)
            goto error;
        if (framing == SK_FRAME_LENGTH && !r->app_has_cl)
            rc = append_content_length(out, content_length);
        else if (framing == SK_FRAME_CHUNKED)
            rc = APPEND_LIT(out, "transfer-encoding: chunked\r\n");
        if (rc < 0)
            goto error;
        if (!keep_alive && !r->app_conn_close)
            rc = APPEND_LIT(out, "connection: close\r\n");
        else if (keep_alive && r->req.http_minor == 0 && !r->app_conn_keep_alive)
            rc = APPEND_LIT(out, "connection: keep-alive\r\n");
        if (rc < 0)
            goto error;
        if (!r->app_has_date && date != NULL)
            rc = append_field(out, "date", 4, date, 29);
        if (rc < 0)
            goto error;
        if (!r->app_has_server)
            rc = append_server(out, r->req.opts);
        if (rc == 0 && r->req.opts != NULL && r->req.opts->extra_len > 0)
            rc = sk_buf_append(out, r->req.opts->extra, r->req.opts->extra_len);
        if (rc < 0)
            goto error;
        rc = APPEND_LIT(out, "\r\n");
        if (rc < 0)
            goto error;
    }

    switch (framing) {
    case SK_FRAME_LENGTH:
    case SK_FRAME_CLOSE: rc = sk_buf_append(out, data, len); break;
    case SK_FRAME_CHUNKED:
        rc = 0;
        if (len > 0) {
            char size[18];
            size_t n = fmt_hex(size, len);

            size[n++] = '\r';
            size[n++] = '\n';
            rc = sk_buf_reserve(out, n + len + 2);
            if (rc == 0)
                rc = sk_buf_append(out, size, n);
            if (rc == 0)
                rc = sk_buf_append(out, data, len);
            if (rc == 0)
                rc = APPEND_LIT(out, "\r\n");
        }
        if (rc == 0 && !more_body)
            rc = APPEND_LIT(out, "0\r\n\r\n");
        break;
    default: /* SK_FRAME_NONE: content is not sent (HEAD, 1xx, 204, 304) */ rc = 0; break;
    }
    if (rc < 0)
        goto error;

    r->head_written = 1;
    r->framing = framing;
    r->keep_alive = keep_alive;
    r->content_length = content_length;
    if (framing != SK_FRAME_NONE)
        r->body_sent += len;
    if (!more_body)
        r->done = 1;
    return 0;

error:
    out->end = out->start + saved; /* nothing appended */
    return rc;
}

int
sk_resp_error(sk_buf_t *out, int status, int head_request, const char *date)
{
    return sk_resp_error_opts(out, status, head_request, date, NULL);
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
    reason = reason_phrase(status);
    if (reason[0] == '\0')
        reason = "Error";
    reason_len = strlen(reason);

    rc = sk_buf_reserve(out, 200 + 2 * reason_len);
    if (rc == 0)
        rc = append_status_line(out, status, reason);
    if (rc == 0)
        rc = APPEND_LIT(out, "content-type: text/plain; charset=utf-8\r\n");
    if (rc == 0)
        rc = append_content_length(out, reason_len);
    if (rc == 0)
        rc = APPEND_LIT(out, "connection: close\r\n");
    if (rc == 0 && date != NULL)
        rc = append_field(out, "date", 4, date, 29);
    if (rc == 0)
        rc = append_server(out, opts);
    if (rc == 0 && opts != NULL && opts->extra_len > 0)
        rc = sk_buf_append(out, opts->extra, opts->extra_len);
    if (rc == 0)
        rc = APPEND_LIT(out, "\r\n");
    if (rc == 0 && !head_request)
        rc = sk_buf_append(out, reason, reason_len);
    if (rc < 0)
        goto error;
    return 0;

error:
    out->end = out->start + saved;
    return rc;
}

void
sk_format_date(int64_t t, char out[30])
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t tt = (time_t)t;
    struct tm tm;
    int year;

    if (gmtime_r(&tt, &tm) == NULL || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) {
        memcpy(out, "Thu, 01 Jan 1970 00:00:00 GMT", 30);
        return;
    }
    year = tm.tm_year + 1900;
    memcpy(out, days[tm.tm_wday], 3);
    out[3] = ',';
    out[4] = ' ';
    out[5] = (char)('0' + tm.tm_mday / 10);
    out[6] = (char)('0' + tm.tm_mday % 10);
    out[7] = ' ';
    memcpy(out + 8, months[tm.tm_mon], 3);
    out[11] = ' ';
    out[12] = (char)('0' + year / 1000);
    out[13] = (char)('0' + year / 100 % 10);
    out[14] = (char)('0' + year / 10 % 10);
    out[15] = (char)('0' + year % 10);
    out[16] = ' ';
    out[17] = (char)('0' + tm.tm_hour / 10);
    out[18] = (char)('0' + tm.tm_hour % 10);
    out[19] = ':';
    out[20] = (char)('0' + tm.tm_min / 10);
    out[21] = (char)('0' + tm.tm_min % 10);
    out[22] = ':';
    out[23] = (char)('0' + tm.tm_sec / 10);
    out[24] = (char)('0' + tm.tm_sec % 10);
    memcpy(out + 25, " GMT", 5);
}
