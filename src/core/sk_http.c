/* sk_http.c — sans-I/O HTTP/1.1 request parser: llhttp (strict, HTTP_REQUEST) turned into pull events.
 *
 * Owns: the llhttp callbacks, the copy of the request head (request-target, field names and values in
 * one block, spans into it), every request limit (414, 431, 413), the checks llhttp leaves to its
 * user (HTTP version 505, unknown method 501 vs 400, Host 400, Transfer-Encoding codings 400/501,
 * strict request-line spacing, the request-target grammar of RFC 9112 §3.2 / RFC 3986 with its
 * documented lenient bytes), the mapping of every refusal to one HTTP status, and the asserts of
 * the parser's invariants (parser_check()).
 * Never: includes Python.h, performs I/O, calls back into the embedder, keeps global mutable state,
 * sets an llhttp lenient flag, returns an event for bytes it has not validated, or re-implements a
 * token or list rule that sk_token.h has.
 *
 * How the pull API works: every callback that produces an event (on_headers_complete, on_body,
 * on_message_complete) records it in p->pending and returns HPE_PAUSED. llhttp then stops with
 * error_pos just after the bytes that belong to the event, and with its resume state already saved
 * (for span callbacks such as on_body too: the generated span-end code stores the next state before
 * it returns the error, and the end-of-buffer span call happens after the state is stored), so
 * llhttp_resume() continues exactly there on the next call. One execute call returns one event.
 *
 * Upgrade and CONNECT: the parser does not switch protocols. llhttp pauses with HPE_PAUSED_UPGRADE
 * after a request with Upgrade (after its content, read by its framing); we resume with
 * llhttp_resume_after_upgrade() and go on parsing the next request, so it is an ordinary request.
 * CONNECT is refused with 501 as soon as its method is known (on_method_complete): skirr provides
 * no tunnel (RFC 9110 §9.3.6), and llhttp would end a CONNECT request at its head and parse any
 * content it declared as the next request (request smuggling).
 */
#include "sk_http.h"
#include "sk_token.h"

#include <arpa/inet.h>
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HEAD_MIN_CAP 512
#define FIELDS_MIN_CAP 16

enum { RL_LEAD = 0, RL_METHOD, RL_REST, RL_DONE };
enum { RL_SP_AFTER_METHOD = 1, RL_SP_AFTER_TARGET = 2 };

/* An empty input for calls without bytes: llhttp must never see a NULL data pointer, because a
 * NULL start would drop a span that is open across calls. */
static const char empty_input[1] = {0};

static sk_parser_t *
from_llh(llhttp_t *llh)
{
    return (sk_parser_t *)(void *)((char *)llh - offsetof(sk_parser_t, llh));
}

/* Records a refusal. Returns HPE_USER so span callbacks can `return fail(...)`; non-span callbacks
 * return it too (llhttp turns any other value into its HPE_CB_* error), and execute() reads the
 * recorded status either way. */
static int
fail(sk_parser_t *p, int status, const char *reason)
{
    if (p->err_status == 0) {
        p->err_status = status;
        p->err_reason = reason;
    }
    return HPE_USER;
}

/* Appends bytes to the head block. Spans are offsets, so moving the block is safe.
 * 0, or SK_ENOMEM (no memory, or the block would pass UINT32_MAX bytes); the block is unchanged. */
static int
head_append(sk_parser_t *p, const char *at, size_t len)
{
    size_t need;
    size_t cap;
    char *head;

    if (len == 0)
        return 0;
    if (len > (size_t)UINT32_MAX - p->head_len)
        return SK_ENOMEM;
    need = p->head_len + len;
    if (need > p->head_cap) {
        cap = p->head_cap < HEAD_MIN_CAP ? HEAD_MIN_CAP : p->head_cap;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        head = realloc(p->head, cap);
        if (head == NULL)
            return SK_ENOMEM;
        p->head = head;
        p->head_cap = cap;
    }
    memcpy(p->head + p->head_len, at, len);
    p->head_len += len;
    return 0;
}

/* Makes room for fields[nfields] (the field-line being received). 0 or SK_ENOMEM. */
static int
fields_grow(sk_parser_t *p)
{
    uint32_t cap;
    sk_field_t *fields;

    if (p->nfields < p->fields_cap)
        return 0;
    if (p->fields_cap > UINT32_MAX / 2)
        return SK_ENOMEM;
    cap = p->fields_cap < FIELDS_MIN_CAP ? FIELDS_MIN_CAP : p->fields_cap * 2;
    fields = realloc(p->fields, (size_t)cap * sizeof(*fields));
    if (fields == NULL)
        return SK_ENOMEM;
    p->fields = fields;
    p->fields_cap = cap;
    return 0;
}

/* ---- request-line pre-scan ------------------------------------------------------------------
 * llhttp reports an unknown method at its first unexpected byte, and accepts several SP between
 * the request-line parts. This scan runs over each call's input before llhttp sees it (so it has
 * always seen at least the bytes llhttp has), from the first byte of a request to the end of its
 * request-line, and records: whether the method is a token followed by SP (501 vs 400), and
 * whether SP SP appears after the method or after the target (RFC 9112 §3: exactly one SP). */
