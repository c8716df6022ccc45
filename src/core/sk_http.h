/* sk_http.h — sans-I/O HTTP/1.1 request parser over llhttp (strict: no lenient flags).
 *
 * Owns: turning request bytes into pull-style events (head, body piece, end, error with the HTTP
 * status to refuse with), the request-head copy (one block of bytes, spans into it), and every
 * request limit. Never: includes Python.h or an src/ext/ header, performs I/O, keeps global mutable
 * state, or calls back into the embedder.
 *
 * Usage: the embedder calls sk_parser_execute() with the bytes it has; it returns how many bytes it
 * consumed and fills one event. After SK_EV_HEAD, SK_EV_BODY or SK_EV_END the embedder handles the
 * event and calls again with the unconsumed rest (which may be empty). Partial input is normal:
 * SK_EV_NONE means every byte was consumed and more are needed. After SK_EV_END the parser is
 * ready for the next request on the connection (pipelining: the embedder decides when to go on).
 * After SK_EV_ERROR the parser is dead: the embedder refuses with ev.status and closes.
 */
#ifndef SK_HTTP_H
#define SK_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "sk_core.h"
#include "llhttp.h"

typedef struct {
    uint32_t off; /* offset into sk_parser_t.head, bytes */
    uint32_t len; /* bytes */
} sk_span_t;

typedef struct {
    sk_span_t name;  /* as received; the embedder lower-cases for ASGI */
    sk_span_t value; /* leading and trailing SP/HTAB removed (RFC 9110 §5.5) */
} sk_field_t;

typedef struct {
    size_t max_request_line; /* bytes of the request-target; over -> 414 (RFC 9112 §3) */
    size_t
        max_field_section; /* bytes of all field-lines, names plus values; over -> 431 (RFC 6585 §5) */
    uint32_t max_fields; /* field-lines per request; more -> 431. Exactly max_fields is accepted */
    uint64_t
        max_body; /* bytes of request content; 0 = unlimited; over -> 413 (RFC 9110 §15.5.14) */
    size_t max_chunk_ext; /* bytes of chunk extensions per chunk; over -> 400 */
} sk_limits_t;

/* Defaults used by skirr's CLI: 8190, 65536, 100, 0 (unlimited), 4096. */
void sk_limits_default(sk_limits_t *l);

enum sk_event_type {
    SK_EV_NONE = 0,  /* all bytes consumed, need more input */
    SK_EV_HEAD = 1,  /* request head complete: read it from the parser (see accessors) */
    SK_EV_BODY = 2,  /* ev.data/ev.len: a piece of request content (de-chunked), inside the input */
    SK_EV_END = 3,   /* request message complete */
    SK_EV_ERROR = 4, /* ev.status: 400, 413, 414, 421, 431, 501 or 505; ev.reason: static text */
};

typedef struct {
    int type;           /* enum sk_event_type */
    const char *data;   /* SK_EV_BODY: points into the caller's input buffer */
    size_t len;         /* SK_EV_BODY: bytes */
    int status;         /* SK_EV_ERROR: HTTP status to refuse with */
    const char *reason; /* SK_EV_ERROR: static, human-readable cause (not sent on the wire) */
} sk_event_t;

