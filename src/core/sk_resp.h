/* sk_resp.h — sans-I/O HTTP/1.1 response serializer.
 *
 * Owns: the status-line, response header validation (RFC 9110 §5), the message framing choice
 * (RFC 9112 §6: Content-Length, chunked, or close-delimited), Content-Length accounting, the
 * bodyless rules (HEAD, 1xx, 204, 205, 304: RFC 9110 §6.4.1), the server's own date/server/connection
 * fields, and the complete refusal responses (400/413/414/431/500/501/505/503/408).
 * Never: includes Python.h or an src/ext/ header, performs I/O, or keeps global mutable state.
 * Output goes into a caller's sk_buf_t.
 */
#ifndef SK_RESP_H
#define SK_RESP_H

#include <stddef.h>
#include <stdint.h>
#include "sk_core.h"

typedef struct {
    const char *name;  /* not NUL-terminated */
    size_t name_len;   /* bytes */
    const char *value; /* not NUL-terminated */
    size_t value_len;  /* bytes */
} sk_header_t;

/* RFC 9113 §6.5.2's measure of a field (bytes): its name's and value's bytes and 32 more. HTTP/2
 * field sections are sized by it (sk_h2.c, skirr.Config's check of --header). */
#define SK_FIELD_SIZE(name_len, value_len) ((size_t)(name_len) + (size_t)(value_len) + 32)
/* The largest HTTP/2 response field section skirr sends, by that measure (bytes). nghttp2 refuses
 * to pack a header block whose encoded bound (12 bytes a field more than its name and value, plus
 * 17) is over 64 KiB (nghttp2_session.c, max_send_header_block_length); 32 bytes a field keeps
 * every section this lets through inside that bound. */
#define SK_H2_SECTION_MAX 65536
/* Room kept beside the server's own fields for what skirr's own HTTP/2 answers add (bytes, the
 * same measure): :status, content-type, content-length and the health check's cache-control
 * (211), an x-request-id of up to 200 bytes (244): 455, rounded up. */
#define SK_H2_OWN_RESPONSE_SIZE 512

/* The server's own fields, configurable (--server-header, --header). NULL = the defaults:
 * "server: skirr" and nothing else. */
typedef struct {
    const char *server; /* complete "server: ...\r\n" line(s), or "" for none */
    size_t server_len;  /* bytes */
    const char *extra;  /* complete, validated "name: value\r\n" lines added to every response */
    size_t extra_len;   /* bytes */
    /* What sk_resp_opts_measure() found in server and extra (HTTP/2 sizes its arrays and checks
     * a head's size with them): */
    size_t lines;       /* field lines in both */
    size_t names_len;   /* bytes of their names */
    size_t server_size; /* the server lines by RFC 9113 §6.5.2's measure (name + value + 32) */
    size_t extra_size;  /* the extra lines by the same measure */
} sk_resp_opts_t;

/* The next complete "name: value\r\n" line of s[..end) (sk_resp_opts_t's form): f gets its name
 * and its value without the OWS around it (RFC 9110 §5.5), *s moves past the line. 1, or 0 when
 * no whole line is left. */
int sk_resp_next_line(const char **s, const char *end, sk_header_t *f);

/* The longest decimal form of a uint64_t (18446744073709551615), bytes. */
#define SK_DEC_MAX_LEN 20
/* Writes v in decimal into out (at least SK_DEC_MAX_LEN bytes, not terminated); returns the
 * number of bytes written. A content-length value (RFC 9110 §8.6) on either version. */
size_t sk_fmt_dec(char *out, uint64_t v);

/* Fills o's lines, names_len, server_size and extra_size from its server and extra lines. */
void sk_resp_opts_measure(sk_resp_opts_t *o);

/* The size (bytes, SK_FIELD_SIZE's measure) skirr's own HTTP/2 answers may reach with o's
 * measured lines: o->server_size + o->extra_size + SK_H2_OWN_RESPONSE_SIZE, and a date field
 * when `date` (--date-header). Over SK_H2_SECTION_MAX the server's fields are refused at startup
 * (skirr.Config, and the native server's constructor: ValueError). */
size_t sk_resp_opts_h2_own_size(const sk_resp_opts_t *o, int date);