static void
rl_scan(sk_parser_t *p, const char *data, size_t len)
{
    for (size_t i = 0; i < len && p->rl_state != RL_DONE; i++) {
        unsigned char c = (unsigned char)data[i];

        if (p->rl_state == RL_LEAD) {
            /* RFC 9112 §2.2: empty lines before the request-line are skipped */
            if (c == '\r' || c == '\n')
                continue;
            p->rl_state = RL_METHOD;
        }
        switch (p->rl_state) {
        case RL_METHOD:
            if (sk_is_tchar(c) && p->method_len < p->limits.max_request_line) {
                p->method_len++;
            }
            else if (c == ' ' && p->method_len > 0) {
                p->rl_method = 1;
                p->rl_sp = 1;
                p->rl_prev_sp = 1;
                p->rl_state = RL_REST;
            }
            else {
                p->rl_method = 2;
                p->rl_state = RL_DONE;
            }
            break;
        case RL_REST:
            if (c == ' ') {
                if (p->rl_prev_sp) {
                    p->rl_double_sp |= p->rl_sp == 1 ? RL_SP_AFTER_METHOD : RL_SP_AFTER_TARGET;
                    p->rl_state = RL_DONE;
                    break;
                }
                p->rl_prev_sp = 1;
                if (p->rl_sp < UINT8_MAX)
                    p->rl_sp++;
            }
            else if (c == '\r' || c == '\n') {
                p->rl_state = RL_DONE;
            }
            else {
                p->rl_prev_sp = 0;
                /* The first byte of the HTTP-version ends the scan. Found by fuzzing
                 * (fuzz/regressions/request/sp-sp-after-version): scanning on to the line's end
                 * took a later SP SP for one after the target, so whether the 400 for it or
                 * llhttp's own refusal of the version (505) came first depended on how much of
                 * the line one read had brought. Bytes after the version are llhttp's to refuse. */
                if (p->rl_sp >= 2)
                    p->rl_state = RL_DONE;
            }
            break;
        default: break;
        }
    }
}

static void
rl_reset(sk_parser_t *p)
{
    p->rl_state = RL_LEAD;
    p->rl_method = 0;
    p->rl_sp = 0;
    p->rl_prev_sp = 0;
    p->rl_double_sp = 0;
    p->method_len = 0;
}

/* ---- request-target grammar ----------------------------------------------------------------
 * RFC 9112 §3.2: origin-form = absolute-path [ "?" query ], absolute-form = absolute-URI (its
 * authority is held to the Host rule by sk_http_valid_authority(), its path-abempty and query
 * to the rules below), authority-form (CONNECT only, which is refused with 501 before its target),
 * asterisk-form = "*" (OPTIONS only; checked with the method in on_headers_complete).
 * RFC 3986 §3.3/§3.4: a path segment holds pchar = unreserved / pct-encoded / sub-delims / ":" /
 * "@", the query pchar / "/" / "?", and pct-encoded = "%" HEXDIG HEXDIG.
 *
 * Lenient set: besides the RFC 3986 bytes, a path may hold "[" "]" "^" "|" and a query "[" "]"
 * "\" "^" "`" "{" "|" "}": the bytes the WHATWG URL Standard leaves unencoded in that component
 * ("^" in paths only until 2024), so browsers send them raw (PHP/JSON:API "a[]=1", "family=A|B").
 * Refused everywhere: SP, controls, DEL, bytes >= 0x80 (raw UTF-8), '"', '<', '>', '#' (never sent
 * by a client: RFC 9112 §3.2.1), and a '%' not followed by two hex digits; in a path also "\" "`"
 * "{" "}", which browsers always encode there. See the decision of RFC3986-target-grammar. */

enum { TC_PATH = 1, TC_QUERY = 2, TC_HEX = 4 };
#define P_ (TC_PATH | TC_QUERY)          /* pchar, "/" and the lenient bytes of both components */
#define Q_ TC_QUERY                      /* "?" and the lenient bytes of the query only */
#define X_ (TC_PATH | TC_QUERY | TC_HEX) /* HEXDIG */

/* Byte -> TC_* bits: one lookup per byte of the target. '%' has no bit (the scan checks the two
 * HEXDIG after it); 0x00-0x20, DEL and 0x80-0xff have none. */
/* clang-format off */
static const uint8_t target_class[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x00-0x0f */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10-0x1f */
    /* SP  !   "   #   $   %   &   '   (   )   *   +   ,   -   .   / */
    0 , P_, 0 , 0 , P_, 0 , P_, P_, P_, P_, P_, P_, P_, P_, P_, P_,
    /* 0   1   2   3   4   5   6   7   8   9   :   ;   <   =   >   ? */
    X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, P_, P_, 0 , P_, 0 , Q_,
    /* @   A   B   C   D   E   F   G   H   I   J   K   L   M   N   O */
    P_, X_, X_, X_, X_, X_, X_, P_, P_, P_, P_, P_, P_, P_, P_, P_,
    /* P   Q   R   S   T   U   V   W   X   Y   Z   [   \   ]   ^   _ */
    P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, Q_, P_, P_, P_,
    /* `   a   b   c   d   e   f   g   h   i   j   k   l   m   n   o */
    Q_, X_, X_, X_, X_, X_, X_, P_, P_, P_, P_, P_, P_, P_, P_, P_,
    /* p   q   r   s   t   u   v   w   x   y   z   {   |   }   ~   DEL */
    P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, P_, Q_, P_, Q_, P_, 0 ,
    /* 0x80-0xff: zero */
};
/* clang-format on */