typedef struct {
    llhttp_t llh;
    sk_limits_t limits;

    /* The current request head, valid from SK_EV_HEAD until the next request begins. */
    char *head;         /* owned block: target bytes then field names/values */
    size_t head_len;    /* bytes used */
    size_t head_cap;    /* bytes allocated */
    sk_span_t target;   /* request-target as received */
    sk_field_t *fields; /* owned array, nfields used */
    uint32_t nfields;
    uint32_t fields_cap;
    uint8_t method;          /* llhttp_method_t; name from llhttp_method_name(); set as soon as the
                             * method is parsed (also valid on SK_EV_ERROR after the request-line) */
    uint8_t http_major;      /* 1 */
    uint8_t http_minor;      /* 0 or 1 */
    uint8_t keep_alive;      /* 1 if the request allows a persistent connection (RFC 9112 §9.3) */
    uint8_t expect_continue; /* 1 if "Expect: 100-continue" was received on HTTP/1.1 */
    uint8_t chunked;         /* 1 if the content is chunked */
    uint8_t has_content_length;
    uint64_t content_length; /* bytes, when has_content_length */
    uint64_t body_received;  /* bytes of content delivered so far for this request */

    /* Internal parsing state (private to sk_http.c). */
    uint32_t field_section_bytes;
    uint32_t chunk_ext_bytes;
    uint32_t host_count;
    uint8_t in_value;
    uint8_t in_trailers;
    uint8_t chunk_ext_named; /* the current chunk extension has a name */
    uint8_t pending;         /* event recorded by a callback, returned after llhttp pauses */
    const char *body_at;
    size_t body_len;
    int err_status;
    const char *err_reason;
    uint32_t field_lines; /* field-lines in the current field section (head or trailers) */
    uint64_t chunk_total; /* bytes of chunk-size declared so far (max_body accounting) */
    uint8_t in_name;
    uint8_t in_message;     /* on_message_begin seen, END not yet returned */
    uint8_t head_done;      /* SK_EV_HEAD returned for the current request */
    uint8_t head_read;      /* the head's end was reached, valid or not: the request-line's
                             * method, target and version are set (an access log of a refusal) */
    uint8_t dead;           /* SK_EV_ERROR returned; err_status holds the status */
    uint8_t method_pending; /* llhttp refused the method; waiting for bytes to tell 400 from 501 */
    uint8_t rl_state;       /* request-line pre-scan: lead, method, rest, done */
    uint8_t rl_method;      /* 0 undecided, 1 token followed by SP, 2 anything else */
    uint8_t rl_sp;          /* SP bytes seen after the method */
    uint8_t rl_prev_sp;
    uint8_t rl_double_sp; /* bit 1: SP SP after the method, bit 2: SP SP after the target */
    uint8_t version_len;  /* bytes of the HTTP-version digits seen (saturating) */
    uint8_t protocol_len; /* bytes of the protocol name seen (saturating) */
    char version[sizeof("1.1") - 1];   /* the HTTP-version's first bytes (DIGIT "." DIGIT) */
    char protocol[sizeof("HTTP") - 1]; /* the protocol name's first bytes (HTTP-name) */
    uint32_t method_len;
} sk_parser_t;

/* Initialises p for requests with the given limits (copied). Returns 0. */
int sk_parser_init(sk_parser_t *p, const sk_limits_t *limits);
/* Releases p's storage. p may be re-initialised afterwards. */
void sk_parser_free(sk_parser_t *p);

/* Parses up to len bytes of data. Returns the bytes consumed (<= len) and fills *ev.
 * On SK_EV_ERROR the return value is unspecified (<= len) and p must not be executed again. */
size_t sk_parser_execute(sk_parser_t *p, const char *data, size_t len, sk_event_t *ev);

/* The peer closed its side. Returns 1 if a request was in progress (head or content incomplete),
 * 0 if the parser was between requests. */
int sk_parser_eof_mid_message(const sk_parser_t *p);

/* 1 while between requests (no byte of the next request seen yet). */
int sk_parser_idle(const sk_parser_t *p);
/* 1 when the current request's head was read whole and passed every check a head the app gets
 * passes: SK_EV_HEAD was returned, or the one refusal made after those checks, a declared
 * Content-Length over limits.max_body (413, RFC 9110 §15.5.14). Its target and fields are then
 * what a scope would be built from; 0 for a head not read whole or refused as invalid. */
int sk_parser_head_checked(const sk_parser_t *p);
/* Between messages (sk_parser_idle), frees the head block and the field array (made again by
 * the next message's first bytes); does nothing otherwise. */