/* What the serializer needs to know about the request being answered. */
typedef struct {
    uint8_t http_minor; /* 0 or 1 (HTTP/1.0 or HTTP/1.1) */
    uint8_t head;       /* 1 if the method was HEAD */
    uint8_t keep_alive; /* 1 if the request allows a persistent connection */
    uint8_t
        force_close; /* 1 if the server wants to close after this response (shutdown, unread body) */
    const sk_resp_opts_t *opts; /* the server's own fields; NULL = the defaults (borrowed) */
    uint8_t te_trailers;        /* 1 if the request's TE field has "trailers" (RFC 9110 §10.1.4) */
} sk_req_info_t;

enum sk_framing {
    SK_FRAME_NONE = 0, /* bodyless: HEAD, 1xx, 204, 205, 304; body bytes are dropped */
    SK_FRAME_LENGTH,   /* Content-Length (the app's, or computed from a single final body event) */
    SK_FRAME_CHUNKED,  /* chunked transfer coding (HTTP/1.1 only) */
    SK_FRAME_CLOSE,    /* close-delimited (HTTP/1.0 without a length) */
};

typedef struct {
    sk_buf_t head; /* status-line and validated fields, without framing fields or final CRLF */
    int status;
    uint8_t started;      /* sk_resp_start succeeded */
    uint8_t head_written; /* the head went to an output buffer (with the first body event) */
    uint8_t done;         /* final body event written */
    uint8_t
        keep_alive;  /* valid after the head is written: the connection may carry another request */
    uint8_t framing; /* enum sk_framing, valid after the head is written */
    uint8_t app_has_date, app_has_server, app_has_cl, app_chunked, app_conn_close;
    uint8_t app_conn_keep_alive; /* private: the app's connection field has a keep-alive token */
    uint8_t trailers;            /* the app will send trailers (sk_resp_announce_trailers) */
    uint8_t trailers_begun;      /* the trailer section's last-chunk is written */
    uint8_t trailers_done;       /* the final trailers call came: the message is complete */
    uint64_t content_length;     /* bytes, when framing is SK_FRAME_LENGTH */
    uint64_t body_sent;          /* content bytes accepted so far */
    sk_req_info_t req;
} sk_resp_t;

/* Zeroes r for a new response (keeps r->head's storage for reuse). */
void sk_resp_reset(sk_resp_t *r);
/* Frees r's storage. */
void sk_resp_free(sk_resp_t *r);

/* Validates status (100..599) and headers and records them. Writes nothing to the wire yet: the
 * head leaves with the first sk_resp_body() call, so head and first body go out in one write.
 * Returns 0, or SK_ESTATUS, SK_EHDRNAME, SK_EHDRVALUE, SK_ECL, SK_ETE, SK_ENOMEM; on error r is
 * left not started. */
int sk_resp_start(sk_resp_t *r, const sk_req_info_t *req, int status, const sk_header_t *headers,
                  size_t nheaders);

/* Appends the head (on the first call) and this body piece, framed, to out.
 * date: the SK_DATE_LEN-byte IMF-fixdate to send when the app gave no date field (NULL: none).
 * On the first call with more_body == 0 and no app Content-Length (and not bodyless), the framing
 * is Content-Length = len. Returns 0, or SK_ETOOLONG (nothing appended), SK_ETOOSHORT (the
 * final event leaves the body shorter than Content-Length; nothing appended), SK_ESTATE
 * (not started or already done), SK_ENOMEM. */
int sk_resp_body(sk_resp_t *r, sk_buf_t *out, const char *data, size_t len, int more_body,
                 const char *date);

/* Bytes sk_resp_body_ref() may give to send after the content: CRLF and a last-chunk with an
 * empty trailer section. */
#define SK_RESP_AFTER_MAX 8

/* As sk_resp_body() for `len` content bytes the caller sends itself (sendfile(2)) right after
 * what this appends: the head (first call) and, chunked, the chunk-size line. The bytes that
 * must follow the content (chunked: CRLF, and the last-chunk when final) go to after[0..*after_len)
 * for the caller to send after it. When the framing is SK_FRAME_NONE (r->framing after the
 * call: HEAD, 204, ...) the content must not be sent. Same returns as sk_resp_body(). */
int sk_resp_body_ref(sk_resp_t *r, sk_buf_t *out, uint64_t len, int more_body, const char *date,
                     char after[SK_RESP_AFTER_MAX], size_t *after_len);

/* The application will send trailers (ASGI `trailers: true`). Call after sk_resp_start(), before
 * the first body call. When the request said "TE: trailers", the response is HTTP/1.1 and has no
 * Content-Length of the app's, it is chunked (even a single final body) and its final body
 * leaves the last-chunk to sk_resp_trailers(); otherwise the trailers are dropped (RFC 9110
 * §6.5: a recipient may discard them anyway). 0, or SK_ESTATE. */