#undef P_
#undef Q_
#undef X_

/* The authority of an absolute-form request-target ("scheme://authority[/path][?query]"): 1 with
 * *auth and *len set and *scheme_len the length of the scheme at t, 0 for any other form. */
static int
absolute_form_authority(const char *t, size_t n, size_t *scheme_len, const char **auth, size_t *len)
{
    if (n == 0 || t[0] == '/' || t[0] == '*')
        return 0;
    for (size_t i = 0; i + 2 < n; i++) {
        if (t[i] == ':' && t[i + 1] == '/' && t[i + 2] == '/') {
            size_t k = i + sizeof("://") - 1;
            size_t start = k;

            while (k < n && t[k] != '/' && t[k] != '?')
                k++;
            *scheme_len = i;
            *auth = t + start;
            *len = k - start;
            return 1;
        }
        if (t[i] == '/' || t[i] == '?')
            return 0;
    }
    return 0;
}

/* Checks the request-target t[0..n) (stored whole in the head block) against the grammar above
 * in one pass with one table lookup a byte. Returns NULL when valid, else the static reason of the
 * 400. The asterisk-form and the authority of the absolute-form are left to on_headers_complete
 * (which knows the method and checks the authority with the Host field's validator). */
const char *
sk_http_target_invalid(const char *t, size_t n)
{
    unsigned mask = TC_PATH;
    size_t i = 0;
    size_t scheme_len, auth_len;
    const char *auth;

    if (n == 0)
        return "empty request-target";
    if (t[0] == '*')
        return NULL;
    if (t[0] != '/') {
        /* absolute-form: the bytes after the authority are a path-abempty [ "?" query ] */
        if (!absolute_form_authority(t, n, &scheme_len, &auth, &auth_len))
            return "request-target in no form"; /* llhttp refuses these first; a guard */
        i = (size_t)(auth - t) + auth_len;
        /* RFC 9112 §3.2.1: no '#' anywhere, the authority included (whatever its scheme) */
        if (memchr(t, '#', i) != NULL)
            return "fragment in the request-target";
    }
    for (; i < n; i++) {
        unsigned char c = (unsigned char)t[i];

        if (target_class[c] & mask)
            continue;
        if (c == '?') { /* the first '?' starts the query; later ones are query bytes */
            mask = TC_QUERY;
            continue;
        }
        if (c == '%') {
            if (n - i < 3 || !(target_class[(unsigned char)t[i + 1]] & TC_HEX) ||
                !(target_class[(unsigned char)t[i + 2]] & TC_HEX))
                return "invalid percent-encoding in the request-target";
            i += 2;
            continue;
        }
        if (c == '#')
            return "fragment in the request-target"; /* RFC 9112 §3.2.1 */
        return "byte not allowed in the request-target";
    }
    return NULL;
}

/* ---- llhttp callbacks ------------------------------------------------------------------------ */

static int
on_message_begin(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);

    p->head_len = 0;
    p->target.off = 0;
    p->target.len = 0;
    p->nfields = 0;
    p->method = 0;
    p->http_major = 0;
    p->http_minor = 0;
    p->keep_alive = 0;
    p->expect_continue = 0;
    p->chunked = 0;
    p->has_content_length = 0;
    p->content_length = 0;
    p->body_received = 0;
    p->field_section_bytes = 0;
    p->field_lines = 0;
    p->chunk_ext_bytes = 0;
    p->chunk_total = 0;
    p->host_count = 0;
    p->in_name = 0;
    p->in_value = 0;
    p->in_trailers = 0;
    p->version_len = 0;
    p->protocol_len = 0;
    p->in_message = 1;
    p->head_done = 0;
    p->head_read = 0;
    return 0;
}

static int
on_method_complete(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);
    uint8_t m = llh->method;

    p->method = m; /* known from here on, so a refusal of a HEAD request can omit its body */
    if (m == HTTP_CONNECT) {
        /* RFC 9110 §9.3.6: a 2xx to CONNECT turns the connection into a tunnel, which skirr
         * does not provide; the app never sees it. */
        return fail(p, 501, "CONNECT not implemented");
    }
    /* llhttp also knows RTSP/ICE methods and PRI; only HTTP_METHOD_MAP methods are HTTP methods.
     * PRI is left to on_version_complete, so the HTTP/2 preface gets 505. */
    switch (m) {
#define SK_HTTP_METHOD_OK(num, name, string) case HTTP_##name:
        HTTP_METHOD_MAP(SK_HTTP_METHOD_OK)
#undef SK_HTTP_METHOD_OK
    case HTTP_PRI: return 0;
    default: return fail(p, 501, "method not implemented");
    }
}

static int
on_url(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);

    if (p->rl_double_sp & RL_SP_AFTER_METHOD)
        return fail(p, 400, "more than one SP after the method");
    if (len > p->limits.max_request_line - p->target.len)
        return fail(p, 414, "request-target too long");
    if (head_append(p, at, len) < 0)
        return fail(p, 503, "out of memory");
    p->target.len += (uint32_t)len;
    return 0;
}

