/* sk_core.c — the SK_E* error table and the growable byte buffer (sk_buf_t).
 *
 * Owns: sk_strerror() and every sk_buf_* operation (reserve, append, consume, free).
 * Never: includes Python.h, performs I/O, keeps global mutable state, or parses or writes HTTP
 * (the error table's texts name HTTP rules; the buffer knows nothing of them).
 * A failed reserve leaves the buffer exactly as it was; every operation keeps sk_buf_check() true.
 */
#include "sk_core.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BUF_MIN_CAP 256

const char *
sk_strerror(int err)
{
    switch (err) {
#define SK_ERR_CASE(name, value, text) \
    case name: return text;
        SK_ERRORS(SK_ERR_CASE)
#undef SK_ERR_CASE
    default: return "unknown error";
    }
}

/* Moves the unconsumed bytes to the front of the storage. */
static void
compact(sk_buf_t *b)
{
    size_t len = sk_buf_len(b);

    assert(b->data != NULL || len == 0);
    if (b->start == 0)
        return;
    if (len > 0)
        memmove(b->data, b->data + b->start, len);
    b->start = 0;
    b->end = len;
}

int
sk_buf_reserve(sk_buf_t *b, size_t extra)
{
    size_t len = sk_buf_len(b);
    size_t need;
    size_t cap;
    char *data;

    if (b->cap - b->end >= extra)
        return 0;
    if (extra > SIZE_MAX - len)
        return SK_ENOMEM;
    need = len + extra;
    if (need <= b->cap) {
        compact(b);
        assert(b->cap - b->end >= extra);
        return 0;
    }
    cap = b->cap < BUF_MIN_CAP ? BUF_MIN_CAP : b->cap;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    /* Copy only the live bytes: a fresh block avoids moving consumed ones twice. */
    data = malloc(cap);
    if (data == NULL)
        return SK_ENOMEM;
    if (len > 0)
        memcpy(data, b->data + b->start, len);
    free(b->data);
    b->data = data;
    b->start = 0;
    b->end = len;
    b->cap = cap;
    sk_buf_check(b);
    assert(b->cap - b->end >= extra);
    return 0;
}

int
sk_buf_append_grow(sk_buf_t *b, const void *p, size_t n)
{
    int rc;

    assert(p != NULL || n == 0);
    if (n == 0)
        return 0;
    /* p may point into b's own live bytes (a part of b appended to b): the reserve may move them
     * (compact) or free them (a new block), so such a source is found again by its offset from
     * b's head (seen: an HTTP/2 request's method read back from freed memory). */
    uintptr_t src = (uintptr_t)p;
    uintptr_t head = b->data != NULL ? (uintptr_t)(b->data + b->start) : 0;
    int own = b->data != NULL && src >= head && src < head + sk_buf_len(b);
    size_t off = own ? (size_t)(src - head) : 0;
    rc = sk_buf_reserve(b, n);
    if (rc < 0)
        return rc;
    if (own) {
        assert(off + n <= sk_buf_len(b));
        p = b->data + b->start + off;
    }
    memcpy(b->data + b->end, p, n);
    b->end += n;
    sk_buf_check(b);
    return 0;
}

void
sk_buf_consume(sk_buf_t *b, size_t n)
{
    size_t len = sk_buf_len(b);

    assert(n <= len);
    if (n > len)
        n = len; /* the contract says n <= len; a release build clamps rather than corrupts */
    b->start += n;
    if (b->start == b->end) {
        b->start = 0;
        b->end = 0;
    }
}

void
sk_buf_free(sk_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->start = 0;
    b->end = 0;
    b->cap = 0;
}