void sk_parser_trim(sk_parser_t *p);

/* Helpers for the embedder. */
static inline const char *
sk_parser_ptr(const sk_parser_t *p, sk_span_t s)
{
    return p->head + s.off;
}
const char *sk_parser_method_name(const sk_parser_t *p); /* static string, e.g. "GET" */

/* The request checks HTTP/1.1 makes, for a request that arrived another way (HTTP/2's
 * pseudo-header fields, RFC 9113 §8.3.1), so an app sees the same requests whichever version
 * carried them. */
/* The request-target t[0..n) (RFC 9112 §3.2 with skirr's lenient bytes, see sk_http.c):
 * origin-form, absolute-form or "*". NULL when valid, else the static reason HTTP/1.1 refuses
 * it with (400): a '#', a byte outside the grammar, a '%' without two HEXDIG. */
const char *sk_http_target_invalid(const char *t, size_t n);
/* An authority host [ ":" port ] (RFC 9110 §7.2, RFC 3986 §3.2.2-§3.2.3) as the Host field and
 * the absolute-form's authority are held to: 1 valid, 0 not (userinfo "user@" never is: '@' is
 * no reg-name byte, RFC 9110 §4.2.4). nonempty: an empty value is invalid too (an http(s) URI's
 * authority, RFC 9110 §4.2.1); otherwise only "" is (a Host field, RFC 9112 §3.2). */
int sk_http_valid_authority(const char *v, size_t n, int nonempty);
/* The llhttp number (enum llhttp_method) of a method skirr's HTTP/1.1 parser serves, by its
 * exact, case-sensitive name m[0..n) (HTTP_METHOD_MAP: RFC 9110 §9 and the registered WebDAV,
 * QUERY, ... methods; CONNECT included, refused by its caller), or -1: HTTP/1.1 answers such a
 * method (a token, 'get', 'FOO', 'PRI') 501 (RFC 9110 §9.1). */
int sk_http_method_id(const char *m, size_t n);

/* The request-target t[0..tlen) of a checked head as the scope has it: origin-form and the
 * asterisk-form as received; absolute-form (RFC 9112 §3.2.2) without its scheme and authority,
 * which goes to *authority (NULL: not absolute-form). *path is the bytes before the first '?'
 * ("/" when there are none: "?q", an absolute-form target without a path); *query the bytes
 * after it (NULL: no '?'). Pointers into t (or static); lengths in bytes. Inline: the HTTP/1.1
 * request path (sk_http1.c) and a refusal's access line (sk_access.c) split the same way. */
static inline void
sk_http_target_split(const char *t, size_t tlen, const char **authority, size_t *authority_len,
                     const char **path, size_t *path_len, const char **query, size_t *query_len)
{
    *authority = NULL;
    *authority_len = 0;
    if (tlen > 0 && t[0] != '/' && t[0] != '*') {
        size_t i = 0; /* where "://" is, if anywhere */
        while (i + 2 < tlen && !(t[i] == ':' && t[i + 1] == '/' && t[i + 2] == '/')) {
            i++;
        }
        if (i + 2 < tlen) {
            const char *sep = t + i + 3;
            const char *end = t + tlen;
            const char *ps = sep;
            while (ps < end && *ps != '/' && *ps != '?') {
                ps++;
            }
            *authority = sep;
            *authority_len = (size_t)(ps - sep);
            tlen = (size_t)(end - ps);
            t = ps;
        }
    }
    const char *q = tlen > 0 ? (const char *)memchr(t, '?', tlen) : NULL;
    size_t plen = q ? (size_t)(q - t) : tlen;
    *path = t;
    if (plen == 0 && (tlen == 0 || t[0] == '?')) {
        *path = "/";
        plen = 1;
    }
    *path_len = plen;
    *query = q != NULL ? q + 1 : NULL;
    *query_len = q != NULL ? (size_t)(t + tlen - q - 1) : 0;
}

#endif