static int
on_url_complete(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);
    const char *reason;

    /* llhttp takes "GET /" CRLF as an HTTP/0.9 request (and sets the version to 0.9 here). */
    if (llh->http_major == 0 && llh->http_minor == 9)
        return fail(p, 400, "request-line without HTTP-version");
    /* RFC 9112 §3: an invalid request-line gets 400. Checked once, on the whole target, so the
     * refusal does not depend on how the bytes were cut into reads. */
    reason =
        sk_http_target_invalid(p->target.len > 0 ? sk_parser_ptr(p, p->target) : "", p->target.len);
    if (reason != NULL)
        return fail(p, 400, reason);
    return 0;
}

static int
on_protocol(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);

    for (size_t i = 0; i < len; i++) {
        if (p->protocol_len < sizeof(p->protocol))
            p->protocol[p->protocol_len] = at[i];
        if (p->protocol_len < UINT8_MAX)
            p->protocol_len++;
    }
    return 0;
}

static int
on_protocol_complete(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);

    if (p->rl_double_sp)
        return fail(p, 400, "more than one SP in the request-line");
    /* llhttp's HTTP_REQUEST mode also accepts RTSP/x.y. */
    if (p->protocol_len != sizeof(p->protocol) ||
        memcmp(p->protocol, "HTTP", sizeof(p->protocol)) != 0)
        return fail(p, 400, "protocol is not HTTP");
    return 0;
}

static int
on_version(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);

    for (size_t i = 0; i < len; i++) {
        if (p->version_len < sizeof(p->version))
            p->version[p->version_len] = at[i];
        if (p->version_len < UINT8_MAX)
            p->version_len++;
    }
    return 0;
}

static int
on_version_complete(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);

    /* llhttp accepts 0.9, 1.0, 1.1 and 2.0. */
    if (llh->http_major != 1 || llh->http_minor > 1)
        return fail(p, 505, "HTTP version not supported");
    if (llh->method == HTTP_PRI)
        return fail(p, 501, "method not implemented");
    p->http_major = llh->http_major;
    p->http_minor = llh->http_minor;
    return 0;
}

/* Counts bytes of the current field section against max_field_section. 0, or what fail() returns
 * (431) when the section would pass the limit. */
static int
count_field_bytes(sk_parser_t *p, size_t len)
{
    if (len > p->limits.max_field_section - p->field_section_bytes)
        return fail(p, 431, "header fields too large");
    p->field_section_bytes += (uint32_t)len;
    return 0;
}

/* A new field-line starts: counted against max_fields (head and trailers alike). */
static int
field_begin(sk_parser_t *p)
{
    p->in_name = 1;
    p->in_value = 0;
    if (p->field_lines >= p->limits.max_fields)
        return fail(p, 431, "too many header fields");
    p->field_lines++;
    if (p->in_trailers)
        return 0;
    if (fields_grow(p) < 0)
        return fail(p, 503, "out of memory");
    p->fields[p->nfields].name.off = (uint32_t)p->head_len;
    p->fields[p->nfields].name.len = 0;
    p->fields[p->nfields].value.off = (uint32_t)p->head_len;
    p->fields[p->nfields].value.len = 0;
    return 0;
}

static int
on_header_field(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);
    int rc;

    if (!p->in_name) {
        rc = field_begin(p);
        if (rc != 0)
            return rc;
    }
    rc = count_field_bytes(p, len);
    if (rc != 0)
        return rc;
    if (p->in_trailers)
        return 0;
    if (head_append(p, at, len) < 0)
        return fail(p, 503, "out of memory");
    p->fields[p->nfields].name.len += (uint32_t)len;
    return 0;
}

static int
on_header_field_complete(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);
    int rc;

    if (!p->in_name) { /* defensive: llhttp refuses empty field names */
        rc = field_begin(p);
        if (rc != 0)
            return rc;
    }
    p->in_name = 0;
    p->in_value = 1;
    if (!p->in_trailers)
        p->fields[p->nfields].value.off = (uint32_t)p->head_len;
    return 0;
}

static int
on_header_value(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);
    int rc;

    rc = count_field_bytes(p, len);
    if (rc != 0)
        return rc;
    if (p->in_trailers || !p->in_value)
        return 0;
    if (head_append(p, at, len) < 0)
        return fail(p, 503, "out of memory");
    p->fields[p->nfields].value.len += (uint32_t)len;
    return 0;
}

static int
on_header_value_complete(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);
    sk_field_t *f;
    const char *v;
    size_t n;

    if (!p->in_value)
        return 0;
    p->in_value = 0;
    if (p->in_trailers)
        return 0; /* trailer fields are validated and counted, never stored */
    f = &p->fields[p->nfields];
    v = p->head + f->value.off;
    n = f->value.len;
    /* RFC 9110 §5.5: leading and trailing whitespace is not part of the field value. */
    sk_ows_trim(&v, &n);
    f->value.off = (uint32_t)(v - p->head);
    f->value.len = (uint32_t)n;
    p->nfields++;
    return 0;
}

/* RFC 3986 §2.3 unreserved and §2.2 sub-delims: the bytes a reg-name holds besides pct-encoded. */
static int
is_regname_char(unsigned char c)
{
    if (sk_is_alpha(c) || sk_is_digit(c))
        return 1;
    return c != '\0' && strchr("-._~!$&'()*+,;=", c) != NULL;
}

