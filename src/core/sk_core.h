/* sk_core.h — shared pieces of skirr's byte-level core: error codes, the return conventions every
 * core function follows, and the growable byte buffer.
 *
 * Owns: the SK_E* error table (negative ints, one list, sk_strerror()), the return conventions
 * (below), and sk_buf_t with its invariants (sk_buf_check()).
 * Never: includes Python.h or any src/ext/ header, performs I/O, or keeps global mutable state.
 * Every function here is safe to drive from a fuzzer.
 */
#ifndef SK_CORE_H
#define SK_CORE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* How core functions report results. One rule per kind of function; no other shape is used.
 *
 *  - An operation that can fail returns int: 0 (or a count >= 0) on success, a negative SK_E*
 *    code on failure. What it leaves behind on failure is documented with it (sk_buf_*: the
 *    buffer unchanged; sk_resp_body/sk_resp_error: nothing appended).
 *  - A lookup or iterator that may find nothing returns int and hands what it found back through
 *    an out-parameter, as CPython's PyDict_GetItemRef does: 1 found (*out set), 0 nothing there
 *    (*out set to NULL or 0), negative SK_E* on failure (*out as for 0). "Nothing" is never
 *    a failure and never a sentinel in the value itself (no NULL, "" or -1 meaning "absent").
 *    Examples: sk_list_next() in sk_token.h, sk_resp_reason_phrase() in sk_resp.h.
 *  - A predicate (sk_is_*, *_has_*, *_ieq, sk_parser_idle) returns 1 or 0 and cannot fail.
 *  - sk_strerror() always returns text ("unknown error" for a code not in the table).
 *  - The request parser is event-shaped: sk_parser_execute() returns bytes consumed and one event;
 *    SK_EV_NONE is "nothing yet", and a refusal is the SK_EV_ERROR event with the HTTP status,
 *    not an SK_E* code. Its llhttp callbacks follow llhttp: 0 to go on, HPE_PAUSED for an event,
 *    or what fail() returns (HPE_USER, the status recorded in the parser).
 *
 * Error codes: always negative, so functions return >= 0 on success. */
#define SK_ERRORS(X)                                                                             \
    X(SK_ENOMEM, -1, "out of memory")                                                            \
    X(SK_EHDRNAME, -2, "response header name is not a token (RFC 9110 §5.1)")                    \
    X(SK_EHDRVALUE, -3, "response header value contains a control character (RFC 9110 §5.5)")    \
    X(SK_ESTATUS, -4, "response status is not an integer in 100..599")                           \
    X(SK_ECL, -5, "response content-length is not a single decimal integer")                     \
    X(SK_ETE, -6, "response transfer-encoding other than chunked, or with content-length")       \
    X(SK_ETOOLONG, -7, "response body longer than its content-length")                           \
    X(SK_ETOOSHORT, -8, "response body shorter than its content-length")                         \
    X(SK_ESTATE, -9, "operation not valid in the current state")                                 \
    X(SK_ETRAILER, -10, "field name not allowed in a trailer section (RFC 9110 §6.5.1)")         \
    X(SK_EFIELDSIZE, -11,                                                                        \
      "response field section over 65,536 bytes or the client's SETTINGS_MAX_HEADER_LIST_SIZE, " \
      "each field counted as its name, value and 32 bytes (RFC 9113 §6.5.2), with what skirr "  \
      "adds to it (a head's :status, date, server and --header fields, a 103's :status)")

enum sk_error {
#define SK_ERR_ENUM(name, value, text) name = (value),
    SK_ERRORS(SK_ERR_ENUM)
#undef SK_ERR_ENUM
};

/* Text for an SK_E* code; "unknown error" for anything else. Static storage, never NULL. */
const char *sk_strerror(int err);

/* A growable byte buffer. data[start..end) is the unconsumed content; cap is data's size.
 * All sizes in bytes. A zeroed sk_buf_t is a valid empty buffer.
 * Invariants (sk_buf_check): start <= end <= cap, and data is NULL exactly when cap is 0. */
typedef struct {
    char *data;
    size_t start;
    size_t end;
    size_t cap;
} sk_buf_t;

/* Asserts sk_buf_t's invariants. Checked where NDEBUG is not defined (the C unit tests, the
 * fuzzers and the sanitizer builds); compiled out of the release extension, whose CFLAGS come from
 * Python's and carry -DNDEBUG. */
static inline void
sk_buf_check(const sk_buf_t *b)
{
    assert(b->start <= b->end);
    assert(b->end <= b->cap);
    assert((b->data == NULL) == (b->cap == 0));
    (void)b;
}

static inline size_t
sk_buf_len(const sk_buf_t *b)
{
    sk_buf_check(b);
    return b->end - b->start;
}
/* A zeroed buffer has data == NULL, and NULL + 0 is undefined in C (clang's UBSan reports it:
 * found by fuzz/regressions/response/null-plus-zero), so an empty buffer's head is NULL as is. */
static inline char *
sk_buf_head(const sk_buf_t *b)
{
    return b->data ? b->data + b->start : NULL;
}

/* Makes room for `extra` more bytes after end (compacting or growing). 0 or SK_ENOMEM. */
int sk_buf_reserve(sk_buf_t *b, size_t extra);
/* sk_buf_append() when the n bytes do not fit after end (or n is 0): reserves, then copies.
 * p may point into b's own live bytes (they are found again after the reserve moved them).
 * 0 or SK_ENOMEM (b unchanged). */
int sk_buf_append_grow(sk_buf_t *b, const void *p, size_t n);
/* Appends n bytes. 0 or SK_ENOMEM (b unchanged). Inline when they fit the spare room after end:
 * a response head is about 19 small appends, and the out-of-line call with its reserve cost about
 * 50 instructions each (bench/LEVERS.md). n > 0 is tested first: a zeroed buffer's data is NULL,
 * and NULL + 0 is undefined (sk_buf_head). */
static inline int
sk_buf_append(sk_buf_t *b, const void *p, size_t n)
{
    assert(p != NULL || n == 0);
    if (n > 0 && n <= b->cap - b->end) {
        memcpy(b->data + b->end, p, n);
        b->end += n;
        sk_buf_check(b);
        return 0;
    }
    return sk_buf_append_grow(b, p, n);
}
/* Drops n bytes from the front. n must be <= sk_buf_len (asserted; a release build clamps it).
 * Resets start/end to 0 when empty. */
void sk_buf_consume(sk_buf_t *b, size_t n);
/* Frees the storage; the buffer is empty and reusable afterwards. */
void sk_buf_free(sk_buf_t *b);

#endif