int sk_resp_announce_trailers(sk_resp_t *r);

/* Trailer fields, after the final body call of a response whose trailers were announced.
 * Validates each name (token, and not one RFC 9110 §6.5.1 keeps out of trailers: framing,
 * routing, authentication, request modifiers, content description: SK_ETRAILER) and value,
 * then appends them as part of the chunked trailer section (RFC 9112 §7.1.2) when there is one,
 * else appends nothing. more_trailers == 0 ends the section and the message. Returns 0, or
 * SK_ESTATE (no trailers announced, body not done, or trailers already ended), SK_EHDRNAME,
 * SK_EHDRVALUE, SK_ETRAILER, SK_ENOMEM (nothing appended on error). */
int sk_resp_trailers(sk_resp_t *r, sk_buf_t *out, const sk_header_t *fields, size_t nfields,
                     int more_trailers);

/* 1 if `name` may not be sent in a trailer section (RFC 9110 §6.5.1), else 0. */
int sk_resp_trailer_forbidden(const char *name, size_t name_len);

/* A response field-line an application gave, checked (RFC 9110 §5.1: the name is a token; §5.5:
 * the value holds no CTL but HTAB). The HTTP/1.1 serializer and the HTTP/2 glue take the same.
 * 0, SK_EHDRNAME or SK_EHDRVALUE. */
int sk_resp_check_field(const sk_header_t *f);

/* Appends an interim (1xx) response: status-line and the given fields, validated, nothing else
 * (RFC 9110 §15.2; e.g. 103 Early Hints with link fields, RFC 8297). status: 100..199 but not
 * 101 (switching protocols is not an interim answer). Returns 0, or SK_ESTATUS, SK_EHDRNAME,
 * SK_EHDRVALUE, SK_ENOMEM (nothing appended on error). */
int sk_resp_interim(sk_buf_t *out, int status, const sk_header_t *fields, size_t nfields);

/* The reason phrase of status: RFC 9110 §15's, or the IANA HTTP Status Code Registry's for a
 * code RFC 9110 does not define (102, 103, 207, 208, 226, 423-425, 428, 429, 431, 451, 506-508,
 * 510, 511; never 306 or 418, which RFC 9110 lists as unused). The one table of phrases in skirr: status
 * lines (sk_resp_start, sk_resp_error), refusal bodies and, through skirr._native.reason_phrases,
 * the access log's lines all read it (rule skirr-status-one-phrase). 1: *reason is that static,
 * NUL-terminated ASCII string (never freed). 0: the code has none (*reason is NULL). */
int sk_resp_reason_phrase(int status, const char **reason);

/* Appends a complete refusal response with "connection: close", a short text/plain body naming
 * the status, and date/server fields. status: 400, 408, 413, 414, 431, 500, 501, 503 or 505
 * (others get the generic reason phrase). head_request: 1 to omit the body (Content-Length kept).
 * Returns 0 or SK_ENOMEM. This is the one error sink for server-generated responses. */
int sk_resp_error(sk_buf_t *out, int status, int head_request, const char *date);
/* The same with the server's own fields from opts (NULL = the defaults). date NULL: no date. */
int sk_resp_error_opts(sk_buf_t *out, int status, int head_request, const char *date,
                       const sk_resp_opts_t *opts);
/* Bytes of content sk_resp_error() sends for status (its reason phrase; 0 for a HEAD request):
 * what an access log reports for a refusal. */
size_t sk_resp_error_content_length(int status, int head_request);

/* The interim response to "Expect: 100-continue" (RFC 9110 §10.1.1, §15.2.1), and its bytes. */
#define SK_CONTINUE_RESPONSE_LITERAL "HTTP/1.1 100 Continue\r\n\r\n"
extern const char SK_CONTINUE_RESPONSE[sizeof(SK_CONTINUE_RESPONSE_LITERAL)];
#define SK_CONTINUE_RESPONSE_LEN (sizeof(SK_CONTINUE_RESPONSE_LITERAL) - 1)

/* Bytes of an IMF-fixdate (RFC 9110 §5.6.7), whose example is this literal. */
#define SK_DATE_LEN (sizeof("Sun, 06 Nov 1994 08:49:37 GMT") - 1)

/* Formats the IMF-fixdate for unix time t into out: SK_DATE_LEN bytes and a NUL. Times before
 * year 0 or after 9999 give the epoch's date. */
void sk_format_date(int64_t t, char out[SK_DATE_LEN + 1]);

#endif