static int
is_hexdig(unsigned char c)
{
    return sk_is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* RFC 3986 §3.2.2 IP-literal without its brackets: IPv6address (RFC 4291 text form, checked with
 * inet_pton) or IPvFuture ("v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )). */
static int
valid_ip_literal(const char *v, size_t n)
{
    char buf[sizeof("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255")];
    unsigned char addr[16];
    size_t i = 1;

    if (n > 0 && (v[0] == 'v' || v[0] == 'V')) {
        while (i < n && is_hexdig((unsigned char)v[i]))
            i++;
        if (i == 1 || i >= n || v[i] != '.' || i + 1 == n)
            return 0;
        for (i++; i < n; i++)
            if (!is_regname_char((unsigned char)v[i]) && v[i] != ':')
                return 0;
        return 1;
    }
    if (n == 0 || n >= sizeof(buf))
        return 0;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return inet_pton(AF_INET6, buf, addr) == 1;
}

/* The authority's host [ ":" port ] (RFC 9110 §7.2 Host and §4.2.1/§4.2.2 http(s) URIs, RFC 3986
 * §3.2.2-§3.2.3): an IP-literal in brackets, or a reg-name (unreserved, sub-delims and
 * pct-encoded "%" HEXDIG HEXDIG; an IPv4address is one too), then an optional ":" port of
 * digits. One validator for every source of the authority: the Host field and the absolute-form
 * request-target. nonempty: the value may not be empty (an http(s) URI, RFC 9110 §4.2.1: "MUST
 * reject it as invalid"); a Host field may be, for a target without authority (RFC 9112 §3.2),
 * but an empty host with a port (":80") is refused from either source. 1 valid, 0 not. */
int
sk_http_valid_authority(const char *v, size_t n, int nonempty)
{
    size_t i = 0;

    if (n > 0 && v[0] == '[') {
        const char *end = memchr(v, ']', n);

        if (end == NULL || !valid_ip_literal(v + 1, (size_t)(end - v) - 1))
            return 0;
        i = (size_t)(end - v) + 1;
    }
    else {
        while (i < n && v[i] != ':') {
            unsigned char c = (unsigned char)v[i];

            if (c == '%') {
                if (i + 2 >= n || !is_hexdig((unsigned char)v[i + 1]) ||
                    !is_hexdig((unsigned char)v[i + 2]))
                    return 0;
                i += 3;
                continue;
            }
            if (!is_regname_char(c))
                return 0;
            i++;
        }
        if (i == 0 && (nonempty || n > 0))
            return 0; /* an empty host: only as the whole (empty) Host value */
    }
    if (i == n)
        return 1;
    if (v[i] != ':')
        return 0;
    for (i++; i < n; i++)
        if (!sk_is_digit((unsigned char)v[i]))
            return 0;
    return 1;
}

/* Parses every Transfer-Encoding field-line as one list (RFC 9112 §6.1):
 *   Transfer-Encoding = #transfer-coding; transfer-coding = token *( OWS ";" OWS parameter )
 * Returns 0 when the list is valid and ends in chunked, else what fail() returns, with 400 for an
 * invalid list and 501 for a coding before chunked that skirr does not implement. */
static int
check_transfer_encoding(sk_parser_t *p)
{
    static const char invalid[] = "invalid Transfer-Encoding";
    int codings = 0;
    int chunked_seen = 0;
    int unknown = 0;

    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];
        sk_list_iter_t it;
        const char *e;
        size_t elen;

        if (!SK_TOKEN_IEQ(sk_parser_ptr(p, f->name), f->name.len, "transfer-encoding"))
            continue;
        sk_list_init(&it, sk_parser_ptr(p, f->value), f->value.len);
        while (sk_list_next(&it, &e, &elen) == 1) {
            size_t tok_len = sk_token_len(e, elen);

            if (tok_len == 0)
                return fail(p, 400, invalid);
            codings++;
            if (chunked_seen)
                return fail(p, 400, invalid); /* chunked is not the final coding, or is repeated */
            if (SK_TOKEN_IEQ(e, tok_len, "chunked")) {
                if (tok_len != elen)
                    return fail(p, 400, invalid); /* chunked takes no parameters */
                chunked_seen = 1;
            }
            else {
                unknown = 1;
            }
        }
    }
    if (codings == 0 || !chunked_seen)
        return fail(p, 400, invalid); /* RFC 9112 §6.3 (4): chunked is not the final coding */
    if (unknown) /* RFC 9112 §6.1: a coding before chunked that we do not implement */
        return fail(p, 501, "transfer coding not implemented");
    return 0;
}

static int
on_headers_complete(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);
    int has_te = 0;
    int conn_close = 0, conn_keep_alive = 0;
    const char *auth;
    size_t auth_len, scheme_len;
    int rc;

    p->head_read = 1;
    p->host_count = 0;
    p->expect_continue = 0;
    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];
        const char *name = sk_parser_ptr(p, f->name);
        const char *value = sk_parser_ptr(p, f->value);

        if (SK_TOKEN_IEQ(name, f->name.len, "host")) {
            p->host_count++;
            if (!sk_http_valid_authority(value, f->value.len, 0))
                return fail(p, 400, "invalid Host");
        }
        else if (SK_TOKEN_IEQ(name, f->name.len, "connection")) {
            /* RFC 9112 §9.3/§9.6: every Connection field-line, any case, any list form */
            if (SK_LIST_HAS_TOKEN(value, f->value.len, "close"))
                conn_close = 1;
            if (SK_LIST_HAS_TOKEN(value, f->value.len, "keep-alive"))
                conn_keep_alive = 1;
        }
        else if (SK_TOKEN_IEQ(name, f->name.len, "transfer-encoding")) {
            has_te = 1;
        }
        else if (SK_TOKEN_IEQ(name, f->name.len, "expect")) {
            if (p->http_minor == 1 && SK_TOKEN_IEQ(value, f->value.len, "100-continue"))
                p->expect_continue = 1;
        }
    }
    /* RFC 9112 §3.2.4: the asterisk-form is exactly "*", and only for OPTIONS */
    if (p->target.len >= 1 && sk_parser_ptr(p, p->target)[0] == '*' &&
        (p->target.len != 1 || llh->method != HTTP_OPTIONS))
        return fail(p, 400, "asterisk-form request-target other than OPTIONS *");
    if (absolute_form_authority(sk_parser_ptr(p, p->target), p->target.len, &scheme_len, &auth,
                                &auth_len)) {
        const char *scheme = sk_parser_ptr(p, p->target);
        /* RFC 9110 §7.4: a target this origin server does not serve (ftp://, ...) gets 421 */
        if (!SK_TOKEN_IEQ(scheme, scheme_len, "http") && !SK_TOKEN_IEQ(scheme, scheme_len, "https"))
            return fail(p, 421, "request-target scheme other than http or https");
        if (memchr(auth, '@', auth_len) != NULL)
            return fail(p, 400, "userinfo in the request-target"); /* RFC 9110 §4.2.4 */
        /* RFC 9112 §3.2.2: this authority replaces Host, so it is held to the same syntax */
        if (!sk_http_valid_authority(auth, auth_len, 1))
            return fail(p, 400, "invalid authority in the request-target");
    }
    /* RFC 9112 §3.2 */
    if (p->host_count > 1)
        return fail(p, 400, "more than one Host");
    if (p->http_minor == 1 && p->host_count == 0)
        return fail(p, 400, "HTTP/1.1 request without Host");
    if (has_te) {
        if (p->http_minor == 0)
            return fail(p, 400, "Transfer-Encoding in an HTTP/1.0 request");
        if (llh->flags & F_CONTENT_LENGTH) /* llhttp strict refuses this first; kept as a guard */
            return fail(p, 400, "Transfer-Encoding with Content-Length");
        rc = check_transfer_encoding(p);
        if (rc != 0)
            return rc;
    }
    p->chunked = (llh->flags & F_CHUNKED) ? 1 : 0;
    p->has_content_length = (llh->flags & F_CONTENT_LENGTH) ? 1 : 0;
    p->content_length = p->has_content_length ? llh->content_length : 0;
    if (p->limits.max_body != 0 && p->content_length > p->limits.max_body)
        return fail(p, 413, "content too large");
    p->method = llh->method;
    /* RFC 9112 §9.3: HTTP/1.1 persists unless "close"; HTTP/1.0 only with "keep-alive" and no
     * "close" (§9.6: after close the server MUST NOT process further requests): decided from the
     * parsed options, not from llhttp's answer (which lets a later keep-alive token win). */
    p->keep_alive = (p->http_minor == 1) ? !conn_close : (conn_keep_alive && !conn_close);
    /* ... and llhttp is told the same, since after a message it refuses further bytes on a
     * connection it believes closing (a trailing HTAB hides a keep-alive token from it) */
    llh->flags &= (uint16_t) ~(F_CONNECTION_KEEP_ALIVE | F_CONNECTION_CLOSE);
    llh->flags |= p->keep_alive ? F_CONNECTION_KEEP_ALIVE : F_CONNECTION_CLOSE;
    p->field_lines = 0;
    p->field_section_bytes = 0;
    p->head_done = 1;
    p->pending = SK_EV_HEAD;
    return HPE_PAUSED;
}

static int
on_body(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);

    if (len == 0)
        return 0; /* llhttp calls an open span with no bytes when a call brings none */
    p->body_at = at;
    p->body_len = len;
    p->body_received += len;
    p->pending = SK_EV_BODY;
    return HPE_PAUSED;
}

static int
on_chunk_extension(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);

    (void)at;
    if (len > p->limits.max_chunk_ext - p->chunk_ext_bytes)
        return fail(p, 400, "chunk extensions too large");
    p->chunk_ext_bytes += (uint32_t)len;
    return 0;
}

static int
on_chunk_extension_name(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);
    if (len > 0)
        p->chunk_ext_named = 1;
    return on_chunk_extension(llh, at, len);
}

static int
on_chunk_extension_value(llhttp_t *llh, const char *at, size_t len)
{
    sk_parser_t *p = from_llh(llh);
    /* chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ): no value
     * without a name (RFC 9112 §7.1.1); llhttp lets ";=b" through. */
    if (!p->chunk_ext_named)
        return fail(p, 400, "chunk extension value without a name");
    return on_chunk_extension(llh, at, len);
}

static int
on_chunk_extension_value_complete(llhttp_t *llh)
{
    from_llh(llh)->chunk_ext_named = 0; /* the next extension needs its own name */
    return 0;
}

static int
on_chunk_header(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);
    uint64_t size = llh->content_length;

    p->chunk_ext_bytes = 0;
    p->chunk_ext_named = 0;
    if (size == 0) {
        /* last-chunk: a trailer section follows, a field section of its own for the limits */
        p->in_trailers = 1;
        p->field_lines = 0;
        p->field_section_bytes = 0;
        p->in_name = 0;
        p->in_value = 0;
        return 0;
    }
    if (p->limits.max_body != 0 && size > p->limits.max_body - p->chunk_total)
        return fail(p, 413, "content too large");
    p->chunk_total += size;
    return 0;
}

static int
on_message_complete(llhttp_t *llh)
{
    sk_parser_t *p = from_llh(llh);

    p->in_message = 0;
    p->pending = SK_EV_END;
    return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_protocol = on_protocol,
    .on_url = on_url,
    .on_version = on_version,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_chunk_extension_name = on_chunk_extension_name,
    .on_chunk_extension_value = on_chunk_extension_value,
    .on_chunk_extension_value_complete = on_chunk_extension_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
    .on_url_complete = on_url_complete,
    .on_protocol_complete = on_protocol_complete,
    .on_method_complete = on_method_complete,
    .on_version_complete = on_version_complete,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value_complete = on_header_value_complete,
    .on_chunk_header = on_chunk_header,
};

/* ---- invariants ------------------------------------------------------------------------------ */

#ifndef NDEBUG
/* Asserts what holds between two sk_parser_execute() calls, whatever the input was: the head block
 * and the field array are consistent, every stored span lies inside the head block, no limit is
 * exceeded, and no event is left pending. A dead parser keeps its partial request; the checks hold
 * for it too, because every limit is tested before the bytes are counted or stored. */
static void
parser_check(const sk_parser_t *p)
{
    assert(p->head_len <= p->head_cap && p->head_len <= UINT32_MAX);
    assert((p->head == NULL) == (p->head_cap == 0));
    assert(p->nfields <= p->fields_cap);
    assert((p->fields == NULL) == (p->fields_cap == 0));
    assert(p->target.off == 0 && p->target.len <= p->head_len);
    assert(p->target.len <= p->limits.max_request_line);
    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];

        assert(f->name.off <= p->head_len && f->name.len <= p->head_len - f->name.off);
        assert(f->value.off <= p->head_len && f->value.len <= p->head_len - f->value.off);
        (void)f;
    }
    assert(p->field_section_bytes <= p->limits.max_field_section);
    assert(p->field_lines <= p->limits.max_fields);
    assert(p->chunk_ext_bytes <= p->limits.max_chunk_ext);
    assert(p->limits.max_body == 0 || p->chunk_total <= p->limits.max_body);
    assert(!(p->has_content_length && p->chunked));
    assert(!p->has_content_length || p->body_received <= p->content_length);
    assert(p->pending == SK_EV_NONE && p->body_at == NULL && p->body_len == 0);
    assert(!p->dead || (p->err_status >= 400 && p->err_reason != NULL && !p->method_pending));
    assert(p->rl_state <= RL_DONE && p->rl_method <= 2);
}
#define PARSER_CHECK(p) parser_check(p)
#else
#define PARSER_CHECK(p) ((void)0)
#endif

/* ---- public API ------------------------------------------------------------------------------ */

void
sk_limits_default(sk_limits_t *l)
{
    l->max_request_line = 8190;
    l->max_field_section = 65536;
    l->max_fields = 100;
    l->max_body = 0;
    l->max_chunk_ext = 4096;
}

int
sk_parser_init(sk_parser_t *p, const sk_limits_t *limits)
{
    memset(p, 0, sizeof(*p));
    p->limits = *limits;
    if (p->limits.max_field_section > UINT32_MAX)
        p->limits.max_field_section = UINT32_MAX;
    if (p->limits.max_request_line > UINT32_MAX)
        p->limits.max_request_line = UINT32_MAX;
    if (p->limits.max_chunk_ext > UINT32_MAX)
        p->limits.max_chunk_ext = UINT32_MAX;
    llhttp_init(&p->llh, HTTP_REQUEST, &settings);
    rl_reset(p);
    return 0;
}

/* Frees the head block and the field array; the spans into them are emptied. */
static void
drop_storage(sk_parser_t *p)
{
    free(p->head);
    free(p->fields);
    p->head = NULL;
    p->fields = NULL;
    p->head_len = 0;
    p->head_cap = 0;
    p->nfields = 0;
    p->fields_cap = 0;
    p->target.off = 0;
    p->target.len = 0;
}

void
sk_parser_free(sk_parser_t *p)
{
    drop_storage(p);
}

/* Status for an llhttp error that no callback recorded. */
static int
map_llhttp_error(const sk_parser_t *p, llhttp_errno_t err, const char **reason)
{
    *reason = llhttp_get_error_reason(&p->llh);
    if (*reason == NULL)
        *reason = "malformed request";
    if (err == HPE_INVALID_METHOD)
        return p->rl_method == 1 ? 501 : 400;
    /* HTTP-version = HTTP-name "/" DIGIT "." DIGIT (RFC 9112 §2.3): a well-formed version other
     * than 1.0 and 1.1 is 505, anything else 400. */
    if (err == HPE_INVALID_VERSION && !p->rl_double_sp && p->version_len == sizeof(p->version) &&
        sk_is_digit((unsigned char)p->version[0]) && p->version[1] == '.' &&
        sk_is_digit((unsigned char)p->version[2]) &&
        !(p->version[0] == '1' && (p->version[2] == '0' || p->version[2] == '1'))) {
        *reason = "HTTP version not supported";
        return 505;
    }
    return 400;
}

static size_t
refuse(sk_parser_t *p, int status, const char *reason, size_t consumed, sk_event_t *ev)
{
    if (!p->dead) {
        p->dead = 1;
        p->method_pending = 0;
        p->err_status = status;
        p->err_reason = reason;
    }
    ev->type = SK_EV_ERROR;
    ev->status = p->err_status;
    ev->reason = p->err_reason;
    return consumed;
}

static size_t
execute(sk_parser_t *p, const char *data, size_t len, sk_event_t *ev)
{
    size_t off = 0;

    memset(ev, 0, sizeof(*ev));
    if (p->dead)
        return refuse(p, p->err_status, p->err_reason, 0, ev);
    if (data == NULL) {
        data = empty_input;
        len = 0;
    }
    if (p->rl_state != RL_DONE)
        rl_scan(p, data, len);
    if (p->method_pending) {
        if (p->rl_method == 0)
            return len; /* SK_EV_NONE: the method token goes on */
        return refuse(p, p->rl_method == 1 ? 501 : 400, "unknown method", len, ev);
    }

    for (;;) {
        llhttp_errno_t err = llhttp_execute(&p->llh, data + off, len - off);
        const char *pos;
        const char *reason;
        int status;

        if (err == HPE_OK)
            return len; /* SK_EV_NONE: everything consumed */
        pos = llhttp_get_error_pos(&p->llh);
        if (err == HPE_PAUSED) {
            size_t consumed = (size_t)(pos - data);

            llhttp_resume(&p->llh);
            if (p->pending == SK_EV_NONE) { /* defensive: only our callbacks pause */
                off = consumed;
                continue;
            }
            ev->type = p->pending;
            if (p->pending == SK_EV_BODY) {
                ev->data = p->body_at;
                ev->len = p->body_len;
                p->body_at = NULL;
                p->body_len = 0;
            }
            else if (p->pending == SK_EV_END) {
                rl_reset(p);
            }
            p->pending = SK_EV_NONE;
            return consumed;
        }
        if (err == HPE_PAUSED_UPGRADE) {
            /* Not a protocol switch for skirr: the message is complete (END was already
             * returned), go on with the next request. */
            llhttp_resume_after_upgrade(&p->llh);
            off = (size_t)(pos - data);
            continue;
        }
        if (p->err_status != 0)
            return refuse(p, p->err_status, p->err_reason, len, ev);
        status = map_llhttp_error(p, err, &reason);
        if (err == HPE_INVALID_METHOD && p->rl_method == 0) {
            /* llhttp stops at the first byte no method starts with; whether the token goes on
             * to SP (501) or not (400) is in bytes not received yet. */
            p->method_pending = 1;
            return len;
        }
        return refuse(p, status, reason, len, ev);
    }
}

size_t
sk_parser_execute(sk_parser_t *p, const char *data, size_t len, sk_event_t *ev)
{
    size_t consumed;

    PARSER_CHECK(p);
    consumed = execute(p, data, len, ev);
    PARSER_CHECK(p);
    /* the event contract of sk_http.h */
    assert(consumed <= len);
    assert(ev->type != SK_EV_NONE || consumed == len);
    assert(ev->type != SK_EV_BODY ||
           (ev->len > 0 && ev->data >= data && (size_t)(ev->data - data) + ev->len <= consumed));
    assert(ev->type != SK_EV_ERROR || (ev->status >= 400 && p->dead));
    assert(ev->type != SK_EV_HEAD || p->head_done);
    return consumed;
}

int
sk_parser_eof_mid_message(const sk_parser_t *p)
{
    if (p->dead)
        return 0;
    if (p->method_pending)
        return 1;
    if (!p->in_message)
        return 0;
    if (!p->head_done || p->chunked)
        return 1;
    return p->body_received < p->content_length;
}

int
sk_parser_idle(const sk_parser_t *p)
{
    return !p->dead && !p->method_pending && !p->in_message;
}

int
sk_parser_head_checked(const sk_parser_t *p)
{
    /* on_headers_complete fails with 413 for the declared length after every other check of the
     * head (fail() keeps the first error: a 413 with the head read and no SK_EV_HEAD is that one;
     * a chunked body's 413 comes after SK_EV_HEAD) */
    return p->head_done || (p->head_read && p->err_status == 413);
}

void
sk_parser_trim(sk_parser_t *p)
{
    if (!sk_parser_idle(p)) {
        return; /* spans of the message being parsed point into the head block */
    }
    drop_storage(p);
}

int
sk_http_method_id(const char *m, size_t n)
{
    static const struct {
        const char *name;
        int id;
    } known[] = {
#define SK_HTTP_METHOD_ROW(num, name, string) {#string, HTTP_##name},
        HTTP_METHOD_MAP(SK_HTTP_METHOD_ROW)
#undef SK_HTTP_METHOD_ROW
    };

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strlen(known[i].name) == n && memcmp(known[i].name, m, n) == 0)
            return known[i].id;
    return -1;
}

const char *
sk_parser_method_name(const sk_parser_t *p)
{
    return llhttp_method_name((llhttp_method_t)p->method);
}
